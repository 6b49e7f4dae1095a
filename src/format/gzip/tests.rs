//! Unit tests of `gzip`: property tests and real samples.

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

/// Text offsets of a parse's sync flushes: the empty stored blocks a flush writes, final
/// block aside.
fn sync_flushes(p: &crate::format::deflate::Parse) -> Vec<u64> {
    let mut start = 0;
    let mut out = Vec::new();
    for b in &p.blocks {
        if matches!(b.kind, crate::format::deflate::BlockKind::Stored { .. }) && b.end == start && !b.last {
            out.push(b.end as u64);
        }
        start = b.end;
    }
    out
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
                let recorded = crate::format::deflate::record(dstream, p);
                // What the splitter's inflater recorded is what recording against the text
                // finds; it declines only streams that cannot be recorded.
                match (&m.parse, &recorded) {
                    (Some(a), Ok(b)) => assert_eq!(a, b, "parse of member at {}", m.start),
                    (Some(_), Err(e)) => panic!("inflated a member that does not record: {e}"),
                    (None, _) => {}
                }
                if let Ok(parse) = recorded {
                    let mut rebuilt = member[..m.header_len].to_vec();
                    crate::format::deflate::replay(&parse, p, &mut rebuilt).unwrap();
                    rebuilt.extend_from_slice(&m.trailer);
                    assert!(rebuilt == member, "rebuild differs at member {}", m.start);
                    st.rebuilt += 1;
                    if !sync_flushes(&parse).is_empty() {
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
            // One sync flush, right before the final empty block.
            assert_eq!(sync_flushes(m.parse.as_ref().expect("inflated by our own inflater")), vec![m.plain_len], "{name}");
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
        assert_eq!(sync_flushes(m.parse.as_ref().expect("inflated by our own inflater")), flushes);
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

/// A stored member is as long as `stored_member_len` says and inflates to its text, at
/// every length around a block's.
#[test]
fn stored_members_inflate_and_have_the_stated_length() {
    use std::io::Read;
    for n in [0usize, 1, 65_534, 65_535, 65_536, 131_070, 200_000] {
        let plain: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
        let m = stored_member(&plain);
        assert_eq!(m.len() as u64, stored_member_len(n as u64), "{n}");
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&m[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, plain, "{n}");
        let mut text = Vec::new();
        assert_eq!(split(&m, &mut text).len(), 1, "one member");
    }
}
