//! Unit tests of the maintenance wing: gc (refcounts, batches, packs of small live blobs,
//! settling), dictionaries kept through gc and rebuilds, repair, fsck of damaged chunks.
//! The fixtures (stores, WARC records) are the store's (`store::tests`).

use std::path::Path;

use crate::store::tests::*;
use crate::store::*;
use crate::digest::{self, ChunkKey};
use crate::nodes::repair_index;
use std::collections::HashMap;

#[test]
fn gc_refuses_to_drop_a_chunk_a_recipe_still_uses() {
    // A refcount that went wrong (as a bug would leave it) must stop gc, not cost a file.
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 241) as u8).collect();
    let a = warc_record(1, &body);
    s.put_file(ROOT_INO, b"a", &a, meta()).unwrap();
    let head = s.inode(s.resolve("/a").unwrap()).unwrap().unwrap().recipe.unwrap();
    let key = *crate::recipe::distinct_keys(&s.load_pieces(&head).unwrap()).iter().next().unwrap();
    let mut e = s.index.chunk(&key).unwrap().unwrap();
    e.refs = 0;
    let mut b = crate::index::Batch::new();
    b.put_chunk_unlogged(&s.index, &key, &e);
    s.index.write(b).unwrap();
    s.flush().unwrap();
    let packs_before = std::fs::read_dir(dir.path().join("packs")).unwrap().count();
    let err = s.gc().unwrap_err();
    assert!(matches!(err, StoreError::GcRefused(_)), "{err}");
    assert_eq!(std::fs::read_dir(dir.path().join("packs")).unwrap().count(), packs_before);
    assert_eq!(read_all(&s, "/a"), a);
}

/// fsck and gc with tiny bounds: references and places spill into many sort runs, gc
/// drops and moves chunks in many batches, and the answers are those of one big pass.
#[test]
fn gc_and_fsck_work_a_sort_run_and_a_batch_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open_config(dir.path(), Config { pack_size: MIN_PACK_SIZE, ..Config::default() }, digest::sha256);
    s.limits = ScanLimits { run_bytes: 600, batch_ops: 5, ..ScanLimits::default() };
    let shared: Vec<u8> = (0..9_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let mut files = Vec::new();
    for f in 0..40u32 {
        let own: Vec<u8> = (0..4_000u32).map(|i| ((i ^ (f * 7919)) % 253) as u8).collect();
        let bytes = [warc_record(f * 2, &own), warc_record(f * 2 + 1, &shared)].concat();
        s.put_file(ROOT_INO, format!("f{f:02}.warc").as_bytes(), &bytes, meta()).unwrap();
        files.push(bytes);
    }
    let rep = s.fsck(true).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!((rep.files, rep.more_problems), (40, 0));
    for f in (0..40).step_by(2) {
        s.remove(&format!("/f{f:02}.warc"), false).unwrap();
    }
    let gc = s.gc().unwrap();
    assert!(gc.chunks_dropped > 2 * s.limits.batch_ops as u64, "{gc:?}");
    assert!(gc.packs_rewritten + gc.packs_deleted > 3, "{gc:?}");
    for f in (1..40).step_by(2) {
        assert_eq!(read_all(&s, &format!("/f{f:02}.warc")), files[f]);
    }
    let rep = s.fsck(true).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(std::fs::read_dir(dir.path().join("cache/runs")).unwrap().count(), 0, "sort runs are removed");

    // A wrong refcount and a chunk missing from the index are found, naming their files.
    let head = s.inode(s.resolve("/f05.warc").unwrap()).unwrap().unwrap().recipe.unwrap();
    let keys: Vec<ChunkKey> = crate::recipe::distinct_keys(&s.load_pieces(&head).unwrap()).into_iter().collect();
    let own = keys.iter().find(|k| s.index.chunk(k).unwrap().unwrap().refs == 1).copied().unwrap();
    let shared_key = keys.iter().find(|k| s.index.chunk(k).unwrap().unwrap().refs == 20).copied().unwrap();
    let mut e = s.index.chunk(&own).unwrap().unwrap();
    e.refs = 5;
    let mut b = crate::index::Batch::new();
    b.put_chunk_unlogged(&s.index, &own, &e);
    b.delete_chunk(&s.index, &shared_key);
    s.index.write(b).unwrap();
    let rep = s.fsck(false).unwrap();
    assert_eq!(rep.problems.len(), 2, "{:?}", rep.problems);
    assert!(rep.problems.iter().any(|p| p.contains("refcount 5 but 1 references (files: /f05.warc)")), "{:?}", rep.problems);
    assert!(
        rep.problems.iter().any(|p| p.contains("missing from the index, 20 references") && p.contains("/f01.warc, /f03.warc, /f05.warc, 17 more")),
        "{:?}",
        rep.problems
    );
}

/// A pack whose blobs are all live is not rewritten, however small its blobs (their footer
/// entries are live bytes too; a pack of blobs under ~430 bytes used to count as 10 % dead).
#[test]
fn gc_leaves_packs_of_small_live_blobs_alone() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_config(dir.path(), Config { pack_size: MIN_PACK_SIZE, ..Config::default() }, digest::sha256);
    for f in 0..30u32 {
        let recs: Vec<u8> = (0..20u32).flat_map(|r| warc_record(f * 100 + r, format!("small payload {f} {r}").as_bytes())).collect();
        s.put_file(ROOT_INO, format!("f{f:02}.warc").as_bytes(), &recs, meta()).unwrap();
    }
    // A first gc takes the metadata log's superseded records (its checkpoint); the second
    // has nothing dead to find.
    s.gc().unwrap();
    let gc = s.gc().unwrap();
    assert_eq!(gc.packs_rewritten, 0, "{gc:?}");
}

/// A store of format 5 trains a zstd dictionary once it has seen enough new chunks, commits
/// it with the file that trained it, compresses with it (smaller, exact), goes on with it
/// after a reopen, and keeps it through gc and an index rebuild.
#[test]
fn a_dictionary_is_trained_committed_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let file = |f: u32| -> Vec<u8> { (0..300u32).flat_map(|r| warc_record(f * 1000 + r, &site_page(f * 1000 + r))).collect() };
    let mut files = Vec::new();
    for f in 0..8u32 {
        files.push(file(f));
        s.put_file(ROOT_INO, format!("f{f}.warc").as_bytes(), &files[f as usize], meta()).unwrap();
    }
    let st = s.stats().unwrap();
    assert_eq!(st.dictionaries, 1, "{st:?}");
    assert!(st.dict_chunks > 0, "{st:?}");
    for (f, data) in files.iter().enumerate() {
        assert_eq!(read_all(&s, &format!("/f{f}.warc")), *data);
    }
    assert!(s.fsck(true).unwrap().problems.is_empty());
    drop(s);
    // A new process goes on with the same dictionary instead of training another.
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    files.push(file(8));
    s.put_file(ROOT_INO, b"f8.warc", &files[8], meta()).unwrap();
    let st = s.stats().unwrap();
    assert_eq!(st.dictionaries, 1, "{st:?}");
    // gc keeps it while nothing references it but the chunks compressed with it.
    s.remove("/f0.warc", false).unwrap();
    s.gc().unwrap();
    assert_eq!(s.stats().unwrap().dictionaries, 1);
    assert!(s.fsck(true).unwrap().problems.is_empty());
    drop(s);
    // An index rebuilt from the packs alone finds it (refcount 1) and reads every file.
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let rep = repair_index(dir.path()).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    assert_eq!(s.stats().unwrap().dictionaries, 1);
    assert!(s.fsck(true).unwrap().problems.is_empty());
    for (f, data) in files.iter().enumerate().skip(1) {
        assert_eq!(read_all(&s, &format!("/f{f}.warc")), *data);
    }
}

/// A store of an older format (3) is written without dictionaries, so the warcfs that made
/// it still reads it.
#[test]
fn a_version_3_store_gets_no_dictionary() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_config(dir.path(), Config { version: LOCAL_V3, ..Config::default() }, digest::sha256);
    for f in 0..8u32 {
        let data: Vec<u8> = (0..300u32).flat_map(|r| warc_record(f * 1000 + r, &site_page(f * 1000 + r))).collect();
        s.put_file(ROOT_INO, format!("f{f}.warc").as_bytes(), &data, meta()).unwrap();
        assert_eq!(read_all(&s, &format!("/f{f}.warc")), data);
    }
    let st = s.stats().unwrap();
    assert_eq!((st.dictionaries, st.dict_chunks), (0, 0), "{st:?}");
}

/// An open rolls forward only this node's own log records: another node's, which a gc of a
/// shared store copies into this node's packs, are numbered in that node's log and taken in
/// by `follow`, never applied as this node's next change.
#[test]
fn an_open_rolls_forward_only_its_own_nodes_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    s.put_file(ROOT_INO, b"f.warc", &warc_record(1, b"x"), meta()).unwrap();
    let applied = s.index.meta_u64_opt(journal::APPLIED_SEQ).unwrap().unwrap();
    drop(s);
    // A pack left open by a crash, holding the next record by number, but another node's.
    #[derive(serde::Serialize)]
    struct V2 {
        version: u32,
        seq: u64,
        ops: Vec<crate::index::LogOp>,
        checkpoint: Option<journal::CheckpointPart>,
        node: u16,
    }
    let mut id = 0u64;
    for e in std::fs::read_dir(dir.path().join("packs")).unwrap() {
        id = id.max(crate::pack::parse_pack_name(e.unwrap().file_name().to_str().unwrap()).unwrap());
    }
    let op = crate::index::LogOp::Put(0, b"someone_elses".to_vec(), 1u64.to_le_bytes().to_vec());
    let raw = postcard::to_allocvec(&V2 { version: journal::LOG_VERSION_SHARED, seq: applied + 1, ops: vec![op], checkpoint: None, node: 7 }).unwrap();
    let mut p = crate::pack::OpenPack::create(&dir.path().join("packs-tmp"), id + 1, FORMAT_VERSION).unwrap();
    p.append(crate::digest::ChunkKey { digest: digest::sha256(&raw), seq: 0 }, crate::pack::ChunkKind::Meta, crate::pack::Codec::None, raw.len() as u32, &raw).unwrap();
    p.sync().unwrap();
    drop(p);
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    assert_eq!(s.index.meta_u64_opt("someone_elses").unwrap(), None, "another node's record was applied as this one's");
    assert_eq!(s.index.meta_u64_opt(journal::APPLIED_SEQ).unwrap(), Some(applied));
    // The next change of its own takes the next number, and the store is whole.
    s.put_file(ROOT_INO, b"g.warc", &warc_record(2, b"y"), meta()).unwrap();
    assert_eq!(s.index.meta_u64_opt(journal::APPLIED_SEQ).unwrap(), Some(applied + 1));
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// An index of a file whose header chunk is gone fails, naming the chunk: leaving that
/// file's records out would be a partial answer with exit 0.
#[test]
fn an_index_of_a_file_with_a_header_chunk_gone_fails() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let data: Vec<u8> = (0..40u32).flat_map(|r| warc_record(r, &site_page(r))).collect();
    s.put_file(ROOT_INO, b"f.warc", &data, meta()).unwrap();
    let head = s.head(s.resolve("/f.warc").unwrap()).unwrap().unwrap();
    assert_eq!(s.records(&head).unwrap().len(), 40);
    let (key, _) = s.index.chunk_iter().map(|i| i.unwrap()).find(|(_, e)| e.kind == crate::pack::ChunkKind::Literal as u8).expect("a header chunk");
    let mut b = crate::index::Batch::new();
    b.delete_chunk(&s.index, &key);
    s.index.write(b).unwrap();
    s.cache.clear();
    let err = s.records(&head).unwrap_err().to_string();
    assert!(err.contains(&key.to_string()[..12]), "{err}");
    assert!(s.cdxj_each("/", StagedFiles::Refuse, &mut |_| Ok(())).is_err());
}

/// A piece whose length is not the span its file's recipe gives it is an error, not bytes
/// from the wrong offsets (its data segments carry no checksum) or a short read.
#[test]
fn a_piece_of_another_length_than_its_span_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let data: Vec<u8> = (0..40u32).flat_map(|r| warc_record(r, &site_page(r))).collect();
    s.put_file(ROOT_INO, b"f.warc", &data, meta()).unwrap();
    let head = s.inode(s.resolve("/f.warc").unwrap()).unwrap().unwrap().recipe.unwrap();
    assert_eq!(head.piece_starts, vec![0]);
    for size in [data.len() as u64 - 1, data.len() as u64 + 1] {
        let other = crate::recipe::RecipeHead { size, ..head.clone() };
        let err = s.piece(&other, 0).unwrap_err().to_string();
        assert!(err.contains("bytes long where"), "{err}");
    }
    assert_eq!(s.piece(&head, 0).unwrap().len(), data.len() as u64);
}

/// A recipe piece that cannot be read (bit rot in its pack) costs `repair index` that file,
/// not the whole index: every other file comes back, the report names the file, gc deletes
/// nothing while that file is there (the chunks only it used are counted 0, and gc reads
/// every recipe before it drops a chunk), and once the pack is mended (from a backup) a
/// second repair gives the file back whole.
#[test]
fn repair_goes_on_past_an_unreadable_recipe_piece() {
    let dir = tempfile::tempdir().unwrap();
    let (s, files) = two_stored_files(dir.path());
    let head = s.head(s.resolve("/b.warc").unwrap()).unwrap().unwrap();
    let key = s.index.recipe_piece(head.id, 0).unwrap().unwrap();
    let e = s.index.chunk(&key).unwrap().unwrap();
    drop(s);
    let mend = crate::test_support::rot_last_stored_byte(&dir.path().join("packs").join(crate::pack::pack_name(e.pack)), &e);
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let rep = repair_index(dir.path()).unwrap();
    assert!(rep.problems.iter().any(|p| p.contains("/b.warc") && p.contains("cannot be read")), "{rep:?}");
    let s = Store::open(dir.path(), false).unwrap();
    assert_eq!(files_exact(&s, &files[..1]), 1, "the other file reads back");
    assert_eq!(files_exact(&s, &files[1..]), 0);
    let keys = || s.index.chunk_iter().map(|i| i.unwrap().0).collect::<std::collections::HashSet<_>>();
    let before = keys();
    match s.gc() {
        Err(StoreError::GcRefused(m)) => assert!(m.contains("/b.warc") && m.contains("nothing was deleted"), "{m}"),
        other => panic!("gc must refuse: {:?}", other.map(|r| r.chunks_dropped)),
    }
    assert!(keys().is_superset(&before), "gc deleted nothing (its checkpoint of the namespace is new)");
    drop(s);
    mend();
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let rep = repair_index(dir.path()).unwrap();
    assert!(rep.problems.is_empty(), "{rep:?}");
    let s = Store::open(dir.path(), false).unwrap();
    assert_eq!(files_exact(&s, &files), 2);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// A store whose settings file is lost gets its own format version back from its packs, so
/// that the warcfs that wrote it still opens it after `repair index`; packs from before
/// blobs named it are taken as version 5, and a bucket's packs as their local counterpart.
#[test]
fn repair_gives_a_store_without_settings_the_version_its_packs_were_written_for() {
    use std::os::unix::fs::FileExt;
    let data: Vec<u8> = (0..40u32).flat_map(|r| warc_record(r, &site_page(r))).collect();
    // (the version made, whether its blobs say it, the version repair writes)
    for (made, says, repaired) in [(DICT_FORMAT_VERSION, true, DICT_FORMAT_VERSION), (LONGEST_V7, true, LONGEST_V7), (DELTAS_V9, true, DELTAS_V9), (PREDICTED_V10, true, PREDICTED_V10), (PACKED_V11, true, PACKED_V11), (FORMAT_VERSION, true, FORMAT_VERSION), (FORMAT_VERSION, false, DICT_FORMAT_VERSION)] {
        let dir = tempfile::tempdir().unwrap();
        let s = open_config(dir.path(), Config { version: made, ..Config::default() }, digest::sha256);
        s.put_file(ROOT_INO, b"f.warc", &data, meta()).unwrap();
        drop(s);
        if !says {
            // What a warcfs before 2026-11-27 wrote: a zero pad byte where the version is.
            for e in std::fs::read_dir(dir.path().join("packs")).unwrap() {
                let f = std::fs::OpenOptions::new().read(true).write(true).open(e.unwrap().path()).unwrap();
                for b in crate::pack::read_footer(&f, 0).unwrap() {
                    let mut h = [0u8; crate::pack::BLOB_HEADER_LEN];
                    f.read_exact_at(&mut h, b.offset).unwrap();
                    assert_eq!(crate::pack::written_for(&h), Some(made as u8));
                    h[7] = 0;
                    let crc = crc32fast::hash(&h[..56]);
                    h[56..60].copy_from_slice(&crc.to_le_bytes());
                    f.write_all_at(&h, b.offset).unwrap();
                    assert_eq!(crate::pack::written_for(&h), Some(0));
                }
            }
        }
        std::fs::remove_file(dir.path().join(CONFIG_FILE)).unwrap();
        std::fs::remove_dir_all(dir.path().join("index")).unwrap();
        let rep = repair_index(dir.path()).unwrap();
        assert!(rep.wrote_default_config && rep.problems.is_empty(), "{rep:?}");
        assert_eq!(rep.config_version, Some((repaired, says)), "made at {made}");
        assert_eq!(read_config(&dir.path().join(CONFIG_FILE)).unwrap().version, repaired);
        let s = Store::open(dir.path(), false).unwrap();
        assert_eq!(read_all(&s, "/f.warc"), data);
        assert!(s.fsck(true).unwrap().problems.is_empty());
    }
    // A node's packs from a bucket several nodes write (version 8): a local store of 7.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("packs")).unwrap();
    let mut p = crate::pack::OpenPack::create(&dir.path().join("packs"), 1, SHARED_FORMAT_VERSION).unwrap();
    p.append(crate::digest::ChunkKey { digest: [1; 32], seq: 0 }, crate::pack::ChunkKind::Raw, crate::pack::Codec::None, 1, b"x").unwrap();
    p.sync().unwrap();
    p.seal(&dir.path().join("packs")).unwrap();
    let packs = crate::pack::PackReader::new(dir.path().join("packs"), dir.path().join("packs-tmp"));
    assert_eq!(crate::store::maint::repair::packs_version(dir.path(), &packs).unwrap(), (LONGEST_V7, true));
}

/// The settled level in the header of every chunk's blob in every sealed pack (not the
/// metadata log's, whose packs every checkpoint replaces).
fn blob_levels(dir: &Path) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir.join("packs")).unwrap() {
        let f = std::fs::File::open(e.unwrap().path()).unwrap();
        for b in crate::pack::read_footer(&f, 0).unwrap().into_iter().filter(|b| b.kind != crate::pack::ChunkKind::Meta as u8) {
            let mut h = [0u8; crate::pack::BLOB_HEADER_LEN];
            f.read_exact_at(&mut h, b.offset).unwrap();
            out.push(crate::pack::settled_level(&h).expect("a blob header"));
        }
    }
    out
}

/// gc settles the packs ingest wrote: each once, every blob recompressed at the archival
/// level (dictionary chunks with their dictionary), smaller, every file exact, and a second
/// gc, even after the index is rebuilt from the packs, leaves them alone.
#[test]
fn gc_settles_each_pack_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let files: Vec<Vec<u8>> = (0..8u32).map(|f| (0..300u32).flat_map(|r| warc_record(f * 1000 + r, &site_page(f * 1000 + r))).collect()).collect();
    for (f, data) in files.iter().enumerate() {
        s.put_file(ROOT_INO, format!("f{f}.warc").as_bytes(), data, meta()).unwrap();
    }
    let st = s.stats().unwrap();
    assert!(st.dict_chunks > 0 && st.chunks > st.dict_chunks, "chunks with and without the dictionary: {st:?}");
    let before = s.gc_with(GcOptions { settle: false }).unwrap();
    assert_eq!(before.packs_settled, 0);
    assert!(blob_levels(dir.path()).iter().all(|&l| l == 0), "ingest and a gc told not to settle write level 0");

    let stored = |s: &Store| -> HashMap<ChunkKey, (u8, u32, u8)> { s.index.chunk_iter().map(|i| i.unwrap()).map(|(k, e)| (k, (e.codec, e.stored_len, e.kind))).collect() };
    let ingested = stored(&s);
    let rep = s.gc().unwrap();
    assert!(rep.packs_settled > 0 && rep.packs_left_unsettled == 0 && rep.chunks_damaged == 0, "{rep:?}");
    // Chunks with and without the dictionary, and recipe pieces, all came out smaller under
    // the same keys.
    let settled = stored(&s);
    let smaller = |codec: u8, kind: Option<crate::pack::ChunkKind>| {
        ingested.iter().filter(|(k, (c, len, kd))| *c == codec && kind.is_none_or(|kind| *kd == kind as u8) && settled.get(k).is_some_and(|(c2, len2, _)| c2 == c && len2 < len)).count()
    };
    for codec in [crate::pack::Codec::Zstd as u8, crate::pack::Codec::ZstdDict as u8] {
        assert!(smaller(codec, None) > 0, "no chunk of codec {codec} was recompressed smaller");
    }
    assert!(smaller(crate::pack::Codec::Zstd as u8, Some(crate::pack::ChunkKind::Recipe)) > 0, "no recipe piece was recompressed smaller");
    let levels = blob_levels(dir.path());
    assert!(!levels.is_empty() && levels.iter().all(|&l| l == crate::store::maint::settle::LEVEL), "{levels:?}");
    assert!(rep.bytes_after < rep.bytes_before, "level {} stores these pages smaller: {rep:?}", crate::store::maint::settle::LEVEL);
    for (f, data) in files.iter().enumerate() {
        assert_eq!(read_all(&s, &format!("/f{f}.warc")), *data);
    }
    assert!(s.fsck(true).unwrap().problems.is_empty());
    let again = s.gc().unwrap();
    assert_eq!((again.packs_settled, again.packs_rewritten), (0, 0), "{again:?}");
    assert!(s.index.meta_u64_opt("settled_below_0000").unwrap().is_some_and(|id| id > 0), "the next gc asks only newer packs");
    // A file stored since: its new pack, above the mark, is settled by the next gc.
    let more: Vec<u8> = (0..300u32).flat_map(|r| warc_record(9000 + r, &site_page(9000 + r))).collect();
    s.put_file(ROOT_INO, b"more.warc", &more, meta()).unwrap();
    assert!(s.gc().unwrap().packs_settled > 0);
    assert!(blob_levels(dir.path()).iter().all(|&l| l == crate::store::maint::settle::LEVEL));
    assert_eq!(read_all(&s, "/more.warc"), more);
    drop(s);

    // The level is in the packs: an index rebuilt from them knows the packs are settled.
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    assert!(repair_index(dir.path()).unwrap().problems.is_empty());
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let after_repair = s.gc().unwrap();
    assert_eq!(after_repair.packs_settled, 0, "{after_repair:?}");
    for (f, data) in files.iter().enumerate() {
        assert_eq!(read_all(&s, &format!("/f{f}.warc")), *data);
    }
}

/// Settling takes no more than half the disk's room above its floor: with none, gc leaves
/// every pack for later, and a later gc with room settles them.
#[test]
fn gc_settles_only_what_the_disk_has_room_for() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let data: Vec<u8> = (0..300u32).flat_map(|r| warc_record(r, &site_page(r))).collect();
    s.put_file(ROOT_INO, b"f.warc", &data, meta()).unwrap();
    s.space.set_floor(u64::MAX);
    let rep = s.gc().unwrap();
    assert!(rep.packs_settled == 0 && rep.packs_left_unsettled > 0, "{rep:?}");
    assert!(blob_levels(dir.path()).iter().all(|&l| l == 0));
    s.space.set_floor(0);
    let rep = s.gc().unwrap();
    assert!(rep.packs_settled > 0 && rep.packs_left_unsettled == 0, "{rep:?}");
    assert!(blob_levels(dir.path()).iter().all(|&l| l == crate::store::maint::settle::LEVEL));
    assert_eq!(read_all(&s, "/f.warc"), data);
}

/// A store holding two WARC files of 100 records each, reopened: for the tests that damage
/// one chunk and see what gc and fsck make of it.
fn two_stored_files(dir: &Path) -> (Store, [(&'static str, Vec<u8>); 2]) {
    let s = open(dir, Verify::Bytes, digest::sha256);
    let file = |from: u32| (from..from + 100).flat_map(|r| warc_record(r, &site_page(r))).collect::<Vec<u8>>();
    let files = [("/a.warc", file(0)), ("/b.warc", file(500))];
    for (name, data) in &files {
        s.put_file(ROOT_INO, &name.as_bytes()[1..], data, meta()).unwrap();
    }
    drop(s);
    (open(dir, Verify::Bytes, digest::sha256), files)
}

/// How many of `files` read back exact.
fn files_exact(s: &Store, files: &[(&str, Vec<u8>)]) -> usize {
    files
        .iter()
        .filter(|(name, data)| {
            let head = s.head(s.resolve(name).unwrap()).unwrap().unwrap();
            let mut buf = vec![0u8; data.len()];
            s.read_at(&head, 0, &mut buf).is_ok_and(|n| n == data.len() && buf == *data)
        })
        .count()
}

/// A chunk whose stored bytes are intact by their checksum but do not decode to its digest
/// is copied as it is and counted: gc goes on, every other file reads back, fsck names it.
#[test]
fn settling_copies_a_damaged_chunk_as_it_is() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let (s, files) = two_stored_files(dir.path());
    // A zstd payload chunk: its last stored byte changed, both checksums made to match (as
    // a bug writing wrong bytes would have left it).
    let (key, e) = s.index.chunk_iter().map(|i| i.unwrap()).find(|(_, e)| e.codec == crate::pack::Codec::Zstd as u8 && e.kind == crate::pack::ChunkKind::PayloadHead as u8).expect("a zstd payload chunk");
    let path = dir.path().join("packs").join(crate::pack::pack_name(e.pack));
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut blob = vec![0u8; crate::pack::BLOB_HEADER_LEN + e.stored_len as usize];
    f.read_exact_at(&mut blob, e.offset).unwrap();
    let n = blob.len();
    blob[n - 1] ^= 0x55;
    let crc = crc32fast::hash(&blob[crate::pack::BLOB_HEADER_LEN..]);
    blob[52..56].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32fast::hash(&blob[..56]);
    blob[56..60].copy_from_slice(&hcrc.to_le_bytes());
    f.write_all_at(&blob, e.offset).unwrap();
    drop(f);
    let rep = s.gc().unwrap();
    assert_eq!(rep.chunks_damaged, 1, "{rep:?}");
    assert!(rep.packs_settled > 0, "{rep:?}");
    let moved = s.index.chunk(&key).unwrap().unwrap();
    assert_eq!(moved.stored_len, e.stored_len, "copied as it was");
    assert!(moved.pack != e.pack, "into a settled pack");
    // The file without the damaged chunk reads back (the other cannot).
    let exact = files_exact(&s, &files);
    assert_eq!(exact, 1);
    let problems = s.fsck(true).unwrap().problems;
    assert!(problems.iter().any(|p| p.contains(&key.short())), "{problems:?}");
}

/// A live blob that does not read back intact (its checksum) does not stop gc: its chunk
/// stays where it is, in its pack, which gc keeps; the rest is settled, the damage counted,
/// and the next gc gets as far (it stopped every gc before, for good).
#[test]
fn a_live_blob_that_fails_its_checksum_does_not_stop_gc() {
    let dir = tempfile::tempdir().unwrap();
    let (s, files) = two_stored_files(dir.path());
    // A payload chunk's last stored byte flipped, its checksum left as it was: bit rot.
    let (key, e) = s.index.chunk_iter().map(|i| i.unwrap()).find(|(_, e)| e.kind == crate::pack::ChunkKind::PayloadHead as u8).expect("a payload chunk");
    let path = dir.path().join("packs").join(crate::pack::pack_name(e.pack));
    let _never_mended = crate::test_support::rot_last_stored_byte(&path, &e);
    for round in 0..2 {
        let rep = s.gc().unwrap();
        assert_eq!(rep.chunks_damaged, 1, "round {round}: {rep:?}");
        assert_eq!(s.index.chunk(&key).unwrap().unwrap().pack, e.pack, "left where it is");
        assert!(path.exists(), "its pack is kept");
    }
    assert!(blob_levels(dir.path()).iter().any(|&l| l > 0), "the other packs are settled");
    let exact = files_exact(&s, &files);
    assert_eq!(exact, 1, "the file without the damaged chunk reads back");
    let problems = s.fsck(true).unwrap().problems;
    assert!(problems.iter().any(|p| p.contains(&crate::pack::pack_name(e.pack)[..16]) || p.contains(&key.short())), "{problems:?}");
}

/// A dictionary the index no longer names is damage, like a chunk's: gc copies the chunks
/// compressed with it as they were, counts them, and settles the rest.
#[test]
fn settling_copies_the_chunks_of_a_missing_dictionary_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    for f in 0..8u32 {
        let data: Vec<u8> = (0..300u32).flat_map(|r| warc_record(f * 1000 + r, &site_page(f * 1000 + r))).collect();
        s.put_file(ROOT_INO, format!("f{f}.warc").as_bytes(), &data, meta()).unwrap();
    }
    let entries: Vec<(ChunkKey, crate::index::ChunkEntry)> = s.index.chunk_iter().map(|i| i.unwrap()).collect();
    let with_dict = entries.iter().filter(|(_, e)| e.codec == crate::pack::Codec::ZstdDict as u8).count() as u64;
    let (dict, _) = entries.iter().find(|(_, e)| e.kind == crate::pack::ChunkKind::Dict as u8).expect("a dictionary");
    assert!(with_dict > 0);
    let mut b = crate::index::Batch::new();
    b.delete_chunk(&s.index, dict);
    s.index.write(b).unwrap();
    let rep = s.gc().unwrap();
    assert_eq!(rep.chunks_damaged, with_dict, "{rep:?}");
    assert!(rep.packs_settled > 0, "{rep:?}");
    let after: HashMap<ChunkKey, u32> = s.index.chunk_iter().map(|i| i.unwrap()).map(|(k, e)| (k, e.stored_len)).collect();
    for (k, e) in &entries {
        if e.codec == crate::pack::Codec::ZstdDict as u8 {
            assert_eq!(after[k], e.stored_len, "copied as it was");
        }
    }
}

/// `records` gzipped member by member by zopfli (an optimal parser; scripts/setup installs it).
fn zopfli_members(records: &[Vec<u8>]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("record");
    let mut out = Vec::new();
    for r in records {
        std::fs::write(&input, r).unwrap();
        let z = std::process::Command::new("zopfli").args(["--i1", "-c"]).arg(&input).output().unwrap_or_else(|e| panic!("zopfli (scripts/setup installs it): {e}"));
        assert!(z.status.success());
        out.extend_from_slice(&z.stdout);
    }
    out
}

/// A store of format 7 keeps an optimal parser's parses in the longest form, smaller than
/// the ranked form a store of format 5 keeps (which the warcfs that made it still reads);
/// both read the file back exactly and check clean.
#[test]
fn an_optimal_parsers_members_take_the_longest_form_from_format_7_on() {
    let records: Vec<Vec<u8>> = (0..12u32).map(|r| warc_record(r, &(0..20).flat_map(|k| site_page(r * 100 + k)).collect::<Vec<u8>>())).collect();
    let data = zopfli_members(&records);
    let mut recorded = Vec::new();
    for version in [DICT_FORMAT_VERSION, FORMAT_VERSION] {
        let dir = tempfile::tempdir().unwrap();
        let s = open_config(dir.path(), Config { version, ..Config::default() }, digest::sha256);
        s.put_file(ROOT_INO, b"z.warc.gz", &data, meta()).unwrap();
        assert_eq!(read_all(&s, "/z.warc.gz"), data);
        let st = s.stats().unwrap();
        assert_eq!((st.gzip_members, st.gzip_members_raw), (12, 0), "{st:?}");
        assert!(s.fsck(true).unwrap().problems.is_empty());
        recorded.push(st.parse_bytes);
    }
    assert!(recorded[1] * 10 < recorded[0] * 9, "parse bytes at format 5 and 7: {recorded:?}");
}

/// gc trains a dictionary on a sample of the text chunks
/// it settles, stores it as a `Dict` chunk and names it in the index, and compresses them
/// with it: smaller than a store whose gc does not, every file exact, fsck clean. A later gc
/// over a little more text goes on with it; an index rebuilt from the packs finds it.
#[test]
fn gc_settles_text_with_a_dictionary_it_trains() {
    let training = Training { first_min: 1 << 20, renew_min: 64 << 20, dict_size: 16 << 10, samples: 1 << 20 };
    let file = |f: u32| -> Vec<u8> { (0..150u32).flat_map(|r| warc_record(f * 1000 + r, &site_page(f * 1000 + r))).collect() };
    let files: Vec<Vec<u8>> = (0..3).map(file).collect();
    let mut sizes = Vec::new();
    for first_min in [u64::MAX, training.first_min] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open_config(dir.path(), Config { version: FORMAT_VERSION, ..Config::default() }, digest::sha256);
        s.limits.training = Training { first_min, ..training };
        for (f, data) in files.iter().take(2).enumerate() {
            s.put_file(ROOT_INO, format!("f{f}.warc").as_bytes(), data, meta()).unwrap();
        }
        s.gc().unwrap();
        let named = s.index.meta_bytes(super::train::META_KEY).unwrap();
        let st = s.stats().unwrap();
        if first_min == u64::MAX {
            assert_eq!((named, st.dictionaries), (None, 0), "too little for ingest to train one: {st:?}");
            sizes.push(s.packs.sealed_packs().unwrap().iter().map(|p| p.1).sum::<u64>());
            continue;
        }
        let key = ChunkKey::from_bytes(&named.expect("gc names its dictionary")).unwrap();
        let e = s.index.chunk(&key).unwrap().expect("its chunk is in the index");
        assert_eq!((e.kind, e.refs), (crate::pack::ChunkKind::Dict as u8, 1));
        assert_eq!(st.dictionaries, 1, "gc's: {st:?}");
        // The settled text chunks name it.
        let with_it = s.index.chunk_iter().map(|r| r.unwrap()).filter(|(_, e)| e.codec == crate::pack::Codec::ZstdDict as u8).filter(|(k, e)| crate::pack::dict_of(&s.packs.read_stored(e.pack, e.offset, k, e.stored_len).unwrap().1) == Some(key.digest)).count();
        assert!(with_it > 100, "{with_it} chunks compressed with gc's dictionary");
        sizes.push(s.packs.sealed_packs().unwrap().iter().map(|p| p.1).sum::<u64>());
        for (f, data) in files.iter().take(2).enumerate() {
            assert_eq!(read_all(&s, &format!("/f{f}.warc")), *data);
        }
        assert!(s.fsck(true).unwrap().problems.is_empty());
        // A little more text (under renew_min): settled with the same dictionary.
        s.put_file(ROOT_INO, b"f2.warc", &files[2], meta()).unwrap();
        s.gc().unwrap();
        assert_eq!(s.index.meta_bytes(super::train::META_KEY).unwrap(), Some(key.to_bytes().to_vec()));
        assert_eq!(s.stats().unwrap().dictionaries, 1);
        drop(s);
        // An index rebuilt from the packs alone finds it and reads every file.
        std::fs::remove_dir_all(dir.path().join("index")).unwrap();
        let rep = repair_index(dir.path()).unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        let s = open(dir.path(), Verify::Bytes, digest::sha256);
        assert!(s.fsck(true).unwrap().problems.is_empty());
        for (f, data) in files.iter().enumerate() {
            assert_eq!(read_all(&s, &format!("/f{f}.warc")), *data);
        }
    }
    assert!(sizes[1] < sizes[0], "packs with gc's dictionary {} against without {}", sizes[1], sizes[0]);
}
