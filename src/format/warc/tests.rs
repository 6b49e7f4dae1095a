//! Unit tests of `warc`: property tests and real samples.

use super::*;
use std::io::Read;
use std::path::PathBuf;

use SpanKind::{Header as H, Payload as P, Raw as R};

/// Checks the tiling contract and returns (kind, bytes) pairs for easy matching.
fn check(plain: &[u8], seg: &Segmentation) -> Vec<(SpanKind, Vec<u8>)> {
    let mut pos = 0u64;
    let mut prev: Option<SpanKind> = None;
    let mut payloads = 0;
    for s in &seg.spans {
        assert_eq!(s.start, pos, "gap or overlap at {pos}: {:?}", seg.spans);
        assert!(s.len > 0, "empty span {s:?}");
        if s.kind == P {
            payloads += 1;
            assert!(s.len >= MIN_PAYLOAD as u64, "small payload {s:?}");
        } else {
            assert_ne!(prev, Some(s.kind), "unmerged neighbours at {}", s.start);
        }
        prev = Some(s.kind);
        pos += s.len;
    }
    assert_eq!(pos, plain.len() as u64, "spans do not reach the end");
    assert_eq!(payloads, seg.payloads);
    seg.spans
        .iter()
        .map(|s| {
            (
                s.kind,
                plain[s.start as usize..(s.start + s.len) as usize].to_vec(),
            )
        })
        .collect()
}

fn record(version: &str, typ: &str, content_type: &str, block: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{version}\r\nWARC-Type: {typ}\r\nWARC-Record-ID: <urn:uuid:1234>\r\n\
         Content-Type: {content_type}\r\ncontent-length :  {} \r\n\r\n",
        block.len()
    )
    .into_bytes();
    r.extend_from_slice(block);
    r
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

const SEP: &[u8] = b"\r\n\r\n";

#[test]
fn hand_written_warc_exact_spans() {
    let info =
        b"software: warcfs-test/1.0\r\nformat: WARC File Format 1.1\r\nconformsTo: spec\r\n";
    let req = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\n";
    let resp_h = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 120\r\n\r\n";
    let body = [b'x'; 120];
    let meta = b"outlink: http://example.com/a.css E link/@href\r\noutlink: http://example.com/b.js E script/@src\r\n";
    let rev = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n";

    let r1 = record("WARC/1.1", "warcinfo", "application/warc-fields", info);
    let r2 = record(
        "WARC/1.1",
        "request",
        "application/http; msgtype=request",
        req,
    );
    let r3 = record(
        "WARC/1.0",
        "response",
        "application/http; msgtype=response",
        &cat(&[resp_h, &body]),
    );
    let r4 = record("WARC/1.1", "metadata", "application/warc-fields", meta);
    let r5 = record("WARC/1.1", "revisit", "message/http", rev);
    let plain = cat(&[&r1, SEP, &r2, SEP, &r3, SEP, &r4, SEP, &r5, SEP]);
    let seg = segment(&plain);
    let got = check(&plain, &seg);

    let h1 = &r1[..r1.len() - info.len()];
    let h3 = &r3[..r3.len() - resp_h.len() - body.len()];
    let h4 = &r4[..r4.len() - meta.len()];
    let want: Vec<(SpanKind, Vec<u8>)> = vec![
        (H, h1.to_vec()),
        (P, info.to_vec()),
        (H, cat(&[SEP, &r2, SEP, h3, resp_h])),
        (P, body.to_vec()),
        (H, cat(&[SEP, h4])),
        (P, meta.to_vec()),
        (H, cat(&[SEP, &r5, SEP])),
    ];
    assert_eq!(got, want);
    assert_eq!(seg.records, 5);
    assert_eq!(seg.payloads, 3);
}

#[test]
fn small_payloads_and_tolerant_separators() {
    let resp = cat(&[b"HTTP/1.0 404 Not Found\n\n", b"gone"]);
    let r1 = record("WARC/1.0", "response", "application/http", &resp);
    let big = [b'y'; 100];
    let r2 = record("WARC/1.0", "resource", "text/plain", &big);
    let r3 = record("WARC/1.0", "resource", "text/plain", &big);
    // Separators: only CRLF, then LF LF, then none at all at the end.
    let plain = cat(&[&r1, b"\r\n", &r2, b"\n\n", &r3]);
    let seg = segment(&plain);
    let got = check(&plain, &seg);
    let h2 = &r2[..r2.len() - big.len()];
    let h3 = &r3[..r3.len() - big.len()];
    assert_eq!(
        got,
        vec![
            (H, cat(&[&r1, b"\r\n", h2])),
            (P, big.to_vec()),
            (H, cat(&[b"\n\n", h3])),
            (P, big.to_vec()),
        ]
    );
    assert_eq!((seg.records, seg.payloads), (3, 2));
}

#[test]
fn adjacent_payloads_stay_separate() {
    // No separator between records: still one payload per record.
    let a = [b'a'; 70];
    let r = record("WARC/1.0", "resource", "text/plain", &a);
    let plain = cat(&[&r, &r]);
    let seg = segment(&plain);
    check(&plain, &seg);
    assert_eq!((seg.records, seg.payloads), (2, 2));
}

#[test]
fn truncated_records() {
    let body = [b'z'; 500];
    let resp_h = b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n";
    let r = record(
        "WARC/1.1",
        "response",
        "application/http; msgtype=response",
        &cat(&[resp_h, &body]),
    );
    let head_len = r.len() - body.len() - resp_h.len();

    // Cut inside the body: the available body bytes are the payload.
    let plain = &r[..r.len() - 200];
    let seg = segment(plain);
    let got = check(plain, &seg);
    assert_eq!(
        got,
        vec![
            (H, r[..head_len + resp_h.len()].to_vec()),
            (P, body[..300].to_vec())
        ]
    );
    assert_eq!((seg.records, seg.payloads), (1, 1));

    // Cut inside the HTTP header: all header.
    let plain = &r[..head_len + 10];
    let seg = segment(plain);
    assert_eq!(check(plain, &seg), vec![(H, plain.to_vec())]);
    assert_eq!(seg.records, 1);

    // Cut inside the WARC header: not a record.
    let plain = &r[..head_len - 3];
    let seg = segment(plain);
    assert_eq!(check(plain, &seg), vec![(R, plain.to_vec())]);
    assert_eq!(seg.records, 0);

    // Every cut point tiles.
    for cut in 0..=r.len() {
        check(&r[..cut], &segment(&r[..cut]));
    }
}

#[test]
fn garbage_before_between_and_after() {
    let big = [b'q'; 80];
    let r = record("WARC/1.0", "resource", "text/plain", &big);
    let hdr = &r[..r.len() - big.len()];
    let no_len = b"WARC/1.0\r\nWARC-Type: resource\r\n\r\nsome block\r\n\r\n".to_vec();
    let plain = cat(&[
        b"junk before\nWARC/ nope\n",
        &r,
        SEP,
        b"garbage in between WARC/1.0 not at line start\n",
        &r,
        b"\r\n",
        &no_len,
        &r,
        b"\r\n\r\ntrailing garbage without newline",
    ]);
    let seg = segment(&plain);
    let got = check(&plain, &seg);
    assert_eq!(
        got,
        vec![
            (R, b"junk before\nWARC/ nope\n".to_vec()),
            (H, hdr.to_vec()),
            (P, big.to_vec()),
            (H, SEP.to_vec()),
            (
                R,
                b"garbage in between WARC/1.0 not at line start\n".to_vec()
            ),
            (H, hdr.to_vec()),
            (P, big.to_vec()),
            (H, b"\r\n".to_vec()),
            // Missing Content-Length: raw up to the next version line at a line start.
            (R, no_len.clone()),
            (H, hdr.to_vec()),
            (P, big.to_vec()),
            (H, SEP.to_vec()),
            (R, b"trailing garbage without newline".to_vec()),
        ]
    );
    assert_eq!((seg.records, seg.payloads), (3, 3));
}

#[test]
fn pathological_inputs_stay_linear() {
    let many_versions = b"WARC/1.0\r\n".repeat(300_000);
    let no_blank = b"WARC/1.0\r\nContent-Length: 5\r\n".repeat(100_000);
    let newlines = vec![b'\n'; 3_000_000];
    let mut arc_lines = b"filedesc://x 0.0.0.0 20000101000000 text/plain 0\n".to_vec();
    arc_lines.extend(b"x\nhttp://a 1 20000101000000 t/p 99999999999\n".to_vec());
    arc_lines.extend(b"ftp://a b 20000101000000 c\n".repeat(100_000));
    let long_line = [
        b"filedesc://x 0.0.0.0 20000101000000 text/plain 0\n".as_slice(),
        &vec![b'a'; 3_000_000],
    ]
    .concat();
    for input in [&many_versions, &no_blank, &newlines, &arc_lines, &long_line] {
        let t = std::time::Instant::now();
        let seg = segment(input);
        check(input, &seg);
        assert!(
            t.elapsed().as_secs_f64() < 5.0,
            "too slow: {:?}",
            t.elapsed()
        );
    }
}

use crate::test_support::real_corpus as corpus_dir;

/// All of the file that gunzips; a broken tail is ignored.
fn gunzip(path: &std::path::Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let _ = flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out);
    out
}

/// The gunzipped members one by one (until the first that fails).
fn gunzip_members(path: &std::path::Path) -> Vec<Vec<u8>> {
    let raw = std::fs::read(path).unwrap();
    let mut rest = &raw[..];
    let mut members = Vec::new();
    while !rest.is_empty() {
        let mut out = Vec::new();
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        if dec.read_to_end(&mut out).is_err() {
            break;
        }
        rest = dec.into_inner();
        members.push(out);
    }
    members
}

fn corpus_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in std::fs::read_dir(corpus_dir()).expect("corpus") {
        let dir = dir.unwrap().path();
        if dir.is_dir() {
            for f in std::fs::read_dir(dir).unwrap() {
                let f = f.unwrap().path();
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                if name.contains(".warc.gz") || name.contains(".arc.gz") {
                    files.push(f);
                }
            }
        }
    }
    files.sort();
    files
}

#[test]
fn arc_files() {
    let dir = corpus_dir();
    let plain = gunzip(&dir.join("webrecorder-pywb/example.arc.gz"));
    let seg = segment(&plain);
    let got = check(&plain, &seg);
    assert_eq!((seg.records, seg.payloads), (2, 2));
    let kinds: Vec<SpanKind> = got.iter().map(|g| g.0).collect();
    assert_eq!(kinds, vec![H, P, H, P, H]);
    assert!(got[0].1.starts_with(b"filedesc://") && got[0].1.ends_with(b" 75\n"));
    assert_eq!(got[1].1.len(), 75);
    assert!(
        got[2].1.starts_with(b"\n\nhttp://example.com/ ") && got[2].1.ends_with(b"\r\n\r\n")
    );
    assert!(got[3].1.starts_with(b"<!doctype html>"));
    assert_eq!(got[3].1.len(), 1270);
    assert_eq!(got[4].1, b"\n");

    let plain =
        gunzip(&dir.join(
            "ukwa-webarchive-discovery/IAH-20080430204825-00000-blackbook-truncated.arc.gz",
        ));
    let seg = segment(&plain);
    let got = check(&plain, &seg);
    assert_eq!(seg.records, 9);
    assert!(!got.iter().any(|g| g.0 == R), "{:?}", seg.spans);
    // filedesc, robots.txt, /, index.php, logoc.jpg, go-button.gif, star.png, rss
    // (dns: is 56 bytes with its header line, below the payload minimum).
    assert_eq!(seg.payloads, 8);
}

/// Independent, deliberately naive reading of a member holding exactly one WARC
/// record: (is a record, payload bytes counted as Payload).
fn naive_member(m: &[u8]) -> (bool, u64) {
    let find = |h: &[u8], n: &[u8]| h.windows(n.len()).position(|w| w == n);
    let Some(he) = find(m, b"\r\n\r\n") else {
        return (false, 0);
    };
    let head = String::from_utf8_lossy(&m[..he]).to_ascii_lowercase();
    let cl: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    let block = &m[he + 4..(he + 4 + cl).min(m.len())];
    let http = head.contains("warc-type: response")
        || head.contains("warc-type: request")
        || head.contains("warc-type: revisit")
        || head.contains("content-type: application/http");
    let looks = block.starts_with(b"HTTP/")
        || block.starts_with(b"GET ")
        || block.starts_with(b"POST ");
    let payload = if http && looks {
        let crlf = find(block, b"\r\n\r\n").map(|i| i + 4);
        let lf = find(block, b"\n\n").map(|i| i + 2);
        match (crlf, lf) {
            (Some(a), Some(b)) => block.len() - a.min(b),
            (Some(a), None) | (None, Some(a)) => block.len() - a,
            (None, None) => 0,
        }
    } else {
        block.len()
    };
    (
        true,
        if payload >= MIN_PAYLOAD {
            payload as u64
        } else {
            0
        },
    )
}

#[test]
fn real_corpus_tiles_and_cross_checks() {
    let files = corpus_files();
    assert!(files.len() >= 20, "corpus missing: {:?}", corpus_dir());
    let one_per_member = [
        "iana.warc.gz",
        "IAH-20080430204825-00000-blackbook.warc.gz",
        "sample-1.warc.gz",
        "BL-20140325121225068-00000-32090~opera~8443.warc.gz",
        "dupes.warc.gz",
        "parseMe.warc.gz",
        "flashfrozen-jwat-recompressed.warc.gz",
        "warcfile.warc.gz",
        "clueweb-quirk.warc.gz",
        "IAH-urls-wget.warc.gz",
        "froggie.warc.gz",
        "example.warc.gz",
    ];
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let plain = gunzip(f);
        let seg = segment(&plain);
        check(&plain, &seg);
        let raw: u64 = seg
            .spans
            .iter()
            .filter(|s| s.kind == R)
            .map(|s| s.len)
            .sum();
        let payload: u64 = seg
            .spans
            .iter()
            .filter(|s| s.kind == P)
            .map(|s| s.len)
            .sum();
        eprintln!(
            "{name:55} {:>9} bytes {:>5} records {:>5} payloads {:>9} payload bytes {raw:>6} raw",
            plain.len(),
            seg.records,
            seg.payloads,
            payload
        );
        if name.contains(".warc") {
            assert!(seg.records > 0, "{name}: no records");
        }
        if one_per_member.contains(&name.as_str()) {
            let members = gunzip_members(f);
            let mut want_records = 0;
            let mut want_payload = 0;
            for m in &members {
                let (rec, p) = naive_member(m);
                want_records += rec as u64;
                want_payload += p;
            }
            assert_eq!(
                seg.records,
                members.len() as u64,
                "{name}: records vs members"
            );
            assert_eq!(seg.records, want_records, "{name}");
            assert_eq!(payload, want_payload, "{name}: payload bytes");
            assert_eq!(raw, 0, "{name}: raw bytes");
        }
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> &'static [u8] {
        static S: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        S.get_or_init(|| {
            let d = corpus_dir();
            let mut v = gunzip(&d.join("webrecorder-warcio/example.warc.gz"));
            v.extend(gunzip(&d.join("webrecorder-pywb/example.arc.gz")));
            v.extend(gunzip(&d.join("webrecorder-pywb/post-test.warc.gz")));
            v
        })
    }

    #[derive(Debug, Clone)]
    enum Edit {
        Flip(usize, u8),
        Insert(usize, Vec<u8>),
        Delete(usize, usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let token = prop_oneof![
            Just(b"\r\n\r\n".to_vec()),
            Just(b"\nWARC/1.0\r\n".to_vec()),
            Just(b"Content-Length: 99999\r\n".to_vec()),
            Just(b"\nfiledesc://a 1 20000101000000 t 10\n".to_vec()),
            Just(b"HTTP/1.1 200 OK\r\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..16),
        ];
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
            (any::<usize>(), token).prop_map(|(i, t)| Edit::Insert(i, t)),
            (any::<usize>(), 0usize..300).prop_map(|(i, n)| Edit::Delete(i, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::format::fuzz_cases(256)))]

        /// Fuzz (these three): WARC and ARC segmentation of any bytes tiles them.
        #[test]
        fn fuzz_arbitrary_bytes_tile(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let seg = segment(&bytes);
            check(&bytes, &seg);
        }

        #[test]
        fn fuzz_arbitrary_warcish_tokens_tile(parts in proptest::collection::vec(prop_oneof![
            Just(&b"WARC/1.0\r\n"[..]), Just(&b"\r\n"[..]), Just(&b"\n"[..]),
            Just(&b"Content-Length: 3\r\n"[..]), Just(&b"WARC-Type: response\r\n"[..]),
            Just(&b"HTTP/1.1 200 OK\r\n"[..]), Just(&b"filedesc://x 1 20000101000000 t 5\n"[..]),
            Just(&b"http://y 1 20000101000000 t 70\n"[..]), Just(&b"abc"[..]),
        ], 0..60)) {
            let bytes = parts.concat();
            let seg = segment(&bytes);
            check(&bytes, &seg);
        }

        #[test]
        fn fuzz_mutated_real_warc_tiles(cut in any::<usize>(), edits in proptest::collection::vec(edit(), 0..8)) {
            let mut v = sample().to_vec();
            for e in edits {
                match e {
                    Edit::Flip(i, b) => { let i = i % v.len(); v[i] ^= b; }
                    Edit::Insert(i, t) => { let i = i % (v.len() + 1); v.splice(i..i, t); }
                    Edit::Delete(i, n) => { let i = i % (v.len() + 1); let e = (i + n).min(v.len()); v.drain(i..e); }
                }
            }
            let cut = cut % (v.len() + 1);
            let seg = segment(&v[..cut]);
            check(&v[..cut], &seg);
        }
    }
}

/// Segments `plain` the way ingest does, `bytes` at a time (growing a window that holds
/// no whole record), and returns the spans with absolute offsets and the record count.
fn windowed(plain: &[u8], bytes: usize) -> (Vec<Span>, u64) {
    let (mut spans, mut records, mut off, mut want, mut arc) = (Vec::new(), 0, 0usize, bytes, false);
    while off < plain.len() {
        let end = (off + want).min(plain.len());
        let (seg, consumed) = segment_window(&plain[off..end], off == 0, end == plain.len(), &mut arc);
        if consumed == 0 {
            want *= 2;
            continue;
        }
        let tiled: u64 = seg.spans.iter().map(|s| s.len).sum();
        assert_eq!(tiled, consumed as u64, "spans must tile what the window consumed");
        spans.extend(seg.spans.iter().map(|s| Span { start: s.start + off as u64, ..*s }));
        records += seg.records;
        off += consumed;
        want = bytes;
    }
    (spans, records)
}

/// Neighbouring spans of one kind merged (payloads stay apart), as `segment` emits them.
fn merged(spans: &[Span]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for s in spans {
        match out.last_mut() {
            Some(l) if l.kind == s.kind && s.kind != P => l.len += s.len,
            _ => out.push(*s),
        }
    }
    out
}

#[test]
fn windows_find_the_records_the_whole_stream_has() {
    for name in ["webrecorder-pywb/iana.warc.gz", "webrecorder-warcio/example.warc.gz"] {
        let mut plain = Vec::new();
        flate2::read::MultiGzDecoder::new(&std::fs::read(corpus_dir().join(name)).unwrap()[..]).read_to_end(&mut plain).unwrap();
        let whole = segment(&plain);
        for bytes in [1, 100, 4096, 65536] {
            let (spans, records) = windowed(&plain, bytes);
            assert_eq!(records, whole.records, "{name} in windows of {bytes}");
            assert_eq!(merged(&spans), whole.spans, "{name} in windows of {bytes}");
        }
    }
}

#[test]
fn a_record_cut_by_the_window_is_left_for_the_next() {
    let r1 = record("WARC/1.1", "resource", "text/plain", &[b'a'; 300]);
    let r2 = record("WARC/1.1", "resource", "text/plain", &[b'b'; 300]);
    let plain = cat(&[&r1, SEP, &r2, SEP]);
    // Cut in the second record's header, then in its block.
    for cut in [r1.len() + SEP.len() + 100, r1.len() + SEP.len() + r2.len() - 50] {
        let (seg, consumed) = segment_window(&plain[..cut], true, false, &mut false);
        assert_eq!((seg.records, consumed), (1, r1.len() + SEP.len()));
    }
    // Ending right after a block: its separator may go on, so it starts the next window.
    let (seg, consumed) = segment_window(&plain[..r1.len() + 2], true, false, &mut false);
    assert_eq!((seg.records, consumed), (1, r1.len()));
    let (seg, consumed) = segment_window(&plain[r1.len()..], false, true, &mut false);
    assert_eq!((seg.records, consumed), (1, plain.len() - r1.len()));
    assert_eq!(seg.spans[0].kind, H);
    // The end of the stream: the cut record is what there is of it.
    let cut = r1.len() + SEP.len() + r2.len() - 50;
    let (seg, consumed) = segment_window(&plain[..cut], true, true, &mut false);
    assert_eq!((seg.records, consumed), (2, cut));
}
