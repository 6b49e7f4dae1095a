//! Records in gzip members the store keeps as their compressed bytes are indexed
//! (`raw_members`): members cut short, corrupt, or too large to keep as text.

use std::io::Write;

use proptest::prelude::*;

use crate::store::kind_tests::{head, store};
use crate::store::tests::{gzip_member, meta, read_all};
use crate::store::*;

/// A member of `record` whose deflate stream turns invalid after its first 300 bytes of
/// text: a block of the reserved type follows a sync flush.
fn corrupt_member(record: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    e.write_all(&record[..300]).unwrap();
    e.flush().unwrap();
    let at = e.get_ref().len();
    e.write_all(&record[300..]).unwrap();
    let mut m = e.finish().unwrap();
    m[at] = 0x07; // BFINAL 1, BTYPE 11
    m
}

/// One dated WARC response record whose payload is `body` (no payload digest: the index
/// computes it).
fn warc_record(id: u32, body: &[u8]) -> Vec<u8> {
    let mut r = crate::store::tests::warc_record(id, body);
    let at = r.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
    r.splice(at..at, b"WARC-Date: 2026-11-27T23:00:00Z\r\n".iter().copied());
    r
}

fn body(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..n / 16)
        .flat_map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            format!("<li>{:08x}</li>\n", x >> 4).into_bytes()
        })
        .collect()
}

fn sha1_of(data: &[u8]) -> String {
    use sha1::Digest as _;
    crate::format::cdx::sha1_string(&sha1::Sha1::digest(data).into())
}

fn index_lines(s: &Store, name: &str) -> Vec<String> {
    let mut lines = Vec::new();
    s.cdxj_each(name, crate::store::read::records::StagedFiles::Refuse, &mut |l| {
        lines.push(l);
        Ok(())
    })
    .unwrap();
    lines
}

fn field(line: &str, name: &str) -> String {
    let json: serde_json::Value = serde_json::from_str(&line[line.find('{').unwrap()..]).unwrap();
    json[name].as_str().unwrap().to_string()
}

#[test]
fn records_in_members_kept_raw_are_indexed_with_their_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let bodies: Vec<Vec<u8>> = (1..=4).map(|i| body(20_000, i)).collect();
    let a = gzip_member(&warc_record(1, &bodies[0]), 9);
    let b = corrupt_member(&warc_record(2, &bodies[1]));
    let c = gzip_member(&warc_record(3, &bodies[2]), 9);
    let d = gzip_member(&warc_record(4, &bodies[3]), 9);
    let d = &d[..d.len() / 2]; // a crawl killed mid-write
    let file = [&a[..], &b, &c, d].concat();
    s.put_file(ROOT_INO, b"f.warc.gz", &file, meta()).unwrap();
    let st = s.stats().unwrap();
    assert_eq!((st.gzip_members, st.gzip_members_raw), (2, 0), "a and c rebuild, b and d are raw bytes: {st:?}");

    let recs = s.records(&head(&s, "/f.warc.gz")).unwrap();
    let (ao, bo, co, dox) = (0, a.len() as u64, (a.len() + b.len()) as u64, (a.len() + b.len() + c.len()) as u64);
    let want = vec![(ao, a.len() as u64), (bo, b.len() as u64), (co, c.len() as u64), (dox, d.len() as u64)];
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), want);
    for (i, r) in recs.iter().enumerate() {
        let id = format!("<urn:uuid:{:08}>", i + 1);
        assert!(String::from_utf8_lossy(&r.warc_header).contains(&id), "record {i}");
        assert!(r.http_header.as_ref().is_some_and(|h| h.starts_with(b"HTTP/1.1 200")), "record {i}");
    }
    assert_eq!(recs.iter().map(|r| r.block == crate::store::read::records::BlockAt::RawMember).collect::<Vec<_>>(), [false, true, false, true]);

    // Their index lines: whole members have their payload's digest; the raw ones have the
    // digest of what their text holds, as cdxj-indexer computes it from what it inflates.
    let mut lines = index_lines(&s, "/f.warc.gz");
    lines.sort_by_key(|l| field(l, "offset").parse::<u64>().unwrap());
    let got: Vec<(String, String, String)> = lines.iter().map(|l| (field(l, "offset"), field(l, "length"), field(l, "digest"))).collect();
    assert_eq!(got.len(), 4, "{lines:?}");
    for (i, (o, l)) in want.iter().enumerate() {
        assert_eq!((got[i].0.as_str(), got[i].1.as_str()), (o.to_string().as_str(), l.to_string().as_str()));
    }
    assert_eq!(got[0].2, sha1_of(&bodies[0]));
    assert_eq!(got[2].2, sha1_of(&bodies[2]));
    let text_of = |m: &[u8]| {
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(m), &mut out);
        out
    };
    // b's text ends where its invalid block begins, d's where its bytes do.
    for (i, text) in [(1usize, warc_record(2, &bodies[1])[..300].to_vec()), (3, text_of(d))] {
        let http_end = crate::store::read::records::find(&text, b"\r\n\r\nHTTP").unwrap() + 4;
        let payload_at = http_end + crate::store::read::records::find(&text[http_end..], b"\r\n\r\n").unwrap() + 4;
        assert!(text.len() < payload_at + bodies[i].len(), "record {i} is cut");
        assert_eq!(got[i].2, sha1_of(&text[payload_at..]), "record {i}");
    }
}

#[test]
fn a_member_too_large_to_keep_as_text_is_indexed_and_its_payload_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    // More text than a member kept as text may hold: a long video, say. Compressible,
    // so the test's file stays small.
    let big: Vec<u8> = b"0123456789abcdef".repeat((crate::recipe::MAX_MEMBER_TEXT as usize + (1 << 20)) / 16);
    let small = gzip_member(&warc_record(1, b"small"), 6);
    let large = gzip_member(&warc_record(2, &big), 6);
    let file = [&small[..], &large, &small].concat();
    s.put_file(ROOT_INO, b"v.warc.gz", &file, meta()).unwrap();
    assert_eq!(s.stats().unwrap().gzip_members_raw, 1);

    let recs = s.records(&head(&s, "/v.warc.gz")).unwrap();
    let at = small.len() as u64;
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), [(0, at), (at, large.len() as u64), (at + large.len() as u64, at)]);
    let lines = index_lines(&s, "/v.warc.gz");
    let line = lines.iter().find(|l| field(l, "offset") == at.to_string()).unwrap();
    assert_eq!(field(line, "digest"), sha1_of(&big), "hashed past the first BLOCK_HEAD of its block");
    assert_eq!(field(line, "length"), large.len().to_string());
}

#[test]
fn raw_runs_that_are_not_gzip_members_give_no_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    // A gzip file whose tail is garbage that holds the magic, and a header claiming a
    // member that never inflates.
    let good = gzip_member(&warc_record(1, b"one"), 6);
    let mut file = good.clone();
    file.extend_from_slice(b"garbage \x1f\x8b\x08\x00 more garbage WARC/1.0\r\n");
    file.extend_from_slice(&[0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff]);
    s.put_file(ROOT_INO, b"g.warc.gz", &file, meta()).unwrap();
    let recs = s.records(&head(&s, "/g.warc.gz")).unwrap();
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), [(0, good.len() as u64)]);
    assert_eq!(index_lines(&s, "/g.warc.gz").len(), 1);

    // A plain WARC's raw bytes are not searched for members, even where one sits.
    let one = warc_record(1, b"one");
    let plain = [&one[..], b"not a record\r\n", &gzip_member(&warc_record(2, b"two"), 6)].concat();
    s.put_file(ROOT_INO, b"p.warc", &plain, meta()).unwrap();
    let recs = s.records(&head(&s, "/p.warc")).unwrap();
    assert_eq!(recs.iter().map(|r| r.offset).collect::<Vec<_>>(), [0]);
}

/// One part of a generated `.warc.gz`.
#[derive(Clone, Debug)]
enum Part {
    Good(u32),
    Corrupt(u32),
    /// Bytes that hold no gzip magic.
    Garbage(Vec<u8>),
}

fn part() -> impl Strategy<Value = Part> {
    prop_oneof![
        (1u32..50).prop_map(Part::Good),
        (1u32..50).prop_map(Part::Corrupt),
        proptest::collection::vec(any::<u8>(), 1..300).prop_map(|v| Part::Garbage(v.into_iter().map(|b| if b == 0x1f { 0x1e } else { b }).collect())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(24), ..ProptestConfig::default() })]

    /// Any mix of whole, corrupt and cut members and garbage: the file reads back exactly,
    /// and every member gives its record at its offset, as long as the member (a whole one)
    /// or up to the next member (a corrupt or cut one); garbage gives none.
    #[test]
    fn fuzz_every_member_of_a_mixed_file_is_found(first in (1u32..50).prop_map(Part::Good), parts in proptest::collection::vec(part(), 0..8), cut in proptest::option::of(1u32..50)) {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let mut file = Vec::new();
        let mut want: Vec<(u64, Option<u64>, u32)> = Vec::new(); // (offset, a whole member's length, id)
        for (n, p) in std::iter::once(first).chain(parts).enumerate() {
            let id = n as u32 + 1;
            let at = file.len() as u64;
            match p {
                Part::Good(k) => {
                    let m = gzip_member(&warc_record(id, &body(400 * k as usize, k)), 6);
                    file.extend_from_slice(&m);
                    want.push((at, Some(m.len() as u64), id));
                }
                Part::Corrupt(k) => {
                    file.extend_from_slice(&corrupt_member(&warc_record(id, &body(400 * k as usize, k))));
                    want.push((at, None, id));
                }
                Part::Garbage(g) => file.extend_from_slice(&g),
            }
        }
        if let Some(k) = cut {
            let m = gzip_member(&warc_record(99, &body(400 * k as usize, k)), 6);
            want.push((file.len() as u64, None, 99));
            file.extend_from_slice(&m[..m.len() * 2 / 3]);
        }
        s.put_file(ROOT_INO, b"m.warc.gz", &file, meta()).unwrap();
        prop_assert_eq!(read_all(&s, "/m.warc.gz"), file.clone());
        let recs = s.records(&head(&s, "/m.warc.gz")).unwrap();
        prop_assert_eq!(recs.iter().map(|r| r.offset).collect::<Vec<_>>(), want.iter().map(|w| w.0).collect::<Vec<_>>());
        for (i, (r, (at, whole, id))) in recs.iter().zip(&want).enumerate() {
            let next = want.get(i + 1).map_or(file.len() as u64, |w| w.0);
            let tag = format!("<urn:uuid:{id:08}>");
            prop_assert!(String::from_utf8_lossy(&r.warc_header).contains(&tag));
            prop_assert_eq!(r.length, whole.unwrap_or(next - at));
        }
        prop_assert_eq!(index_lines(&s, "/m.warc.gz").len(), want.len());
    }
}

#[test]
fn a_run_of_corrupt_members_gives_each_member_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let members: Vec<Vec<u8>> = (1..=40).map(|i| corrupt_member(&warc_record(i, &body(2_000 + 500 * i as usize, i)))).collect();
    let file = members.concat();
    s.put_file(ROOT_INO, b"c.warc.gz", &file, meta()).unwrap();
    assert_eq!(read_all(&s, "/c.warc.gz"), file);
    let recs = s.records(&head(&s, "/c.warc.gz")).unwrap();
    let mut at = 0u64;
    let want: Vec<(u64, u64)> = members
        .iter()
        .map(|m| {
            at += m.len() as u64;
            (at - m.len() as u64, m.len() as u64)
        })
        .collect();
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), want);
    assert_eq!(index_lines(&s, "/c.warc.gz").len(), 40);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(24), ..ProptestConfig::default() })]

    /// Fuzz: a member, then any bytes with gzip headers sprinkled in (whose deflate streams
    /// are garbage): the file reads back exactly, the index finds the first record and no
    /// record outside the file, and nothing panics.
    #[test]
    fn fuzz_raw_runs_of_arbitrary_bytes(tail in proptest::collection::vec(any::<u8>(), 0..6000), at in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..32), 0..6)) {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let first = gzip_member(&warc_record(1, b"first"), 6);
        let mut tail = tail;
        for (i, flags) in at {
            let i = i.index(tail.len().max(1));
            let header = [0x1f, 0x8b, 8, flags & 0x1f, 0, 0, 0, 0, 0, 3];
            let n = header.len().min(tail.len().saturating_sub(i));
            tail[i..i + n].copy_from_slice(&header[..n]);
        }
        let file = [&first[..], &tail].concat();
        s.put_file(ROOT_INO, b"z.warc.gz", &file, meta()).unwrap();
        prop_assert_eq!(read_all(&s, "/z.warc.gz"), file.clone());
        let recs = s.records(&head(&s, "/z.warc.gz")).unwrap();
        prop_assert_eq!(recs.first().map(|r| (r.offset, r.length)), Some((0, first.len() as u64)));
        for r in &recs {
            prop_assert!(r.offset + r.length <= file.len() as u64);
        }
        prop_assert!(index_lines(&s, "/z.warc.gz").len() <= recs.len());
    }
}

#[test]
fn a_member_cut_inside_its_warc_header_is_indexed_as_cdxj_indexer_does() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let a = gzip_member(&warc_record(1, b"one"), 6);
    // Stored blocks, so that the text is the bytes: the record cut inside its header.
    let text = warc_record(2, b"two");
    let b = gzip_member(&text, 0);
    let after_length = crate::store::read::records::find(&text, b"Content-Length: ").unwrap() + 16;
    // Cut where its Content-Length has no value yet (warcio takes the block as empty and
    // cdxj-indexer prints the fields it has), and before that line (warcio finds no HTTP
    // header where it looks for one and stops the file: no line).
    for (cut, lines_wanted) in [(after_length, 2), (150, 1)] {
        let name = format!("h{cut}.warc.gz");
        let file = [&a[..], &b[..10 + 5 + cut]].concat();
        s.put_file(ROOT_INO, name.as_bytes(), &file, meta()).unwrap();
        let recs = s.records(&head(&s, &format!("/{name}"))).unwrap();
        assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), [(0, a.len() as u64), (a.len() as u64, (file.len() - a.len()) as u64)]);
        assert_eq!(recs[1].warc_header, text[..cut]);
        let mut lines = index_lines(&s, &format!("/{name}"));
        lines.sort_by_key(|l| field(l, "offset").parse::<u64>().unwrap());
        assert_eq!(lines.len(), lines_wanted, "{lines:?}");
        if lines_wanted == 2 {
            // cdxj-indexer 1.5.0's line for these bytes.
            let want = format!(
                r#"org,example)/2 20261127230000 {{"url": "http://example.org/2", "digest": "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", "length": "{}", "offset": "{}", "filename": "{name}"}}"#,
                file.len() - a.len(),
                a.len()
            );
            assert_eq!(lines[1], want);
        }
    }
}

#[test]
fn a_raw_run_stored_as_a_payloads_chunk_is_still_searched() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let a = gzip_member(&warc_record(1, &body(20_000, 1)), 9);
    let d = gzip_member(&warc_record(2, &body(20_000, 2)), 9);
    let cut = &d[..d.len() / 2];
    // A crawl that fetched the cut member's very bytes, stored first: the `.warc.gz`'s raw
    // run is then that payload's chunk (equal bytes of data kinds are one chunk).
    s.put_file(ROOT_INO, b"first.warc", &warc_record(3, cut), meta()).unwrap();
    s.put_file(ROOT_INO, b"k.warc.gz", &[&a[..], cut].concat(), meta()).unwrap();
    let h = head(&s, "/k.warc.gz");
    let piece = s.piece(&h, 0).unwrap();
    let crate::recipe::Segment::Data { extents } = piece.segments.last().unwrap() else { panic!("the cut member is raw bytes") };
    let kinds: Vec<u8> = extents.iter().map(|e| s.index.chunk(&piece.keys[e.chunk as usize]).unwrap().unwrap().kind).collect();
    assert_eq!(kinds, [crate::pack::ChunkKind::PayloadHead as u8], "the raw run is the payload's chunk");
    let recs = s.records(&h).unwrap();
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), [(0, a.len() as u64), (a.len() as u64, cut.len() as u64)]);
}

#[test]
fn a_run_of_crafted_gzip_headers_is_searched_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    // Every 4 bytes a header naming a file (FNAME) whose name never ends: read whole for
    // each, the search would read about 1 MiB per 4 bytes of the run.
    let a = gzip_member(&warc_record(1, b"one"), 6);
    let file = [&a[..], &[0x1f, 0x8b, 0x08, 0x08].repeat(64 << 10)].concat();
    s.put_file(ROOT_INO, b"x.warc.gz", &file, meta()).unwrap();
    assert_eq!(read_all(&s, "/x.warc.gz"), file);
    let recs = s.records(&head(&s, "/x.warc.gz")).unwrap();
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), [(0, a.len() as u64)]);
}
