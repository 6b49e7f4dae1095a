//! A zlib member's matches predicted by zlib's own search, and the few places it is wrong.
//!
//! zlib (levels 4 to 9, memLevel 8: wget, warcio, Python, Java, Heritrix) chooses its matches
//! with `deflate_slow`: lazy matching over hash chains, each search walking at most `chain`
//! links. Run over the member's text, that loop gives the writer's parse, so the parse need
//! not be stored at all; but a rebuild would then cost the writer's whole search (level 9
//! walks about 70 links per search on the crawl corpus). So a reader here runs the same loop
//! with each search cut at `cheap` links, and the stored form lists the searches whose result
//! must differ from the cut search's for the loop to give the recorded parse (`Fix`), each
//! with the step of the loop it applies to.
//!
//! The encoder needs no deeper search of its own: it runs the reader's loop beside the
//! recorded matches and fixes a result only where the loop would otherwise leave them. A
//! match the parse starts at a step takes its exact length and distance; a recorded literal
//! whose pending match the loop would emit gets a result one longer than that match (zlib's
//! own result there was longer still, so the fixed loop stays within what zlib did), or none
//! at all. Text in stored blocks holds no recorded matches: the loop's own choices there
//! stand. The loop that chose the corrections emitted exactly the recorded matches, and the
//! bytes are read back as those corrections before a section takes the form; a section no
//! level predicts (another writer, a stored block cut inside a match) keeps the ranked form.

mod chains;

use super::varint::{put_varint, Cursor};
use super::{Block, BlockKind, Match, ParseError};
use chains::{Chains, Tables, TABLES};

type Result<T> = std::result::Result<T, ParseError>;

/// zlib's `configuration_table` for the levels that use `deflate_slow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    pub level: u8,
    good: usize,
    lazy: usize,
    nice: usize,
    chain: usize,
}

impl Level {
    pub fn zlib(level: u8) -> Option<Level> {
        let (good, lazy, nice, chain) = match level {
            4 => (4, 4, 16, 16),
            5 => (8, 16, 32, 32),
            6 => (8, 16, 128, 128),
            7 => (8, 32, 128, 256),
            8 => (32, 128, 258, 1024),
            9 => (32, 258, 258, 4096),
            _ => return None,
        };
        Some(Level { level, good, lazy, nice, chain })
    }
}

/// What the loop takes at one step instead of its own search's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    /// No match here.
    None,
    /// Nothing longer than the pending match: it is emitted.
    Keep,
    /// One longer than the pending match, which becomes a literal.
    Above,
    /// Exactly this match.
    Match { len: u16, src: Src },
}

/// Where a fixed match copies from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// This far back.
    Dist(u16),
    /// The k-th position down the chain (0 the nearest) whose text reaches the match's
    /// length: zlib keeps the first longest it meets, so nearly always 0.
    Rank(u16),
}

/// A fix and the loop step it applies to (steps count every position the loop stops at,
/// searched or not; positions inside an emitted match are not steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Correction {
    pub step: u32,
    pub fix: Fix,
}

const WSIZE: usize = 32768;
const MAX_DIST: usize = WSIZE - 262;
const TOO_FAR: usize = 4096;
/// The most links a stored form may ask its reader to walk per search.
pub const MAX_CHEAP: usize = 64;
/// The links a writer cuts each search at: on the crawl corpus (wget, level 9), 16 links
/// leave corrections at 10 % of the matches where 8 leave 16 % and 32 leave 7 %; on 20 MB of
/// its first crawl, 2, 4 and 8 links take 4.6, 2.7 and 1.4 times 16's bytes (at zstd 19) for
/// a rebuild 2.3, 1.6 and 1.2 times as fast (`examples/predict_bench`; 16 links: 110 MB/s of
/// text, the ranked form 460).
pub const CHEAP: usize = 16;

/// What the recorded parse says of one position.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Literal,
    Match(u16, u16),
    /// Inside a stored block: the parse has no tokens there.
    Any,
}

/// One section of the text: the loop runs over [from, to) with the chains holding the text
/// from `origin` (at most `from`) on, and starts fresh (no match pending), as zlib's does
/// after a match ends. `stored`: the plain ranges of the member's stored blocks.
#[derive(Clone, Copy)]
struct Section<'a> {
    text: &'a [u8],
    origin: usize,
    from: usize,
    to: usize,
    stored: &'a [(u32, u32)],
}

/// The loop, with fixes either read (decoding) or chosen against the recorded parse
/// (encoding). Returns the matches it emits outside stored blocks, and the fixes it took.
fn run(sec: Section, lvl: Level, cheap: usize, mut fixes: Fixes) -> Result<(Vec<Match>, Vec<Correction>)> {
    let r = TABLES.with(|t| run_with(sec, lvl, cheap, &mut fixes, &mut t.borrow_mut()))?;
    match fixes {
        Fixes::Read { list, next } if next != list.len() => Err(ParseError::Damaged("corrections past the section")),
        _ => Ok(r),
    }
}

fn run_with(sec: Section, lvl: Level, cheap: usize, fixes: &mut Fixes, tables: &mut Tables) -> Result<(Vec<Match>, Vec<Correction>)> {
    let Section { text, origin, from, to, stored } = sec;
    let n = text.len();
    let mut ch = Chains::new(text, origin, tables)?;
    ch.fill_to(from);
    let mut out = Vec::new();
    let mut made = Vec::new();
    let (mut s, mut step) = (from, 0u32);
    let (mut mlen, mut mstart) = (2usize, origin);
    let mut pending = false;
    let cheap = cheap.min(lvl.chain).max(1);
    let mut sfrom = stored.partition_point(|r| (r.1 as usize) <= from);
    while s < to {
        let lookahead = n - s;
        let head = if lookahead >= 3 { ch.head_at(s) } else { None };
        let (plen, pstart) = (mlen, mstart);
        mlen = 2;
        if let Some(head) = head.filter(|&h| plen < lvl.lazy && s - h <= MAX_DIST) {
            let steps = if plen >= lvl.good { (cheap >> 2).max(1) } else { cheap };
            (mlen, mstart) = ch.longest(s, head, steps, lvl.nice, plen, mstart);
            if mlen == 3 && s - mstart > TOO_FAR {
                mlen = 2;
            }
        }
        let mut fix = fixes.at(step, s, plen, pending, (mlen, mstart))?;
        match fix {
            Some(Fix::None) => mlen = 2,
            Some(Fix::Keep) => (mlen, mstart) = (plen, pstart),
            Some(Fix::Above) => mlen = plen + 1,
            Some(Fix::Match { len, src }) => {
                let cap = 258.min(n - s);
                let (dist, src) = match (src, head) {
                    // The encoder names the recorded source by its rank where it can.
                    (Src::Dist(d), Some(h)) if fixes.choosing() && (len as usize) <= cap => (d as usize, ch.rank_of(s, h, len as usize, s.wrapping_sub(d as usize)).map_or(src, Src::Rank)),
                    (Src::Dist(d), _) => (d as usize, src),
                    (Src::Rank(k), Some(h)) if (len as usize) <= cap => (s - ch.nth_reaching(s, h, len as usize, k).ok_or(ParseError::Damaged("predicted source"))?, src),
                    (Src::Rank(_), _) => return Err(ParseError::Damaged("predicted source")),
                };
                if dist > s || dist == 0 {
                    return Err(ParseError::Damaged("predicted match out of range"));
                }
                (mlen, mstart) = (len as usize, s - dist);
                fix = Some(Fix::Match { len, src });
            }
            None => {}
        }
        // (What the encoder chose; a reader has its list already.)
        if let Some(f) = fix.filter(|_| fixes.choosing()) {
            made.push(Correction { step, fix: f });
        }
        step = step.checked_add(1).ok_or(ParseError::Damaged("too many steps"))?;
        if plen >= 3 && mlen <= plen {
            let pos = s - 1;
            if pstart >= pos || pos - pstart > WSIZE || plen > 258 || pos + plen > to {
                return Err(ParseError::Damaged("predicted match out of range"));
            }
            while sfrom < stored.len() && stored[sfrom].1 as usize <= pos {
                sfrom += 1;
            }
            if stored.get(sfrom).is_none_or(|r| r.0 as usize > pos) {
                out.push(Match { pos: pos as u32, len: plen as u16, dist: (pos - pstart) as u16 });
            }
            // (zlib inserts every position of the match: `head_at` has them in the chains.)
            s = pos + plen;
            pending = false;
            mlen = 2;
        } else {
            pending = true;
            s += 1;
        }
    }
    Ok((out, made))
}

/// Where the loop's fixes come from.
enum Fixes<'a> {
    /// Decoding: the stored corrections, in step order.
    Read { list: &'a [Correction], next: usize },
    /// Encoding: what the recorded parse wants at each position, and how many more fixes
    /// the section may take before this level is given up.
    Choose { want: Box<dyn Fn(usize) -> Want + 'a>, budget: usize },
}

impl Fixes<'_> {
    /// The fix at `step` (position `s`), given the pending match `plen` (for position s - 1
    /// when `pending`) and the loop's own result `got` for position `s`.
    fn choosing(&self) -> bool {
        matches!(self, Fixes::Choose { .. })
    }

    fn at(&mut self, step: u32, s: usize, plen: usize, pending: bool, got: (usize, usize)) -> Result<Option<Fix>> {
        match self {
            Fixes::Read { list, next } => match list.get(*next) {
                Some(c) if c.step == step => {
                    *next += 1;
                    Ok(Some(c.fix))
                }
                Some(c) if c.step < step => Err(ParseError::Damaged("corrections out of order")),
                _ => Ok(None),
            },
            Fixes::Choose { want, budget } => {
                let fix = Self::choose(want, s, plen, pending, got)?;
                if fix.is_some() {
                    *budget = budget.checked_sub(1).ok_or(ParseError::Unsupported("too many corrections"))?;
                }
                Ok(fix)
            }
        }
    }

    /// The fix the encoder takes at position `s` (see the module's comment).
    fn choose(want: &dyn Fn(usize) -> Want, s: usize, plen: usize, pending: bool, got: (usize, usize)) -> Result<Option<Fix>> {
        let lazy = || ParseError::Unsupported("not zlib's lazy parse");
        // The pending position decides first: a recorded match is emitted now, a recorded
        // literal must not be.
        if pending {
            match want(s - 1) {
                Want::Match(..) if plen < 3 => return Err(lazy()),
                Want::Match(..) => return Ok((got.0 > plen).then_some(Fix::Keep)),
                Want::Literal if plen >= 3 && got.0 <= plen => {
                    return match want(s) {
                        Want::Match(len, dist) if len as usize > plen => Ok(Some(Fix::Match { len, src: Src::Dist(dist) })),
                        Want::Match(..) => Err(lazy()),
                        _ => Ok(Some(Fix::Above)),
                    };
                }
                _ => {}
            }
        }
        match want(s) {
            Want::Match(len, dist) => {
                if pending && plen >= 3 && len as usize <= plen {
                    return Err(lazy());
                }
                let exact = got.0 == len as usize && s - got.1 == dist as usize;
                Ok((!exact).then_some(Fix::Match { len, src: Src::Dist(dist) }))
            }
            // A literal with a match pending stays one only if the next position's match is
            // longer: the loop's own search there, or the recorded match it is fixed to.
            Want::Literal if got.0 >= 3 => match want(s + 1) {
                Want::Match(len, _) if len as usize > got.0 => Ok(None),
                _ => Ok(Some(Fix::None)),
            },
            _ => Ok(None),
        }
    }
}

/// The plain ranges `[start, end)` of the stored blocks, from the block ends.
fn stored_ranges(blocks: &[Block]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut start = 0;
    for b in blocks {
        if matches!(b.kind, BlockKind::Stored { .. }) && b.end > start {
            out.push((start, b.end));
        }
        start = b.end;
    }
    out
}

/// The corrections that make the cut loop give `matches` (the recorded parse of the
/// section), or an error if zlib at `lvl` cannot have written them.
fn corrections(sec: Section, matches: &[Match], lvl: Level, cheap: usize, budget: usize) -> Result<Vec<Correction>> {
    if matches.iter().any(|m| (m.pos as usize) < sec.from || (m.pos as usize) >= sec.to) {
        return Err(ParseError::Unsupported("match outside its section"));
    }
    if matches.windows(2).any(|w| w[1].pos <= w[0].pos) {
        return Err(ParseError::Unsupported("matches out of order"));
    }
    let stored = sec.stored;
    // The loop asks of positions in order, each step of s - 1 (with a match pending), s and
    // s + 1, so no ask goes back more than one position from the last: a cursor at the first
    // match starting at or after the last ask's position less one finds every answer, with
    // no table of the section's positions (4 bytes a byte of text, whatever the member's size).
    let next = std::cell::Cell::new(0usize);
    let want = move |p: usize| -> Want {
        let mut i = next.get();
        while matches.get(i).is_some_and(|m| (m.pos as usize) + 1 < p) {
            i += 1;
        }
        next.set(i);
        // (The match before p, if i is it, ends at p + 2 or later: the next starts past p.)
        match matches.get(i).filter(|m| m.pos as usize == p) {
            Some(m) => Want::Match(m.len, m.dist),
            None if stored.get(stored.partition_point(|r| r.1 as usize <= p)).is_some_and(|r| r.0 as usize <= p) => Want::Any,
            None => Want::Literal,
        }
    };
    let (got, made) = run(sec, lvl, cheap, Fixes::Choose { want: Box::new(want), budget })?;
    if got != matches {
        return Err(ParseError::Unsupported("not zlib's lazy parse"));
    }
    Ok(made)
}

/// The first bytes of a section in the predicted form: a varint 1 written in two bytes,
/// which neither the ranked form (canonical varints) nor the longest form (0x80 0x00) begins
/// with.
pub const PREDICTED_MARK: [u8; 2] = [0x81, 0x00];

/// The levels a writer tries, in order: wget's, then zlib's default, then the rest.
const LEVELS: [u8; 6] = [9, 6, 5, 7, 8, 4];

/// A section's matches in the predicted form, or None if no zlib level predicts them within
/// a third of its matches (the writer's own level leaves about one in ten to correct;
/// another runs past the budget within a few hundred positions, and the next is tried).
/// Returns the level taken. Proven as it is made: the loop that chose the corrections gave
/// exactly `matches`, and a reader runs that loop with those corrections.
pub(super) fn put_section(out: &mut Vec<u8>, text: &[u8], origin: usize, from: usize, to: usize, blocks: &[Block], matches: &[Match]) -> Option<u8> {
    let stored = stored_ranges(blocks);
    let sec = Section { text, origin, from, to, stored: &stored };
    let budget = matches.len() / 3 + 16;
    let best = LEVELS.into_iter().find_map(|lv| {
        let lvl = Level::zlib(lv)?;
        corrections(sec, matches, lvl, CHEAP, budget).ok().map(|c| (lvl, c))
    });
    let (lvl, cs) = best?;
    let start = out.len();
    out.extend_from_slice(&PREDICTED_MARK);
    out.push(lvl.level);
    out.push(CHEAP as u8);
    put_varint(out, (from - origin) as u64);
    let (mut steps, mut codes, mut dists) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = 0;
    for c in &cs {
        put_varint(&mut steps, (c.step - last) as u64);
        last = c.step;
        match c.fix {
            Fix::None => codes.push(0),
            Fix::Keep => codes.push(1),
            Fix::Above => codes.push(2),
            Fix::Match { len, src } => {
                put_varint(&mut codes, len as u64);
                put_varint(&mut dists, match src {
                    Src::Rank(k) => 2 * k as u64,
                    Src::Dist(d) => 2 * (d as u64 - 1) + 1,
                });
            }
        }
    }
    put_varint(out, cs.len() as u64);
    put_varint(out, steps.len() as u64);
    put_varint(out, codes.len() as u64);
    put_varint(out, dists.len() as u64);
    out.extend_from_slice(&steps);
    out.extend_from_slice(&codes);
    out.extend_from_slice(&dists);
    // The bytes as a reader takes them: the section's proof rests on it (`stored::read_back`).
    if read_header(&out[start + PREDICTED_MARK.len()..], to - from).map(|h| h.fixes).as_ref() != Ok(&cs) {
        out.truncate(start);
        return None;
    }
    Some(lvl.level)
}

struct Header {
    lvl: Level,
    cheap: usize,
    back: usize,
    fixes: Vec<Correction>,
    used: usize,
}

/// A section's level, search length and `back`: the first fields of its header.
fn read_start(c: &mut Cursor) -> Result<(Level, usize, usize)> {
    let lvl = Level::zlib(c.byte()?).ok_or(ParseError::Damaged("predicted level"))?;
    let cheap = c.byte()? as usize;
    if cheap == 0 || cheap > MAX_CHEAP {
        return Err(ParseError::Damaged("predicted search length"));
    }
    Ok((lvl, cheap, c.bounded(1 << 31)? as usize))
}

fn read_header(b: &[u8], span: usize) -> Result<Header> {
    let mut c = Cursor { b, i: 0 };
    let (lvl, cheap, back) = read_start(&mut c)?;
    // One fix per step at most, and a section has at most one step per position.
    let n = c.bounded(span as u64 + 1)? as usize;
    let (sl, cl, dl) = (c.bounded(b.len() as u64)? as usize, c.bounded(b.len() as u64)? as usize, c.bounded(b.len() as u64)? as usize);
    let body = c.i;
    let end = body.checked_add(sl).and_then(|e| e.checked_add(cl)).and_then(|e| e.checked_add(dl)).filter(|&e| e <= b.len()).ok_or(ParseError::Damaged("predicted columns"))?;
    // Every correction's step takes a byte at least: the count is bounded by the bytes
    // before it sizes anything.
    if n > sl {
        return Err(ParseError::Damaged("predicted columns"));
    }
    let mut steps = Cursor { b: &b[body..body + sl], i: 0 };
    let mut codes = Cursor { b: &b[body + sl..body + sl + cl], i: 0 };
    let mut dists = Cursor { b: &b[body + sl + cl..end], i: 0 };
    let mut fixes = Vec::with_capacity(n);
    let mut step = 0u64;
    for k in 0..n {
        let d = steps.bounded(span as u64 + 1)?;
        step += d;
        if step > span as u64 || (k > 0 && d == 0) {
            return Err(ParseError::Damaged("predicted steps"));
        }
        let fix = match codes.bounded(258)? {
            0 => Fix::None,
            1 => Fix::Keep,
            2 => Fix::Above,
            len => {
                let r = dists.bounded(2 * WSIZE as u64 - 1)?;
                let src = if r % 2 == 0 { Src::Rank((r / 2).try_into().map_err(|_| ParseError::Damaged("predicted rank"))?) } else { Src::Dist((r / 2 + 1) as u16) };
                Fix::Match { len: len as u16, src }
            }
        };
        fixes.push(Correction { step: step as u32, fix });
    }
    if steps.i != sl || codes.i != cl || dists.i != dists.b.len() {
        return Err(ParseError::Damaged("predicted columns"));
    }
    Ok(Header { lvl, cheap, back, fixes, used: end })
}

/// A section's start minus its origin (the header of a section in the predicted form, after
/// its mark): the text a tail's loop reads begins there.
pub(super) fn section_back(b: &[u8]) -> Result<usize> {
    Ok(read_start(&mut Cursor { b, i: 0 })?.2)
}

/// The bytes a section in the predicted form (after its mark) takes, its columns checked as
/// a reader reads them (ingest's proof: the section's matches are those it was made from).
pub(super) fn section_len(b: &[u8], span: usize) -> Result<usize> {
    Ok(read_header(b, span)?.used)
}

/// Reads a section in the predicted form (after its mark) covering [from, to) of `text`,
/// appending its matches to `out`; returns the bytes it took.
pub(super) fn get_section(b: &[u8], text: &[u8], from: usize, to: usize, blocks: &[Block], out: &mut Vec<Match>) -> Result<usize> {
    if from > to || to > text.len() {
        return Err(ParseError::Damaged("predicted section"));
    }
    let h = read_header(b, to - from)?;
    let origin = from.checked_sub(h.back).ok_or(ParseError::Damaged("predicted origin"))?;
    let stored = stored_ranges(blocks);
    let sec = Section { text, origin, from, to, stored: &stored };
    let (ms, _) = run(sec, h.lvl, h.cheap, Fixes::Read { list: &h.fixes, next: 0 })?;
    out.extend_from_slice(&ms);
    Ok(h.used)
}

#[cfg(test)]
mod tests;
