//! A copy of a payload names the parse tail stored with an earlier copy (`tails`) only when
//! its own payload chunks are that copy's and the tail's chunk is still there; otherwise it
//! is proven in full. Every file reads back byte for byte either way.

use crate::store::tests::{gzip_member, meta, read_all, warc_record};
use crate::store::*;
use crate::digest::ChunkKey;
use crate::pack::ChunkKind;

fn store(dir: &std::path::Path) -> Store {
    let opts = OpenOptionsStore { create: true, config: Config { verify: Verify::Bytes, ..Config::default() }, follower: false };
    Store::open_with(dir, &opts, crate::digest::sha256).unwrap()
}

/// About 40 KB of markup, many short matches: a parse with a tail well past 4 KiB.
fn body(seed: u64) -> Vec<u8> {
    let words = ["<td>", "</td>", "<a href=\"/", "item", "\">", "</a>", "price ", "12", "7", " class=\"n\"", "<tr>\n", "</tr>\n"];
    let mut x = seed | 1;
    let mut out = Vec::new();
    for _ in 0..8000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x >> 24) as usize % words.len()].as_bytes());
    }
    out
}

/// A `.warc.gz` of one member per record, the records numbered from `first` (one digit, so
/// that every copy's headers have one length) with the given bodies.
fn crawl(first: u32, bodies: &[&[u8]]) -> Vec<u8> {
    bodies.iter().enumerate().flat_map(|(i, b)| gzip_member(&warc_record(first + i as u32, b), 9)).collect()
}

fn put(s: &Store, name: &str, data: &[u8]) {
    s.put_file(ROOT_INO, name.as_bytes(), data, meta()).unwrap();
    assert_eq!(read_all(s, &format!("/{name}")), data, "{name} reads back");
}

fn tails_refs(s: &Store) -> Vec<u64> {
    s.index.chunk_iter().map(|r| r.unwrap().1).filter(|e| e.kind == ChunkKind::Parse as u8).map(|e| e.refs).collect()
}

#[test]
fn copies_of_a_payload_name_the_tail_stored_with_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let (x, y) = (body(1), body(2));
    put(&s, "a.warc.gz", &crawl(1, &[&x, &y]));
    assert_eq!(s.tails.counts(), (0, 0));
    assert_eq!(tails_refs(&s), [1, 1]);
    // Other record ids and dates in the headers, the same payloads.
    put(&s, "b.warc.gz", &crawl(5, &[&y, &x]));
    assert_eq!(s.tails.counts(), (2, 0), "both members named a stored tail");
    assert_eq!(tails_refs(&s), [2, 2], "one chunk per tail, referenced by both files");
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

#[test]
fn a_named_tail_is_refused_unless_its_payload_and_its_chunk_are_there() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let (x, y) = (body(1), body(2));
    put(&s, "a.warc.gz", &crawl(1, &[&x, &y]));
    let known = s.tails.entries();
    assert_eq!(known.len(), 2);
    // x's identity now names y's payload and tail: a copy of x must not take y's tail.
    s.tails.replace(&known[0], known[1].payload.clone(), known[1].tail);
    put(&s, "b.warc.gz", &crawl(3, &[&x]));
    assert_eq!(s.tails.counts(), (0, 1), "refused: the payload is another");
    // x's identity and payload, a tail chunk the store does not hold.
    let gone = ChunkKey { digest: [9; 32], seq: 0 };
    s.tails.replace(&known[0], known[0].payload.clone(), gone);
    put(&s, "c.warc.gz", &crawl(4, &[&x]));
    assert_eq!(s.tails.counts(), (0, 2), "refused: the tail's chunk is not there");
    // Proven in full, each stored x's tail again (the same bytes: the same chunk), which
    // took the refused entry's place: the next copy names it.
    put(&s, "d.warc.gz", &crawl(6, &[&x]));
    assert_eq!(s.tails.counts(), (1, 2));
    assert_eq!(tails_refs(&s), [4, 1]);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// A record whose WARC headers run past the 64 KiB of text a member keeps in its recipe:
/// its parse is cut inside the headers, so the tail's text is not its payload's alone.
fn padded_record(id: u32, body: &[u8]) -> Vec<u8> {
    let http = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n", body.len());
    let pad: String = (0..70_000u32).map(|i| (b'a' + (i * 7 % 26) as u8) as char).collect();
    let mut r = format!(
        "WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{id:08}>\r\nX-Pad: {pad}\r\nContent-Type: application/http; msgtype=response\r\nContent-Length: {}\r\n\r\n",
        http.len() + body.len()
    )
    .into_bytes();
    r.extend_from_slice(http.as_bytes());
    r.extend_from_slice(body);
    r.extend_from_slice(b"\r\n\r\n");
    r
}

#[test]
fn a_tail_cut_inside_the_headers_is_never_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let x = body(1);
    put(&s, "a.warc.gz", &gzip_member(&padded_record(1, &x), 9));
    put(&s, "b.warc.gz", &gzip_member(&padded_record(2, &x), 9));
    assert_eq!(s.tails.counts(), (0, 0), "its copy encodes its own (a checksum alone would name it)");
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

#[test]
fn gc_forgets_the_tails_it_may_collect() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let x = body(1);
    put(&s, "a.warc.gz", &crawl(1, &[&x]));
    s.remove("/a.warc.gz", false).unwrap();
    s.gc().unwrap();
    assert!(tails_refs(&s).is_empty(), "the tail is collected with its file");
    put(&s, "b.warc.gz", &crawl(2, &[&x]));
    assert_eq!(s.tails.counts(), (0, 0), "nothing named, nothing to refuse");
    assert_eq!(tails_refs(&s), [1]);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// Two copies of a payload in one file, windows apart: the second names the tail the first
/// stored, which is not committed yet (among the ingest's new chunks). A tail is known once
/// its window is stored, and a window is proven while the two before it may still wait to
/// be (one being stored, one proven in the slot before the storing thread: `windows_ahead`):
/// three windows apart (a member a window here) the copy is always proven after.
#[test]
fn a_copy_later_in_the_same_file_names_a_tail_not_yet_committed() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let (x, y, z) = (body(1), body(2), body(4));
    let data = crawl(1, &[&x, &y, &z, &x]);
    let win = crate::store::ingest::Windows { bytes: 4 << 10, max_bytes: 1 << 20, plain: 4 << 10 };
    s.put_file_windows(ROOT_INO, b"a.warc.gz", &data, crate::store::ingest::Presplit::none(), win, meta()).unwrap();
    assert_eq!(s.tails.counts(), (1, 0));
    assert_eq!(read_all(&s, "/a.warc.gz"), data);
    // (A file counts once for each chunk it names, however often.)
    assert_eq!(tails_refs(&s), [1, 1, 1], "three tails: x's, named twice, y's and z's");
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// A member's parse tail is stored right after its payload's last chunk, where a lookup of
/// the record reads both at once.
#[test]
fn each_tail_is_stored_after_its_payload() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let (x, y) = (body(1), body(2));
    put(&s, "a.warc.gz", &crawl(1, &[&x, &y]));
    let entries: Vec<crate::index::ChunkEntry> = s.index.chunk_iter().map(|r| r.unwrap().1).collect();
    let tails: Vec<&crate::index::ChunkEntry> = entries.iter().filter(|e| e.kind == ChunkKind::Parse as u8).collect();
    assert_eq!(tails.len(), 2);
    for t in tails {
        let before = entries.iter().find(|e| e.pack == t.pack && e.offset + crate::pack::BLOB_HEADER_LEN as u64 + e.stored_len as u64 == t.offset);
        assert!(before.is_some_and(|e| e.kind == ChunkKind::PayloadHead as u8 || e.kind == ChunkKind::Payload as u8), "the blob before the tail at {} is a payload's: {before:?}", t.offset);
    }
}
