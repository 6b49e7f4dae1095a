//! The nodes of one bucket together: two writers of a store several nodes write, in one
//! process, each taking in what the other publishes (a `file://` bucket; the Garage cluster
//! runs the same in tests/remote_nodes.rs).

use crate::store::tests::{checkpoint_key, shared_store, site_page, warc_record, ARCHIVAL_ZSTD_LEVEL};
use crate::store::{FileMeta, Store, StoreError, Timestamp};

/// Nodes 3 ("three") and 5 ("five") of one bucket in `dir`, and a file's attributes.
fn two_nodes(dir: &std::path::Path) -> (Store, Store, FileMeta) {
    (shared_store(dir, 3, "three"), shared_store(dir, 5, "five"), FileMeta { mode: 0o644, mtime: Timestamp::now() })
}

/// Node B takes in A's records: A's file (and the references its recipe holds) appears
/// on B; A's file left open after its removal (an orphan) stays A's to drop, and B's
/// mount start neither drops nor counts it.
#[test]
fn a_node_takes_in_another_nodes_records_and_leaves_its_orphans_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, meta) = two_nodes(dir.path());
    let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
    let own = a.resolve("/three").unwrap();
    let kept = a.put_file(own, b"kept.warc", &data, meta).unwrap();
    let open = a.put_file(own, b"open.warc", &data[..5000], meta).unwrap();
    a.unlink_entry(own, b"open.warc", false, &|_| true).unwrap();
    a.publish().unwrap();
    a.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
    assert!(b.follow().unwrap().records > 0);
    let mut buf = vec![0u8; data.len()];
    let head = b.head(kept.ino).unwrap().unwrap();
    assert_eq!(b.read_at(&head, 0, &mut buf).unwrap(), data.len());
    assert!(buf == data, "A's file reads differently on B");
    // B's counts hold A's references: fsck on B finds them right.
    let rep = b.fsck(false).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let (orphans, staged) = b.orphans_and_staged().unwrap();
    assert!(!orphans.contains(&open.ino) && staged.is_empty(), "{orphans:?} {staged:?}");
    assert!(matches!(b.drop_orphan(open.ino).unwrap_err(), StoreError::NotOwned { .. }));
    assert_eq!(a.orphans_and_staged().unwrap().0, vec![open.ino]);
}

/// A follow round that fails part-way (here a recipe piece of the other node's that does
/// not read back from the bucket) keeps the records it did not apply: once the piece
/// reads again, the next round applies them (found by a review: they were dropped, their
/// packs counted as taken in, so the file never appeared here, and a gc here would have
/// taken its chunks for garbage).
#[test]
fn a_follow_round_that_fails_keeps_the_records_it_did_not_apply() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, meta) = two_nodes(dir.path());
    let data: Vec<u8> = (0..100_000u32).flat_map(|i| (i % 241).to_le_bytes()).collect();
    let own = a.resolve("/three").unwrap();
    let put = a.put_file(own, b"f.warc", &data, meta).unwrap();
    a.publish().unwrap();
    a.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
    // The file's recipe piece, damaged in the bucket (its last stored byte).
    let rid = a.head(put.ino).unwrap().unwrap().id;
    let key = a.test_index().recipe_piece(rid, 0).unwrap().unwrap();
    let e = a.test_index().chunk(&key).unwrap().unwrap();
    let mend = crate::test_support::rot_last_stored_byte(&dir.path().join("bucket").join("packs").join(crate::pack::pack_name(e.pack)), &e);
    assert!(b.follow().is_err(), "the damaged piece must stop the round");
    assert!(b.head(put.ino).unwrap().is_none());
    mend();
    assert!(b.follow().unwrap().records > 0, "the record waited");
    let head = b.head(put.ino).unwrap().expect("A's file, on B");
    let mut buf = vec![0u8; data.len()];
    assert_eq!(b.read_at(&head, 0, &mut buf).unwrap(), data.len());
    assert!(buf == data);
    assert!(b.fsck(false).unwrap().problems.is_empty());
}

/// gc keeps the entry of an unused chunk whose pack stays: node B, whose rebuilt index
/// holds it (it is in a listed pack), may dedup against it, and A must be able to take
/// in B's record that names it.
#[test]
fn an_unused_chunk_in_a_pack_gc_keeps_stays_usable_by_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, meta) = two_nodes(dir.path());
    drop(b);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let (small, big) = (noise(20_000), noise(1_000_000));
    let own = a.resolve("/three").unwrap();
    a.put_file(own, b"small", &small, meta).unwrap();
    a.put_file(own, b"big", &big, meta).unwrap();
    // A crawl, whose recipe pieces (a record's extents each) compress well.
    let crawl: Vec<u8> = (0..300u32).flat_map(|r| warc_record(r, &site_page(r))).collect();
    a.put_file(own, b"crawl.warc", &crawl, meta).unwrap();
    a.remove("/three/small", false).unwrap();
    let rep = a.gc().unwrap();
    assert_eq!(rep.packs_settled, 0, "a store several nodes write is not settled: {rep:?}");
    // So its recipe pieces are written at the archival level from the start.
    let pieces: Vec<_> = a.test_index().chunk_iter().map(|i| i.unwrap()).filter(|(_, e)| e.kind == crate::pack::ChunkKind::Recipe as u8 && e.codec == crate::pack::Codec::Zstd as u8).collect();
    assert!(!pieces.is_empty());
    for (k, e) in &pieces {
        let raw = a.chunk_bytes(k, e).unwrap();
        assert_eq!(e.stored_len as usize, zstd::bulk::compress(&raw, ARCHIVAL_ZSTD_LEVEL).unwrap().len(), "recipe piece {k}");
    }
    a.publish().unwrap();
    a.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
    // B opens after the gc (its index rebuilt from the bucket) and stores the same bytes.
    let b = Store::open(&dir.path().join("five"), false).unwrap();
    let theirs = b.resolve("/five").unwrap();
    let put = b.put_file(theirs, b"again", &small, meta).unwrap();
    assert!(put.new_bytes < 1000, "B stored {} new bytes of bytes the bucket holds", put.new_bytes);
    b.publish().unwrap();
    b.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
    assert!(a.follow().unwrap().records > 0, "A could not take in B's record");
    let head = a.head(put.ino).unwrap().expect("B's file on A");
    let mut buf = vec![0u8; small.len()];
    assert_eq!(a.read_at(&head, 0, &mut buf).unwrap(), small.len());
    assert!(buf == small);
    assert!(a.fsck(false).unwrap().problems.is_empty());
}

/// A node that never runs gc still checkpoints its log; the node that runs gc takes the
/// checkpoint in and collects the records it supersedes, and a node rebuilt from the
/// bucket afterwards has everything.
#[test]
fn a_nodes_own_checkpoints_let_another_nodes_gc_collect_its_old_records() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, meta) = two_nodes(dir.path());
    let theirs = b.resolve("/five").unwrap();
    for i in 0..20u32 {
        b.put_file(theirs, format!("f{i}").as_bytes(), format!("record {i}").as_bytes(), meta).unwrap();
    }
    assert!(!b.checkpoint_if_due(1000).unwrap());
    assert!(b.checkpoint_if_due(10).unwrap());
    b.publish().unwrap();
    b.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
    drop(b);
    a.follow().unwrap();
    let first = a.test_index().meta_u64_opt(&checkpoint_key(5)).unwrap();
    assert!(first.is_some_and(|f| f >= 20), "{first:?}");
    let live_records = |s: &Store| s.stats().unwrap().log_records;
    let before = live_records(&a);
    let rep = a.gc().unwrap();
    assert!(live_records(&a) < before, "gc kept node 5's superseded records ({before}): {rep:?}");
    // Rebuilt from the bucket: every file of node 5 is there.
    let b = Store::open(&dir.path().join("five"), false).unwrap();
    let mut names: Vec<String> = b.list("/five").unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect();
    names.sort();
    assert_eq!(names.len(), 20, "{names:?}");
    assert!(b.fsck(false).unwrap().problems.is_empty());
}
