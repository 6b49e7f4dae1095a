//! Unit tests of `deflate`: every writer and setting the tests can make, bad streams, fuzzing.

use super::*;
use flate2::{Compress, Compression, FlushCompress};
use proptest::prelude::*;

fn zlib(plain: &[u8], level: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(plain.len() * 2 + 1024);
    let mut c = Compress::new(Compression::new(level), false);
    c.compress_vec(plain, &mut out, FlushCompress::Finish).unwrap();
    out
}

/// `plain` deflated by zlib at `level` with `strategy` (0 default, 1 filtered, 2 Huffman
/// only, 3 RLE, 4 fixed codes) and `mem_level`, through libz-sys directly (flate2 exposes
/// neither setting).
pub(super) fn zlib_with(t: &[u8], level: u32, strategy: u32, mem_level: i32) -> Vec<u8> {
    let len = t.len();
    unsafe {
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
    }
}

pub(super) fn text(n: usize, seed: u32) -> Vec<u8> {
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
    let s = encode(&p, plain, cut, true);
    let back = decode(&s.prefix, s.tail.as_deref(), plain).unwrap();
    assert_eq!(back, p);
    // Ingest's proof reads the same bytes back as the same parse (in a store of format 7 or
    // 8); a store of format 5 or 6 gets the ranked form, which reads back alike.
    assert_eq!(encode_read_back(&p, plain, cut, true).unwrap(), (s, p.clone()));
    let (ranked, back) = encode_read_back(&p, plain, cut, false).unwrap();
    assert!(!ranked.prefix.starts_with(&[0x80, 0]) && !ranked.tail.as_ref().is_some_and(|t| t.starts_with(&[0x80, 0])));
    assert_eq!(back, p);
    assert_eq!(decode(&ranked.prefix, ranked.tail.as_deref(), plain).unwrap(), p);
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
        let s = encode(&p, &plain, Some(hdr.len() + 40_000), true);
        tails.push(s.tail.unwrap());
    }
    assert_eq!(tails[0], tails[1]);
}

/// A block of long matches (4 MB of text in 16,383 symbols) replays exactly, with room for
/// its symbols, not two bytes a text byte; a damaged parse still gets room for anything.
#[test]
fn a_block_of_long_matches_replays_in_little_room() {
    let t: Vec<u8> = b"<tr><td>0</td></tr>\n".iter().copied().cycle().take(8 << 20).collect();
    let d = zlib(&t, 9);
    let p = round_trip(&d, &t, None);
    let first = &p.blocks[0];
    assert!(first.end as usize > 4 << 20, "one block holds over 4 MB of text: {}", first.end);
    let room = block_room(&p.matches, 0, first.end as usize);
    assert!(room < 128 << 10, "{room}");
    let mut damaged = p.matches.clone();
    damaged.swap(10, 11);
    assert_eq!(block_room(&damaged, 0, first.end as usize), 2 * first.end as usize + 16);
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
fn a_stream_of_empty_blocks_is_refused_not_held() {
    // Empty fixed blocks (10 bits each) and little text: a hostile member, not a writer's. It
    // is refused before it holds more blocks than a reader of its stored parse would take.
    let stream = |blocks: usize, text: &[u8]| {
        let mut w = Vec::new();
        let mut bw = BitWriter { out: &mut w, buf: 0, n: 0 };
        for _ in 0..blocks {
            bw.put(0, 1);
            bw.put(1, 2);
            bw.put(0, 7);
        }
        // The last block: stored, with the text.
        bw.put(1, 1);
        bw.put(0, 2);
        bw.pad_to_byte(0);
        w.extend_from_slice(&(text.len() as u16).to_le_bytes());
        w.extend_from_slice(&(!(text.len() as u16)).to_le_bytes());
        w.extend_from_slice(text);
        w
    };
    assert_eq!(record(&stream(15, b""), b"").unwrap().blocks.len(), 16);
    assert_eq!(record(&stream(16, b""), b"").unwrap_err(), ParseError::Unsupported("more blocks than the text warrants"));
    assert!(record(&stream(200_000, b"abc"), b"abc").is_err());
    assert_eq!(record(&stream(60, b"abc"), b"abc").unwrap().blocks.len(), 61);
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

#[test]
fn inflate_gives_the_text_and_the_parse_record_finds() {
    // Runs of one byte and of short patterns: overlapping matches of every small distance.
    let mut t = text(40_000, 3);
    for d in 1..40 {
        let pat: Vec<u8> = (0..d).map(|i| b'a' + (i % 26) as u8).collect();
        t.extend(pat.iter().cycle().take(300 + d));
    }
    for level in 0..=9 {
        let d = zlib(&t, level);
        let mut input = d.clone();
        input.extend_from_slice(b"trailer and the next member");
        let mut out = b"before".to_vec();
        let (p, used) = inflate(&input, &mut out, usize::MAX).unwrap();
        assert_eq!(used, d.len(), "level {level}");
        assert!(out[6..] == t[..], "level {level}");
        assert_eq!(p, record(&d, &t).unwrap(), "level {level}");
        // Refused, with the output left as it was: over the limit, cut short, corrupt.
        let mut out = b"before".to_vec();
        assert!(matches!(inflate(&d, &mut out, t.len() - 1), Err(ParseError::Unsupported(_))));
        assert!(inflate(&d[..d.len() / 2], &mut out, usize::MAX).is_err());
        assert!(inflate(&[0xff, 0xff], &mut out, usize::MAX).is_err());
        assert_eq!(out, b"before");
    }
}

#[test]
fn codes_zlib_refuses_are_refused() {
    // No code, a complete one, one code of one bit (not for the code-length code).
    assert!(zlib_takes(&[0; 19], true).is_ok());
    assert!(zlib_takes(&[1, 1], true).is_ok());
    assert!(zlib_takes(&[0, 1, 0], false).is_ok());
    assert!(zlib_takes(&[0, 1, 0], true).is_err());
    // Incomplete with longer codes, or over-subscribed.
    assert!(zlib_takes(&[2, 2, 2], false).is_err());
    assert!(zlib_takes(&[1, 1, 1], false).is_err());
    assert!(zlib_takes(&[1, 2, 3, 3], false).is_ok());
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

/// A real crawl's text (its first 400,000 bytes) in a file for other writers to compress.
fn sample_text(dir: &std::path::Path) -> (Vec<u8>, std::path::PathBuf) {
    use std::io::Read;
    let t = std::fs::read(crate::test_support::real_corpus().join("webrecorder-pywb/iana.warc.gz")).unwrap();
    let mut plain = Vec::new();
    flate2::read::MultiGzDecoder::new(&t[..]).read_to_end(&mut plain).unwrap();
    plain.truncate(400_000);
    let input = dir.join("plain");
    std::fs::write(&input, &plain).unwrap();
    (plain, input)
}

/// Checks that a writer's gzip output (`what` wrote it) holds members only, that they give
/// `plain`, and that each one's parse round-trips; returns the parses.
fn members_replay_exactly(out: &std::process::Output, plain: &[u8], what: &str) -> Vec<Parse> {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    let mut back = Vec::new();
    let regions = crate::format::gzip::split(&out.stdout, &mut back);
    assert_eq!(back, plain, "{what}");
    regions
        .into_iter()
        .map(|r| {
            let crate::format::gzip::Region::Member(m) = r else { panic!("{what}: raw bytes") };
            let d0 = m.start as usize + m.header_len;
            let d = &out.stdout[d0..d0 + m.deflate_len as usize];
            let tx = &back[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
            round_trip(d, tx, Some(tx.len() / 2))
        })
        .collect()
}

/// Members written by other deflate engines than zlib: GNU gzip, pigz (zlib at other
/// settings, and zopfli with -11), zopfli itself and 7-Zip (its own optimal parser, at its
/// fastest, default and strongest settings).
#[test]
fn other_writers_replay_exactly() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let (plain, input) = sample_text(dir.path());
    for cmd in [&["gzip", "-c", "-9"][..], &["gzip", "-c", "-1"], &["gzip", "-c", "-6", "--rsyncable"], &["pigz", "-c", "-11", "-p", "1"], &["pigz", "-c", "-b", "32", "-p", "2"], &["zopfli", "-c", "--i5"], &["7zz", "a", "-tgzip", "-mx=1", "-so", "x.gz"], &["7zz", "a", "-tgzip", "-mx=5", "-so", "x.gz"], &["7zz", "a", "-tgzip", "-mx=9", "-mfb=258", "-mpass=15", "-so", "x.gz"]] {
        let out = Command::new(cmd[0]).args(&cmd[1..]).arg(&input).output().unwrap_or_else(|e| panic!("{} (scripts/setup installs it): {e}", cmd[0]));
        members_replay_exactly(&out, &plain, &format!("{cmd:?}"));
    }
}

/// Writes stdin to stdout as one gzip member by Go's compress/gzip at the level named
/// (-2 is Huffman only), flushing (a sync flush) every so many bytes if a second number is
/// given: gowarc's and Browsertrix's tools write with it.
const GO_GZIP: &str = r#"package main

import (
	"compress/gzip"
	"io"
	"os"
	"strconv"
)

func main() {
	level, _ := strconv.Atoi(os.Args[1])
	every := int64(1 << 62)
	if len(os.Args) > 2 {
		every, _ = strconv.ParseInt(os.Args[2], 10, 64)
	}
	w, err := gzip.NewWriterLevel(os.Stdout, level)
	if err != nil {
		panic(err)
	}
	for {
		n, err := io.CopyN(w, os.Stdin, every)
		if n > 0 && len(os.Args) > 2 {
			w.Flush()
		}
		if err == io.EOF {
			break
		} else if err != nil {
			panic(err)
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
}
"#;

/// Members written by Go's compress/flate, whose parser is its own at every level.
#[test]
fn go_writers_replay_exactly() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let (plain, input) = sample_text(dir.path());
    let prog = dir.path().join("gogzip.go");
    std::fs::write(&prog, GO_GZIP).unwrap();
    // Built once, offline: the standard library only, no module, the toolchain installed.
    let bin = dir.path().join("gogzip");
    let built = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(&prog)
        .env("GOCACHE", dir.path().join("cache"))
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap_or_else(|e| panic!("go (scripts/setup installs golang-go): {e}"));
    assert!(built.status.success(), "go build: {}", String::from_utf8_lossy(&built.stderr));
    for args in [&["-2"][..], &["1"], &["5"], &["9"], &["6", "30000"]] {
        let out = Command::new(&bin).args(args).stdin(Stdio::from(std::fs::File::open(&input).unwrap())).output().unwrap();
        let parses = members_replay_exactly(&out, &plain, &format!("go {args:?}"));
        let flushes: usize = parses.iter().map(|p| p.blocks.iter().filter(|b| matches!(b.kind, BlockKind::Stored { .. }) && !b.last).count()).sum();
        // Every 30,000 bytes a sync flush (an empty stored block); none without.
        if args.len() > 1 {
            assert!(flushes >= plain.len() / 30_000, "{args:?}: {flushes} flushes");
        } else {
            assert_eq!(flushes, 0, "{args:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(256), ..ProptestConfig::default() })]

    /// Fuzz: a damaged stored parse decodes to an error or to something replay refuses
    /// or writes; never a panic or an unbounded walk.
    #[test]
    fn fuzz_damaged_stored_parses_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..6),
                                        cut in 0usize..20_000, tail_side in any::<bool>(), optimal in any::<bool>()) {
        // One member of zlib's and one of zopfli's (an optimal parser's, stored in the
        // longest form) for every case (made once: a fuzz run has 100,000 of them).
        static MEMBERS: std::sync::OnceLock<[(Vec<u8>, Parse); 2]> = std::sync::OnceLock::new();
        let members = MEMBERS.get_or_init(|| {
            let t = text(20_000, 5);
            let dir = tempfile::tempdir().unwrap();
            let (mut html, _) = sample_text(dir.path());
            html.truncate(20_000);
            std::fs::write(dir.path().join("t"), &html).unwrap();
            let z = std::process::Command::new("zopfli").args(["--i1", "--deflate", "-c"]).arg(dir.path().join("t")).output().expect("zopfli (scripts/setup installs it)");
            let zp = record(&z.stdout, &html).unwrap();
            assert!(encode(&zp, &html, Some(10_000), true).tail.unwrap().starts_with(&[0x80, 0]), "zopfli's parse should take the longest form");
            [(t.clone(), record(&zlib(&t, 9), &t).unwrap()), (html, zp)]
        });
        let (t, p) = &members[optimal as usize];
        let t = t.as_slice();
        let mut s = encode(p, t, Some(cut), true);
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

    /// Fuzz: real streams with a few bits flipped, which decode far before they go wrong,
    /// through the inflater's fast loop (`fast_run`), fixed and dynamic blocks, texts that
    /// outgrow its buffer: whatever it takes, zlib takes too and reads as the same text, and
    /// `record`'s general loop finds the same parse; what it refuses and zlib reads, `record`
    /// refuses too (or it is a stream replay cannot write exactly, `Unsupported`).
    #[test]
    fn fuzz_damaged_streams_inflate_as_zlib_and_record_do(stream in any::<prop::sample::Index>(),
                                                         flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4)) {
        // Streams made once (a fuzz run has 100,000 cases): every strategy (fixed codes, RLE,
        // Huffman only among them), texts of 2 KB to 140 KB.
        static STREAMS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
        let streams = STREAMS.get_or_init(|| {
            let mut v = Vec::new();
            for (i, len) in [2_000usize, 20_000, 70_000, 140_000].into_iter().enumerate() {
                for (level, strategy) in [(9, 0), (6, 1), (1, 2), (4, 3), (9, 4)] {
                    v.push(zlib_with(&text(len, 40 + i as u32), level, strategy, 8));
                }
            }
            v
        });
        let mut d = streams[stream.index(streams.len())].clone();
        for (i, bit) in flips {
            let i = i.index(d.len());
            d[i] ^= 1 << bit;
        }
        let mut out = Vec::new();
        let ours = inflate(&d, &mut out, 1 << 20);
        let mut z = flate2::Decompress::new(false);
        let mut zt = Vec::with_capacity((1 << 20) + 64);
        let zlib_read = matches!(z.decompress_vec(&d, &mut zt, flate2::FlushDecompress::Finish), Ok(flate2::Status::StreamEnd));
        let zused = z.total_in() as usize;
        match ours {
            Ok((p, used)) => {
                prop_assert!(zlib_read);
                prop_assert_eq!(zused, used);
                prop_assert!(zt == out);
                prop_assert_eq!(record(&d[..used], &out), Ok(p));
            }
            Err(e) => {
                if zlib_read {
                    prop_assert!(record(&d[..zused], &zt).is_err() || matches!(e, ParseError::Unsupported(_)), "{e:?}");
                }
            }
        }
    }

    /// Fuzz: the recording inflater on any bytes.
    #[test]
    fn fuzz_arbitrary_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048), plain in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = record(&data, &plain);
        // Inflating: whatever it takes, recording that much against its text finds the same.
        let mut out = Vec::new();
        if let Ok((p, used)) = inflate(&data, &mut out, 1 << 20) {
            prop_assert_eq!(record(&data[..used], &out), Ok(p));
            // And zlib reads the same stream to the same text: nothing zlib refuses is taken.
            let mut z = flate2::Decompress::new(false);
            let mut text = Vec::with_capacity(out.len() + 64);
            let status = z.decompress_vec(&data[..used], &mut text, flate2::FlushDecompress::Finish);
            prop_assert!(matches!(status, Ok(flate2::Status::StreamEnd)), "zlib: {:?}", status);
            prop_assert_eq!(text, out);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_zlib_member_round_trips(len in 0usize..100_000, level in 0u32..=9, seed in any::<u32>(),
                                   strategy in 0u32..4, mem_level in 1i32..=9) {
        let t = text(len, seed);
        let d = zlib_with(&t, level, strategy, mem_level);
        round_trip(&d, &t, Some(len / 2));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(2048), ..ProptestConfig::default() })]

    /// The code-length code's own decoder takes and refuses exactly the codes the general
    /// decoder does under zlib's rule, and decodes any bits to the same symbols.
    #[test]
    fn code_length_decoder_is_the_general_one(seed in any::<u64>(), bits in proptest::collection::vec(any::<u8>(), 8..64)) {
        let lengths: [u8; 19] = random_code(seed, 19, 7).try_into().unwrap();
        let general = Decoder::new(&lengths).and_then(|d| d.zlib_takes(true).map(|_| d));
        let small = bits::ClDecoder::new(&lengths);
        prop_assert_eq!(general.is_ok(), small.is_ok(), "{:?}", lengths);
        if let (Ok(g), Ok(s)) = (general, small) {
            let (mut a, mut b) = (BitReader::new(&bits), BitReader::new(&bits));
            for _ in 0..bits.len() {
                let (x, y) = (g.decode(&mut a), s.decode(&mut b));
                prop_assert_eq!(&x, &y);
                prop_assert_eq!(a.bit_pos(), b.bit_pos());
                if x.is_err() {
                    break;
                }
            }
        }
    }
}

/// Code lengths of a random prefix code over `n` symbols with codes of at most `max` bits:
/// a tree grown by splitting random leaves, a leaf then perhaps taken away (incomplete) or
/// one added (over-subscribed), put on random symbols.
fn random_code(seed: u64, n: usize, max: u8) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = |k: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % k
    };
    let mut leaves = vec![0u8];
    for _ in 0..next(n as u64) {
        let splittable: Vec<usize> = (0..leaves.len()).filter(|&i| leaves[i] < max).collect();
        if splittable.is_empty() {
            break;
        }
        let i = splittable[next(splittable.len() as u64) as usize];
        leaves[i] += 1;
        leaves.push(leaves[i]);
    }
    match next(3) {
        0 if leaves.len() > 1 => {
            leaves.swap_remove(next(leaves.len() as u64) as usize);
        }
        1 if leaves.len() < n => leaves.push(1 + next(max as u64) as u8),
        _ => {}
    }
    let mut symbols: Vec<usize> = (0..n).collect();
    let mut lengths = vec![0u8; n];
    for &l in &leaves {
        let s = symbols.swap_remove(next(symbols.len() as u64) as usize);
        lengths[s] = l;
    }
    lengths
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(2048), ..ProptestConfig::default() })]

    /// The decoder's direct table, grown by doubling, holds what writing each code at every
    /// index it covers gives.
    #[test]
    fn direct_table_is_every_code_at_every_index(seed in any::<u64>(), lit in any::<bool>()) {
        let lengths = if lit { random_code(seed, 288, 15) } else { random_code(seed, 30, 15) };
        let Ok(d) = Decoder::new(&lengths) else { return Ok(()) };
        let mut want = [0u16; 1 << FAST_BITS];
        for (sym, code, len) in bits::canonical_codes(&lengths) {
            if len as u32 <= FAST_BITS {
                let mut i = code as usize;
                while i < want.len() {
                    want[i] = ((sym as u16) << 4) | len as u16;
                    i += 1 << len;
                }
            }
        }
        prop_assert_eq!(&d.fast[..], &want[..], "{:?}", lengths);
    }
}
