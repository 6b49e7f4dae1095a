//! Unit tests of `pack`: blobs, footers, torn tails and recovery.

use crate::bucket::{client as remote, lock};
use super::*;
use std::fs;

fn key(n: u8) -> ChunkKey {
    ChunkKey { digest: [n; 32], seq: 0 }
}

#[test]
fn append_seal_footer_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, packs) = (dir.path().join("t"), dir.path().join("p"));
    fs::create_dir_all(&tmp).unwrap();
    fs::create_dir_all(&packs).unwrap();
    let mut p = OpenPack::create(&tmp, 7, 7).unwrap();
    let a = p.append(key(1), ChunkKind::Raw, Codec::None, 5, b"hello").unwrap();
    let z = zstd::bulk::compress(&[b'x'; 1000], 3).unwrap();
    let b = p.append(key(2), ChunkKind::PayloadHead, Codec::Zstd, 1000, &z).unwrap();
    p.sync().unwrap();
    let path = p.seal(&packs).unwrap();
    let f = File::open(&path).unwrap();
    assert_eq!(read_footer(&f, 7).unwrap(), vec![a.clone(), b.clone()]);
    let (scanned, _) = scan(&f).unwrap();
    assert_eq!(scanned, vec![a.clone(), b.clone()]);
    let r = PackReader::new(packs.clone(), tmp.clone());
    assert_eq!(r.read(7, a.offset, &key(1), 5).unwrap(), b"hello");
    assert_eq!(r.read(7, b.offset, &key(2), b.stored_len).unwrap(), vec![b'x'; 1000]);
    assert!(matches!(r.read(7, b.offset, &key(1), b.stored_len), Err(PackError::Corrupt { .. })));
    // Decoding straight into a caller's buffer: only into one of the chunk's exact length.
    let mut out = vec![0u8; 1000];
    r.read_into(7, b.offset, &key(2), b.stored_len, &mut out).unwrap();
    assert_eq!(out, vec![b'x'; 1000]);
    let mut five = [0u8; 5];
    r.read_into(7, a.offset, &key(1), 5, &mut five).unwrap();
    assert_eq!(&five, b"hello");
    for len in [999, 1001] {
        let mut out = vec![0u8; len];
        assert!(matches!(r.read_into(7, b.offset, &key(2), b.stored_len, &mut out), Err(PackError::Corrupt { .. })), "{len}");
    }
    assert!(r.read_into(7, a.offset, &key(1), 5, &mut [0u8; 4]).is_err());
}

#[test]
fn decoding_into_a_buffer_checks_the_length() {
    let z = zstd::bulk::compress(&[7u8; 500], 3).unwrap();
    let mut exact = [0u8; 500];
    decode_stored_into(Codec::Zstd as u8, &z, &mut exact, Against::Nothing).unwrap();
    assert_eq!(exact, [7u8; 500]);
    // A frame holding more or less than the buffer, a stored blob of another length, an
    // unknown codec: errors, never a partly filled buffer taken as whole.
    assert!(decode_stored_into(Codec::Zstd as u8, &z, &mut [0u8; 499], Against::Nothing).is_err());
    assert!(decode_stored_into(Codec::Zstd as u8, &z, &mut [0u8; 501], Against::Nothing).is_err());
    assert!(decode_stored_into(Codec::None as u8, b"abc", &mut [0u8; 4], Against::Nothing).is_err());
    assert!(decode_stored_into(Codec::None as u8, b"abcd", &mut [0u8; 3], Against::Nothing).is_err());
    assert!(decode_stored_into(99, b"abc", &mut [0u8; 3], Against::Nothing).is_err());
    assert!(decode_stored(Codec::None as u8, b"abc", 4, Against::Nothing).is_err());
}

#[test]
fn torn_tail_is_truncated_on_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, packs) = (dir.path().join("t"), dir.path().join("p"));
    fs::create_dir_all(&tmp).unwrap();
    fs::create_dir_all(&packs).unwrap();
    let mut p = OpenPack::create(&tmp, 1, 7).unwrap();
    p.append(key(1), ChunkKind::Raw, Codec::None, 3, b"abc").unwrap();
    p.append(key(2), ChunkKind::Raw, Codec::None, 3, b"def").unwrap();
    p.sync().unwrap();
    let path = tmp.join(pack_name(1));
    drop(p);
    // Tear the second blob.
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len((BLOB_HEADER_LEN + 3 + BLOB_HEADER_LEN + 1) as u64).unwrap();
    assert_eq!(recover_open_pack(&path, &packs, 1).unwrap(), Some(1));
    let sealed = File::open(packs.join(pack_name(1))).unwrap();
    assert_eq!(read_footer(&sealed, 1).unwrap().len(), 1);
}

#[test]
fn flipped_byte_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, packs) = (dir.path().join("t"), dir.path().join("p"));
    fs::create_dir_all(&tmp).unwrap();
    fs::create_dir_all(&packs).unwrap();
    let mut p = OpenPack::create(&tmp, 2, 7).unwrap();
    let a = p.append(key(3), ChunkKind::Raw, Codec::None, 4, b"data").unwrap();
    let path = p.seal(&packs).unwrap();
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"X", BLOB_HEADER_LEN as u64 + 1).unwrap();
    let r = PackReader::new(packs, tmp);
    assert!(matches!(r.read(2, a.offset, &key(3), 4), Err(PackError::Corrupt { .. })));
}

/// A pack in a bucket (here a `file://` one) is read through the node's cache; a cached
/// block that goes bad (evicted under a reader, or damaged) is fetched again, never served.
#[test]
fn remote_packs_are_read_through_the_cache_and_a_bad_cached_block_is_fetched_again() {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, local, bucket) = (dir.path().join("t"), dir.path().join("p"), dir.path().join("bucket"));
    fs::create_dir_all(&tmp).unwrap();
    fs::create_dir_all(&local).unwrap();
    fs::create_dir_all(bucket.join("packs")).unwrap();
    let mut p = OpenPack::create(&tmp, 9, 7).unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let a = p.append(key(1), ChunkKind::Raw, Codec::None, big.len() as u32, &big).unwrap();
    let b = p.append(key(2), ChunkKind::Raw, Codec::None, 5, b"tail!").unwrap();
    let sealed = p.seal(&local).unwrap();
    fs::rename(&sealed, bucket.join("packs").join(pack_name(9))).unwrap();
    let remote = remote::Remote::connect(&format!("file://{}", bucket.display())).unwrap();
    let cache = dir.path().join("cache");
    let r = PackReader::with_remote(local.clone(), tmp.clone(), std::sync::Arc::new(remote::RemotePacks::new(remote, cache.clone(), 0).unwrap()));
    assert_eq!(r.sealed_packs().unwrap(), vec![(9, fs::metadata(bucket.join("packs").join(pack_name(9))).unwrap().len())]);
    assert_eq!(r.footer(9).unwrap(), vec![a.clone(), b.clone()]);
    assert_eq!(r.read(9, a.offset, &key(1), a.stored_len).unwrap(), big);
    // Damage the cached copy of the first blob: the read fetches it again from the bucket.
    let cached = cache.join(pack_name(9));
    let f = OpenOptions::new().write(true).open(&cached).unwrap();
    f.write_all_at(&[0u8; 4096], a.offset + 1_500_000).unwrap();
    assert_eq!(r.read(9, a.offset, &key(1), a.stored_len).unwrap(), big);
    assert_eq!(r.read(9, b.offset, &key(2), 5).unwrap(), b"tail!");
    // Damage in the bucket itself is an error, not bytes.
    let obj = bucket.join("packs").join(pack_name(9));
    let f = OpenOptions::new().write(true).open(&obj).unwrap();
    f.write_all_at(b"XXXX", b.offset + BLOB_HEADER_LEN as u64).unwrap();
    r.elsewhere().forget_range(9, b.offset, 100);
    assert!(matches!(r.read(9, b.offset, &key(2), 5), Err(PackError::Corrupt { .. })));
}

/// A bucket in a directory, for the lock tests: the directory (kept while it lives), the
/// bucket's path, and the bucket.
fn lock_bucket() -> (tempfile::TempDir, std::path::PathBuf, remote::Remote) {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let r = remote::Remote::connect(&format!("file://{}", bucket.display())).unwrap();
    (dir, bucket, r)
}

/// Makes lock `name` look `secs` old (ages are the store's times: file mtimes here).
fn age_lock(bucket: &std::path::Path, name: &str, secs: u64) {
    let f = File::options().write(true).open(bucket.join("locks").join(name)).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs)).unwrap();
}

/// The bucket's lock: a live lock of another node refuses; one not renewed for LOCK_STALE
/// is taken over, unless its node stopped with packs to upload; a writer whose lock was
/// taken over hears it when it renews. Ages are the store's times (file mtimes here).
#[test]
fn the_bucket_lock_is_taken_over_only_when_stale_and_never_with_packs_pending() {
    let (_dir, bucket, r) = lock_bucket();
    let age = |name: &str, secs: u64| age_lock(&bucket, name, secs);
    lock::take_lock(&r, "node-0001", "a").unwrap();
    let busy = lock::take_lock(&r, "node-0002", "b").unwrap_err();
    assert_eq!(busy.kind(), io::ErrorKind::WouldBlock);
    assert!(busy.to_string().contains("node-0001"), "{busy}");
    assert!(!bucket.join("locks/node-0002").exists(), "a refused lock is removed again");
    // node-0001 stops renewing: taken over after LOCK_STALE, and it learns so.
    age("node-0001", lock::LOCK_STALE.as_secs() + 5);
    lock::take_lock(&r, "node-0002", "b").unwrap();
    let fenced = lock::refresh_lock(&r, "node-0001").unwrap_err();
    assert_eq!(fenced.kind(), io::ErrorKind::PermissionDenied, "{fenced}");
    lock::unlock(&r, "node-0001").unwrap();
    // node-0002 stops with packs to upload: its lock holds, however old.
    lock::mark_pending(&r, "node-0002", 3).unwrap();
    age("node-0002", lock::LOCK_STALE.as_secs() * 3);
    let busy = lock::take_lock(&r, "node-0003", "c").unwrap_err();
    assert!(busy.to_string().contains("node-0002"), "{busy}");
    // Its own node takes it back at once (one process per node: the local flock).
    lock::take_lock(&r, "node-0002", "b again").unwrap();
}

/// A store several nodes write: leases live side by side; gc's lock is refused while another
/// node's lease lives (its own node's lease does not count) and, once held, keeps new leases
/// out; a lease that meets it when renewing (a lapsed lease) is fenced.
#[test]
fn leases_share_the_bucket_and_gc_excludes_every_other_node() {
    let (_dir, bucket, r) = lock_bucket();
    let age = |name: &str, secs: u64| age_lock(&bucket, name, secs);
    lock::take_lock(&r, "lease-0001", "a").unwrap();
    lock::take_lock(&r, "lease-0002", "b").unwrap();
    lock::refresh_lock(&r, "lease-0001").unwrap();
    let busy = lock::take_lock(&r, "gc-0001", "gc on a").unwrap_err();
    assert!(busy.to_string().contains("lease-0002"), "{busy}");
    assert!(!bucket.join("locks/gc-0001").exists());
    // Node 2 stops: node 1's gc goes ahead beside node 1's own lease, and keeps node 2 out.
    lock::unlock(&r, "lease-0002").unwrap();
    lock::take_lock(&r, "gc-0001", "gc on a").unwrap();
    let out = lock::take_lock(&r, "lease-0002", "b").unwrap_err();
    assert!(out.to_string().contains("gc-0001"), "{out}");
    // A lease that lapsed meanwhile (node 3, away past LOCK_STALE) is fenced when it renews.
    std::fs::write(bucket.join("locks/lease-0003"), b"c").unwrap();
    age("lease-0003", lock::LOCK_STALE.as_secs() + 5);
    let fenced = lock::refresh_lock(&r, "lease-0003").unwrap_err();
    assert_eq!(fenced.kind(), io::ErrorKind::PermissionDenied, "{fenced}");
    lock::unlock(&r, "gc-0001").unwrap();
    lock::take_lock(&r, "lease-0002", "b").unwrap();
    // A lease deleted by hand while its node runs is not written again (without its
    // "pending" mark, it would later let a gc in over that node's unpublished records): the
    // node is fenced.
    std::fs::remove_file(bucket.join("locks/lease-0002")).unwrap();
    let gone = lock::refresh_lock(&r, "lease-0002").unwrap_err();
    assert_eq!(gone.kind(), io::ErrorKind::PermissionDenied, "{gone}");
    assert!(!bucket.join("locks/lease-0002").exists());
}
