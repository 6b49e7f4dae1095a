//! A store made with `init --parses compact` (format 12) keeps zlib's members' parses in the
//! predicted form: every file still reads back byte for byte, through gc and a rebuilt
//! index, in far fewer parse bytes than the ranked form, and copies of a payload still
//! share one tail.

use crate::store::tests::{gzip_member, meta, read_all, warc_record};
use crate::store::*;
use crate::pack::ChunkKind;

fn store(dir: &std::path::Path, parses: Parses) -> Store {
    let opts = OpenOptionsStore { create: true, config: Config { version: parses.version(), ..Config::default() }, follower: false };
    Store::open_with(dir, &opts, crate::digest::sha256).unwrap()
}

fn name_of(p: &std::path::Path) -> String {
    p.strip_prefix(crate::test_support::real_corpus()).unwrap().display().to_string().replace('/', "_")
}

#[test]
fn a_compact_store_reads_every_real_file_back_exactly_through_gc_and_a_rebuilt_index() {
    let files = crate::test_support::real_corpus_files();
    let (fast_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (fast, s) = (store(fast_dir.path(), Parses::Fast), store(dir.path(), Parses::Compact));
    assert_eq!(s.config().version, FORMAT_VERSION);
    for f in &files {
        let data = std::fs::read(f).unwrap();
        for st in [&fast, &s] {
            st.put_file(ROOT_INO, name_of(f).as_bytes(), &data, meta()).unwrap();
        }
        assert_eq!(read_all(&s, &format!("/{}", name_of(f))), data, "{}", f.display());
    }
    // The same members, their parses in a fraction of the bytes (Heritrix's, warcio's and
    // wget's zlib; a few writers' keep the ranked form).
    let (fast_parse, parse) = (fast.stats().unwrap().parse_bytes, s.stats().unwrap().parse_bytes);
    assert!(parse * 2 < fast_parse, "predicted {parse} bytes, ranked {fast_parse}");
    s.gc().unwrap();
    assert!(s.fsck(true).unwrap().problems.is_empty());
    // gc settled its packs at the level of a store made for size.
    let levels: Vec<Option<u8>> = s.packs.sealed_packs().unwrap().iter().map(|&(id, _)| s.packs.first_settled(id).unwrap()).collect();
    assert!(levels.contains(&Some(crate::store::maint::settle::COMPACT_LEVEL)), "{levels:?}");
    drop(s);
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let rep = rebuild_index(dir.path()).unwrap();
    assert!(rep.problems.is_empty(), "{rep:?}");
    let s = Store::open(dir.path(), false).unwrap();
    for f in &files {
        assert_eq!(read_all(&s, &format!("/{}", name_of(f))), std::fs::read(f).unwrap(), "{} after repair", f.display());
    }
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// 40 KB of a real crawl's text (the pywb sample's), from `seed` * 50,000 on.
fn body(seed: usize) -> Vec<u8> {
    use std::io::Read;
    let t = std::fs::read(crate::test_support::real_corpus().join("webrecorder-pywb/iana.warc.gz")).unwrap();
    let mut plain = Vec::new();
    flate2::read::MultiGzDecoder::new(&t[..]).read_to_end(&mut plain).unwrap();
    plain[seed * 50_000..seed * 50_000 + 40_000].to_vec()
}

#[test]
fn copies_of_a_payload_share_one_predicted_tail() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), Parses::Compact);
    let x = body(1);
    // Each copy behind other headers (record ids, dates); zlib at its default level.
    let (a, b) = (gzip_member(&warc_record(1, &x), 6), gzip_member(&warc_record(5, &x), 6));
    for (name, data) in [("a.warc.gz", &a), ("b.warc.gz", &b)] {
        s.put_file(ROOT_INO, name.as_bytes(), data, meta()).unwrap();
        assert_eq!(read_all(&s, &format!("/{name}")), *data, "{name}");
    }
    assert_eq!(s.tails.counts(), (1, 0), "the second copy named the stored tail");
    let refs: Vec<u64> = s.index.chunk_iter().map(|r| r.unwrap().1).filter(|e| e.kind == ChunkKind::Parse as u8).map(|e| e.refs).collect();
    assert_eq!(refs, [2], "one chunk, referenced by both files");
    assert!(s.fsck(true).unwrap().problems.is_empty());
    // In the predicted form: a fraction of the ranked tails' bytes.
    let fast_dir = tempfile::tempdir().unwrap();
    let fast = store(fast_dir.path(), Parses::Fast);
    fast.put_file(ROOT_INO, b"a.warc.gz", &a, meta()).unwrap();
    let (tails, ranked) = (s.stats().unwrap().parse_tail_chunk_bytes, fast.stats().unwrap().parse_tail_chunk_bytes);
    assert!(tails * 2 < ranked, "predicted tails {tails} bytes, ranked {ranked}");
    // Read by a new process (no tails known, every parse decoded from its stored form).
    drop(s);
    let s = Store::open(dir.path(), false).unwrap();
    assert_eq!(read_all(&s, "/b.warc.gz"), b);
}

/// In the default store (format 11) too, a gzip member that holds no record (a WACZ's CDXJ
/// index, any gzip text) keeps its parse in the predicted form: a fraction of the ranked
/// form a format-9 store keeps, read back exact. A WARC's members keep the ranked form.
#[test]
fn a_member_without_a_record_takes_the_predicted_form_in_the_default_store() {
    let lines: Vec<u8> = (0..4000u32).flat_map(|i| format!("com,example)/page/{} 2026120{}{:06} {{\"url\": \"http://example.com/page/{}\", \"digest\": \"sha1:{:032X}\", \"length\": \"{}\", \"offset\": \"{}\"}}\n", i % 700, i % 10, i * 37 % 999_983, i % 700, (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834) >> 4, 300 + i * 13 % 9000, i * 4099).into_bytes()).collect();
    let cdxj = gzip_member(&lines, 9);
    let warc = gzip_member(&warc_record(3, &body(2)), 9);
    let mut recorded = Vec::new();
    for version in [DELTAS_V9, Parses::Fast.version()] {
        let dir = tempfile::tempdir().unwrap();
        let opts = OpenOptionsStore { create: true, config: Config { version, ..Config::default() }, follower: false };
        let s = Store::open_with(dir.path(), &opts, crate::digest::sha256).unwrap();
        s.put_file(ROOT_INO, b"index.cdxj.gz", &cdxj, meta()).unwrap();
        let cdxj_parse = s.stats().unwrap().parse_bytes;
        s.put_file(ROOT_INO, b"a.warc.gz", &warc, meta()).unwrap();
        let warc_parse = s.stats().unwrap().parse_bytes - cdxj_parse;
        assert_eq!(read_all(&s, "/index.cdxj.gz"), cdxj);
        assert_eq!(read_all(&s, "/a.warc.gz"), warc);
        assert!(s.fsck(true).unwrap().problems.is_empty());
        recorded.push((cdxj_parse, warc_parse));
    }
    let ((old_cdxj, old_warc), (cdxj_parse, warc_parse)) = (recorded[0], recorded[1]);
    assert!(cdxj_parse * 4 < old_cdxj, "the index's parse: {cdxj_parse} bytes, ranked {old_cdxj}");
    assert_eq!(warc_parse, old_warc, "a WARC's member keeps the ranked form");
}
