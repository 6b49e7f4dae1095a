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
//! blocks and matches it decodes, nor writes a given parse.

use thiserror::Error;

mod stored;
mod trees;

pub use stored::{decode, encode, encode_assuming_zlib_headers, Stored};

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

struct BitReader<'a> {
    data: &'a [u8],
    /// Next byte to load into `buf`.
    pos: usize,
    buf: u64,
    n: u32,
    /// Zero bytes loaded past the end (reading them is an error, found by `check`).
    over: usize,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        BitReader { data, pos: 0, buf: 0, n: 0, over: 0 }
    }

    #[inline]
    fn refill(&mut self) {
        if self.pos + 8 <= self.data.len() {
            let w = u64::from_le_bytes(self.data[self.pos..self.pos + 8].try_into().expect("8 bytes"));
            self.buf |= w << self.n;
            self.pos += ((63 - self.n) >> 3) as usize;
            self.n |= 56;
        } else {
            while self.n <= 56 {
                let b = match self.data.get(self.pos) {
                    Some(&b) => b,
                    None => {
                        self.over += 1;
                        0
                    }
                };
                self.pos += 1;
                self.buf |= (b as u64) << self.n;
                self.n += 8;
            }
        }
    }

    /// Bits consumed so far.
    fn bit_pos(&self) -> u64 {
        self.pos as u64 * 8 - self.n as u64
    }

    fn check(&self) -> Result<()> {
        if self.bit_pos() > self.data.len() as u64 * 8 {
            Err(ParseError::Truncated)
        } else {
            Ok(())
        }
    }

    #[inline]
    fn peek(&mut self, n: u32) -> u32 {
        if self.n < n {
            self.refill();
        }
        (self.buf & ((1u64 << n) - 1)) as u32
    }

    #[inline]
    fn consume(&mut self, n: u32) {
        self.buf >>= n;
        self.n -= n;
    }

    #[inline]
    fn bits(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let v = self.peek(n);
        self.consume(n);
        v
    }

    /// Skips to the next byte boundary; returns the skipped bits' value.
    fn align(&mut self) -> u8 {
        let k = self.n % 8;
        self.bits(k) as u8
    }
}

/// A canonical Huffman code for decoding: a direct table for codes of up to FAST_BITS bits,
/// and the canonical walk (as in zlib's puff.c) for longer ones.
struct Decoder {
    /// (symbol << 4) | length, 0 for "longer than FAST_BITS or unused".
    fast: Vec<u16>,
    count: [u16; MAX_BITS + 1],
    /// Symbols ordered by code.
    symbols: Vec<u16>,
}

impl Decoder {
    fn new(lengths: &[u8]) -> Result<Decoder> {
        let mut count = [0u16; MAX_BITS + 1];
        for &l in lengths {
            count[l as usize] += 1;
        }
        count[0] = 0;
        let mut left: i32 = 1;
        for &c in &count[1..] {
            left = left * 2 - c as i32;
            if left < 0 {
                return Err(ParseError::Invalid("over-subscribed Huffman code"));
            }
        }
        let mut offs = [0u16; MAX_BITS + 2];
        for len in 1..=MAX_BITS {
            offs[len + 1] = offs[len] + count[len];
        }
        let mut symbols = vec![0u16; offs[MAX_BITS + 1] as usize];
        for (sym, &l) in lengths.iter().enumerate() {
            if l != 0 {
                symbols[offs[l as usize] as usize] = sym as u16;
                offs[l as usize] += 1;
            }
        }
        let mut fast = vec![0u16; 1 << FAST_BITS];
        for (sym, code, len) in canonical_codes(lengths) {
            if len as u32 <= FAST_BITS {
                let step = 1usize << len;
                let mut i = code as usize;
                while i < fast.len() {
                    fast[i] = ((sym as u16) << 4) | len as u16;
                    i += step;
                }
            }
        }
        Ok(Decoder { fast, count, symbols })
    }

    #[inline]
    fn decode(&self, r: &mut BitReader) -> Result<u16> {
        let bits = r.peek(MAX_BITS as u32);
        let e = self.fast[(bits & ((1 << FAST_BITS) - 1)) as usize];
        if e != 0 {
            r.consume((e & 15) as u32);
            return Ok(e >> 4);
        }
        // Canonical decode, one bit at a time (codes are stored MSB first in the stream).
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..=MAX_BITS {
            code |= ((bits >> (len - 1)) & 1) as i32;
            let count = self.count[len] as i32;
            if code - count < first {
                r.consume(len as u32);
                return Ok(self.symbols[(index + (code - first)) as usize]);
            }
            index += count;
            first += count;
            first <<= 1;
            code <<= 1;
        }
        Err(ParseError::Invalid("unused Huffman code"))
    }
}

/// (symbol, code with its bits reversed for LSB-first output, length) of every used symbol.
fn canonical_codes(lengths: &[u8]) -> impl Iterator<Item = (usize, u32, u8)> + '_ {
    let mut count = [0u32; MAX_BITS + 1];
    for &l in lengths {
        count[l as usize] += 1;
    }
    count[0] = 0;
    let mut next = [0u32; MAX_BITS + 2];
    let mut code = 0u32;
    for bits in 1..=MAX_BITS {
        code = (code + count[bits - 1]) << 1;
        next[bits] = code;
    }
    lengths.iter().enumerate().filter(|(_, &l)| l != 0).map(move |(sym, &l)| {
        let c = next[l as usize];
        next[l as usize] += 1;
        (sym, c.reverse_bits() >> (32 - l as u32), l)
    })
}

/// Reads a dynamic block's header: returns the literal/length and distance code lengths.
fn read_dynamic_header(r: &mut BitReader) -> Result<(Vec<u8>, Vec<u8>)> {
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
    let cl_dec = Decoder::new(&cl)?;
    let mut lengths = vec![0u8; hlit + hdist];
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
    let dist = lengths.split_off(hlit);
    Ok((lengths, dist))
}

/// The bits `[from, from + n)` of `data`, repacked from bit 0.
fn copy_bits(data: &[u8], from: u64, n: u64) -> Vec<u8> {
    let mut out = vec![0u8; n.div_ceil(8) as usize];
    for i in 0..n {
        let b = from + i;
        if data[(b / 8) as usize] >> (b % 8) & 1 != 0 {
            out[(i / 8) as usize] |= 1 << (i % 8);
        }
    }
    out
}

/// Decodes the raw deflate stream `deflate`, which must give exactly `plain` and end exactly
/// at its last byte, and returns its parse.
pub fn record(deflate: &[u8], plain: &[u8]) -> Result<Parse> {
    if plain.len() >= MAX_PLAIN {
        return Err(ParseError::Unsupported("member text too large"));
    }
    let mut r = BitReader::new(deflate);
    let mut p = Parse::default();
    let mut pos = 0usize;
    loop {
        let last = r.bits(1) == 1;
        let btype = r.bits(2);
        let kind = match btype {
            0 => {
                let pad = r.align();
                let len = r.bits(16);
                let nlen = r.bits(16);
                r.check()?;
                if len != !nlen & 0xffff {
                    return Err(ParseError::Invalid("stored block length check"));
                }
                // The stored bytes are whole bytes now: take them straight from the input.
                debug_assert_eq!(r.n % 8, 0);
                let start = (r.bit_pos() / 8) as usize;
                let end = start + len as usize;
                let src = deflate.get(start..end).ok_or(ParseError::Truncated)?;
                if plain.get(pos..pos + len as usize) != Some(src) {
                    return Err(ParseError::TextDiffers);
                }
                pos += len as usize;
                r = BitReader { data: deflate, pos: end, buf: 0, n: 0, over: 0 };
                BlockKind::Stored { pad }
            }
            1 | 2 => {
                let (kind, owned);
                let (lit, dist) = if btype == 1 {
                    kind = BlockKind::Fixed;
                    let f = fixed_decoders();
                    (&f.0, &f.1)
                } else {
                    let from = r.bit_pos();
                    let (ll, dl) = read_dynamic_header(&mut r)?;
                    let bits = r.bit_pos() - from;
                    kind = BlockKind::Dynamic { header: copy_bits(deflate, from, bits), bits: bits as u32 };
                    owned = (Decoder::new(&ll)?, Decoder::new(&dl)?);
                    (&owned.0, &owned.1)
                };
                loop {
                    let sym = lit.decode(&mut r)?;
                    if sym < 256 {
                        if plain.get(pos) != Some(&(sym as u8)) {
                            return Err(ParseError::TextDiffers);
                        }
                        pos += 1;
                    } else if sym == 256 {
                        break;
                    } else {
                        let li = (sym - 257) as usize;
                        if li >= 29 {
                            return Err(ParseError::Invalid("bad length symbol"));
                        }
                        let len = LBASE[li] + r.bits(LEXT[li] as u32) as u16;
                        if li == 27 && len == 258 {
                            // Valid, but replay writes 258 as symbol 285.
                            return Err(ParseError::Unsupported("length 258 coded as symbol 284"));
                        }
                        let ds = dist.decode(&mut r)? as usize;
                        if ds >= 30 {
                            return Err(ParseError::Invalid("bad distance symbol"));
                        }
                        let d = DBASE[ds] as usize + r.bits(DEXT[ds] as u32) as usize;
                        let l = len as usize;
                        if d > pos {
                            return Err(ParseError::Invalid("distance too far back"));
                        }
                        if pos + l > plain.len() || plain[pos..pos + l] != plain[pos - d..pos - d + l] {
                            return Err(ParseError::TextDiffers);
                        }
                        p.matches.push(Match { pos: pos as u32, len, dist: d as u16 });
                        pos += l;
                    }
                    if r.over > 0 {
                        r.check()?;
                    }
                }
                r.check()?;
                kind
            }
            _ => return Err(ParseError::Invalid("reserved block type")),
        };
        p.blocks.push(Block { kind, last, end: pos as u32 });
        if last {
            break;
        }
    }
    p.end_pad = r.align();
    r.check()?;
    if r.bit_pos() != deflate.len() as u64 * 8 {
        return Err(ParseError::Invalid("bytes after the final block"));
    }
    if pos != plain.len() {
        return Err(ParseError::TextDiffers);
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------
// Writing bits.

struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    buf: u64,
    n: u32,
}

impl BitWriter<'_> {
    #[inline]
    fn put(&mut self, v: u32, n: u32) {
        self.buf |= (v as u64) << self.n;
        self.n += n;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.buf as u32).to_le_bytes());
            self.buf >>= 32;
            self.n -= 32;
        }
    }

    /// Writes out whole bytes; leaves fewer than 8 bits pending.
    fn flush_bytes(&mut self) {
        while self.n >= 8 {
            self.out.push(self.buf as u8);
            self.buf >>= 8;
            self.n -= 8;
        }
    }

    fn pad_to_byte(&mut self, value: u8) {
        let k = (8 - self.n % 8) % 8;
        self.put(value as u32 & ((1 << k) - 1), k);
        self.flush_bytes();
    }
}

/// An encoding table: (reversed code, length) per symbol; length 0 for unused symbols.
type Codes<const N: usize> = [(u16, u8); N];

/// Fixed-size, so that a literal byte indexes it without a bounds check.
fn encoder<const N: usize>(lengths: &[u8]) -> Codes<N> {
    let mut t = [(0u16, 0u8); N];
    for (sym, code, len) in canonical_codes(lengths) {
        if let Some(slot) = t.get_mut(sym) {
            *slot = (code as u16, len);
        }
    }
    t
}

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
                let (ll, dl) = read_dynamic_header(&mut r).map_err(|_| ParseError::Damaged("dynamic header"))?;
                if r.bit_pos() != *bits as u64 {
                    return bad("dynamic header length");
                }
                for (i, &byte) in header.iter().enumerate() {
                    let k = (*bits - 8 * i as u32).min(8);
                    w.put(byte as u32 & ((1 << k) - 1), k);
                }
                owned = (encoder::<288>(&ll), encoder::<30>(&dl));
                (lit, dist) = (&owned.0, &owned.1);
            }
        }
        let lit_of = |b: u8| lit[b as usize];
        loop {
            let next = match parse.matches.get(mi) {
                Some(m) if (m.pos as usize) < end => Some(*m),
                _ => None,
            };
            let lit_end = next.map_or(end, |m| m.pos as usize);
            if lit_end < pos {
                return bad("matches out of order");
            }
            for &byte in &plain[pos..lit_end] {
                let (c, l) = lit_of(byte);
                if l == 0 {
                    return bad("literal without a code");
                }
                w.put(c as u32, l as u32);
            }
            pos = lit_end;
            let Some(m) = next else { break };
            let (len, d) = (m.len as usize, m.dist as usize);
            if !(3..=258).contains(&len) || d == 0 || d > pos || pos + len > end {
                return bad("match bounds");
            }
            let li = len_index(m.len);
            let (c, l) = lit[257 + li];
            let di = dist_index(m.dist);
            let (dc, dl) = dist[di];
            if l == 0 || dl == 0 {
                return bad("match without a code");
            }
            w.put(c as u32, l as u32);
            w.put((m.len - LBASE[li]) as u32, LEXT[li] as u32);
            w.put(dc as u32, dl as u32);
            w.put((m.dist - DBASE[di]) as u32, DEXT[di] as u32);
            pos += len;
            mi += 1;
        }
        let (c, l) = lit[256];
        if l == 0 {
            return bad("no end-of-block code");
        }
        w.put(c as u32, l as u32);
    }
    if pos != plain.len() || mi != parse.matches.len() || !parse.blocks.last().is_some_and(|b| b.last) {
        return bad("parse does not cover the text");
    }
    w.pad_to_byte(parse.end_pad);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};
    use proptest::prelude::*;

    fn zlib(plain: &[u8], level: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(plain.len() * 2 + 1024);
        let mut c = Compress::new(Compression::new(level), false);
        c.compress_vec(plain, &mut out, FlushCompress::Finish).unwrap();
        out
    }

    fn text(n: usize, seed: u32) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut x = seed;
        while v.len() < n {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            let w = ["<div class=", "record ", "http://", "200 ", "OK\r\n", "text/html ", "\u{e9}t\u{e9} "][(x >> 16) as usize % 7];
            v.extend_from_slice(w.as_bytes());
            v.push((x >> 24) as u8);
        }
        v.truncate(n);
        v
    }

    /// Records, stores (split at `cut`), loads and replays: must give `d` back exactly.
    fn round_trip(d: &[u8], plain: &[u8], cut: Option<usize>) -> Parse {
        let p = record(d, plain).unwrap();
        let mut out = Vec::new();
        replay(&p, plain, &mut out).unwrap();
        assert!(out == d, "direct replay differs");
        let s = encode(&p, plain, cut);
        let back = decode(&s.prefix, s.tail.as_deref(), plain).unwrap();
        assert_eq!(back, p);
        p
    }

    #[test]
    fn zlib_levels_replay_exactly() {
        let t = text(300_000, 7);
        for level in 0..=9 {
            round_trip(&zlib(&t, level), &t, Some(1000));
        }
        round_trip(&zlib(b"", 6), b"", None);
        round_trip(&zlib(b"a", 9), b"a", Some(0));
    }

    #[test]
    fn the_tail_is_the_same_whatever_comes_before() {
        // Two members with different headers before the same payload: once the window no
        // longer reaches the headers, the tails are equal byte for byte.
        let payload = text(200_000, 3);
        let mut tails = Vec::new();
        for hdr in [&b"WARC/1.0\r\nWARC-Date: 2024-01-01\r\n\r\n"[..], b"WARC/1.0\r\nWARC-Date: 2025-12-31T23:59:59Z\r\nX: y\r\n\r\n"] {
            let mut plain = hdr.to_vec();
            plain.extend_from_slice(&payload);
            let d = zlib(&plain, 9);
            let p = round_trip(&d, &plain, Some(hdr.len() + 40_000));
            let s = encode(&p, &plain, Some(hdr.len() + 40_000));
            tails.push(s.tail.unwrap());
        }
        assert_eq!(tails[0], tails[1]);
    }

    #[test]
    fn sync_flushes_and_stored_blocks() {
        let t = text(100_000, 9);
        let mut out = Vec::with_capacity(300_000);
        let mut c = Compress::new(Compression::new(6), false);
        c.compress_vec(&t[..1000], &mut out, FlushCompress::Sync).unwrap();
        c.compress_vec(&t[1000..50_000], &mut out, FlushCompress::Full).unwrap();
        c.compress_vec(&t[50_000..50_000], &mut out, FlushCompress::Partial).unwrap();
        c.compress_vec(&t[50_000..], &mut out, FlushCompress::Finish).unwrap();
        let p = round_trip(&out, &t, Some(60_000));
        assert!(p.blocks.iter().any(|b| matches!(b.kind, BlockKind::Stored { .. })));
    }

    #[test]
    fn odd_but_valid_streams() {
        // Nonzero padding before a stored block's length and after the final block.
        let mut d = vec![0b1111_1001u8]; // last, stored, pad bits 11111
        d.extend_from_slice(&[3, 0, !3, !0]);
        d.extend_from_slice(b"abc");
        let p = round_trip(&d, b"abc", None);
        assert_eq!(p.blocks[0].kind, BlockKind::Stored { pad: 0b11111 });
        // A fixed block: "aaaa" as literal a + match (3, 1), final padding 0b10101.
        let mut w = Vec::new();
        let mut bw = BitWriter { out: &mut w, buf: 0, n: 0 };
        bw.put(1, 1);
        bw.put(1, 2);
        bw.put(0b10010001u32.reverse_bits() >> 24, 8); // 'a' = 0x61: code 0x30 + 0x61
        bw.put(1u32.reverse_bits() >> 25, 7); // length 3: symbol 257, code 0000001
        bw.put(0, 5); // distance 1: code 0
        bw.put(0, 7); // end of block
        bw.pad_to_byte(0b10101);
        let p = round_trip(&w, b"aaaa", None);
        assert_eq!(p.end_pad, 0b01); // 30 bits written: two bits of padding
        assert_eq!(p.matches, vec![Match { pos: 1, len: 3, dist: 1 }]);
    }

    #[test]
    fn bad_streams_are_errors() {
        let t = text(5000, 1);
        let d = zlib(&t, 6);
        assert!(record(&d[..d.len() - 1], &t).is_err());
        assert_eq!(record(&d, &t[..4999]).unwrap_err(), ParseError::TextDiffers);
        let mut more = d.clone();
        more.push(0);
        assert!(record(&more, &t).is_err());
        assert!(record(&[0xff], b"").is_err());
        assert!(record(&[], b"").is_err());
        // A parse of another text does not replay over this one without an error or a
        // different stream (the caller's checksum catches the latter).
        let p = record(&d, &t).unwrap();
        let other = text(5000, 2);
        let mut out = Vec::new();
        assert!(replay(&p, &other, &mut out).is_err() || out != d);
    }

    /// Every member of every sample file: recorded, split at a payload-like offset, replayed.
    #[test]
    fn every_real_member_replays_exactly() {
        use crate::format::gzip::{split, Region};
        let mut members = 0;
        for path in crate::test_support::real_corpus_files() {
            let data = std::fs::read(&path).unwrap();
            let mut plain = Vec::new();
            for r in split(&data, &mut plain) {
                let Region::Member(m) = r else { continue };
                let d0 = m.start as usize + m.header_len;
                let d = &data[d0..d0 + m.deflate_len as usize];
                let t = &plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
                round_trip(d, t, Some(t.len() / 3));
                members += 1;
            }
        }
        assert!(members > 1000, "{members}");
    }

    /// Members written by other deflate engines than zlib: GNU gzip, pigz (zlib at other
    /// settings, and zopfli with -11) and zopfli itself.
    #[test]
    fn other_writers_replay_exactly() {
        use std::process::Command;
        let t = std::fs::read(crate::test_support::real_corpus().join("webrecorder-pywb/iana.warc.gz")).unwrap();
        let mut plain = Vec::new();
        flate2::read::MultiGzDecoder::new(&t[..]).read_to_end(&mut plain).unwrap();
        use std::io::Read;
        let plain = &plain[..plain.len().min(400_000)];
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("plain");
        std::fs::write(&input, plain).unwrap();
        for cmd in [&["gzip", "-c", "-9"][..], &["gzip", "-c", "-1"], &["gzip", "-c", "-6", "--rsyncable"], &["pigz", "-c", "-11", "-p", "1"], &["pigz", "-c", "-b", "32", "-p", "2"], &["zopfli", "-c", "--i5"]] {
            let out = Command::new(cmd[0]).args(&cmd[1..]).arg(&input).output().unwrap_or_else(|e| panic!("{} (scripts/setup installs it): {e}", cmd[0]));
            assert!(out.status.success(), "{cmd:?}");
            let mut back = Vec::new();
            let regions = crate::format::gzip::split(&out.stdout, &mut back);
            assert_eq!(back, plain, "{cmd:?}");
            for r in regions {
                let crate::format::gzip::Region::Member(m) = r else { panic!("{cmd:?}: raw bytes") };
                let d0 = m.start as usize + m.header_len;
                let d = &out.stdout[d0..d0 + m.deflate_len as usize];
                let tx = &back[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
                round_trip(d, tx, Some(tx.len() / 2));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(256), ..ProptestConfig::default() })]

        /// Fuzz: a damaged stored parse decodes to an error or to something replay refuses
        /// or writes; never a panic or an unbounded walk.
        #[test]
        fn fuzz_damaged_stored_parses_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..6),
                                            cut in 0usize..20_000, tail_side in any::<bool>()) {
            // One member for every case (made once: a fuzz run has 100,000 of them).
            static MEMBER: std::sync::OnceLock<(Vec<u8>, Parse)> = std::sync::OnceLock::new();
            let (t, p) = MEMBER.get_or_init(|| {
                let t = text(20_000, 5);
                let p = record(&zlib(&t, 9), &t).unwrap();
                (t, p)
            });
            let t = t.as_slice();
            let mut s = encode(p, t, Some(cut));
            for (i, bit) in flips {
                let target = match (&mut s.tail, tail_side) {
                    (Some(tail), true) => tail,
                    _ => &mut s.prefix,
                };
                let i = i.index(target.len());
                target[i] ^= 1 << bit;
            }
            if let Ok(p) = decode(&s.prefix, s.tail.as_deref(), t) {
                let mut out = Vec::new();
                let _ = replay(&p, t, &mut out);
            }
        }

        /// Fuzz: the recording inflater on any bytes.
        #[test]
        fn fuzz_arbitrary_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048), plain in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = record(&data, &plain);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn any_zlib_member_round_trips(len in 0usize..100_000, level in 0u32..=9, seed in any::<u32>(),
                                       strategy in 0u32..4, mem_level in 1i32..=9) {
            let t = text(len, seed);
            // Every strategy and memLevel, through libz-sys directly (flate2 exposes neither).
            let d = unsafe {
                extern "C" fn zalloc(_: *mut libc::c_void, n: u32, size: u32) -> *mut libc::c_void {
                    unsafe { libc::calloc(n as usize, size as usize) }
                }
                extern "C" fn zfree(_: *mut libc::c_void, p: *mut libc::c_void) {
                    unsafe { libc::free(p) }
                }
                let mut s = std::mem::MaybeUninit::<libz_sys::z_stream>::zeroed();
                std::ptr::addr_of_mut!((*s.as_mut_ptr()).zalloc).write(zalloc);
                std::ptr::addr_of_mut!((*s.as_mut_ptr()).zfree).write(zfree);
                let mut s = s.assume_init();
                let ver = libz_sys::zlibVersion();
                let r = libz_sys::deflateInit2_(&mut s, level as i32, 8, -15, mem_level, strategy as i32, ver, std::mem::size_of::<libz_sys::z_stream>() as i32);
                assert_eq!(r, 0);
                let mut out = vec![0u8; len * 2 + 1024];
                s.next_in = t.as_ptr() as *mut u8;
                s.avail_in = t.len() as u32;
                s.next_out = out.as_mut_ptr();
                s.avail_out = out.len() as u32;
                assert_eq!(libz_sys::deflate(&mut s, libz_sys::Z_FINISH), libz_sys::Z_STREAM_END);
                out.truncate(s.total_out as usize);
                libz_sys::deflateEnd(&mut s);
                out
            };
            round_trip(&d, &t, Some(len / 2));
        }
    }
}
