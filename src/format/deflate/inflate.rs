//! Decoding a deflate stream while recording its parse: against the text it must give
//! (`record`, the proof's side) or writing that text out (`inflate`, the splitter's, so that
//! ingest inflates each member once). One decoding loop serves both.

use super::bits::{copy_bits, BitReader, Decoder};
use super::{fixed_decoders, read_dynamic_header, Block, BlockKind, Match, Parse, ParseError, Result, DBASE, DEXT, FAST_BITS, LBASE, LEXT, MAX_PLAIN};

/// Where the text a stream decodes to goes: compared with the text it must give (`record`)
/// or written out (`inflate`). One decoding loop serves both, so that what ingest records
/// while it inflates is what `record` would find.
trait Text {
    /// Bytes of text so far.
    fn len(&self) -> usize;
    /// Blocks a stream may have before it is refused, given the text so far.
    fn max_blocks(&self) -> usize;
    fn literal(&mut self, b: u8) -> Result<()>;
    fn stored(&mut self, bytes: &[u8]) -> Result<()>;
    /// `len` bytes from `dist` back; the caller checked that `dist` is within the text.
    fn copy(&mut self, dist: usize, len: usize) -> Result<()>;
    /// The text as a buffer `fast_run` may write straight into (`inflate`'s), if it is one.
    fn buffer(&mut self) -> Option<&mut Write> {
        None
    }
}

/// Blocks `record` takes in one member at most (about 40 MB of them): a stream with more is
/// refused, and its member kept raw. Real writers write far fewer (one for each 16-64 KiB
/// of text, or one more for each sync flush).
const MAX_RECORDED_BLOCKS: usize = 1 << 20;

struct Check<'a> {
    plain: &'a [u8],
    pos: usize,
}

impl Text for Check<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.pos
    }

    /// As many as a reader of the stored parse takes (16 a byte of text: runs of empty
    /// flush blocks), and never more than `MAX_RECORDED_BLOCKS`: a member of empty blocks
    /// and little text (a hostile file, not a writer) must not hold gigabytes of them.
    fn max_blocks(&self) -> usize {
        ((self.plain.len() + 1) << 4).min(MAX_RECORDED_BLOCKS)
    }

    #[inline]
    fn literal(&mut self, b: u8) -> Result<()> {
        if self.plain.get(self.pos) != Some(&b) {
            return Err(ParseError::TextDiffers);
        }
        self.pos += 1;
        Ok(())
    }

    fn stored(&mut self, bytes: &[u8]) -> Result<()> {
        if self.plain.get(self.pos..self.pos + bytes.len()) != Some(bytes) {
            return Err(ParseError::TextDiffers);
        }
        self.pos += bytes.len();
        Ok(())
    }

    #[inline]
    fn copy(&mut self, dist: usize, len: usize) -> Result<()> {
        let (p, pos) = (self.plain, self.pos);
        if pos + len > p.len() || p[pos..pos + len] != p[pos - dist..pos - dist + len] {
            return Err(ParseError::TextDiffers);
        }
        self.pos += len;
        Ok(())
    }
}

/// Writes the text into a scratch buffer, refusing to grow it past `limit` bytes. The buffer
/// is kept from member to member (per thread, up to SCRATCH_KEPT), so that a literal is a
/// store and a short match a few fixed-size copies, not a call each, without zero-filling
/// room ahead of every member; `inflate` appends the text to its output at the end.
struct Write {
    buf: Vec<u8>,
    at: usize,
    limit: usize,
}

/// Room `Write` keeps past a match: its copies go in steps of this many bytes.
const STEP: usize = 16;

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Write {
    /// Makes room for `n` more bytes of text and a step's slack.
    #[inline]
    fn room(&mut self, n: usize) -> Result<()> {
        if self.at + n > self.limit {
            return Err(ParseError::Unsupported("member text over the limit"));
        }
        if self.at + n + STEP > self.buf.len() {
            self.grow(n);
        }
        Ok(())
    }

    #[cold]
    fn grow(&mut self, n: usize) {
        // Never past the limit's room: a text that reaches it is refused anyway.
        let want = (self.at + n + STEP).max(self.buf.len() * 2).max(64 << 10).min(self.limit + STEP);
        self.buf.resize(want, 0);
    }
}

impl Text for Write {
    #[inline]
    fn len(&self) -> usize {
        self.at
    }

    #[inline]
    fn buffer(&mut self) -> Option<&mut Write> {
        Some(self)
    }

    /// A parse inflated here waits in memory with its window's others, and a block costs
    /// more there than the 10 bits an empty one takes in a stream: one per 64 bytes of text
    /// (real writers have far fewer; a stream with more is recorded by `record` instead).
    fn max_blocks(&self) -> usize {
        self.at / 64 + 64
    }

    #[inline]
    fn literal(&mut self, b: u8) -> Result<()> {
        self.room(1)?;
        self.buf[self.at] = b;
        self.at += 1;
        Ok(())
    }

    fn stored(&mut self, bytes: &[u8]) -> Result<()> {
        self.room(bytes.len())?;
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
        Ok(())
    }

    #[inline]
    fn copy(&mut self, dist: usize, len: usize) -> Result<()> {
        self.room(len)?;
        copy_match(&mut self.buf, self.at, dist, len);
        self.at += len;
        Ok(())
    }
}

/// Copies a match of `len` bytes from `dist` back to `at` in `buf`, which has a step of room
/// past the match (`Write::room`, `fast_run`'s bound).
#[inline(always)]
fn copy_match(buf: &mut [u8], at: usize, dist: usize, len: usize) {
    let from = at - dist;
    if dist >= STEP {
        // Whole steps, the last one past the match's end into the slack (overwritten by
        // what comes next): source and destination steps never overlap.
        let mut i = 0;
        while i < len {
            buf.copy_within(from + i..from + i + STEP, at + i);
            i += STEP;
        }
    } else {
        // Overlapping: byte by byte, each byte read after it is written.
        for i in 0..len {
            buf[at + i] = buf[from + i];
        }
    }
}

/// Decodes the raw deflate stream `deflate`, which must give exactly `plain` and end exactly
/// at its last byte, and returns its parse.
pub fn record(deflate: &[u8], plain: &[u8]) -> Result<Parse> {
    if plain.len() >= MAX_PLAIN {
        return Err(ParseError::Unsupported("member text too large"));
    }
    let mut text = Check { plain, pos: 0 };
    let (p, used) = decode_stream(deflate, &mut text)?;
    if used != deflate.len() {
        return Err(ParseError::Invalid("bytes after the final block"));
    }
    if text.pos != plain.len() {
        return Err(ParseError::TextDiffers);
    }
    Ok(p)
}

/// Inflates the raw deflate stream at the start of `deflate` (which may go on past its end),
/// appending its text to `out`, and returns its parse and the stream's length in bytes. A
/// text of more than `limit` bytes is refused (`Unsupported`); on any error `out` is left as
/// it was.
pub fn inflate(deflate: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(Parse, usize)> {
    let mut text = Write { buf: SCRATCH.with(|s| s.take()), at: 0, limit: limit.min(MAX_PLAIN - 1) };
    let mut r = decode_stream(deflate, &mut text);
    if let Ok((p, _)) = &mut r {
        out.extend_from_slice(&text.buf[..text.at]);
        // The parse waits in memory for its member's proof, with a window's worth of
        // others: not with up to twice its room.
        p.matches.shrink_to_fit();
    }
    // Kept for the thread's next member unless an outsized one grew it.
    if text.buf.len() <= SCRATCH_KEPT {
        SCRATCH.with(|s| s.set(text.buf));
    }
    r
}

/// The largest scratch buffer a thread keeps between members.
const SCRATCH_KEPT: usize = 16 << 20;

/// Decodes symbols of a coded block straight into `w` for as long as the input has 16 bytes
/// to spare, the text has room for two longest matches and every literal/length code is in
/// its decoder's direct table (a long distance code is read by the general decoder); returns
/// true once it has read the block's end. Otherwise it stops before a symbol and the general
/// loop takes that one. The same decoding and the same refusals as the general loop, with the
/// state in registers: a refill per match (two after a long distance code) or per up to four
/// literals, no bounds or room checks per byte, and each symbol's table entry looked up
/// before the work of the one before it is done (a refill only adds bits above those it
/// reads). Most of a member's text is decoded here, and ingest inflates every byte of every
/// `.warc.gz`.
#[inline(always)]
fn fast_run(r: &mut BitReader, lit: &Decoder, dist: &Decoder, w: &mut Write, matches: &mut Vec<Match>) -> Result<bool> {
    const MASK: u64 = (1 << FAST_BITS) - 1;
    let data = r.data;
    // An iteration refills at most twice (7 bytes each); it writes four literals or a match
    // of at most 258 bytes, plus a copy's step of slack.
    let (Some(in_end), Some(out_end)) = (data.len().checked_sub(16), w.buf.len().saturating_sub(STEP).min(w.limit).checked_sub(2 * 258)) else {
        return Ok(false);
    };
    let (mut buf, mut n, mut pos, mut at) = (r.buf, r.n, r.pos, w.at);
    if pos > in_end {
        return Ok(false);
    }
    let out = &mut w.buf[..];
    let mut ended = Ok(false);
    // Loads at least 56 bits, as `BitReader::refill` does (those above were loaded before,
    // or are the same input bytes again); `pos` is at most `in_end + 7` whenever it runs.
    macro_rules! refill {
        () => {
            buf |= u64::from_le_bytes(data[pos..pos + 8].try_into().expect("8 bytes")) << n;
            pos += ((63 - n) >> 3) as usize;
            n |= 56;
        };
    }
    macro_rules! consume {
        ($k:expr) => {
            buf >>= $k;
            n -= $k as u32;
        };
    }
    // A length's or a distance's value: its symbol's base and extra bits.
    macro_rules! value {
        ($base:expr, $extra:expr, $i:expr) => {{
            let x = $extra[$i] as u32;
            let v = $base[$i] as usize + (buf & ((1 << x) - 1)) as usize;
            consume!(x);
            v
        }};
    }
    refill!();
    // Direct-table codes are at most FAST_BITS (10) bits: four literals take 40 of the 56
    // bits a refill leaves, a match (code, extra bits, distance code, extra bits) at most
    // 38, and the next entry is looked up with the 16 or more left.
    let mut e = lit.fast[(buf & MASK) as usize];
    while pos <= in_end && at <= out_end {
        if e == 0 {
            break;
        }
        let sym = e >> 4;
        consume!(e & 15);
        if sym < 256 {
            out[at] = sym as u8;
            at += 1;
            e = lit.fast[(buf & MASK) as usize];
            for _ in 0..3 {
                if e == 0 || e >> 4 >= 256 {
                    break;
                }
                consume!(e & 15);
                out[at] = (e >> 4) as u8;
                at += 1;
                e = lit.fast[(buf & MASK) as usize];
            }
            refill!();
            continue;
        }
        if sym == 256 {
            ended = Ok(true);
            break;
        }
        let li = (sym - 257) as usize;
        if li >= 29 {
            ended = Err(ParseError::Invalid("bad length symbol"));
            break;
        }
        let len = value!(LBASE, LEXT, li);
        if li == 27 && len == 258 {
            ended = Err(ParseError::Unsupported("length 258 coded as symbol 284"));
            break;
        }
        let ed = dist.fast[(buf & MASK) as usize];
        let ds = if ed != 0 {
            consume!(ed & 15);
            (ed >> 4) as usize
        } else {
            // A long distance code: the general decoder, on the reader as it stands, and a
            // refill for the extra bits and the next entry.
            (r.buf, r.n, r.pos) = (buf, n, pos);
            let ds = dist.decode(r);
            (buf, n, pos) = (r.buf, r.n, r.pos);
            match ds {
                Ok(ds) => {
                    refill!();
                    ds as usize
                }
                Err(e) => {
                    ended = Err(e);
                    break;
                }
            }
        };
        if ds >= 30 {
            ended = Err(ParseError::Invalid("bad distance symbol"));
            break;
        }
        let d = value!(DBASE, DEXT, ds);
        if d > at {
            ended = Err(ParseError::Invalid("distance too far back"));
            break;
        }
        e = lit.fast[(buf & MASK) as usize];
        copy_match(out, at, d, len);
        matches.push(Match { pos: at as u32, len: len as u16, dist: d as u16 });
        at += len;
        refill!();
    }
    (r.buf, r.n, r.pos) = (buf, n, pos);
    w.at = at;
    ended
}

/// The decoding loop of `record` and `inflate`: returns the parse and the bytes the stream
/// took (its final block's end, padding included).
fn decode_stream<T: Text>(deflate: &[u8], text: &mut T) -> Result<(Parse, usize)> {
    let mut r = BitReader::new(deflate);
    let mut p = Parse::default();
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
                text.stored(src)?;
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
                    let lengths = read_dynamic_header(&mut r)?;
                    let bits = r.bit_pos() - from;
                    kind = BlockKind::Dynamic { header: copy_bits(deflate, from, bits), bits: bits as u32 };
                    owned = (Decoder::new(lengths.lit())?, Decoder::new(lengths.dist())?);
                    // Checked here, where a stream is taken in, not in the header reader,
                    // which replay runs on every stored block too.
                    owned.0.zlib_takes(false)?;
                    owned.1.zlib_takes(false)?;
                    (&owned.0, &owned.1)
                };
                loop {
                    if let Some(w) = text.buffer() {
                        if fast_run(&mut r, lit, dist, w, &mut p.matches)? {
                            break;
                        }
                    }
                    let sym = lit.decode(&mut r)?;
                    if sym < 256 {
                        text.literal(sym as u8)?;
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
                        let pos = text.len();
                        if d > pos {
                            return Err(ParseError::Invalid("distance too far back"));
                        }
                        // (Positions fit u32: `record` and `inflate` keep texts under MAX_PLAIN.)
                        text.copy(d, len as usize)?;
                        p.matches.push(Match { pos: pos as u32, len, dist: d as u16 });
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
        p.blocks.push(Block { kind, last, end: text.len() as u32 });
        if p.blocks.len() > text.max_blocks() {
            return Err(ParseError::Unsupported("more blocks than the text warrants"));
        }
        if last {
            break;
        }
    }
    p.end_pad = r.align();
    r.check()?;
    Ok((p, (r.bit_pos() / 8) as usize))
}
