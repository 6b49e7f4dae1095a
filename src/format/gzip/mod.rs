//! gzip members: splitting a `.gz` file into members and raw regions.
//!
//! This module finds where members start and end and inflates them; it never decides what
//! is stored. Whether a member can be replaced by "plain text + recorded parse" is decided by
//! `format::deflate`, which proves it byte for byte; everything else stays raw.
//!
//! Members are inflated by `format::deflate`'s own inflater, which records each one's parse
//! on the way (so ingest need not inflate it a second time to record it); a stream it does
//! not take (invalid, cut short by the window, over the text limit, or valid in a way it
//! cannot replay) is inflated again by zlib, which decides what it is.

use flate2::{Decompress, FlushDecompress, Status};

use super::deflate;

const FTEXT: u8 = 0x01;
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = !(FTEXT | FHCRC | FEXTRA | FNAME | FCOMMENT);

/// True if `data` starts like a deflate-compressed gzip member.
pub fn looks_gzip(data: &[u8]) -> bool {
    data.len() >= 3 && data[0] == 0x1f && data[1] == 0x8b && data[2] == 0x08
}

#[derive(Debug, Clone)]
pub enum Region {
    Member(Member),
    Raw { start: u64, len: u64 },
}

#[derive(Debug, Clone)]
pub struct Member {
    /// Offset of the member in the file.
    pub start: u64,
    /// gzip header bytes (10..), kept verbatim by the caller.
    pub header_len: usize,
    /// Raw deflate stream bytes after the header.
    pub deflate_len: u64,
    /// header + deflate + 8-byte trailer.
    pub comp_len: u64,
    /// Offset of this member's plain text in the `plain` buffer given to [`split`].
    pub plain_start: u64,
    pub plain_len: u64,
    /// False when the member's plain text was too large to keep (see [`split_window`]):
    /// then `plain` holds none of it.
    pub plain_kept: bool,
    pub xfl: u8,
    /// Verbatim CRC32 + ISIZE as found in the file (not checked here).
    pub trailer: [u8; 8],
    /// The deflate parse recorded while inflating, when this module's own inflater took the
    /// stream (see the module's comment); proven by nobody yet. Some only when the trailer's
    /// CRC-32 and length are the text's (so `trailer_for` need not be asked again).
    pub parse: Option<deflate::Parse>,
}

/// Splits `data` into members and raw regions that cover it exactly, in order, and appends
/// every member's inflated bytes to `plain` (so members' plain ranges are consecutive).
pub fn split(data: &[u8], plain: &mut Vec<u8>) -> Vec<Region> {
    split_window(data, true, usize::MAX, usize::MAX, plain).0
}

/// A failed attempt at a member that may only be cut short by the end of the window: within
/// this distance of it, a header that does not parse may be one whose end is not read yet
/// (FEXTRA alone can be 64 KiB; names and comments rarely come close).
const HEADER_TAIL: usize = 256 << 10;

/// [`split`] for one window of a file that is ingested a window at a time, so that memory
/// stays bounded whatever the file's size. Regions tile `data[..consumed]`, returned with
/// them. Unless `last` (the window reaches the end of the file), a member cut by the
/// window's end is left for the next window, and splitting stops at the first member end
/// after `plain` holds `max_plain` bytes. Consumed is 0 only when the window starts with a
/// member longer than itself (the caller reads a larger one). Members of more than `keep`
/// plain bytes are found, but their text is not kept (`plain_kept` is false).
pub fn split_window(data: &[u8], last: bool, max_plain: usize, keep: usize, plain: &mut Vec<u8>) -> (Vec<Region>, usize) {
    let mut regions = Vec::new();
    let mut inflater = Decompress::new(false);
    let mut nul_memo = NulMemo::default();
    let mut raw_from: Option<usize> = None;
    let mut pos = 0usize;
    let flush_raw = |regions: &mut Vec<Region>, raw_from: &mut Option<usize>, end: usize| {
        if let Some(r) = raw_from.take().filter(|&r| end > r) {
            regions.push(Region::Raw { start: r as u64, len: (end - r) as u64 });
        }
    };
    while pos < data.len() {
        if raw_from.is_none() && plain.len() >= max_plain {
            return (regions, pos);
        }
        match parse_member(data, pos, plain, &mut inflater, &mut nul_memo, keep) {
            Ok(m) => {
                flush_raw(&mut regions, &mut raw_from, pos);
                // comp_len came from slicing `data`, so it fits in usize.
                pos += m.comp_len as usize;
                regions.push(Region::Member(m));
                continue;
            }
            Err(cut) if !last && (cut || data.len() - pos < HEADER_TAIL) => {
                // Perhaps a member that goes on past this window: the next one starts here.
                flush_raw(&mut regions, &mut raw_from, pos);
                return (regions, pos);
            }
            Err(_) => {}
        }
        // Not a member here: these bytes are raw up to the next offset where a complete
        // member parses. Only `1f 8b 08` offsets can start one.
        raw_from.get_or_insert(pos);
        pos = next_candidate(data, pos + 1);
    }
    if let (false, Some(r)) = (last, raw_from) {
        // The raw run reaches the window's end, where a member's `1f 8b 08` may be cut.
        let end = data.len().saturating_sub(2).max(r);
        flush_raw(&mut regions, &mut raw_from, end);
        return (regions, end);
    }
    flush_raw(&mut regions, &mut raw_from, data.len());
    (regions, data.len())
}

fn next_candidate(data: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < data.len() {
        match data[i..].iter().position(|&b| b == 0x1f) {
            None => return data.len(),
            Some(off) => {
                i += off;
                if looks_gzip(&data[i..]) {
                    return i;
                }
                i += 1;
            }
        }
    }
    data.len()
}

/// Remembers the last zero-terminator search, so that resync over garbage full of
/// `1f 8b 08 08` candidates without a NUL byte stays linear instead of rescanning to EOF
/// for every candidate.
#[derive(Default)]
struct NulMemo {
    /// Searches starting anywhere in `from..=found` yield `found` (None: no NUL up to EOF).
    from: usize,
    found: Option<Option<usize>>,
}

impl NulMemo {
    fn find(&mut self, data: &[u8], at: usize) -> Option<usize> {
        if let Some(found) = self.found {
            let end = found.unwrap_or(data.len());
            if at >= self.from && at <= end {
                return found;
            }
        }
        let found = data[at..].iter().position(|&b| b == 0).map(|i| at + i);
        self.from = at;
        self.found = Some(found);
        found
    }
}

/// The length of the gzip member header at the start of `data`, if a whole valid one is
/// there (for a reader that inflates a member itself, such as the index of a raw region).
pub fn header_len(data: &[u8]) -> Option<usize> {
    parse_header(data, 0, &mut NulMemo::default()).map(|(len, _)| len)
}

/// Parses the gzip header at `data[base..]`; returns its length and XFL.
fn parse_header(data: &[u8], base: usize, memo: &mut NulMemo) -> Option<(usize, u8)> {
    let h = &data[base..];
    if h.len() < 10 || !looks_gzip(h) {
        return None;
    }
    let flg = h[3];
    if flg & FRESERVED != 0 {
        return None;
    }
    let xfl = h[8];
    let mut p = 10usize;
    if flg & FEXTRA != 0 {
        // Opaque on purpose: Wget 1.14 writes `sl` subfields without their LEN field.
        let xlen = u16::from_le_bytes([*h.get(p)?, *h.get(p + 1)?]) as usize;
        p = p.checked_add(2 + xlen)?;
    }
    for bit in [FNAME, FCOMMENT] {
        if flg & bit != 0 {
            if p >= h.len() {
                return None;
            }
            p = memo.find(data, base + p)? - base + 1;
        }
    }
    if flg & FHCRC != 0 {
        p += 2;
    }
    if p > h.len() {
        return None;
    }
    Some((p, xfl))
}

/// Parses one complete member at `data[start..]`, appending its plain text to `plain` (only
/// if it is at most `keep` bytes). On failure `plain` is left as it was, and the error says
/// whether the member's deflate stream or trailer ran into the end of `data`.
fn parse_member(
    data: &[u8],
    start: usize,
    plain: &mut Vec<u8>,
    inflater: &mut Decompress,
    memo: &mut NulMemo,
    keep: usize,
) -> Result<Member, bool> {
    let (header_len, xfl) = parse_header(data, start, memo).ok_or(false)?;
    let stream = &data[start + header_len..];
    let plain_start = plain.len();
    let (deflate_len, plain_len, parse) = match deflate::inflate(stream, plain, keep) {
        // Taken only with the writer's own checksum of the text: the proof at ingest
        // replays the parse over this text, but a match's bytes never reach the stream, so
        // a wrong byte there would pass it (a lying trailer is zlib's to judge, then).
        Ok((parse, len)) if stream.get(len..len + 8).is_some_and(|t| *t == trailer_for(&plain[plain_start..])) => {
            (len, (plain.len() - plain_start) as u64, Some(parse))
        }
        _ => {
            plain.truncate(plain_start);
            match inflate_member(inflater, stream, plain, keep) {
                Ok((len, plain_len)) => (len, plain_len, None),
                Err(cut) => {
                    plain.truncate(plain_start);
                    return Err(cut);
                }
            }
        }
    };
    let Some(trailer) = stream.get(deflate_len..deflate_len + 8) else {
        plain.truncate(plain_start);
        return Err(true);
    };
    let plain_kept = plain.len() - plain_start == plain_len as usize;
    if !plain_kept {
        plain.truncate(plain_start);
    }
    let mut tr = [0u8; 8];
    tr.copy_from_slice(trailer);
    Ok(Member {
        start: start as u64,
        header_len,
        deflate_len: deflate_len as u64,
        comp_len: (header_len + deflate_len + 8) as u64,
        plain_start: plain_start as u64,
        plain_len,
        plain_kept,
        xfl,
        trailer: tr,
        parse,
    })
}

/// Inflates the raw deflate stream at the start of `input` with zlib, appending its plain
/// text to `plain`. Returns the stream's compressed length and its text's length, or Err(true)
/// if it does not reach its end within `input` (truncated, or cut by the window), Err(false)
/// if it is corrupt.
fn inflate_member(d: &mut Decompress, input: &[u8], plain: &mut Vec<u8>, keep: usize) -> Result<(usize, u64), bool> {
    d.reset(false);
    let base = plain.len();
    // Plain bytes of this member let go of because it outgrew `keep`: only its length counts.
    let mut dropped = 0u64;
    // Input is fed in growing pieces, so that a small member does not hand zlib the whole
    // window (the stream's end is only known once inflate reports it).
    let mut piece = 16 * 1024usize;
    let mut fed = 0usize; // end of the input handed to inflate so far
    loop {
        let target = input.len().min(fed.saturating_add(piece));
        piece = piece.saturating_mul(2).min(4 << 20);
        loop {
            if plain.capacity() - plain.len() < 32 * 1024 {
                // Growth proportional to what this member produced so far keeps small
                // members cheap and big members amortised.
                plain.reserve((plain.len() - base).max(64 * 1024));
            }
            let in_pos = d.total_in() as usize;
            let out_before = plain.len();
            let status = d.decompress_vec(&input[in_pos..target], plain, FlushDecompress::None).map_err(|_| false)?;
            let consumed = d.total_in() as usize;
            let produced = plain.len() - out_before;
            let output_full = plain.len() == plain.capacity();
            if plain.len() - base > keep {
                dropped += (plain.len() - base) as u64;
                plain.truncate(base);
            }
            if status == Status::StreamEnd {
                return Ok((consumed, dropped + (plain.len() - base) as u64));
            }
            if consumed == target && !output_full {
                break;
            }
            if consumed == in_pos && produced == 0 && !output_full {
                // No progress with input and output space available: stuck.
                return Err(false);
            }
        }
        fed = target;
        if fed >= input.len() {
            // All input consumed without the end of the stream: truncated.
            return Err(true);
        }
    }
}

/// The largest block of stored (uncompressed) deflate data.
const STORED_BLOCK: usize = 65_535;
/// The gzip header of a member written here: deflate, no name, no time, unknown OS.
const PLAIN_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// The length of `stored_member` of `n` bytes: known without writing it.
pub fn stored_member_len(n: u64) -> u64 {
    let blocks = n.div_ceil(STORED_BLOCK as u64).max(1);
    PLAIN_HEADER.len() as u64 + n + 5 * blocks + 8
}

/// A gzip member holding `plain` in stored deflate blocks: a member any reader inflates,
/// whose length follows from `plain`'s alone (a view's new records: nothing compressed).
pub fn stored_member(plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(stored_member_len(plain.len() as u64) as usize);
    out.extend_from_slice(&PLAIN_HEADER);
    let mut blocks = plain.chunks(STORED_BLOCK).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(b) = blocks.next() {
        let len = b.len() as u16;
        out.push(blocks.peek().is_none() as u8);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(&trailer_for(plain));
    out
}

/// CRC32 (LE) + ISIZE (LE, plain length mod 2^32) of `plain`.
pub fn trailer_for(plain: &[u8]) -> [u8; 8] {
    let mut t = [0u8; 8];
    t[..4].copy_from_slice(&crc32fast::hash(plain).to_le_bytes());
    t[4..].copy_from_slice(&(plain.len() as u32).to_le_bytes());
    t
}

#[cfg(test)]
mod tests;
