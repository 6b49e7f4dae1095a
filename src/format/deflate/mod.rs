//! A deflate stream's parse: recorded while inflating, replayed to the stream's exact bits.
//!
//! What makes a deflate stream expensive to rebuild from its plain text is the writer's match
//! search. Once the matches it chose are known, the rest follows: block types and boundaries,
//! the dynamic blocks' headers (kept as the bits they were written as, so the writer's own
//! run-length coding of the code lengths is kept too) and the canonical Huffman codes those
//! headers define. So a member is recorded once, at ingest, as a [`Parse`]: its blocks and
//! its matches. Replaying the parse over the plain text writes every bit again, whatever
//! wrote the stream (zlib at any level or strategy, GNU gzip, Go, zopfli, 7-Zip): nothing
//! about any writer's rules is assumed. Ingest proves every member by replaying it and
//! comparing with the original bytes; a stream this module cannot represent exactly (length
//! 258 written as symbol 284, say) is refused, and the caller stores the member another way.
//!
//! Storage splits the parse in two at a plain offset (`cut`): the matches before it, with the
//! block list, are member-specific (`prefix`); the matches after it depend only on the text
//! there once the writer's 32 KiB window no longer reaches before the payload, so they are
//! stored as a content-addressed chunk that deduplicates with the payload (`tail`). Byte
//! layouts: docs/FORMAT.md, "Deflate parse".
//!
//! Our own inflater and bit writer: no deflate crate (flate2, miniz_oxide, zlib) exposes the
//! blocks and matches it decodes, nor writes a given parse. Recording (`inflate.rs`), the
//! stored form (`stored/`), bits and Huffman codes (`bits.rs`, `trees.rs`) are apart; this
//! file keeps the types, the RFC 1951 tables, header reading and `replay`.

use thiserror::Error;

mod bits;
mod inflate;
mod predict;
mod stored;
mod varint;
mod trees;

use bits::{encoder, BitReader, BitWriter, ClDecoder, Codes, Decoder};

pub use inflate::{inflate, record};
pub use stored::{decode, encode, encode_prefix_read_back, encode_read_back, encode_read_back_at, header_bytes, is_optimal, read_prefix, tail_identity, Cut, Prefix, Stored};

/// What went wrong recording or replaying a parse. None of these is a panic: the input is
/// untrusted (a member of any file, or a stored parse that may be damaged).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("deflate stream ends early")]
    Truncated,
    #[error("invalid deflate stream: {0}")]
    Invalid(&'static str),
    #[error("deflate stream does not give the member's plain text")]
    TextDiffers,
    #[error("deflate stream is valid but cannot be replayed exactly: {0}")]
    Unsupported(&'static str),
    #[error("stored parse is damaged: {0}")]
    Damaged(&'static str),
}

type Result<T> = std::result::Result<T, ParseError>;

/// How a block is coded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// Stored: `pad` is the value of the bits skipped to reach a byte boundary.
    Stored { pad: u8 },
    Fixed,
    /// Dynamic: the header after BTYPE (HLIT, HDIST, HCLEN, code-length code and the coded
    /// lengths) exactly as written, `bits` long, LSB first.
    Dynamic { header: Vec<u8>, bits: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub kind: BlockKind,
    pub last: bool,
    /// Plain offset where this block's text ends (blocks are in order; empty blocks repeat it).
    pub end: u32,
}

/// A match of `len` bytes at plain offset `pos`, copied from `dist` bytes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    pub pos: u32,
    pub len: u16,
    pub dist: u16,
}

/// Everything a deflate stream holds beyond its plain text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parse {
    pub blocks: Vec<Block>,
    /// In plain order; each lies within one block.
    pub matches: Vec<Match>,
    /// The value of the padding bits after the final block.
    pub end_pad: u8,
}

/// Plain text of more than this is not recorded (positions are u32; ingest's own limit on a
/// member's text is far lower).
pub const MAX_PLAIN: usize = 1 << 31;

// RFC 1951 tables.
const LBASE: [u16; 29] = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
const LEXT: [u8; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DBASE: [u16; 30] = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577];
const DEXT: [u8; 30] = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];
/// Order of the code-length code lengths in a dynamic header.
const CL_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
const MAX_BITS: usize = 15;
const FAST_BITS: u32 = 10;

/// The fixed Huffman code's decoding and encoding tables, built once: most small members
/// (request and metadata records) are a single fixed block, and every rebuild of one would
/// otherwise build them again.
fn fixed_decoders() -> &'static (Decoder, Decoder) {
    static FIXED: std::sync::OnceLock<(Decoder, Decoder)> = std::sync::OnceLock::new();
    FIXED.get_or_init(|| {
        let (l, d) = fixed_lengths();
        (Decoder::new(&l).expect("fixed code"), Decoder::new(&d).expect("fixed code"))
    })
}

fn fixed_codes() -> &'static (Codes<288>, Codes<30>) {
    static FIXED: std::sync::OnceLock<(Codes<288>, Codes<30>)> = std::sync::OnceLock::new();
    FIXED.get_or_init(|| {
        let (l, d) = fixed_lengths();
        (encoder::<288>(&l), encoder::<30>(&d))
    })
}

fn fixed_lengths() -> ([u8; 288], [u8; 30]) {
    let mut l = [0u8; 288];
    l[..144].fill(8);
    l[144..256].fill(9);
    l[256..280].fill(7);
    l[280..].fill(8);
    (l, [5u8; 30])
}

/// Length symbol index (0..29) of a match length 3..=258.
fn len_index(len: u16) -> usize {
    match len {
        258 => 28,
        3..=10 => (len - 3) as usize,
        _ => {
            let l = (len - 3) as u32;
            let nb = 31 - l.leading_zeros();
            (4 * (nb - 1) + ((l >> (nb - 2)) & 3)) as usize
        }
    }
}

/// Distance symbol (0..30) of a distance 1..=32768.
fn dist_index(dist: u16) -> usize {
    let d = (dist - 1) as u32;
    if d < 4 {
        d as usize
    } else {
        let nb = 31 - d.leading_zeros();
        (2 * nb + ((d >> (nb - 1)) & 1)) as usize
    }
}

// ---------------------------------------------------------------------------------------
// Reading bits.

/// `Decoder::zlib_takes` for a code given by its lengths (the tests' view of the rule).
#[cfg(test)]
fn zlib_takes(lengths: &[u8], code_lengths_code: bool) -> Result<()> {
    Decoder::new(lengths)?.zlib_takes(code_lengths_code)
}

/// A dynamic block's code lengths, literal/length codes then distance codes (one array: a
/// repeat may run from one into the other).
pub(super) struct Lengths {
    all: [u8; 286 + 30],
    hlit: usize,
    hdist: usize,
}

impl Lengths {
    pub(super) fn lit(&self) -> &[u8] {
        &self.all[..self.hlit]
    }

    pub(super) fn dist(&self) -> &[u8] {
        &self.all[self.hlit..self.hlit + self.hdist]
    }
}

/// Reads a dynamic block's header: returns its code lengths.
fn read_dynamic_header(r: &mut BitReader) -> Result<Lengths> {
    let hlit = r.bits(5) as usize + 257;
    let hdist = r.bits(5) as usize + 1;
    let hclen = r.bits(4) as usize + 4;
    if hlit > 286 || hdist > 30 {
        return Err(ParseError::Invalid("too many length or distance codes"));
    }
    let mut cl = [0u8; 19];
    for &i in &CL_ORDER[..hclen] {
        cl[i] = r.bits(3) as u8;
    }
    let cl_dec = ClDecoder::new(&cl)?;
    let mut out = Lengths { all: [0u8; 286 + 30], hlit, hdist };
    let lengths = &mut out.all[..hlit + hdist];
    let mut i = 0;
    while i < lengths.len() {
        let sym = cl_dec.decode(r)?;
        let (val, rep) = match sym {
            0..=15 => (sym as u8, 1),
            16 => {
                let prev = *lengths[..i].last().ok_or(ParseError::Invalid("repeat with no previous length"))?;
                (prev, 3 + r.bits(2) as usize)
            }
            17 => (0, 3 + r.bits(3) as usize),
            _ => (0, 11 + r.bits(7) as usize),
        };
        if i + rep > lengths.len() {
            return Err(ParseError::Invalid("code lengths overrun"));
        }
        lengths[i..i + rep].fill(val);
        i += rep;
    }
    r.check()?;
    if lengths[256] == 0 {
        return Err(ParseError::Invalid("no end-of-block code"));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Writing bits.

/// The longest extension of a match at `pos` from `dist` back, up to `limit` bytes: the
/// length a stored parse leaves out when the writer took all of it.
#[inline]
fn extension(plain: &[u8], pos: usize, dist: usize, limit: usize) -> usize {
    let a = &plain[pos..pos + limit];
    let b = &plain[pos - dist..pos - dist + limit];
    // Eight bytes at a time: the first differing byte is where their XOR's lowest set bit is.
    let mut i = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let d = u64::from_le_bytes(x.try_into().expect("8 bytes")) ^ u64::from_le_bytes(y.try_into().expect("8 bytes"));
        if d != 0 {
            return i + (d.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..].iter().zip(&b[i..]).take_while(|(x, y)| x == y).count()
}

/// The largest scratch buffer `replay` keeps between blocks (a zlib block, 16,383 symbols,
/// needs 96 KiB at most).
const REPLAY_KEPT: usize = 1 << 20;

/// The most bytes the symbols of the coded block [pos, end) with matches `ms` (the parse's
/// from this block on) can take with the 7 bits carried in and the 8 that `flush` writes at
/// once: 15 bits a literal, 48 a match, 15 the end of the block. From the symbols, not the
/// text, so that a block of long matches needs little room (at the cost of a pass over
/// them). Matches that do not lie in order inside the block (a damaged parse, which replay
/// refuses on meeting them) get room for two bytes a text byte, which no block can exceed.
fn block_room(ms: &[Match], pos: usize, end: usize) -> usize {
    let (mut at, mut literals, mut matches) = (pos, 0usize, 0usize);
    for m in ms {
        let (p, len) = (m.pos as usize, m.len as usize);
        if p >= end {
            break;
        }
        if p < at || p + len > end {
            return 2 * (end - pos) + 16;
        }
        literals += p - at;
        matches += 1;
        at = p + len;
    }
    literals += end - at;
    (15 * literals + 48 * matches + 15) / 8 + 16
}

thread_local! {
    /// `replay`'s room for a block's symbols, kept for the thread's next block.
    static REPLAY_SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Writes the raw deflate stream that `parse` describes over `plain` to `out`. A parse that
/// does not fit the text (damaged, or another member's) is an error, never a panic; the
/// bytes then written are meaningless, and the caller checks the result's checksum anyway.
pub fn replay(parse: &Parse, plain: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let bad = |what| Err(ParseError::Damaged(what));
    let mut w = BitWriter { out, buf: 0, n: 0 };
    let mut pos = 0usize;
    let mut mi = 0usize;
    for (bi, b) in parse.blocks.iter().enumerate() {
        let end = b.end as usize;
        if end < pos || end > plain.len() || b.last != (bi + 1 == parse.blocks.len()) {
            return bad("block bounds");
        }
        w.put(b.last as u32, 1);
        let (lit, dist, owned);
        match &b.kind {
            BlockKind::Stored { pad } => {
                w.put(0, 2);
                w.pad_to_byte(*pad);
                let len = end - pos;
                if len > 0xffff || parse.matches.get(mi).is_some_and(|m| (m.pos as usize) < end) {
                    return bad("stored block");
                }
                w.put(len as u32 | ((!len as u32 & 0xffff) << 16), 32);
                w.flush_bytes();
                w.out.extend_from_slice(&plain[pos..end]);
                pos = end;
                continue;
            }
            BlockKind::Fixed => {
                w.put(1, 2);
                let f = fixed_codes();
                (lit, dist) = (&f.0, &f.1);
            }
            BlockKind::Dynamic { header, bits } => {
                w.put(2, 2);
                if (*bits as usize).div_ceil(8) != header.len() {
                    return bad("dynamic header length");
                }
                let mut r = BitReader::new(header);
                let lengths = read_dynamic_header(&mut r).map_err(|_| ParseError::Damaged("dynamic header"))?;
                if r.bit_pos() != *bits as u64 {
                    return bad("dynamic header length");
                }
                for (i, &byte) in header.iter().enumerate() {
                    let k = (*bits - 8 * i as u32).min(8);
                    w.put(byte as u32 & ((1 << k) - 1), k);
                }
                owned = (encoder::<288>(lengths.lit()), encoder::<30>(lengths.dist()));
                (lit, dist) = (&owned.0, &owned.1);
            }
        }
        // The block's symbols go into a scratch buffer with room for the most they can take
        // (a literal or a text byte of a match at most two bytes; end-of-block 15 bits), eight
        // bytes at a time from a register: no capacity check, no length kept in memory per
        // write. Whole bytes pending in `w` go first, so at most 7 bits are carried in.
        w.flush_bytes();
        let mut dst = REPLAY_SCRATCH.with(|s| s.take());
        // Two bytes a text byte is room enough for any block and costs no pass over its
        // matches; a block of much text (long matches, a whole large member in one block) is
        // given room by its symbols instead.
        let need = match 2 * (end - pos) + 16 {
            room if room <= REPLAY_KEPT => room,
            _ => block_room(&parse.matches[mi..], pos, end),
        };
        if dst.len() < need {
            dst.resize(need, 0);
        }
        let (mut buf, mut n, mut at) = (w.buf, w.n, 0usize);
        // A write adds at most 48 bits to the at most 7 carried; `flush` then writes out the
        // whole bytes.
        macro_rules! put {
            ($v:expr, $k:expr) => {
                buf |= ($v as u64) << n;
                n += $k as u32;
            };
        }
        macro_rules! flush {
            () => {
                dst[at..at + 8].copy_from_slice(&buf.to_le_bytes());
                at += (n >> 3) as usize;
                buf >>= n & !7;
                n &= 7;
            };
        }
        // A byte without a code shows as a zero length, checked once a run.
        let mut uncoded = false;
        loop {
            let next = match parse.matches.get(mi) {
                Some(m) if (m.pos as usize) < end => Some(*m),
                _ => None,
            };
            let lit_end = next.map_or(end, |m| m.pos as usize);
            if lit_end < pos {
                return bad("matches out of order");
            }
            // Two literals a write: their codes are at most 15 bits each.
            let mut run = plain.get(pos..lit_end).ok_or(ParseError::Damaged("matches out of order"))?;
            while let [a, b, rest @ ..] = run {
                let ((ca, la), (cb, lb)) = (lit[*a as usize], lit[*b as usize]);
                uncoded |= (la == 0) | (lb == 0);
                put!(ca as u32 | (cb as u32) << la, la + lb);
                flush!();
                run = rest;
            }
            if let [a] = run {
                let (c, l) = lit[*a as usize];
                uncoded |= l == 0;
                put!(c, l);
                flush!();
            }
            if uncoded {
                return bad("literal without a code");
            }
            pos = lit_end;
            let Some(m) = next else { break };
            let (len, d) = (m.len as usize, m.dist as usize);
            // (No distance beyond deflate's 32 KiB window has a code.)
            if !(3..=258).contains(&len) || d == 0 || d > pos || d > 32768 || pos + len > end {
                return bad("match bounds");
            }
            let li = len_index(m.len);
            let (c, l) = lit[257 + li];
            let di = dist_index(m.dist);
            let (dc, dl) = dist[di];
            if l == 0 || dl == 0 {
                return bad("match without a code");
            }
            // Each code with its extra bits (at most 20 and 28 bits), one write for both.
            put!(c as u32 | ((m.len - LBASE[li]) as u32) << l, l as u32 + LEXT[li] as u32);
            put!(dc as u32 | ((m.dist - DBASE[di]) as u32) << dl, dl as u32 + DEXT[di] as u32);
            flush!();
            pos += len;
            mi += 1;
        }
        let (c, l) = lit[256];
        if l == 0 {
            return bad("no end-of-block code");
        }
        put!(c, l);
        flush!();
        w.out.extend_from_slice(&dst[..at]);
        (w.buf, w.n) = (buf, n);
        // Kept for the next block unless an outsized one grew it (a block of a whole large
        // member, as zopfli and 7-Zip write them): a kept buffer is never more than that.
        if dst.len() <= REPLAY_KEPT {
            REPLAY_SCRATCH.with(|s| s.set(dst));
        }
    }
    if pos != plain.len() || mi != parse.matches.len() || !parse.blocks.last().is_some_and(|b| b.last) {
        return bad("parse does not cover the text");
    }
    w.pad_to_byte(parse.end_pad);
    Ok(())
}

#[cfg(test)]
pub(super) mod tests;
