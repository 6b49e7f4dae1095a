//! Bits in and out of a deflate stream: a bit reader, canonical Huffman decoders built from
//! code lengths, and a bit writer with encoders (RFC 1951, 3.1.1 and 3.2.2).

use super::*;

pub(super) struct BitReader<'a> {
    pub(super) data: &'a [u8],
    /// Next byte to load into `buf`.
    pub(super) pos: usize,
    pub(super) buf: u64,
    pub(super) n: u32,
    /// Zero bytes loaded past the end (reading them is an error, found by `check`).
    pub(super) over: usize,
}

impl<'a> BitReader<'a> {
    #[inline]
    pub(super) fn new(data: &'a [u8]) -> Self {
        BitReader { data, pos: 0, buf: 0, n: 0, over: 0 }
    }

    #[inline]
    pub(super) fn refill(&mut self) {
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
    #[inline]
    pub(super) fn bit_pos(&self) -> u64 {
        self.pos as u64 * 8 - self.n as u64
    }

    #[inline]
    pub(super) fn check(&self) -> Result<()> {
        if self.bit_pos() > self.data.len() as u64 * 8 {
            Err(ParseError::Truncated)
        } else {
            Ok(())
        }
    }

    #[inline]
    pub(super) fn peek(&mut self, n: u32) -> u32 {
        if self.n < n {
            self.refill();
        }
        (self.buf & ((1u64 << n) - 1)) as u32
    }

    #[inline]
    pub(super) fn consume(&mut self, n: u32) {
        self.buf >>= n;
        self.n -= n;
    }

    #[inline]
    pub(super) fn bits(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let v = self.peek(n);
        self.consume(n);
        v
    }

    /// Skips to the next byte boundary; returns the skipped bits' value.
    #[inline]
    pub(super) fn align(&mut self) -> u8 {
        let k = self.n % 8;
        self.bits(k) as u8
    }
}

/// How many codes of each length `lengths` gives (index = length; `N` is one more than the
/// longest), and the code space they leave unused, in units of a code of the longest length
/// (0: complete). Over-subscribed codes are refused.
fn count_lengths<const N: usize>(lengths: &[u8]) -> Result<([u16; N], i32)> {
    let mut count = [0u16; N];
    for &l in lengths {
        *count.get_mut(l as usize).ok_or(ParseError::Invalid("code length out of range"))? += 1;
    }
    count[0] = 0;
    let mut left: i32 = 1;
    for &c in &count[1..] {
        left = left * 2 - c as i32;
        if left < 0 {
            return Err(ParseError::Invalid("over-subscribed Huffman code"));
        }
    }
    Ok((count, left))
}

/// A canonical Huffman code for decoding: a direct table for codes of up to FAST_BITS bits,
/// and the canonical walk (as in zlib's puff.c) for longer ones.
pub(super) struct Decoder {
    /// (symbol << 4) | length, 0 for "longer than FAST_BITS or unused". Fixed-size, so that
    /// a masked index needs no bounds check.
    pub(super) fast: Box<[u16; 1 << FAST_BITS]>,
    pub(super) count: [u16; MAX_BITS + 1],
    /// Symbols ordered by code.
    pub(super) symbols: Vec<u16>,
}

impl Decoder {
    #[inline]
    pub(super) fn new(lengths: &[u8]) -> Result<Decoder> {
        let (count, _) = count_lengths::<{ MAX_BITS + 1 }>(lengths)?;
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
        // The direct table, grown a code length at a time: doubled by copying (an entry for
        // a code shorter than the new length stands for both values of the new top bit),
        // then each code of that length put at its bit-reversed index. The same entries as
        // writing every code at each of its 2^(FAST_BITS - length) places, but with copies
        // instead of strided stores: a dynamic block builds two of these tables, and a
        // small member is not much more than its block.
        let mut fast = Box::new([0u16; 1 << FAST_BITS]);
        let (mut filled, mut code, mut next) = (1usize, 0u32, 0usize);
        for len in 1..=FAST_BITS as usize {
            fast.copy_within(0..filled, filled);
            filled *= 2;
            for &sym in &symbols[next..next + count[len] as usize] {
                fast[(code.reverse_bits() >> (32 - len)) as usize] = (sym << 4) | len as u16;
                code += 1;
            }
            next += count[len] as usize;
            code <<= 1;
        }
        Ok(Decoder { fast, count, symbols })
    }

    /// Whether zlib would build a decoding table for this code (inftrees.c): no code at all,
    /// or a complete one, or (except for the code-length code) a single code of one bit.
    /// (Over-subscribed codes `new` refused already.) A stream zlib refuses is what replay
    /// tools cannot read: a member with one stays raw, rather than having records indexed
    /// that other tools cannot decode.
    pub(super) fn zlib_takes(&self, code_lengths_code: bool) -> Result<()> {
        let max = (1..=MAX_BITS).rev().find(|&l| self.count[l] != 0).unwrap_or(0);
        let left = self.count[1..].iter().fold(1i32, |left, &c| left * 2 - c as i32);
        if max != 0 && left > 0 && (code_lengths_code || max != 1) {
            return Err(ParseError::Invalid("incomplete Huffman code"));
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn decode(&self, r: &mut BitReader) -> Result<u16> {
        let bits = r.peek(MAX_BITS as u32);
        let e = self.fast[(bits & ((1 << FAST_BITS) - 1)) as usize];
        if e != 0 {
            r.consume((e & 15) as u32);
            return Ok(e >> 4);
        }
        self.decode_long(r, bits)
    }

    /// A code longer than FAST_BITS (rare: the inlined path above stays small).
    #[cold]
    #[inline(never)]
    fn decode_long(&self, r: &mut BitReader, bits: u32) -> Result<u16> {
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

/// The code-length code of a dynamic header (19 symbols, codes of at most 7 bits): one
/// direct table, built on the stack. Every dynamic block's header is read with one, at
/// ingest and on every rebuild, and the general `Decoder` would fill and free a table eight
/// times the size for it.
pub(super) struct ClDecoder {
    /// (symbol << 3) | length for each 7-bit code prefix; 0 for none.
    table: [u8; 128],
}

impl ClDecoder {
    /// A decoder for the code-length code with these lengths (index = symbol), refused as
    /// zlib refuses it (`Decoder::zlib_takes`: complete, or no code at all).
    #[inline]
    pub(super) fn new(lengths: &[u8; 19]) -> Result<ClDecoder> {
        let (count, left) = count_lengths::<8>(lengths)?;
        if left > 0 && count.iter().any(|&c| c != 0) {
            return Err(ParseError::Invalid("incomplete Huffman code"));
        }
        let mut table = [0u8; 128];
        let mut next = [0u32; 8];
        let mut code = 0u32;
        for bits in 1..8 {
            code = (code + count[bits - 1] as u32) << 1;
            next[bits] = code;
        }
        for (sym, &l) in lengths.iter().enumerate() {
            if l == 0 {
                continue;
            }
            let c = next[l as usize];
            next[l as usize] += 1;
            let mut i = (c.reverse_bits() >> (32 - l as u32)) as usize;
            while i < 128 {
                table[i] = (sym as u8) << 3 | l;
                i += 1 << l;
            }
        }
        Ok(ClDecoder { table })
    }

    #[inline(always)]
    pub(super) fn decode(&self, r: &mut BitReader) -> Result<u16> {
        let e = self.table[(r.peek(7) & 127) as usize];
        if e == 0 {
            return Err(ParseError::Invalid("unused Huffman code"));
        }
        r.consume((e & 7) as u32);
        Ok((e >> 3) as u16)
    }
}

/// (symbol, code with its bits reversed for LSB-first output, length) of every used symbol.
#[inline]
pub(super) fn canonical_codes(lengths: &[u8]) -> impl Iterator<Item = (usize, u32, u8)> + '_ {
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

/// The bits `[from, from + n)` of `data`, repacked from bit 0.
#[inline]
pub(super) fn copy_bits(data: &[u8], from: u64, n: u64) -> Vec<u8> {
    let mut out = vec![0u8; n.div_ceil(8) as usize];
    for i in 0..n {
        let b = from + i;
        if data[(b / 8) as usize] >> (b % 8) & 1 != 0 {
            out[(i / 8) as usize] |= 1 << (i % 8);
        }
    }
    out
}

pub(super) struct BitWriter<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) buf: u64,
    pub(super) n: u32,
}

impl BitWriter<'_> {
    #[inline]
    pub(super) fn put(&mut self, v: u32, n: u32) {
        self.buf |= (v as u64) << self.n;
        self.n += n;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.buf as u32).to_le_bytes());
            self.buf >>= 32;
            self.n -= 32;
        }
    }

    /// Writes out whole bytes; leaves fewer than 8 bits pending.
    #[inline]
    pub(super) fn flush_bytes(&mut self) {
        while self.n >= 8 {
            self.out.push(self.buf as u8);
            self.buf >>= 8;
            self.n -= 8;
        }
    }

    #[inline]
    pub(super) fn pad_to_byte(&mut self, value: u8) {
        let k = (8 - self.n % 8) % 8;
        self.put(value as u32 & ((1 << k) - 1), k);
        self.flush_bytes();
    }
}

/// An encoding table: (reversed code, length) per symbol; length 0 for unused symbols.
pub(super) type Codes<const N: usize> = [(u16, u8); N];

/// Fixed-size, so that a literal byte indexes it without a bounds check.
#[inline]
pub(super) fn encoder<const N: usize>(lengths: &[u8]) -> Codes<N> {
    let mut t = [(0u16, 0u8); N];
    for (sym, code, len) in canonical_codes(lengths) {
        if let Some(slot) = t.get_mut(sym) {
            *slot = (code as u16, len);
        }
    }
    t
}
