//! A store made with `init --parses compact-at-gc` ingests as a fast store does, and after
//! gc holds what a compact store holds: every file read back byte for byte, each file tried
//! once, an index rebuilt without the mark changing nothing, damage left for fsck.

use crate::store::tests::{gzip_member, meta, read_all, site_page, warc_record};
use crate::store::*;

fn store(dir: &std::path::Path, parses: Parses) -> Store {
    let config = Config { version: parses.version(), compact_at_gc: parses.compact_at_gc(), ..Config::default() };
    let opts = OpenOptionsStore { create: true, config, follower: false };
    Store::open_with(dir, &opts, crate::digest::sha256).unwrap()
}

fn name_of(p: &std::path::Path) -> String {
    p.strip_prefix(crate::test_support::real_corpus()).unwrap().display().to_string().replace('/', "_")
}

fn all_exact(s: &Store, files: &[std::path::PathBuf], ctx: &str) {
    for f in files {
        assert!(read_all(s, &format!("/{}", name_of(f))) == std::fs::read(f).unwrap(), "{} {ctx}", f.display());
    }
}

#[test]
fn gc_leaves_the_store_as_compact_as_one_that_ingested_compact() {
    let files = crate::test_support::real_corpus_files();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (fast, compact, s) = (store(dirs[0].path(), Parses::Fast), store(dirs[1].path(), Parses::Compact), store(dirs[2].path(), Parses::CompactAtGc));
    assert_eq!(s.config().version, FORMAT_VERSION);
    for f in &files {
        let data = std::fs::read(f).unwrap();
        for st in [&fast, &compact, &s] {
            st.put_file(ROOT_INO, name_of(f).as_bytes(), &data, meta()).unwrap();
        }
    }
    // Ingest wrote the fast form.
    assert_eq!(s.stats().unwrap().parse_bytes, fast.stats().unwrap().parse_bytes);
    // Files that may hold gzip members: gzip files and ZIPs (WACZs).
    let gz = files.iter().filter(|f| std::fs::read(f).unwrap().get(..2).is_some_and(|m| m == [0x1f, 0x8b] || m == b"PK")).count() as u64;
    let rep = s.gc().unwrap();
    assert!(rep.files_reparsed > 0 && rep.files_reparsed <= gz && rep.files_not_reparsed == 0, "{rep:?} of {gz} gzip files and ZIPs");
    assert!(rep.chunks_dropped > 0, "the fast parses' tails are collected by the same gc: {rep:?}");
    all_exact(&s, &files, "after a reparsing gc");
    assert!(s.fsck(true).unwrap().problems.is_empty());
    // The parses a compact store's ingest kept, byte for byte (both settled by gc).
    compact.gc().unwrap();
    let (parse, tails) = (s.stats().unwrap().parse_bytes, s.stats().unwrap().parse_tail_chunk_bytes);
    assert_eq!((parse, tails), (compact.stats().unwrap().parse_bytes, compact.stats().unwrap().parse_tail_chunk_bytes));
    assert!(parse * 2 < fast.stats().unwrap().parse_bytes);
    // Each file is tried once: the next pass reads none back; a file stored since is tried.
    let tried = |s: &Store| s.reparse().unwrap().tried;
    assert_eq!(tried(&s), 0);
    assert_eq!(s.gc().unwrap().files_reparsed, 0);
    let one = files.iter().find(|f| f.to_string_lossy().ends_with("iana.warc.gz")).expect("pywb's iana.warc.gz");
    s.put_file(ROOT_INO, b"again.warc.gz", &std::fs::read(one).unwrap(), meta()).unwrap();
    assert_eq!(s.gc().unwrap().files_reparsed, 1);
    assert_eq!(tried(&s), 0);
    assert_eq!(read_all(&s, "/again.warc.gz"), std::fs::read(one).unwrap());
    // An index rebuilt from the packs has the mark (it is logged): no file is tried again.
    drop(s);
    std::fs::remove_dir_all(dirs[2].path().join("index")).unwrap();
    let rebuilt = rebuild_index(dirs[2].path()).unwrap();
    assert!(rebuilt.problems.is_empty(), "{rebuilt:?}");
    let s = Store::open(dirs[2].path(), false).unwrap();
    assert!(s.config().compact_at_gc);
    assert_eq!(tried(&s), 0, "the rebuilt index has the mark");
    assert_eq!(s.gc().unwrap().files_reparsed, 0);
    all_exact(&s, &files, "after a rebuilt index and gc");
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// A file that does not read back (a payload chunk rotten) is left as it is and counted;
/// gc reparses the other and goes on.
#[test]
fn a_damaged_file_is_left_as_it_is_and_gc_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), Parses::CompactAtGc);
    let file = |from: u32| (from..from + 60).flat_map(|r| gzip_member(&warc_record(r, &site_page(r)), 6)).collect::<Vec<u8>>();
    let files = [("a.warc.gz", file(0)), ("b.warc.gz", file(500))];
    for (name, data) in &files {
        s.put_file(ROOT_INO, name.as_bytes(), data, meta()).unwrap();
    }
    // A payload chunk of b's (its records come second) rotten on the disk.
    let b_chunks: std::collections::BTreeSet<crate::digest::ChunkKey> = {
        let head = s.head(s.resolve("/b.warc.gz").unwrap()).unwrap().unwrap();
        s.recipe_references(&head).unwrap().1.into_iter().collect()
    };
    let (_, e) = s.index.chunk_iter().map(|i| i.unwrap()).find(|(k, e)| e.kind == crate::pack::ChunkKind::PayloadHead as u8 && b_chunks.contains(k) && e.refs == 1).expect("a payload chunk of b's alone");
    s.flush().unwrap();
    let _never_mended = crate::test_support::rot_last_stored_byte(&dir.path().join("packs").join(crate::pack::pack_name(e.pack)), &e);
    let rep = s.gc().unwrap();
    assert_eq!((rep.files_reparsed, rep.files_not_reparsed), (1, 1), "{rep:?}");
    assert_eq!(read_all(&s, "/a.warc.gz"), files[0].1);
    let problems = s.fsck(true).unwrap().problems;
    assert!(!problems.is_empty(), "fsck names the damage");
}

/// Without compression too, gc rewrites the parses (it settles nothing there).
#[test]
fn a_store_without_compression_is_reparsed_too() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { version: Parses::CompactAtGc.version(), compact_at_gc: true, compression: Compression::None, ..Config::default() };
    let s = Store::open_with(dir.path(), &OpenOptionsStore { create: true, config, follower: false }, crate::digest::sha256).unwrap();
    let data: Vec<u8> = (0..40).flat_map(|r| gzip_member(&warc_record(r, &site_page(r)), 6)).collect();
    s.put_file(ROOT_INO, b"a.warc.gz", &data, meta()).unwrap();
    let before = s.stats().unwrap().parse_bytes;
    let rep = s.gc().unwrap();
    assert_eq!(rep.files_reparsed, 1, "{rep:?}");
    assert!(s.stats().unwrap().parse_bytes < before);
    assert_eq!(read_all(&s, "/a.warc.gz"), data);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}
