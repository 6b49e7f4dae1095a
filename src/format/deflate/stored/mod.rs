//! A parse's stored form: a member-specific prefix (blocks, padding, the matches before the
//! cut) and, for larger members, a tail (the matches from the cut on) that is stored as a
//! chunk and shared by every copy of the payload. Matches are kept as three columns: literal
//! runs, where each match copies from (found again by walking the text's own 3-byte chains,
//! so a number that is nearly always small stands in for a distance), and lengths (implied
//! when maximal). That is the ranked form, made for zlib's parses; an optimal parser's
//! (zopfli's, 7-Zip's) take the longest form (`longest`, stores of format 7 and 8).
//!
//! Three choices trade a little space for rebuild speed, measured on the crawl corpus: dynamic
//! headers are kept as the bits they were written as (deriving zlib's from the block's
//! symbols, as parses before format 5 ask, took a quarter of a rebuild; the bits cost the
//! corpus's store 1.6 MB);
//! a source of a match of implied length (zlib's, GNU gzip's) more than
//! `STORED_REF_STEPS` links down its chain is stored as its distance (5 % of matches took
//! half of all chain steps); and text with few matches has them all stored as distances, so
//! that no chain is built over it (`SPARSE_PER_KIB`, `SPARSE_IMPLIED_PER_KIB`). Readers still take derived headers and
//! ranks up to `RANK_STEPS` links, as older parses hold them. Byte layout: docs/FORMAT.md,
//! "Deflate parse".

mod blocks;
mod chain;
mod longest;

use super::{predict, trees};
use chain::{resolve, Chain, Ref, RANK_STEPS, STORED_REF_STEPS, WINDOW};
use longest::{get_longest, put_longest, LONGEST_MARK};
pub use longest::is_optimal;
pub use blocks::header_bytes;
use blocks::{get_block, get_count, put_blocks};
use super::{dist_index, extension, len_index, Block, BlockKind, Match, Parse, ParseError, Result};
use super::varint::{put_varint, Cursor};

/// Appends a section of `n` matches whose columns are `gaps`, `refs` and `lens`: the count
/// and the first two columns' byte lengths, then the columns.
fn put_columns(out: &mut Vec<u8>, n: usize, gaps: &[u8], refs: &[u8], lens: &[u8]) {
    put_varint(out, n as u64);
    put_varint(out, gaps.len() as u64);
    put_varint(out, refs.len() as u64);
    out.extend_from_slice(gaps);
    out.extend_from_slice(refs);
    out.extend_from_slice(lens);
}

/// A section's match count and its three columns, as `put_columns` wrote them.
struct Columns<'a> {
    n: usize,
    gaps: Cursor<'a>,
    refs: Cursor<'a>,
    lens: Cursor<'a>,
}

impl<'a> Columns<'a> {
    /// Reads a section's head from `b`, bounded by the section and by `plain_len`.
    fn read(b: &'a [u8], plain_len: usize) -> Result<Columns<'a>> {
        let mut c = Cursor { b, i: 0 };
        let n = c.bounded(plain_len as u64 / 3)? as usize;
        let gaps_len = c.bounded(b.len() as u64)? as usize;
        if n > gaps_len {
            // Every gap takes a byte at least: a count beyond that is damage, not a reason to
            // reserve room for it.
            return Err(ParseError::Damaged("match count"));
        }
        let refs_len = c.bounded(b.len() as u64)? as usize;
        let start = c.i;
        let cols = b.get(start..start.saturating_add(gaps_len).saturating_add(refs_len)).ok_or(ParseError::Damaged("ends early"))?;
        Ok(Columns {
            n,
            gaps: Cursor { b: &cols[..gaps_len], i: 0 },
            refs: Cursor { b: &cols[gaps_len..], i: 0 },
            lens: Cursor { b: &b[start + gaps_len + refs_len..], i: 0 },
        })
    }

    /// The bytes of `b` the section took, once its matches are read from `gaps`, `refs` and
    /// `lens`; an error unless the first two columns were read to their ends.
    fn end(b: &[u8], gaps: &Cursor, refs: &Cursor, lens: &Cursor) -> Result<usize> {
        if gaps.i != gaps.b.len() || refs.i != refs.b.len() {
            return Err(ParseError::Damaged("columns of the wrong length"));
        }
        Ok(b.len() - lens.b.len() + lens.i)
    }
}

/// Appends matches `ms`, the first counted from plain offset `from`, as three columns (they
/// compress better apart): the gap since the previous match's end; where it copies from
/// (3k for the k-th record of its chain, or for a match of stated length the k-th candidate
/// that reaches that length; 3r + 1 for rank r among the earlier occurrences of its first
/// three bytes, most recent first; 3 (distance - 1) + 2 when the walk to it is too long, or
/// the matches are too sparse for a chain to pay: `SPARSE_PER_KIB`);
/// and its length (0 when it is the longest the text allows from there, as most writers
/// choose; else length - 2). With zlib's parses the references are small and the lengths all
/// 0: what is left is mostly the literal runs.
/// With `proof`, each source is also resolved from the ref just written, as a reader
/// resolves it, on this chain at this point (where a reader's chain is in the same state):
/// what `read_back` checks the stored bytes against.
/// A match whose source lies before `base` is stored as its distance (`Cut::base`).
fn put_matches(out: &mut Vec<u8>, ms: &[Match], mut from: u32, base: usize, plain: &[u8], chain: &mut Chain, mut proof: Option<&mut Vec<Resolved>>) -> Result<()> {
    let (mut gaps, mut refs, mut lens) = (Vec::with_capacity(ms.len()), Vec::with_capacity(ms.len()), Vec::with_capacity(ms.len()));
    let end = ms.last().map_or(from as usize, |m| m.pos as usize + m.len as usize).max(from as usize);
    // Whether each match is as long as its source allows (its length then implied), worked
    // out once: the sparse rule asks it of them all first.
    let maximal: Vec<bool> = ms.iter().map(|m| is_maximal(m, plain)).collect();
    let under = |per_kib: u64| (ms.len() as u64) * 1024 < (end - from as usize) as u64 * per_kib;
    let sparse = under(SPARSE_PER_KIB) || (under(SPARSE_IMPLIED_PER_KIB) && maximal.iter().all(|&m| m));
    for (m, &maximal) in ms.iter().zip(&maximal) {
        let (pos, dist) = (m.pos as usize, m.dist as usize);
        put_varint(&mut gaps, (m.pos - from) as u64);
        // A stated length (an optimal parser's, such as zopfli's) keeps the long walk: its
        // sources lie further down, and distances would cost a fifth more of its parse.
        let steps = if maximal { STORED_REF_STEPS } else { RANK_STEPS };
        let located = if sparse || pos - dist < base {
            None
        } else {
            chain.insert_to(plain, pos);
            chain.locate(plain, pos, pos - dist, (!maximal).then_some(m.len as usize), steps)
        };
        let r = match located {
            Some(Ref::Counted(k)) => k * 3,
            Some(Ref::Rank(r)) => r * 3 + 1,
            None => (dist as u64 - 1) * 3 + 2,
        };
        let lc = if maximal { 0 } else { m.len as usize - 2 };
        put_varint(&mut refs, r);
        put_varint(&mut lens, lc as u64);
        if let Some(proof) = proof.as_deref_mut() {
            let resolved = resolve(chain, plain, pos, r, lc)?;
            proof.push(Resolved::new(pos, r, lc, resolved).ok_or(ParseError::Damaged("source out of range"))?);
        }
        from = m.pos + m.len as u32;
    }
    put_columns(out, ms.len(), &gaps, &refs, &lens);
    Ok(())
}

/// Whether `m` is as long as its source allows (its length is then implied). A recorded
/// match copies what it says (its text was checked or written by it), so one byte past its
/// end tells: measuring its whole extension cost a match's length in compares, 3 % of an
/// import. (A match past the text, which no recorded parse has, is not maximal: the proof
/// then finds it out.)
fn is_maximal(m: &Match, plain: &[u8]) -> bool {
    let (pos, len, dist) = (m.pos as usize, m.len as usize, m.dist as usize);
    let cap = (plain.len() - pos).min(258);
    debug_assert!(len > cap || plain[pos..pos + len] == plain[pos - dist..pos - dist + len]);
    len == cap || (len < cap && plain[pos + len] != plain[pos + len - dist])
}

/// A match's ref as written, and where `resolve` found its source from it. Packed (16
/// bytes; a member of 64 MiB of text has up to 22 million matches): positions are below
/// MAX_PLAIN, refs below 3 * WINDOW + 3, length columns at most 256, distances at most WINDOW
/// and measured lengths 3..=258 (0: none).
#[derive(Clone, Debug)]
struct Resolved {
    pos: u32,
    r: u32,
    dist: u32,
    lc: u16,
    measured: u16,
}

impl Resolved {
    fn new(pos: usize, r: u64, lc: usize, (dist, measured): (usize, Option<usize>)) -> Option<Resolved> {
        Some(Resolved {
            pos: pos.try_into().ok()?,
            r: r.try_into().ok()?,
            dist: dist.try_into().ok()?,
            lc: lc.try_into().ok()?,
            measured: measured.unwrap_or(0).try_into().ok()?,
        })
    }

    /// Whether this is the match at `pos` with ref `r` and length column `lc`.
    fn is(&self, pos: usize, r: u64, lc: usize) -> bool {
        (self.pos as usize, self.r as u64, self.lc as usize) == (pos, r, lc)
    }

    fn source(&self) -> (usize, Option<usize>) {
        (self.dist as usize, (self.measured != 0).then_some(self.measured as usize))
    }
}

/// Matches per KiB of text (from the first match's gap to the last match's end) below which
/// a prefix's or a tail's matches are all stored with their distances: a reader then builds
/// no chain over that text (`Chain::insert_to` skips what no later walk reaches). Text with
/// few matches (images, compressed payloads) costs a chain for every position and saves
/// little by ranks. On the crawl corpus the members under 20 a KiB hold 30 % of the text and
/// 4.6 % of the matches: `cat` 4 % faster for 0.7 MB more store (docs/BENCHMARKS.md).
const SPARSE_PER_KIB: u64 = 20;
/// The same for matches that all take as much as their sources allow (zlib's, GNU gzip's:
/// their lengths are implied). On the crawl corpus, 50 a KiB instead of 20 makes `cat` a
/// tenth faster and import 5 % less CPU for 4.5 MB more store before gc (which settles it
/// back under 115 MB: `store::settle`). An optimal parser's (zopfli's) sources lie further
/// down its chains: at 50 a KiB, a zopfli crawl's store growth went from 35 % to 50 %.
const SPARSE_IMPLIED_PER_KIB: u64 = 50;

/// Where a reader takes each match's source from.
enum Sources<'a> {
    /// `resolve`, on a chain filled up to each match as it is read: reading a stored parse.
    Chain(Chain),
    /// The refs as the encoder wrote them, in order, and what `resolve` gave for each on its
    /// own chain: ingest's proof (`encode_read_back`). With them the recorded matches,
    /// which a section in the predicted form stands for: the loop that wrote it emitted
    /// exactly those, and a reader runs the same loop with the same corrections.
    Written(std::slice::Iter<'a, Resolved>, &'a [Match]),
}

impl Sources<'_> {
    /// The (distance, measured length) of the match at `pos` with ref `r` and length column
    /// `lc`.
    #[inline(always)]
    fn source(&mut self, plain: &[u8], pos: usize, r: u64, lc: usize) -> Result<(usize, Option<usize>)> {
        match self {
            Sources::Chain(chain) => {
                // A stored distance needs no chain: it catches up at the next ref that does.
                if r % 3 != 2 {
                    chain.insert_to(plain, pos);
                }
                resolve(chain, plain, pos, r, lc)
            }
            Sources::Written(written, _) => match written.next() {
                Some(w) if w.is(pos, r, lc) => Ok(w.source()),
                _ => Err(ParseError::Damaged("reads back other than written")),
            },
        }
    }
}

/// Reads what `put_matches` wrote; returns the bytes it took.
fn get_matches(b: &[u8], from: u64, to: u64, blocks: &[Block], plain: &[u8], sources: &mut Sources, out: &mut Vec<Match>) -> Result<usize> {
    if let Some(rest) = b.strip_prefix(&predict::PREDICTED_MARK[..]) {
        let used = match sources {
            Sources::Written(_, recorded) => {
                let (a, z) = (recorded.partition_point(|m| (m.pos as u64) < from), recorded.partition_point(|m| (m.pos as u64) < to));
                out.extend_from_slice(&recorded[a..z]);
                predict::section_len(rest, (to - from) as usize)?
            }
            Sources::Chain(_) => predict::get_section(rest, plain, from as usize, to as usize, blocks, out)?,
        };
        return Ok(predict::PREDICTED_MARK.len() + used);
    }
    if let Some(rest) = b.strip_prefix(&LONGEST_MARK[..]) {
        // Ingest's proof reads a parse with longest-form sections back as a reader does.
        let Sources::Chain(chain) = sources else { return Err(ParseError::Damaged("reads back other than written")) };
        return Ok(LONGEST_MARK.len() + get_longest(rest, from, plain, chain, out)?);
    }
    let Columns { n, mut gaps, mut refs, mut lens } = Columns::read(b, plain.len())?;
    out.reserve(n);
    let mut from = from;
    for _ in 0..n {
        let pos = from + gaps.bounded(plain.len() as u64)?;
        if pos + 3 > plain.len() as u64 {
            return Err(ParseError::Damaged("match out of range"));
        }
        let pos = pos as usize;
        let r = refs.bounded(3 * WINDOW as u64)?;
        let lc = lens.bounded(256)? as usize;
        if lc != 0 && pos + lc + 2 > plain.len() {
            return Err(ParseError::Damaged("match length"));
        }
        let (dist, measured) = sources.source(plain, pos, r, lc)?;
        if dist > pos || dist > WINDOW {
            return Err(ParseError::Damaged("match out of range"));
        }
        // A record's match length is the extension its walk measured.
        let len = match (lc, measured) {
            (0, Some(len)) => len,
            (0, None) => extension(plain, pos, dist, (plain.len() - pos).min(258)),
            _ => lc + 2,
        };
        if !(3..=258).contains(&len) || pos + len > plain.len() {
            return Err(ParseError::Damaged("match length"));
        }
        out.push(Match { pos: pos as u32, len: len as u16, dist: dist as u16 });
        from = (pos + len) as u64;
    }
    Columns::end(b, &gaps, &refs, &lens)
}

/// How often each literal/length and distance symbol occurs in the block [start, end) whose
/// matches are `ms` (end-of-block included); None if a match does not lie inside it.
fn block_freqs(plain: &[u8], ms: &[Match], start: usize, end: usize) -> Option<([u32; 286], [u32; 30])> {
    let mut lit = [0u32; 286];
    let mut dist = [0u32; 30];
    // Literal counts in four tables, so that runs of one byte do not wait on each other.
    let mut bytes = [[0u32; 256]; 4];
    let mut count = |run: &[u8]| {
        let mut quads = run.chunks_exact(4);
        for q in &mut quads {
            bytes[0][q[0] as usize] += 1;
            bytes[1][q[1] as usize] += 1;
            bytes[2][q[2] as usize] += 1;
            bytes[3][q[3] as usize] += 1;
        }
        for &b in quads.remainder() {
            bytes[0][b as usize] += 1;
        }
    };
    let mut pos = start;
    for m in ms {
        let (mp, me) = (m.pos as usize, m.pos as usize + m.len as usize);
        if mp < pos || me > end || !(3..=258).contains(&m.len) || m.dist == 0 {
            return None;
        }
        count(&plain[pos..mp]);
        lit[257 + len_index(m.len)] += 1;
        dist[dist_index(m.dist)] += 1;
        pos = me;
    }
    count(plain.get(pos..end)?);
    for (b, l) in lit[..256].iter_mut().enumerate() {
        *l = bytes[0][b] + bytes[1][b] + bytes[2][b] + bytes[3][b];
    }
    lit[256] += 1;
    Some((lit, dist))
}

/// Smallest shared tail worth a chunk of its own: below this, a tail's chunk (and its index
/// entry) would cost more than the bytes it could save.
const MIN_TAIL_MATCHES: usize = 64;

/// A parse in its stored form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Blocks, padding and the matches before the cut: kept with the member's recipe.
    pub prefix: Vec<u8>,
    /// The matches from the cut on, when there are enough: stored as a chunk.
    pub tail: Option<Vec<u8>>,
    /// Whether its matches are in the longest form.
    pub longest: bool,
}

/// Encodes `p` (the parse of `plain`), splitting off the matches from about `cut_at` on
/// into a tail. The cut moves forward past a match that covers `cut_at`. With `longest` (a
/// store of format 7 or 8), an optimal parser's matches are written in the longest form
/// (see `put_longest`).
pub fn encode(p: &Parse, plain: &[u8], cut_at: Option<usize>, longest: bool) -> Stored {
    match encode_with(p, plain, cut_at.map(Cut::at), longest && is_optimal(p, plain), None, false) {
        Ok(s) => s,
        Err(_) => unreachable!("only a proof's resolution can fail"),
    }
}

/// `encode`, and the parse its stored form reads back as: `decode`'s own reading of the
/// bytes, except that each match's source is the one `resolve` found from the ref as it was
/// written, on the encoder's chain, which then held what a reader's holds at that match. So
/// ingest proves a stored parse with one pass over the text's chains instead of two (every
/// position inserted again, every source walked again). A parse in the longest form (only
/// if `longest`: a store of format 7 or 8; an older warcfs cannot read it) is read back by
/// `decode` itself. An error if the bytes do not read back as written.
pub fn encode_read_back(p: &Parse, plain: &[u8], cut_at: Option<usize>, longest: bool) -> Result<(Stored, Parse)> {
    encode_read_back_at(p, plain, cut_at.map(Cut::at), longest)
}

/// `encode_read_back`, cut as `cut` says.
pub fn encode_read_back_at(p: &Parse, plain: &[u8], cut: Option<Cut>, longest: bool) -> Result<(Stored, Parse)> {
    if longest && is_optimal(p, plain) {
        let stored = encode_with(p, plain, cut, true, None, false)?;
        let back = decode(&stored.prefix, stored.tail.as_deref(), plain)?;
        return Ok((stored, back));
    }
    let mut proof = Vec::with_capacity(p.matches.len());
    let stored = encode_with(p, plain, cut, false, Some(&mut proof), false)?;
    let back = read_back(&stored, plain, &proof, &p.matches, None)?;
    // The proof stands for what a reader does; every debug build (the tests) checks that.
    debug_assert_eq!(decode(&stored.prefix, stored.tail.as_deref(), plain).as_ref(), Ok(&back));
    Ok((stored, back))
}

/// `encode_read_back` of the prefix alone, for a parse whose tail is stored already: the
/// caller found a tail of the same `tail_identity` over the same text from `cut.base` on, so
/// that tail's bytes are the ones `encode` would write (its matches are those of `p` from
/// the cut on, which the parse read back takes as they are). None if `p` has no tail.
pub fn encode_prefix_read_back(p: &Parse, plain: &[u8], cut: Cut) -> Result<Option<(Stored, Parse)>> {
    let (_, k) = cut_of(p, plain, Some(cut));
    if k == p.matches.len() {
        return Ok(None);
    }
    let mut proof = Vec::with_capacity(k);
    let stored = encode_with(p, plain, Some(cut), false, Some(&mut proof), true)?;
    let back = read_back(&stored, plain, &proof, &p.matches, Some(&p.matches[k..]))?;
    debug_assert_eq!(read_prefix(&stored.prefix, plain.len()).and_then(|h| decode_with(h, None, plain, &mut Sources::Chain(Chain::new(plain.len())), Some((&p.matches[k..], 0)))).as_ref(), Ok(&back));
    Ok(Some((stored, back)))
}

/// Where a parse is cut into its prefix and its tail: at the first match boundary from `at`
/// on. `base` (at most `at`; ingest gives the payload's start) is where the text the tail
/// depends on starts: the tail's matches whose sources lie before it (in the headers, which
/// differ from one copy of a payload to the next) are stored as distances, so the tail's
/// bytes follow from the text from `base` on and its own matches (`tail_identity`). With
/// `predicted` (a store of format 10 or 12), sections may take the predicted form, and the cut
/// falls at the end of the first match that reaches `at`, where zlib's loop starts afresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    pub at: usize,
    pub base: usize,
    pub predicted: bool,
}

impl Cut {
    pub fn at(at: usize) -> Cut {
        Cut { at, base: 0, predicted: false }
    }
}

/// The cut offset and the number of matches before it; (the text's length, every match)
/// when what would follow the cut is too small a tail.
fn cut_of(p: &Parse, plain: &[u8], cut: Option<Cut>) -> (usize, usize) {
    let (cut, k) = match cut {
        Some(Cut { at, predicted: true, .. }) => {
            // The end of the first match that reaches `at`.
            let j = p.matches.partition_point(|m| (m.pos as usize + m.len as usize) < at);
            match p.matches.get(j) {
                Some(m) => (m.pos as usize + m.len as usize, j + 1),
                None => (plain.len(), p.matches.len()),
            }
        }
        Some(Cut { at, .. }) => {
            let k = p.matches.partition_point(|m| (m.pos as usize) < at);
            let cut = match k.checked_sub(1).map(|i| p.matches[i]) {
                Some(m) if m.pos as usize + m.len as usize > at => m.pos as usize + m.len as usize,
                _ => at,
            };
            (cut.min(plain.len()), k)
        }
        None => (plain.len(), p.matches.len()),
    };
    if p.matches.len() - k >= MIN_TAIL_MATCHES {
        (cut, k)
    } else {
        (plain.len(), p.matches.len())
    }
}

/// What the ranked bytes of `p`'s tail (cut as `encode` cuts it at `cut`) follow from,
/// besides the text from `cut.base` on: the chain's table size (which the text's whole
/// length sets), the text's length and the cut counted from `cut.base`, and the tail's
/// matches as written (gap, distance, length with whether it is maximal, as varints). A walk
/// from a match to its source passes only positions between the two, sources before
/// `cut.base` are stored as distances, and the one header byte such a match's stored form
/// rests on (the one past its source's end, which says whether it is maximal) is in the
/// identity; so two members with equal identities and equal text from `cut.base` on store
/// the same tail, byte for byte. None if `p` has no tail or `cut.base` lies past the cut.
pub fn tail_identity(p: &Parse, plain: &[u8], cut: Cut) -> Option<Vec<u8>> {
    let (at, k) = cut_of(p, plain, Some(cut));
    if k == p.matches.len() || cut.base > at {
        return None;
    }
    let tail = &p.matches[k..];
    let mut id = Vec::with_capacity(16 + tail.len() * 4);
    id.push(cut.predicted as u8);
    put_varint(&mut id, Chain::table_bits(plain.len()) as u64);
    put_varint(&mut id, (plain.len() - cut.base) as u64);
    put_varint(&mut id, (at - cut.base) as u64);
    let mut from = at as u32;
    for m in tail {
        put_varint(&mut id, (m.pos - from) as u64);
        put_varint(&mut id, m.dist as u64);
        // Whether a match is maximal decides its length column and the sparse rule; for a
        // source just before `cut.base` that rests on a byte of the headers.
        put_varint(&mut id, (m.len as u64) << 1 | is_maximal(m, plain) as u64);
        from = m.pos + m.len as u32;
    }
    Some(id)
}

/// `stored` read as `decode` reads it, each source taken from `written` (the refs as the
/// encoder wrote them, in order, and what they resolved to); with `named`, `stored` has
/// no tail of its own and these are its matches.
fn read_back(stored: &Stored, plain: &[u8], written: &[Resolved], recorded: &[Match], named: Option<&[Match]>) -> Result<Parse> {
    let mut sources = Sources::Written(written.iter(), recorded);
    let back = decode_with(read_prefix(&stored.prefix, plain.len())?, stored.tail.as_deref(), plain, &mut sources, named.map(|ms| (ms, 0)))?;
    match sources {
        Sources::Written(rest, _) if rest.len() == 0 => Ok(back),
        _ => Err(ParseError::Damaged("reads back other than written")),
    }
}

/// With `longest` (the caller found `p` an optimal parser's), both sections are written in
/// the longest form where they can be (no `proof` is taken then).
/// With `named`, the tail is not written (`encode_prefix_read_back`).
fn encode_with(p: &Parse, plain: &[u8], cut: Option<Cut>, longest: bool, mut proof: Option<&mut Vec<Resolved>>, named: bool) -> Result<Stored> {
    let mut prefix = Vec::with_capacity(64 + p.matches.len() * 4);
    let derived = if cut.is_some_and(|c| c.predicted) { zlib_headers(p, plain) } else { Vec::new() };
    put_blocks(&mut prefix, &p.blocks, &derived);
    prefix.push(p.end_pad);
    let base = cut.map_or(0, |c| c.base);
    let (at, k) = cut_of(p, plain, cut);
    put_varint(&mut prefix, at as u64);
    if longest {
        // Both sections in the longest form, or (a match where no candidate is found) the
        // whole parse in the ranked form, on a fresh chain.
        let mut chain = Chain::new(plain.len());
        let mut pre = prefix.clone();
        if put_longest(&mut pre, &p.matches[..k], 0, plain, &mut chain) {
            let mut t = Vec::new();
            if k == p.matches.len() {
                return Ok(Stored { prefix: pre, tail: None, longest: true });
            }
            if put_longest(&mut t, &p.matches[k..], at as u32, plain, &mut chain) {
                return Ok(Stored { prefix: pre, tail: Some(t), longest: true });
            }
        }
    }
    // The ranked form's chain, made only if a section takes that form.
    let mut chain = None;
    let predicted = cut.is_some_and(|c| c.predicted);
    // The member's own blocks bound where its prefix's loop may choose freely; a tail's
    // loop takes none, so that its bytes follow from its text alone. Text with few matches
    // (images, compressed payloads) keeps the ranked form: its loop would search at every
    // position, where the ranked form builds no chain at all.
    let dense = |ms: &[Match], from: usize, to: usize| ms.len() as u64 * 1024 >= (to - from) as u64 * SPARSE_PER_KIB;
    let predicted_at = |from: usize, to: usize, ms: &[Match]| predicted && dense(ms, from, to);
    if !(predicted_at(0, at, &p.matches[..k]) && predict::put_section(&mut prefix, plain, 0, 0, at, &p.blocks, &p.matches[..k]).is_some()) {
        let chain = chain.get_or_insert_with(|| Chain::new(plain.len()));
        put_matches(&mut prefix, &p.matches[..k], 0, 0, plain, chain, proof.as_deref_mut())?;
    }
    let tail = if k < p.matches.len() && !named {
        let mut t = Vec::with_capacity((p.matches.len() - k) * 2);
        if !(predicted_at(at, plain.len(), &p.matches[k..]) && predict::put_section(&mut t, plain, base, at, plain.len(), &[], &p.matches[k..]).is_some()) {
            let chain = chain.get_or_insert_with(|| Chain::new(plain.len()));
            put_matches(&mut t, &p.matches[k..], at as u32, base, plain, chain, proof)?;
        }
        Some(t)
    } else {
        None
    };
    Ok(Stored { prefix, tail, longest: false })
}

/// For each block of `p`, whether it is dynamic with zlib's header for its symbols (kind 3:
/// a reader derives it).
fn zlib_headers(p: &Parse, plain: &[u8]) -> Vec<bool> {
    let mut start = 0usize;
    p.blocks
        .iter()
        .map(|b| {
            let end = b.end as usize;
            let derivable = match &b.kind {
                BlockKind::Dynamic { header, bits } => {
                    let from = p.matches.partition_point(|m| (m.pos as usize) < start);
                    let to = p.matches.partition_point(|m| (m.pos as usize) < end);
                    block_freqs(plain, &p.matches[from..to], start, end).is_some_and(|(l, d)| {
                        let (h, n) = trees::zlib_header(&l, &d);
                        n == *bits && h == *header
                    })
                }
                _ => false,
            };
            start = end;
            derivable
        })
        .collect()
}

/// A stored parse's prefix read up to its matches: its blocks (with those whose zlib header
/// is derived once the matches are read) and its cut. Read once by a rebuild that asks where
/// a predicted tail starts before it decodes.
pub struct Prefix<'a> {
    bytes: &'a [u8],
    p: Parse,
    derived: Vec<usize>,
    cut: u64,
    /// Where the prefix's matches begin in `bytes`.
    at: usize,
}

/// Reads `prefix`'s blocks and cut, bounded by the text's length.
pub fn read_prefix(prefix: &[u8], plain_len: usize) -> Result<Prefix<'_>> {
    let mut c = Cursor { b: prefix, i: 0 };
    let n = get_count(&mut c, plain_len as u64)?;
    let mut p = Parse { blocks: Vec::with_capacity(n.min(1 << 16)), ..Parse::default() };
    let mut derived = Vec::new();
    let mut end = 0u64;
    for _ in 0..n {
        let (block, to_derive, _) = get_block(&mut c, plain_len as u64, end)?;
        end = block.end as u64;
        // zlib's header for the block's symbols (kind 3), derived once the matches are read.
        if to_derive {
            derived.push(p.blocks.len());
        }
        p.blocks.push(block);
    }
    p.end_pad = c.byte()?;
    let cut = c.bounded(plain_len as u64)?;
    Ok(Prefix { bytes: prefix, p, derived, cut, at: c.i })
}

impl Prefix<'_> {
    /// Where `tail`, if it is in the predicted form, takes its text from: its origin, the cut
    /// less its section's `back`; None for a tail in another form. Its matches follow from
    /// its bytes and the text from its origin to the member's end alone (docs/FORMAT.md), so
    /// one decode of them serves every member that holds that text (`decode_given_tail`).
    pub fn predicted_origin(&self, tail: &[u8]) -> Result<Option<usize>> {
        let Some(rest) = tail.strip_prefix(&predict::PREDICTED_MARK[..]) else { return Ok(None) };
        let back = predict::section_back(rest)?;
        (self.cut as usize).checked_sub(back).map(Some).ok_or(ParseError::Damaged("predicted origin"))
    }

    /// The position in the text where the prefix ends and the tail begins.
    pub fn cut(&self) -> usize {
        self.cut as usize
    }

    /// The parse, with its tail as stored.
    pub fn decode(self, tail: Option<&[u8]>, plain: &[u8]) -> Result<Parse> {
        decode_with(self, tail, plain, &mut Sources::Chain(Chain::new(plain.len())), None)
    }

    /// The parse, with the tail's matches as an earlier decode of the same tail over the
    /// same text gave them, their positions counted from `origin`.
    pub fn decode_given_tail(self, kept: &[Match], origin: usize, plain: &[u8]) -> Result<Parse> {
        let origin = u32::try_from(origin).map_err(|_| ParseError::Damaged("predicted origin"))?;
        decode_with(self, None, plain, &mut Sources::Chain(Chain::new(plain.len())), Some((kept, origin)))
    }
}

/// Decodes a stored parse of `plain`. Every count and offset is bounded by the text's
/// length before it sizes anything.
pub fn decode(prefix: &[u8], tail: Option<&[u8]>, plain: &[u8]) -> Result<Parse> {
    read_prefix(prefix, plain.len())?.decode(tail, plain)
}

/// `decode`, with each match's source taken from `sources`; `named`: the tail's matches,
/// their positions counted from the offset given, when `tail` is not given (`read_back`, a
/// kept tail).
fn decode_with(prefix: Prefix, tail: Option<&[u8]>, plain: &[u8], sources: &mut Sources, named: Option<(&[Match], u32)>) -> Result<Parse> {
    let Prefix { bytes, mut p, derived, cut, at } = prefix;
    let used = get_matches(&bytes[at..], 0, cut, &p.blocks, plain, sources, &mut p.matches)?;
    if at + used != bytes.len() {
        return Err(ParseError::Damaged("trailing bytes"));
    }
    if p.matches.last().is_some_and(|m| m.pos as u64 + m.len as u64 > cut) {
        return Err(ParseError::Damaged("prefix match past the cut"));
    }
    match (tail, named) {
        (None, Some((ms, by))) if cut < plain.len() as u64 && ms.first().is_some_and(|m| m.pos as u64 + by as u64 >= cut) => {
            // (Positions past the text fail the blocks' checks below and the replay's.)
            p.matches.extend(ms.iter().map(|m| Match { pos: m.pos.saturating_add(by), ..*m }));
        }
        (_, Some(_)) => return Err(ParseError::Damaged("reads back other than written")),
        (Some(t), None) if get_matches(t, cut, plain.len() as u64, &[], plain, sources, &mut p.matches)? != t.len() => return Err(ParseError::Damaged("trailing bytes")),
        (Some(_), None) => {}
        (None, None) if cut != plain.len() as u64 => return Err(ParseError::Damaged("tail missing")),
        (None, None) => {}
    }
    for bi in derived {
        let start = bi.checked_sub(1).map_or(0, |i| p.blocks[i].end) as usize;
        let end = p.blocks[bi].end as usize;
        let from = p.matches.partition_point(|m| (m.pos as usize) < start);
        let to = p.matches.partition_point(|m| (m.pos as usize) < end);
        let (l, d) = block_freqs(plain, &p.matches[from..to], start, end).ok_or(ParseError::Damaged("matches outside their block"))?;
        let (header, bits) = trees::zlib_header(&l, &d);
        p.blocks[bi].kind = BlockKind::Dynamic { header, bits };
    }
    Ok(p)
}

#[cfg(test)]
mod tests;
