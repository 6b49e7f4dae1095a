//! Store-level tests on a real RocksDB in a temporary directory: verify modes against a
//! deliberately weak digest, and byte-exact round trips of arbitrary and damaged input.

use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::digest;
use crate::store::ingest::Windows;
use crate::store::namespace::FileMeta;

pub(in crate::store) fn open(dir: &Path, verify: Verify, digest: DigestFn) -> Store {
    open_config(dir, Config { verify, ..Config::default() }, digest)
}

/// Creates (or opens) the store in `dir` with `config`.
pub(in crate::store) fn open_config(dir: &Path, config: Config, digest: DigestFn) -> Store {
    let opts = OpenOptionsStore { create: true, config, follower: false };
    Store::open_with(dir, &opts, digest).unwrap()
}

/// Node `node` ("name") of a store several nodes write, in `dir/name`, its bucket
/// `dir/bucket` (`file://`).
pub(crate) fn shared_store(dir: &Path, node: u16, name: &str) -> Store {
    let config = Config {
        version: SHARED_FORMAT_VERSION,
        backend: Some(format!("file://{}", dir.join("bucket").display())),
        node: Some(node),
        node_name: Some(name.into()),
        ..Config::default()
    };
    Store::init(&dir.join(name), config).unwrap()
}

/// The zstd level recipe pieces are written at where gc does not settle them.
pub(crate) const ARCHIVAL_ZSTD_LEVEL: i32 = crate::store::ingest::chunks::ARCHIVAL_ZSTD_LEVEL;
pub(crate) use super::journal::checkpoint_key;

impl Store {
    /// The index, for tests that look into it from outside the store.
    pub(crate) fn test_index(&self) -> &Index {
        &self.index
    }
}

pub(in crate::store) fn meta() -> FileMeta {
    FileMeta { mode: 0o644, mtime: Timestamp::now() }
}

pub(in crate::store) fn read_all(s: &Store, name: &str) -> Vec<u8> {
    let ino = s.resolve(name).unwrap();
    let head = s.inode(ino).unwrap().unwrap().recipe.unwrap();
    let mut out = Vec::new();
    s.copy_to(&head, &mut out).unwrap();
    // The random-access path must agree with the streaming one.
    let mut again = vec![0u8; head.size as usize];
    let mut off = 0usize;
    while off < again.len() {
        let n = s.read_at(&head, off as u64, &mut again[off..(off + 7919).min(head.size as usize)]).unwrap();
        assert!(n > 0);
        off += n;
    }
    assert_eq!(out, again, "read_at and copy_to disagree on {name}");
    out
}

/// One WARC response record whose payload is `body`.
pub(crate) fn warc_record(id: u32, body: &[u8]) -> Vec<u8> {
    response_record(&format!("http://example.org/{id}"), id, body)
}

/// One WARC response record of `url` whose payload is `body`.
pub(crate) fn response_record(url: &str, id: u32, body: &[u8]) -> Vec<u8> {
    let http = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n", body.len());
    let block_len = http.len() + body.len();
    let mut r = format!(
        "WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{id:08}>\r\nWARC-Target-URI: {url}\r\nContent-Type: application/http; msgtype=response\r\nContent-Length: {block_len}\r\n\r\n"
    )
    .into_bytes();
    r.extend_from_slice(http.as_bytes());
    r.extend_from_slice(body);
    r.extend_from_slice(b"\r\n\r\n");
    r
}

pub(in crate::store) fn gzip_member(data: &[u8], level: u32) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
pub(in crate::store) fn bytes_mode_keeps_colliding_payloads_apart() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::weak_for_tests);
    let a = warc_record(1, &[b'a'; 5000]);
    let b = warc_record(2, &[b'b'; 5000]);
    s.put_file(ROOT_INO, b"a.warc", &a, meta()).unwrap();
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    assert_eq!(read_all(&s, "/a.warc"), a);
    assert_eq!(read_all(&s, "/b.warc"), b);
    let st = s.stats().unwrap();
    assert!(st.collisions >= 1, "the weak digest must have collided: {st:?}");
    assert_eq!(st.unique_payloads, 2);
    // gzip members too: same plain length, different bytes.
    let ga = gzip_member(&a, 9);
    let gb = gzip_member(&b, 9);
    s.put_file(ROOT_INO, b"a.warc.gz", &ga, meta()).unwrap();
    s.put_file(ROOT_INO, b"b.warc.gz", &gb, meta()).unwrap();
    assert_eq!(read_all(&s, "/a.warc.gz"), ga);
    assert_eq!(read_all(&s, "/b.warc.gz"), gb);
    assert!(s.fsck(false).unwrap().problems.is_empty());
}

/// Colliding payloads in one file meet inside one batch of chunks (`store_chunks`), before
/// either is in the store: each verify mode still decides as it does across files.
#[test]
pub(in crate::store) fn colliding_payloads_in_one_file_follow_the_verify_mode() {
    let mut both = warc_record(1, &[b'a'; 5000]);
    both.extend_from_slice(&warc_record(2, &[b'b'; 5000]));
    let mut same = warc_record(1, &[b'a'; 5000]);
    same.extend_from_slice(&warc_record(2, &[b'a'; 5000]));
    for verify in [Verify::Bytes, Verify::Size, Verify::Off] {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), verify, digest::weak_for_tests);
        s.put_file(ROOT_INO, b"both.warc", &both, meta()).unwrap();
        s.put_file(ROOT_INO, b"same.warc", &same, meta()).unwrap();
        let st = s.stats().unwrap();
        if verify == Verify::Bytes {
            assert_eq!(read_all(&s, "/both.warc"), both);
            assert!(st.collisions >= 1, "{verify:?}: the weak digest must have collided: {st:?}");
            assert_eq!(st.unique_payloads, 2, "{verify:?}");
        } else {
            assert_ne!(read_all(&s, "/both.warc"), both, "{verify:?} cannot tell the payloads apart");
            assert_eq!(st.unique_payloads, 1, "{verify:?}");
        }
        // Equal payloads are one chunk in every mode, and read back.
        assert_eq!(read_all(&s, "/same.warc"), same);
        assert!(s.fsck(false).unwrap().problems.is_empty(), "{verify:?}");
        // Equal payloads new to the store, both in one batch: stored once. Random bytes
        // (they do not compress), so a second copy would show in the bytes added.
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7);
        let payload: Vec<u8> = (0..20_000).map(|_| rand::Rng::gen::<u8>(&mut rng)).collect();
        let one = warc_record(3, &payload);
        let mut twice = warc_record(4, &payload);
        twice.extend_from_slice(&warc_record(5, &payload));
        let dir2 = tempfile::tempdir().unwrap();
        let s2 = open(dir2.path(), verify, digest::sha256);
        let twice_added = s2.put_file(ROOT_INO, b"twice.warc", &twice, meta()).unwrap().new_bytes;
        let dir3 = tempfile::tempdir().unwrap();
        let once_added = open(dir3.path(), verify, digest::sha256).put_file(ROOT_INO, b"one.warc", &one, meta()).unwrap().new_bytes;
        assert!(twice_added < once_added + 2_000, "{verify:?}: {twice_added} bytes added for two copies, {once_added} for one");
        assert_eq!(read_all(&s2, "/twice.warc"), twice);
    }
}

#[test]
pub(in crate::store) fn off_mode_trusts_the_digest_and_so_merges_colliding_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Off, digest::weak_for_tests);
    let a = warc_record(1, &[b'a'; 5000]);
    let b = warc_record(2, &[b'b'; 5000]);
    s.put_file(ROOT_INO, b"a.warc", &a, meta()).unwrap();
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    assert_eq!(read_all(&s, "/a.warc"), a);
    let got = read_all(&s, "/b.warc");
    assert_ne!(got, b, "with verify=off a colliding digest must be trusted (this is what the mode means)");
    assert_eq!(s.stats().unwrap().collisions, 0);
}

#[test]
pub(in crate::store) fn size_mode_separates_only_different_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Size, digest::weak_for_tests);
    let a = warc_record(1, &[b'a'; 5000]);
    let b = warc_record(2, &[b'b'; 5000]);
    s.put_file(ROOT_INO, b"a.warc", &a, meta()).unwrap();
    s.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    // Same length: size mode cannot tell them apart.
    assert_ne!(read_all(&s, "/b.warc"), b);
    // With SHA-256 every mode stores both exactly.
    let dir2 = tempfile::tempdir().unwrap();
    let s2 = open(dir2.path(), Verify::Size, digest::sha256);
    s2.put_file(ROOT_INO, b"a.warc", &a, meta()).unwrap();
    s2.put_file(ROOT_INO, b"b.warc", &b, meta()).unwrap();
    assert_eq!(read_all(&s2, "/b.warc"), b);
}

#[test]
pub(in crate::store) fn replace_and_remove_keep_refcounts_exact() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let a = warc_record(1, &body);
    let b = [warc_record(2, &body), warc_record(3, b"another payload that is long enough to be a chunk of its own......")].concat();
    s.put_file(ROOT_INO, b"a", &a, meta()).unwrap();
    s.put_file(ROOT_INO, b"b", &b, meta()).unwrap();
    s.put_file(ROOT_INO, b"a", &b, meta()).unwrap();
    assert_eq!(read_all(&s, "/a"), b);
    assert!(s.fsck(true).unwrap().problems.is_empty());
    s.remove("/a", false).unwrap();
    s.remove("/b", false).unwrap();
    let st = s.stats().unwrap();
    assert_eq!(st.chunks, 0, "every chunk is unreferenced after removing every file");
    let rep = s.gc().unwrap();
    assert!(rep.bytes_after < rep.bytes_before);
    assert!(s.fsck(false).unwrap().problems.is_empty());
}

#[test]
pub(in crate::store) fn reopen_recovers_an_open_pack_left_by_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let a = warc_record(1, &[b'z'; 100_000]);
    {
        let s = open(dir.path(), Verify::Bytes, digest::sha256);
        s.put_file(ROOT_INO, b"a", &a, meta()).unwrap();
    }
    // Recreate what a crash leaves: the pack back in packs-tmp/ without its footer, and a
    // torn blob at its tail. The index still points into it.
    // The data pack, not the metadata log's.
    let sealed: Vec<_> = std::fs::read_dir(dir.path().join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| crate::pack::read_footer(&std::fs::File::open(p).unwrap(), 0).unwrap().iter().all(|b| b.kind != crate::pack::ChunkKind::Meta as u8))
        .collect();
    assert_eq!(sealed.len(), 1);
    let f = std::fs::File::open(&sealed[0]).unwrap();
    let blobs = crate::pack::read_footer(&f, 0).unwrap();
    let end = blobs.iter().map(|b| b.offset + b.total_len()).max().unwrap();
    let mut bytes = std::fs::read(&sealed[0]).unwrap();
    bytes.truncate(end as usize);
    bytes.extend_from_slice(b"WFB1\x01\x02 torn");
    let tmp = dir.path().join("packs-tmp").join(sealed[0].file_name().unwrap());
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::remove_file(&sealed[0]).unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    assert!(std::fs::read_dir(dir.path().join("packs-tmp")).unwrap().next().is_none());
    assert_eq!(read_all(&s, "/a"), a);
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

pub(in crate::store) fn real_warc_gz() -> Vec<u8> {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/real/webrecorder-warcio/example.warc.gz");
    std::fs::read(p).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_round_trip(data in proptest::collection::vec(any::<u8>(), 0..200_000)) {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), Verify::Bytes, digest::sha256);
        s.put_file(ROOT_INO, b"f", &data, meta()).unwrap();
        prop_assert_eq!(read_all(&s, "/f"), data);
    }

    #[test]
    fn damaged_warc_gz_round_trips(cut in 0usize..6000, flips in proptest::collection::vec((0usize..6000, 1u8..=255), 0..4), plain in any::<bool>(), win in 1usize..3000) {
        let mut data = real_warc_gz();
        if plain {
            use std::io::Read;
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&data[..]).read_to_end(&mut out).unwrap();
            data = out;
        }
        for (at, x) in flips {
            if at < data.len() { data[at] ^= x; }
        }
        data.truncate(cut.min(data.len()));
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), Verify::Bytes, digest::sha256);
        s.put_file(ROOT_INO, b"f", &data, meta()).unwrap();
        prop_assert_eq!(read_all(&s, "/f"), data.clone());
        // Ingested a few bytes at a time, with windows that may not grow enough for a
        // member or record: every byte still comes back.
        let small = Windows { bytes: win, max_bytes: win * 3, plain: win };
        s.put_file_windows(ROOT_INO, b"g", &data, Presplit::none(), small, meta()).unwrap();
        prop_assert_eq!(read_all(&s, "/g"), data);
    }
}

/// Ingest holds a window of a file at a time, not the file: cutting the real corpus into
/// 4 KiB windows (grown as far as a member or record needs) must find the same records,
/// payloads and members as ingesting each file whole, and read back the same bytes.
#[test]
pub(in crate::store) fn windowed_ingest_finds_what_whole_file_ingest_finds() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let whole = Windows { bytes: usize::MAX / 4, max_bytes: usize::MAX / 2, plain: usize::MAX / 4 };
    let small = Windows { bytes: 4 << 10, max_bytes: 256 << 20, plain: 8 << 10 };
    let (mut records, mut members, mut new_whole, mut new_small) = (0, 0, 0, 0);
    for (i, path) in crate::test_support::real_corpus_files().iter().enumerate() {
        let data = std::fs::read(path).unwrap();
        let a = s.put_file_windows(ROOT_INO, format!("w{i}").as_bytes(), &data, Presplit::none(), whole, meta()).unwrap();
        let b = s.put_file_windows(ROOT_INO, format!("s{i}").as_bytes(), &data, Presplit::none(), small, meta()).unwrap();
        assert_eq!(a.stats, b.stats, "{}", path.display());
        assert_eq!(read_all(&s, &format!("/s{i}")), data, "{}", path.display());
        // Payloads dedup against the whole-file copy; only header blocks (cut differently
        // at window ends) are new.
        new_whole += a.new_bytes;
        new_small += b.new_bytes;
        records += b.stats.records;
        members += b.stats.gzip_members;
    }
    assert!(records > 1000 && members > 500, "{records} records, {members} members");
    eprintln!("new bytes: whole {new_whole}, small windows after it {new_small}");
    assert!(new_small * 5 < new_whole, "whole {new_whole}, small windows {new_small}");
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

#[test]
pub(in crate::store) fn windows_read_from_a_file_are_those_read_from_memory() {
    // A file's windows are read into buffers (reused from window to window: `crate::store::ingest::source::Spare`);
    // in memory they are borrowed. Small windows: many of them, and windows that grow when
    // a member does not fit.
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let small = Windows { bytes: 4 << 10, max_bytes: 256 << 20, plain: 8 << 10 };
    for (i, path) in crate::test_support::real_corpus_files().iter().enumerate() {
        let data = std::fs::read(path).unwrap();
        let file = std::fs::File::open(path).unwrap();
        let in_memory = s.ingest_windows(&data[..], Presplit::none(), small).unwrap();
        let from_file = s.ingest_windows(&file, Presplit::none(), small).unwrap();
        assert_eq!(from_file.stats, in_memory.stats, "{}", path.display());
        assert_eq!(from_file.piece_keys, in_memory.piece_keys, "{}: the same recipe", path.display());
        s.commit_file(&mut s.ns.locked(), ROOT_INO, format!("f{i}").as_bytes(), from_file, meta()).unwrap();
        assert_eq!(read_all(&s, &format!("/f{i}")), data, "{}", path.display());
    }
    assert!(s.fsck(true).unwrap().problems.is_empty());
}

/// A real multi-member WARC (pywb's sample): its bytes, its plain text, and each gzip
/// member's (offset, compressed length).
pub(in crate::store) fn iana_members() -> (Vec<u8>, Vec<u8>, Vec<(u64, u64)>) {
    let gz = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/real/webrecorder-pywb/iana.warc.gz")).unwrap();
    let mut plain = Vec::new();
    let members = crate::format::gzip::split(&gz, &mut plain)
        .iter()
        .filter_map(|r| match r {
            crate::format::gzip::Region::Member(m) => Some((m.start, m.comp_len)),
            _ => None,
        })
        .collect();
    (gz, plain, members)
}

#[test]
pub(in crate::store) fn records_are_found_from_header_chunks_alone() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let (gz, plain, members) = iana_members();
    s.put_file(ROOT_INO, b"iana.warc.gz", &gz, meta()).unwrap();
    s.put_file(ROOT_INO, b"iana.warc", &plain, meta()).unwrap();

    let head = |name: &str| s.inode(s.resolve(name).unwrap()).unwrap().unwrap().recipe.unwrap();
    let recs = s.records(&head("/iana.warc.gz")).unwrap();
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), members);
    assert!(recs.iter().all(|r| r.warc_header.starts_with(b"WARC/1.0\r\n") && r.warc_header.ends_with(b"\r\n\r\n")));
    assert!(recs.iter().any(|r| r.http_header.as_ref().is_some_and(|h| h.starts_with(b"HTTP/1.1 200"))));

    // The plain file: every record at its offset, length without the separator.
    let recs = s.records(&head("/iana.warc")).unwrap();
    let mut expect = Vec::new();
    let mut pos = 0usize;
    while pos < plain.len() {
        let end = pos + plain[pos..].windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let text = String::from_utf8_lossy(&plain[pos..end]).to_string();
        let clen: usize = text.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().trim().parse().unwrap();
        expect.push((pos as u64, (end - pos + clen) as u64));
        pos = end + clen + 4;
    }
    assert_eq!(recs.iter().map(|r| (r.offset, r.length)).collect::<Vec<_>>(), expect);
}

#[test]
pub(in crate::store) fn lookup_reads_stop_at_the_member_they_start_in() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let (gz, _, members) = iana_members();
    assert!(members.len() > 4);
    s.put_file(ROOT_INO, b"f.warc.gz", &gz, meta()).unwrap();
    let head = s.inode(s.resolve("/f.warc.gz").unwrap()).unwrap().unwrap().recipe.unwrap();
    assert!(s.rebuilds_members(&head));

    // From each member's start (and from its middle), with a buffer reaching far past it:
    // a lookup read returns that member's bytes up to its end, exactly, and no further
    // (nothing after it was rebuilt yet); a whole read fills the buffer.
    for &(start, len) in members.iter().rev() {
        for from in [start, start + len / 2] {
            s.cache.clear();
            let mut buf = vec![0u8; 256 << 10];
            let want = (gz.len() as u64 - from).min(buf.len() as u64) as usize;
            let n = s.read_some(&head, from, &mut buf).unwrap();
            assert_eq!(n as u64, start + len - from, "lookup read at {from}");
            assert_eq!(&buf[..n], &gz[from as usize..from as usize + n]);
            let n = s.read_at(&head, from, &mut buf).unwrap();
            assert_eq!(n, want);
            assert_eq!(&buf[..n], &gz[from as usize..from as usize + n]);
        }
    }
    // Members already rebuilt are cheap: a lookup read then carries on through them.
    s.cache.clear();
    let mut all = vec![0u8; gz.len()];
    assert_eq!(s.read_at(&head, 0, &mut all).unwrap(), gz.len());
    assert_eq!(s.read_some(&head, 0, &mut all).unwrap(), gz.len());

    // The read-ahead plan of a cold file covers every member once, in file order, and
    // running it leaves every member cached.
    s.cache.clear();
    let plan = s.plan_ahead(&head, 0, head.size).unwrap();
    let planned: Vec<(u32, u32)> = plan.iter().map(|j| (j.piece, j.segment)).collect();
    assert_eq!(planned.len(), members.len());
    assert!(planned.windows(2).all(|w| w[0] < w[1]));
    for job in &plan {
        s.run_ahead(&head, job).unwrap();
    }
    assert_eq!(s.read_some(&head, 0, &mut all).unwrap(), gz.len());
    assert_eq!(all, gz);
}

#[test]
pub(in crate::store) fn a_streaming_reader_leaves_the_members_it_read_through_out_of_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let (gz, _, members) = iana_members();
    s.put_file(ROOT_INO, b"f.warc.gz", &gz, meta()).unwrap();
    let head = s.inode(s.resolve("/f.warc.gz").unwrap()).unwrap().unwrap().recipe.unwrap();
    let cached = || s.cache.members.locked().map.len();
    // Through the file in reads that end inside members as well as at their ends.
    let through = |read: &dyn Fn(u64, &mut [u8]) -> usize| {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 3001];
        loop {
            let n = read(out.len() as u64, &mut buf);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        assert!(out == gz, "the bytes read are not the file's");
    };
    s.cache.clear();
    through(&|at, buf| s.read_at(&head, at, buf).unwrap());
    assert_eq!(cached(), members.len(), "read_at keeps every member it rebuilt");
    s.cache.clear();
    through(&|at, buf| s.read_streaming(&head, at, buf).unwrap());
    assert_eq!(cached(), 0, "a streaming reader keeps none of the members it read to their end");
    // A member it stopped inside stays, for the read that goes on from there.
    s.cache.clear();
    let (start, len) = members[1];
    let mut buf = vec![0u8; (len / 2) as usize];
    s.read_streaming(&head, start, &mut buf).unwrap();
    assert_eq!(cached(), 1);
}

/// A source that panics on its `panic_at`-th window (counting from 1), as a parser bug
/// would; the first is the gzip sniff, in the ingest's own thread, the others are read ahead
/// on a thread of their own.
struct PanickingSource {
    bytes: Vec<u8>,
    calls: std::sync::atomic::AtomicUsize,
    panic_at: usize,
}

impl Source for PanickingSource {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }

    fn window(&self, offset: u64, len: usize) -> std::io::Result<std::borrow::Cow<'_, [u8]>> {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        assert!(n != self.panic_at, "window {n} of the source panics");
        self.bytes.window(offset, len)
    }
}

#[test]
pub(in crate::store) fn a_panic_in_an_ingest_is_that_files_error_and_the_store_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let gz = real_warc_gz();
    let plain = warc_record(1, b"plain payload");
    // In the ingest's own thread (the gzip sniff), then in the one that reads ahead.
    for (input, panic_at) in [(&gz, 1), (&gz, 2), (&plain, 2)] {
        let src = PanickingSource { bytes: input.clone(), calls: Default::default(), panic_at };
        match s.prepare(&src) {
            // With the panic's own message, whichever thread it was in (the panic hook has
            // logged its place).
            Err(StoreError::Bug(what)) => assert!(what.contains("of the source panics"), "{what}"),
            Err(e) => panic!("window {panic_at} panicked: want a Bug error, got {e}"),
            Ok(_) => panic!("window {panic_at} panicked, yet the ingest succeeded"),
        }
        assert!(src.calls.load(std::sync::atomic::Ordering::SeqCst) >= panic_at, "the panicking window was never asked for");
    }
    // Late in a windowed ingest, after earlier windows' chunks went into the open pack.
    let iana = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/real/webrecorder-pywb/iana.warc.gz")).unwrap();
    let src = PanickingSource { bytes: iana.clone(), calls: Default::default(), panic_at: 6 };
    let small = Windows { bytes: 16 << 10, max_bytes: 256 << 20, plain: 16 << 10 };
    {
        let r = s.ingest_windows(&src, Presplit::none(), small);
        assert!(matches!(r, Err(StoreError::Bug(_))), "a panic at window 6 should be a Bug error");
        assert!(!s.writer.locked().pending.is_empty(), "the case should panic after chunks were appended");
    }
    s.put_file(ROOT_INO, b"iana.warc.gz", &iana, meta()).unwrap();
    assert_eq!(read_all(&s, "/iana.warc.gz"), iana);
    // The writer's lock is not poisoned, and nothing of the failed ingests leaks in.
    s.put_file(ROOT_INO, b"after.warc.gz", &gz, meta()).unwrap();
    assert_eq!(read_all(&s, "/after.warc.gz"), gz);
    let rep = s.fsck(false).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
}

/// Bad gzip input is stored byte-exact: a member whose trailer lies (ISIZE, CRC-32) keeps
/// its trailer and still dedups; bytes where a deflate stream ends early are kept raw.
#[test]
pub(in crate::store) fn lying_trailers_and_early_ends_round_trip_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let mut x = 7u32;
    let body: Vec<u8> = (0..60_000u32)
        .flat_map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            format!("<li>item {}</li>\n", x >> 20).into_bytes()
        })
        .collect();
    let good = gzip_member(&warc_record(1, &body), 9);

    let mut lying = good.clone();
    let n = lying.len();
    lying[n - 1] ^= 0x40; // ISIZE
    lying[n - 8] ^= 0x01; // CRC-32
    let mut ends_early = good[..good.len() / 2].to_vec();
    ends_early.extend_from_slice(&good[good.len() - 8..]); // a trailer after half a stream
    let mut file = good.clone();
    for part in [&lying, &ends_early, &good] {
        file.extend_from_slice(part);
    }
    s.put_file(ROOT_INO, b"f", &file, meta()).unwrap();
    assert_eq!(read_all(&s, "/f"), file);
    let st = s.stats().unwrap();
    // good, lying, (ends early: raw bytes, no member), good: three members rebuilt.
    assert_eq!((st.gzip_members, st.gzip_members_raw), (3, 0), "{st:?}");
    assert_eq!(st.unique_payloads, 1, "the lying member's payload is the good one's: {st:?}");
}

#[test]
pub(in crate::store) fn two_ingests_of_one_new_payload_committed_in_turn_share_one_chunk() {
    // File A's ingest stores a new payload; before A commits, file B's ingest stores the same
    // payload again (not in the index yet). Both commit: the chunk must count both
    // references, so removing A and collecting garbage cannot take B's bytes.
    for verify in [Verify::Bytes, Verify::Size, Verify::Off] {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), verify, digest::sha256);
        let body: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 253) as u8).collect();
        let (a, b) = (warc_record(1, &body), warc_record(2, &body));
        let ingest = |data: &[u8]| s.ingest_windows(data, Presplit::none(), crate::store::ingest::WINDOWS).unwrap();
        let (ia, ib) = (ingest(&a), ingest(&b));
        s.commit_file(&mut s.ns.locked(), ROOT_INO, b"a", ia, meta()).unwrap();
        s.commit_file(&mut s.ns.locked(), ROOT_INO, b"b", ib, meta()).unwrap();
        assert!(s.fsck(true).unwrap().problems.is_empty(), "{verify:?}: {:?}", s.fsck(true).unwrap().problems);
        s.remove("/a", false).unwrap();
        s.gc().unwrap();
        assert_eq!(read_all(&s, "/b"), b, "{verify:?}");
        assert!(s.fsck(true).unwrap().problems.is_empty(), "{verify:?}");
    }
}


/// HTML-like pages of one site: shared markup, varying text.
pub(crate) fn site_page(i: u32) -> Vec<u8> {
    let mut p = format!("<!doctype html><html lang=en><head><meta charset=utf-8><title>Item {i}</title><link rel=stylesheet href=/static/site.css><script src=/static/app.js defer></script></head><body><header><nav><a href=/>Home</a> | <a href=/catalogue>Catalogue</a> | <a href=/about>About us</a></nav></header><main>").into_bytes();
    for k in 0..40u32 {
        let x = i.wrapping_mul(2654435761).wrapping_add(k * 40503) >> 7;
        p.extend_from_slice(format!("<section class=entry id=e{k}><h2>Entry {x:x}</h2><p>Reference {} of {} in the catalogue, listed under {}.</p></section>\n", x % 9973, x % 101, ["maps", "letters", "prints", "records"][(x % 4) as usize]).as_bytes());
    }
    p.extend_from_slice(b"</main><footer>Copyright the archive. All rights reserved.</footer></body></html>");
    p
}

/// `/.warcfs` is the mount's own view: no file, directory, link or rename takes that name at
/// the root (a file there would be hidden by the view), while below the root it is a name
/// like any other.
#[test]
fn the_mounts_own_name_is_refused_at_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Verify::Bytes, digest::sha256);
    let reserved = |r: Result<()>| matches!(r, Err(StoreError::Reserved(_)));
    assert!(reserved(s.put_file(ROOT_INO, RESERVED.as_bytes(), b"x", meta()).map(|_| ())));
    assert!(reserved(s.mkdir_p("/.warcfs/inside").map(|_| ())));
    assert!(reserved(s.create_node(ROOT_INO, RESERVED.as_bytes(), Inode::new(InodeKind::Dir, 0o755)).map(|_| ())));
    assert!(reserved(s.put_symlink(ROOT_INO, RESERVED.as_bytes(), b"target").map(|_| ())));
    let a = s.put_file(ROOT_INO, b"a", b"x", meta()).unwrap().ino;
    assert!(reserved(s.link(a, ROOT_INO, RESERVED.as_bytes()).map(|_| ())));
    assert!(reserved(s.rename(ROOT_INO, b"a", ROOT_INO, RESERVED.as_bytes(), false, &|_| false)));
    assert_eq!(s.index.lookup(ROOT_INO, RESERVED.as_bytes()).unwrap(), None);
    let d = s.mkdir_p("/d/.warcfs").unwrap();
    s.put_file(d, b"f", b"y", meta()).unwrap();
    // One an older warcfs made: nothing more goes in, and it can be removed.
    let mut b = crate::index::Batch::new();
    let mut inode = Inode::new(InodeKind::Dir, 0o755);
    inode.parent = ROOT_INO;
    b.put_inode(&s.index, 999, &inode);
    b.put_dirent(&s.index, ROOT_INO, RESERVED.as_bytes(), 999);
    s.index.write(b).unwrap();
    assert!(reserved(s.mkdir_p("/.warcfs/x").map(|_| ())));
    s.remove("/.warcfs", true).unwrap();
    assert_eq!(s.index.lookup(ROOT_INO, RESERVED.as_bytes()).unwrap(), None);
}

/// A store's lock held for a moment (as a process that forks holds it until its child
/// execs) is waited for; one held for good is reported, naming its holder.
#[test]
fn a_lock_held_for_a_moment_is_waited_for_and_one_held_for_good_is_reported() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), Verify::Bytes, digest::sha256));
    let hold = |dir: &Path| {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(super::layout::lock(dir)).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        f
    };
    let held = hold(dir.path());
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(held);
    });
    let opts = OpenOptionsStore { create: false, config: Config::default(), follower: false };
    let s = Store::open_with(dir.path(), &opts, digest::sha256).expect("opened once the moment passed");
    release.join().unwrap();
    drop(s);
    let _held = hold(dir.path());
    match Store::open_with(dir.path(), &opts, digest::sha256) {
        Err(StoreError::Busy { pid, .. }) => assert_eq!(pid, std::process::id().to_string(), "the last holder's pid, as it wrote it"),
        Err(e) => panic!("busy, not {e}"),
        Ok(_) => panic!("opened a store whose lock is held"),
    }
}
