//! gzip members: splitting a `.gz` file into members and raw regions.
//!
//! This module finds where members start and end and inflates them (any correct inflater
//! gives the same text); it never decides what is stored. Whether a member can be replaced by
//! "plain text + recorded parse" is decided by `format::deflate`, which proves it byte for
//! byte; everything else stays raw.

use flate2::{Decompress, FlushDecompress, Status};

const FTEXT: u8 = 0x01;
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = !(FTEXT | FHCRC | FEXTRA | FNAME | FCOMMENT);

/// The byte-aligned tail of an empty stored block, as written by `Z_SYNC_FLUSH`.
const SYNC_MARKER: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];
/// Streams with more candidates than this are not what Python flush writers produce; the
/// extra candidates are ignored, which at worst makes the flush recipe fail (member stays raw).
const MAX_FLUSH_POINTS: usize = 64;

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
    /// Plain offsets (relative to the member's plain start) just after each byte-aligned
    /// sync-flush marker (`00 00 FF FF`) found in the deflate stream.
    pub flush_points: Vec<u64>,
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
    let mut flush_points = Vec::new();
    let (deflate_len, plain_len) = match inflate_member(inflater, stream, plain, &mut flush_points, keep) {
        Ok(r) => r,
        Err(cut) => {
            plain.truncate(plain_start);
            return Err(cut);
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
        flush_points,
    })
}

/// Finds the next sync marker starting in `hay[from..limit]` and ending by `limit`.
fn find_marker(hay: &[u8], from: usize, limit: usize) -> Option<usize> {
    // Horspool on the last byte: random compressed data rarely holds 00 or FF, so this
    // mostly advances 4 bytes per probe.
    let mut i = from;
    while i + 4 <= limit {
        let last = hay[i + 3];
        if last == 0xFF {
            if hay[i..i + 4] == SYNC_MARKER {
                return Some(i);
            }
            i += 1;
        } else if last == 0x00 {
            i += 2;
        } else {
            i += 4;
        }
    }
    None
}

/// Inflates the raw deflate stream at the start of `input`, appending its plain text to
/// `plain` and recording sync-flush points. Returns the stream's compressed length, or None
/// if it does not reach its end (corrupt or truncated).
fn inflate_member(
    d: &mut Decompress,
    input: &[u8],
    plain: &mut Vec<u8>,
    flush_points: &mut Vec<u64>,
    keep: usize,
) -> Result<(usize, u64), bool> {
    d.reset(false);
    let base = plain.len();
    // Plain bytes of this member let go of because it outgrew `keep`: only its length counts.
    let mut dropped = 0u64;
    // Input is fed in growing pieces so the marker search never runs far past the end of a
    // small member (the stream's end is only known once inflate reports it); pieces end
    // right after each marker so total_out can be read there.
    let mut piece = 16 * 1024usize;
    let mut fed = 0usize; // end of the input handed to inflate so far
    let mut search = 0usize; // next offset where a marker could start
    loop {
        let window_end = input.len().min(fed.saturating_add(piece));
        piece = piece.saturating_mul(2).min(4 << 20);
        let (target, at_marker) = match (flush_points.len() < MAX_FLUSH_POINTS)
            .then(|| find_marker(input, search, window_end))
            .flatten()
        {
            Some(i) => {
                search = i + 4;
                (i + 4, true)
            }
            None => {
                search = search.max(window_end.saturating_sub(3));
                (window_end, false)
            }
        };
        let flush = if at_marker {
            FlushDecompress::Sync
        } else {
            FlushDecompress::None
        };
        loop {
            if plain.capacity() - plain.len() < 32 * 1024 {
                // Growth proportional to what this member produced so far keeps small
                // members cheap and big members amortised.
                plain.reserve((plain.len() - base).max(64 * 1024));
            }
            let in_pos = d.total_in() as usize;
            let out_before = plain.len();
            let status = d
                .decompress_vec(&input[in_pos..target], plain, flush)
                .map_err(|_| false)?;
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
        if at_marker {
            flush_points.push(dropped + (plain.len() - base) as u64);
        }
        fed = target;
        if fed >= input.len() {
            // All input consumed without the end of the stream: truncated.
            return Err(true);
        }
    }
}

/// CRC32 (LE) + ISIZE (LE, plain length mod 2^32) of `plain`.
pub fn trailer_for(plain: &[u8]) -> [u8; 8] {
    let mut t = [0u8; 8];
    t[..4].copy_from_slice(&crc32fast::hash(plain).to_le_bytes());
    t[4..].copy_from_slice(&(plain.len() as u32).to_le_bytes());
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};
    use proptest::prelude::*;


    use crate::test_support::real_corpus as corpus_dir;

    fn corpus_files() -> Vec<(String, Vec<u8>)> {
        let root = corpus_dir();
        crate::test_support::real_corpus_files()
            .into_iter()
            .map(|p| (p.strip_prefix(&root).unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
            .collect()
    }

    fn corpus_file(name: &str) -> Vec<u8> {
        std::fs::read(corpus_dir().join(name)).unwrap()
    }

    #[derive(Debug, Default, PartialEq)]
    struct Stats {
        members: usize,
        rebuilt: usize,
        with_flush: usize,
        raw_regions: usize,
        raw_bytes: u64,
        crc_ok: usize,
    }

    /// Splits, checks tiling and plain layout, and rebuilds every member that gets a recipe.
    fn check(data: &[u8]) -> Stats {
        let mut plain = b"prefix".to_vec(); // split must append, not overwrite
        let regions = split(data, &mut plain);
        let mut st = Stats::default();
        let mut pos = 0u64;
        let mut plain_pos = 6u64;
        let mut prev_raw = false;
        for r in &regions {
            match r {
                Region::Raw { start, len } => {
                    assert_eq!(*start, pos);
                    assert!(*len > 0);
                    assert!(!prev_raw, "adjacent raw regions must be merged");
                    prev_raw = true;
                    st.raw_regions += 1;
                    st.raw_bytes += len;
                    pos += len;
                }
                Region::Member(m) => {
                    prev_raw = false;
                    assert_eq!(m.start, pos);
                    assert_eq!(m.plain_start, plain_pos);
                    assert_eq!(m.comp_len, m.header_len as u64 + m.deflate_len + 8);
                    let s = m.start as usize;
                    let member = &data[s..s + m.comp_len as usize];
                    assert_eq!(&member[member.len() - 8..], &m.trailer);
                    let p = &plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
                    st.members += 1;
                    if trailer_for(p) == m.trailer {
                        st.crc_ok += 1;
                    }
                    let dstream = &member[m.header_len..m.header_len + m.deflate_len as usize];
                    if let Ok(parse) = crate::format::deflate::record(dstream, p) {
                        let mut rebuilt = member[..m.header_len].to_vec();
                        crate::format::deflate::replay(&parse, p, &mut rebuilt).unwrap();
                        rebuilt.extend_from_slice(&m.trailer);
                        assert!(rebuilt == member, "rebuild differs at member {}", m.start);
                        st.rebuilt += 1;
                        if !m.flush_points.is_empty() {
                            st.with_flush += 1;
                        }
                    }
                    pos += m.comp_len;
                    plain_pos += m.plain_len;
                }
            }
        }
        assert_eq!(pos, data.len() as u64, "regions must tile the input");
        assert_eq!(plain_pos, plain.len() as u64);
        st
    }

    #[test]
    fn whole_corpus_rebuilds_exactly() {
        // (file, members, rebuilt, raw bytes) — member/rebuild counts from the corpus README.
        let expected: &[(&str, usize, usize, u64)] = &[
            ("webrecorder-warcio/example.warc.gz", 6, 6, 0),
            ("webrecorder-warcio/example-wrong-chunks.warc.gz", 3, 3, 0),
            (
                "webrecorder-warcio/example-space-in-target-uri.warc.gz",
                2,
                2,
                0,
            ),
            ("webrecorder-pywb/iana.warc.gz", 343, 343, 0),
            ("webrecorder-pywb/example-wget-1-14.warc.gz", 6, 6, 0),
            ("webrecorder-pywb/example2.warc.gz", 3, 3, 0),
            ("webrecorder-pywb/post-test.warc.gz", 6, 6, 0),
            (
                "oduwsdl-ipwb/IAH-20080430204825-00000-blackbook.warc.gz",
                822,
                822,
                0,
            ),
            ("iipc-webarchive-commons/IAH-urls-wget.warc.gz", 36, 36, 0),
            // Go's compress/flate: not zlib's bytes, replayed from the recorded parse.
            ("internetarchive-gowarc/test.warc.gz", 3, 3, 0),
            ("internetarchive-gowarc/good.warc.gz.open", 1, 1, 0),
            (
                "internetarchive-gowarc/corrupted-trailing-bytes.warc.gz.open",
                1,
                1,
                55,
            ),
            (
                "ukwa-webarchive-discovery/IAH-20080430204825-00000-blackbook-truncated.arc.gz",
                9,
                9,
                0,
            ),
            ("N0taN3rd-node-warc/parseMe.warc.gz", 30, 30, 0),
        ];
        let mut seen = 0;
        for (name, data) in corpus_files() {
            let st = check(&data);
            eprintln!("{name}: {st:?}");
            if name.ends_with("clipped.warc.gz") {
                assert_eq!(st.members, 0);
                assert_eq!(st.raw_regions, 1);
                assert_eq!(st.raw_bytes, data.len() as u64);
                seen += 1;
                continue;
            }
            // Every other corpus file has only complete members with correct trailers.
            assert_eq!(st.crc_ok, st.members, "{name}");
            if let Some(&(_, members, rebuilt, raw)) = expected.iter().find(|e| e.0 == name) {
                assert_eq!(
                    (st.members, st.rebuilt, st.raw_bytes),
                    (members, rebuilt, raw),
                    "{name}"
                );
                seen += 1;
            }
        }
        assert_eq!(seen, expected.len() + 1);
    }

    #[test]
    fn python_flush_writers_need_their_sync_flush() {
        for name in [
            "webrecorder-pywb/example2.warc.gz",
            "webrecorder-pywb/post-test.warc.gz",
        ] {
            let data = corpus_file(name);
            let st = check(&data);
            assert_eq!(st.with_flush, st.members, "{name}");
            let mut plain = Vec::new();
            for r in split(&data, &mut plain) {
                let Region::Member(m) = r else {
                    panic!("raw region in {name}")
                };
                // One marker, right before the final empty block.
                assert_eq!(m.flush_points, vec![m.plain_len], "{name}");
            }
        }
    }

    /// A member written by zlib at `level`, with a sync flush at each of `flushes`.
    fn gzip_member(plain: &[u8], level: u8, flushes: &[u64], header: &[u8]) -> Vec<u8> {
        let mut out = header.to_vec();
        out.reserve(plain.len() * 2 + 1024);
        let mut c = Compress::new(Compression::new(u32::from(level)), false);
        let mut prev = 0usize;
        for &f in flushes {
            c.compress_vec(&plain[prev..f as usize], &mut out, FlushCompress::Sync).unwrap();
            prev = f as usize;
        }
        c.compress_vec(&plain[prev..], &mut out, FlushCompress::Finish).unwrap();
        out.extend_from_slice(&trailer_for(plain));
        out
    }

    const PLAIN_HDR: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];

    fn sample_text(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut x = 12345u32;
        while v.len() < n {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            let word = ["warc ", "record ", "http ", "200 ", "OK\r\n", "text/html "]
                [(x >> 16) as usize % 6];
            v.extend_from_slice(word.as_bytes());
            v.push(b'a' + (x >> 24) as u8 % 26);
        }
        v.truncate(n);
        v
    }

    #[test]
    fn synthetic_sync_flushes_are_found_and_rebuilt() {
        let text = sample_text(300_000);
        for flushes in [
            vec![1000u64, 5000, 200_000, 300_000],
            vec![0],
            vec![150_000],
        ] {
            let data = gzip_member(&text, 6, &flushes, &PLAIN_HDR);
            let mut plain = Vec::new();
            let regions = split(&data, &mut plain);
            let [Region::Member(m)] = regions.as_slice() else {
                panic!("{regions:?}")
            };
            assert_eq!(plain, text);
            assert_eq!(m.flush_points, flushes);
            assert_eq!(check(&data).rebuilt, 1);
        }
    }

    #[test]
    fn levels_and_headers() {
        let text = sample_text(50_000);
        // FEXTRA malformed like Wget 1.14 (XLEN=10, "sl" + 8 bytes), FNAME, FCOMMENT, FHCRC.
        let mut hdr = vec![
            0x1f,
            0x8b,
            8,
            FEXTRA | FNAME | FCOMMENT | FHCRC,
            1,
            2,
            3,
            4,
            2,
            3,
        ];
        hdr.extend_from_slice(&[10, 0, b's', b'l', 0x9c, 1, 0, 0, 0, 0, 0, 0]);
        hdr.extend_from_slice(b"name.warc.gz\0a comment\0");
        hdr.extend_from_slice(&[0xAB, 0xCD]);
        for level in 0..=9u8 {
            let data = gzip_member(&text, level, &[], &hdr);
            let st = check(&data);
            assert_eq!(
                (st.members, st.rebuilt, st.raw_regions),
                (1, 1, 0),
                "level {level}"
            );
            let mut plain = Vec::new();
            let Region::Member(m) = &split(&data, &mut plain)[0] else {
                panic!()
            };
            assert_eq!(m.header_len, hdr.len());
            assert_eq!(m.xfl, 2);
        }
        // Reserved flag bits: not a member.
        let mut bad = gzip_member(&text, 6, &[], &PLAIN_HDR);
        bad[3] = 0x20;
        let st = check(&bad);
        assert_eq!((st.members, st.raw_regions), (0, 1));
    }

    #[test]
    fn empty_members_garbage_and_resync() {
        let a = gzip_member(b"", 6, &[], &PLAIN_HDR);
        let b = gzip_member(&sample_text(10_000), 9, &[], &PLAIN_HDR);
        // Cut inside the deflate stream: inflate then runs into the next member and fails.
        let truncated = &b[..b.len() / 2];
        let mut data = a.clone();
        data.extend_from_slice(b"garbage \x1f\x8b\x08\x00 more garbage");
        data.extend_from_slice(truncated);
        data.extend_from_slice(&b);
        data.extend_from_slice(&a);
        data.extend_from_slice(b"tail\x1f\x8b");
        let mut plain = Vec::new();
        let regions = split(&data, &mut plain);
        let kinds: Vec<_> = regions
            .iter()
            .map(|r| match r {
                Region::Member(m) => m.plain_len as i64,
                Region::Raw { len, .. } => -(*len as i64),
            })
            .collect();
        let garbage = 25 + truncated.len() as i64;
        assert_eq!(kinds, vec![0, -garbage, 10_000, 0, -6]);
        let st = check(&data);
        assert_eq!((st.members, st.rebuilt), (3, 3));
        assert!(split(&[], &mut plain).is_empty());
    }

    #[test]
    fn resync_over_hostile_garbage_stays_linear() {
        // Candidates with FNAME set and no NUL anywhere: a naive scan rereads to EOF each time.
        let data: Vec<u8> = [0x1f, 0x8b, 8, FNAME].repeat(1 << 20);
        let t = std::time::Instant::now();
        let st = check(&data);
        assert_eq!((st.members, st.raw_regions), (0, 1));
        assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
    }

    fn real_members() -> Vec<u8> {
        // A few small members from different writers (level 9 Wget, level 6 pywb, flush writer).
        let mut v = Vec::new();
        for (name, take) in [
            ("webrecorder-pywb/example-wget-1-14.warc.gz", 2),
            ("webrecorder-pywb/example2.warc.gz", 1),
            ("webrecorder-pywb/dupes.warc.gz", 2),
        ] {
            let data = corpus_file(name);
            let mut plain = Vec::new();
            for r in split(&data, &mut plain).iter().take(take) {
                if let Region::Member(m) = r {
                    v.extend_from_slice(&data[m.start as usize..(m.start + m.comp_len) as usize]);
                }
            }
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(64), ..ProptestConfig::default() })]

        /// Fuzz: any bytes split into members and raw regions that tile them, each member
        /// rebuilding exactly (`check`); no panic, no allocation sized by the input.
        #[test]
        fn fuzz_arbitrary_bytes_tile(data in proptest::collection::vec(any::<u8>(), 0..4096),
                                seed in proptest::collection::vec(0u8..4, 0..4)) {
            // Sprinkle gzip magic so the header parser is exercised, not just skipped.
            let mut data = data;
            for (i, s) in seed.iter().enumerate() {
                let at = (i * 997) % (data.len().max(1));
                if at + 4 <= data.len() {
                    data[at..at + 4].copy_from_slice(&[0x1f, 0x8b, 8, *s << 3]);
                }
            }
            check(&data);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn zlib_written_members_always_rebuild(len in 0usize..200_000, level in 0u8..=9,
                                               cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4)) {
            let text = sample_text(len);
            let mut flushes: Vec<u64> = cuts.iter().map(|c| c.index(len + 1) as u64).collect();
            flushes.sort();
            let data = gzip_member(&text, level, &flushes, &PLAIN_HDR);
            let st = check(&data);
            prop_assert_eq!((st.members, st.rebuilt), (1, 1));
            // Written in one call with a huge output buffer, as other writers might: levels
            // 1-9 must still rebuild; level 0 (buffer-dependent) may fail but never lie.
            let mut one_shot = PLAIN_HDR.to_vec();
            one_shot.reserve(len * 2 + 1024);
            let mut c = Compress::new(Compression::new(u32::from(level)), false);
            c.compress_vec(&text, &mut one_shot, FlushCompress::Finish).unwrap();
            one_shot.extend_from_slice(&trailer_for(&text));
            let st = check(&one_shot);
            prop_assert_eq!(st.members, 1);
            if level > 0 {
                prop_assert_eq!(st.rebuilt, 1);
            }
        }

        #[test]
        fn damaged_real_members(cut in any::<prop::sample::Index>(),
                                flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
                                keep_tail in any::<bool>()) {
            let orig = real_members();
            let mut data = orig.clone();
            for (i, bit) in flips {
                let i = i.index(data.len());
                data[i] ^= 1 << bit;
            }
            if !keep_tail {
                data.truncate(cut.index(data.len() + 1));
            }
            check(&data);
        }
    }

    /// Three members of a real WARC, cut by windows that end inside them.
    #[test]
    fn split_window_leaves_a_cut_member_to_the_next_window() {
        let data = corpus_file("webrecorder-pywb/iana.warc.gz");
        let mut plain = Vec::new();
        let whole: Vec<(u64, u64)> = split(&data, &mut plain)
            .iter()
            .filter_map(|r| if let Region::Member(m) = r { Some((m.start, m.comp_len)) } else { None })
            .collect();
        assert!(whole.len() >= 3);
        let (s1, l1) = whole[1];
        // A window ending halfway through member 1: member 0 only, and 1 starts the next.
        let mut p = Vec::new();
        let (regions, consumed) = split_window(&data[..(s1 + l1 / 2) as usize], false, usize::MAX, usize::MAX, &mut p);
        assert_eq!(consumed as u64, s1);
        assert!(matches!(&regions[..], [Region::Member(m)] if m.start == 0 && m.comp_len == whole[0].1));
        // Nothing fits: the caller must read more.
        let mut p = Vec::new();
        assert_eq!(split_window(&data[..(whole[0].1 / 2) as usize], false, usize::MAX, usize::MAX, &mut p).1, 0);
        // The end of the file: a cut member is raw bytes.
        let mut p = Vec::new();
        let (regions, consumed) = split_window(&data[..(s1 + l1 / 2) as usize], true, usize::MAX, usize::MAX, &mut p);
        assert_eq!(consumed as u64, s1 + l1 / 2);
        assert!(matches!(regions.last(), Some(Region::Raw { start, .. }) if *start == s1));
        // Raw bytes up to the window's end: the last two could begin a member's magic.
        let n = HEADER_TAIL + 100;
        let mut junk = vec![0x55u8; n];
        junk.extend_from_slice(&data[..whole[0].1 as usize]);
        let mut p = Vec::new();
        let (regions, consumed) = split_window(&junk[..n + 1], false, usize::MAX, usize::MAX, &mut p);
        assert_eq!(consumed, n - 1);
        assert!(matches!(&regions[..], [Region::Raw { start: 0, len }] if *len == n as u64 - 1));
        let mut p = Vec::new();
        let (regions, _) = split_window(&junk[n - 1..], true, usize::MAX, usize::MAX, &mut p);
        assert!(matches!(&regions[..], [Region::Raw { start: 0, len: 1 }, Region::Member(m)] if m.start == 1));
        // Enough plain text: stop at the first member end after it.
        let mut p = Vec::new();
        let (regions, consumed) = split_window(&data, false, 1, usize::MAX, &mut p);
        assert_eq!((regions.len(), consumed as u64), (1, whole[0].1));
    }

    #[test]
    fn a_member_too_large_to_keep_is_found_but_its_text_is_not_kept() {
        let text: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        std::io::Write::write_all(&mut e, &text).unwrap();
        let mut data = e.finish().unwrap();
        let first = data.len() as u64;
        data.extend_from_slice(&data.clone());
        let mut plain = Vec::new();
        let (regions, consumed) = split_window(&data, true, usize::MAX, 100_000, &mut plain);
        assert_eq!(consumed, data.len());
        assert!(plain.is_empty());
        let Region::Member(m) = &regions[1] else { panic!("{regions:?}") };
        assert_eq!((m.start, m.plain_len, m.plain_kept), (first, text.len() as u64, false));
    }
}
