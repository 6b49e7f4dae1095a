//! Chunks of equal bytes but other kinds are kept apart (`crate::store::ingest::chunks::kinds_share`): a file's
//! bytes equal to a metadata log record, or a header block equal to a payload.

use super::tests::{meta, read_all, warc_record};
use super::*;
use crate::digest::ChunkKey;
use crate::pack::ChunkKind;

pub(super) fn store(dir: &std::path::Path) -> Store {
    let opts = OpenOptionsStore { create: true, config: Config { verify: Verify::Bytes, ..Config::default() }, follower: false };
    Store::open_with(dir, &opts, crate::digest::sha256).unwrap()
}

pub(super) fn head(s: &Store, name: &str) -> crate::recipe::RecipeHead {
    s.inode(s.resolve(name).unwrap()).unwrap().unwrap().recipe.unwrap()
}

/// The raw bytes of the metadata log's last record, and its key.
fn a_log_record(s: &Store) -> (ChunkKey, Vec<u8>) {
    let (k, e) = s.index.chunk_iter().map(|r| r.unwrap()).filter(|(_, e)| e.kind == ChunkKind::Meta as u8).max_by_key(|(_, e)| (e.pack, e.offset)).unwrap();
    (k, s.packs.read(e.pack, e.offset, &k, e.stored_len).unwrap())
}

#[test]
fn a_file_holding_a_log_records_bytes_is_not_collected_with_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    s.put_file(ROOT_INO, b"a.warc", &warc_record(1, b"hello"), meta()).unwrap();
    let (record, raw) = a_log_record(&s);
    // A file of those very bytes: one chunk, of the record's digest.
    s.put_file(ROOT_INO, b"copy.bin", &raw, meta()).unwrap();
    let piece = s.piece(&head(&s, "/copy.bin"), 0).unwrap();
    assert_eq!(piece.keys.len(), 1);
    assert_eq!(piece.keys[0].digest, record.digest, "the file is one chunk of the record's bytes");
    assert_ne!(piece.keys[0], record, "a file's chunk never shares a log record's key");
    // gc checkpoints the log, sets the superseded records' refcounts to 0 and collects them.
    s.gc().unwrap();
    assert!(s.index.chunk(&record).unwrap().is_none(), "the superseded record is collected");
    assert_eq!(read_all(&s, "/copy.bin"), raw);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

#[test]
fn a_log_record_takes_the_next_seq_past_a_chunk_of_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let raw = b"bytes a log record could hold".to_vec();
    let digest = crate::digest::sha256(&raw);
    assert_eq!(s.record_key(&raw).unwrap(), ChunkKey { digest, seq: 0 });
    s.put_file(ROOT_INO, b"f.bin", &raw, meta()).unwrap();
    assert_eq!(s.piece(&head(&s, "/f.bin"), 0).unwrap().keys.clone(), vec![ChunkKey { digest, seq: 0 }]);
    assert_eq!(s.record_key(&raw).unwrap(), ChunkKey { digest, seq: 1 });
}

/// A WARC file `b`, the header block ingest makes of it (its header spans, end to end), and
/// a crawl `a` that fetched those bytes: its payload is one chunk equal to the block.
fn a_payload_equal_to_a_header_block() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let b = [warc_record(1, b"one"), warc_record(2, b"two")].concat();
    let seg = crate::format::warc::segment_window(&b, true, true, &mut false).0;
    let block: Vec<u8> = seg.spans.iter().filter(|sp| sp.kind == crate::format::warc::SpanKind::Header).flat_map(|sp| b[sp.start as usize..(sp.start + sp.len) as usize].to_vec()).collect();
    (warc_record(3, &block), b, block)
}

#[test]
fn a_header_block_equal_to_a_payload_is_still_found_as_headers() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let (a, b, block) = a_payload_equal_to_a_header_block();
    s.put_file(ROOT_INO, b"a.warc", &a, meta()).unwrap();
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    let (ka, kb) = (s.piece(&head(&s, "/a.warc"), 0).unwrap().keys.clone(), s.piece(&head(&s, "/b.warc"), 0).unwrap().keys.clone());
    let digest = crate::digest::sha256(&block);
    assert!(ka.iter().any(|k| k.digest == digest) && kb.iter().any(|k| k.digest == digest), "the block is a chunk of both");
    assert!(ka.iter().all(|k| !kb.contains(k) || k.digest != digest), "but not one chunk");
    assert_eq!(s.records(&head(&s, "/b.warc")).unwrap().len(), 2);
    assert_eq!(s.records(&head(&s, "/a.warc")).unwrap().len(), 1);
    assert_eq!(read_all(&s, "/a.warc"), a);
    assert_eq!(read_all(&s, "/b.warc"), b);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

#[test]
fn a_commit_does_not_join_a_chunk_of_another_kind_committed_meanwhile() {
    // File B's ingest stores its header block before file A, whose payload holds the same
    // bytes, commits: neither saw the other's chunk, and both took seq 0.
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let (a, b, _) = a_payload_equal_to_a_header_block();
    let ingest = |data: &[u8]| s.ingest_windows(data, crate::store::ingest::Presplit::none(), crate::store::ingest::WINDOWS).unwrap();
    let (ia, ib) = (ingest(&a), ingest(&b));
    s.commit_file(&mut s.ns.locked(), ROOT_INO, b"a.warc", ia, meta()).unwrap();
    let err = s.commit_file(&mut s.ns.locked(), ROOT_INO, b"b.warc", ib, meta()).unwrap_err();
    assert!(matches!(err, StoreError::ConcurrentCollision(_)), "{err}");
    assert!(s.resolve("/b.warc").is_err(), "nothing of b's commit counts");
    // Stored again, it takes the digest's next seq for its block.
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    assert_eq!(s.records(&head(&s, "/b.warc")).unwrap().len(), 2);
    assert_eq!(read_all(&s, "/a.warc"), a);
    assert_eq!(read_all(&s, "/b.warc"), b);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}
