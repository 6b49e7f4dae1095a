//! Deltas end to end on a real store: a later capture of a page becomes a delta against the
//! earlier one when gc settles it, reads back exact, keeps its base alive through the base's
//! refcount, survives `repair index`, and goes (its base with it) when nothing uses it.

use crate::digest::{self, ChunkKey};
use crate::nodes::repair_index;
use crate::pack::{ChunkKind, Codec};
use crate::store::tests::*;
use crate::store::*;


/// A page of about 40 KB, and the same page a crawl later: a line changed in its middle.
fn versions() -> (Vec<u8>, Vec<u8>) {
    let one: Vec<u8> = (0..8).flat_map(site_page).collect();
    let mut two = one.clone();
    let mid = two.len() / 2;
    two.splice(mid..mid, b"<p>Updated this week: opening hours changed.</p>".iter().copied());
    (one, two)
}

/// The payload chunk of `body` (a payload head, one chunk at this size).
fn chunk_of(s: &Store, body: &[u8]) -> (ChunkKey, crate::index::ChunkEntry) {
    let digest = (s.digest)(body);
    let mut found = s.index.chunks_with_digest(&digest).unwrap();
    assert_eq!(found.len(), 1, "one chunk holds the payload");
    found.pop().unwrap()
}

fn clean(s: &Store) {
    let rep = s.fsck(true).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
}

#[test]
fn a_later_capture_becomes_a_delta_on_the_earlier_and_keeps_it_alive() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let (one, two) = versions();
    let url = "http://example.org/opening-hours";
    let a = response_record(url, 1, &one);
    let b = response_record(url, 2, &two);
    s.put_file(ROOT_INO, b"a.warc", &a, meta()).unwrap();
    s.gc().unwrap();
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    let (base, _) = chunk_of(&s, &one);
    let (key, e) = chunk_of(&s, &two);
    assert_eq!(s.index.delta_base_hint(&key).unwrap(), Some(base), "ingest names the earlier capture");
    assert_ne!(e.codec, Codec::ZstdDelta as u8, "ingest writes no delta");
    let before = s.stats().unwrap().stored_bytes;
    s.gc().unwrap();
    let (_, e) = chunk_of(&s, &two);
    assert_eq!(e.codec, Codec::ZstdDelta as u8, "gc made the later capture a delta");
    assert!((e.stored_len as usize) * 10 < two.len() / 4, "a near copy costs a fraction: {} of {}", e.stored_len, two.len());
    assert_eq!(s.index.delta_base_hint(&key).unwrap(), None, "the hint is spent");
    assert_eq!(chunk_of(&s, &one).1.refs, 2, "the base counts its file and its delta");
    assert!(s.stats().unwrap().stored_bytes < before);
    assert_eq!(read_all(&s, "/b.warc"), b);
    assert_eq!(read_all(&s, "/a.warc"), a);
    clean(&s);

    // The earlier file goes: its payload stays, for the delta.
    s.remove("/a.warc", false).unwrap();
    s.gc().unwrap();
    assert_eq!(chunk_of(&s, &one).1.refs, 1);
    drop(s);
    let s = Store::open(dir.path(), false).unwrap();
    assert_eq!(read_all(&s, "/b.warc"), b);
    clean(&s);

    // The index rebuilt from the packs counts the delta's reference too.
    drop(s);
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let rep = repair_index(dir.path()).unwrap();
    assert!(rep.problems.is_empty(), "{rep:?}");
    let s = Store::open(dir.path(), false).unwrap();
    assert_eq!(chunk_of(&s, &one).1.refs, 1);
    assert_eq!(read_all(&s, "/b.warc"), b);
    clean(&s);

    // The last file goes: its delta and then the base, in one gc.
    s.remove("/b.warc", false).unwrap();
    let rep = s.gc().unwrap();
    assert!(s.index.chunks_with_digest(&(s.digest)(&two)).unwrap().is_empty());
    assert!(s.index.chunks_with_digest(&(s.digest)(&one)).unwrap().is_empty(), "{rep:?}");
    assert_eq!(s.stats().unwrap().chunks, 0);
    clean(&s);
}

/// A chain of captures: each later one is a delta on the first (never on a delta), and one
/// gc over them all makes deltas only on bases already settled.
#[test]
fn a_base_is_never_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Off, digest::sha256);
    let url = "http://example.org/news";
    let pages: Vec<Vec<u8>> = (0..4u32)
        .map(|v| {
            let mut p: Vec<u8> = (0..8).flat_map(site_page).collect();
            p.extend_from_slice(format!("<p>Edition {v}</p>").as_bytes());
            p
        })
        .collect();
    let files: Vec<Vec<u8>> = pages.iter().enumerate().map(|(i, p)| response_record(url, i as u32, p)).collect();
    for (i, f) in files.iter().enumerate() {
        s.put_file(ROOT_INO, format!("{i}.warc").as_bytes(), f, meta()).unwrap();
        s.gc().unwrap();
    }
    let (first, e) = chunk_of(&s, &pages[0]);
    assert_ne!(e.codec, Codec::ZstdDelta as u8);
    assert_eq!(e.refs, 4, "its file and three deltas");
    for p in &pages[1..] {
        let (key, e) = chunk_of(&s, p);
        assert_eq!(e.codec, Codec::ZstdDelta as u8);
        assert_eq!(s.packs.base_named(e.pack, e.offset, &key, e.stored_len).unwrap(), Some(first), "on the first capture, not on a delta");
    }
    for (i, f) in files.iter().enumerate() {
        assert_eq!(&read_all(&s, &format!("/{i}.warc")), f);
    }
    clean(&s);
    // Another kind of chunk with the same URL's hint would not be one: only payloads are.
    assert!(matches!(ChunkKind::from_u8(e.kind), ChunkKind::PayloadHead));
}

/// Imported together and settled by one gc: the second capture's base is not settled when
/// gc meets it unless its pack came first, and nothing is ever a delta on a chunk that may
/// still become one. Whatever gc chose, every file reads back and fsck is clean.
#[test]
fn one_gc_over_many_captures_reads_back_exact() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_config(dir.path(), Config { pack_size: MIN_PACK_SIZE, ..Config::default() }, digest::sha256);
    let mut files = Vec::new();
    for v in 0..6u32 {
        let f: Vec<u8> = (0..5u32)
            .flat_map(|u| {
                let mut p: Vec<u8> = (0..6).flat_map(|k| site_page(u * 10 + k)).collect();
                p.extend_from_slice(format!("<p>Crawl {v}</p>").as_bytes());
                response_record(&format!("http://example.org/{u}"), v * 10 + u, &p)
            })
            .collect();
        s.put_file(ROOT_INO, format!("crawl-{v}.warc").as_bytes(), &f, meta()).unwrap();
        files.push(f);
    }
    let rep = s.gc().unwrap();
    // Crawl 0's pages have no hint (nothing came before), so they are final however gc meets
    // them: crawl 1's become deltas on them in this same pass, and so on down the chain.
    assert!(rep.deltas_made >= 5, "{rep:?}");
    assert_eq!(s.gc().unwrap().deltas_made, 0, "a chunk becomes a delta only when first settled");
    assert_eq!(s.stats().unwrap().delta_chunks, rep.deltas_made);
    for (v, f) in files.iter().enumerate() {
        assert_eq!(&read_all(&s, &format!("/crawl-{v}.warc")), f);
    }
    clean(&s);
}

/// A store of version 7 keeps no hints and makes no deltas (an older warcfs must still open
/// its index and read every chunk).
#[test]
fn a_version_7_store_makes_no_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_config(dir.path(), Config { version: LONGEST_V7, ..Config::default() }, digest::sha256);
    let (one, two) = versions();
    s.put_file(ROOT_INO, b"a.warc", &response_record("http://x/", 1, &one), meta()).unwrap();
    s.gc().unwrap();
    s.put_file(ROOT_INO, b"b.warc", &response_record("http://x/", 2, &two), meta()).unwrap();
    s.gc().unwrap();
    assert!(!s.index.has_hints());
    assert_ne!(chunk_of(&s, &two).1.codec, Codec::ZstdDelta as u8);
    clean(&s);
}

/// A base whose bytes are damaged: reading its delta fails (the file's read, never other
/// bytes), and fsck names both the base and its delta.
#[test]
fn a_damaged_base_is_an_error_never_other_bytes() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Off, digest::sha256);
    let (one, two) = versions();
    s.put_file(ROOT_INO, b"a.warc", &response_record("http://x/", 1, &one), meta()).unwrap();
    s.gc().unwrap();
    let b = response_record("http://x/", 2, &two);
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    s.gc().unwrap();
    let (base, e) = chunk_of(&s, &one);
    let (delta, d) = chunk_of(&s, &two);
    assert_eq!(d.codec, Codec::ZstdDelta as u8);
    drop(s);
    let pack = crate::store::layout::packs(dir.path()).join(crate::pack::pack_name(e.pack));
    let f = std::fs::OpenOptions::new().write(true).open(&pack).unwrap();
    f.write_all_at(b"damage", e.offset + crate::pack::BLOB_HEADER_LEN as u64 + 40).unwrap();
    drop(f);
    let s = Store::open(dir.path(), false).unwrap();
    let head = s.inode(s.resolve("/b.warc").unwrap()).unwrap().unwrap().recipe.unwrap();
    let mut out = Vec::new();
    assert!(s.copy_to(&head, &mut out).is_err(), "a delta on a damaged base does not read");
    let mut buf = vec![0u8; head.size as usize];
    assert!(s.read_at(&head, 0, &mut buf).is_err());
    let rep = s.fsck(false).unwrap();
    let said = rep.problems.join("\n");
    assert!(said.contains(&base.short()) && said.contains(&delta.short()), "fsck names the base and its delta: {said}");
}

/// A page never captured at its URL before, but like a stored page at another URL (a moved
/// page, a translation), is compressed against it: its sketch finds it. A stranger is not.
#[test]
fn a_page_at_a_new_url_becomes_a_delta_on_the_page_it_resembles() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let (one, moved) = versions();
    let stranger: Vec<u8> = (100..108).flat_map(site_page).collect();
    let a = response_record("http://example.org/hours.html", 1, &one);
    let b = [response_record("http://example.org/archive/hours.html", 2, &moved), response_record("http://example.org/other.html", 3, &stranger)].concat();
    s.put_file(ROOT_INO, b"a.warc", &a, meta()).unwrap();
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    let (base, _) = chunk_of(&s, &one);
    let (key, _) = chunk_of(&s, &moved);
    assert_eq!(s.index.delta_base_hint(&key).unwrap(), Some(base), "the sketch names the page it resembles");
    let (other, _) = chunk_of(&s, &stranger);
    assert_eq!(s.index.delta_base_hint(&other).unwrap(), None, "a page like none has no base to try");
    s.gc().unwrap();
    let (_, e) = chunk_of(&s, &moved);
    assert_eq!(e.codec, Codec::ZstdDelta as u8, "gc made the moved page a delta");
    assert!((e.stored_len as usize) * 10 < moved.len() / 4, "{} of {}", e.stored_len, moved.len());
    assert_ne!(chunk_of(&s, &stranger).1.codec, Codec::ZstdDelta as u8);
    assert_eq!(read_all(&s, "/b.warc"), b);
    assert_eq!(read_all(&s, "/a.warc"), a);
    clean(&s);
}
