//! Faults inside a mounted daemon, by failpoints and a full disk: a panic in a request, a
//! failed fsync, ENOSPC, a gzip member that does not rebuild, and a failing FLUSH; each is
//! an error for its request, never wrong bytes, and the mount goes on.

mod common;

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tempfile::TempDir;

use common::*;

/// A bug that panics inside a request must cost that request an EIO and a log line, not the
/// mount: the daemon is built with a failpoint (debug builds only) that panics in READ while
/// it holds the table of open handles, so this also shows that the lock stays usable.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_panic_in_a_request_is_eio_and_the_mount_goes_on() {
    let fx = MountFixture::new();
    let src = fx.with_sample("webrecorder-warcio/example.warc.gz");
    let want = fs::read(&src).unwrap();
    // Two fuser event loops: two panics would end both without the guard. The open failpoint
    // fires while the first open decides on direct I/O (reading the recipe): after that open
    // fails, nothing may count it as open (the kernel sends no RELEASE for it).
    let m = fx.mount_env(&[], &[("WARCFS_FAILPOINTS", "read=2,open=1")]);
    if !gzip_files_direct(&fx.store) {
        // Through the page cache one read(2) may make several READs: the count below differs.
        eprintln!("skipped: this kernel reads gzip files through the page cache");
        return m.unmount_clean();
    }
    let path = m.path("example.warc.gz");
    let mut eio = 0;
    let got = loop {
        match fs::read(&path) {
            Ok(b) => break b,
            Err(e) if e.raw_os_error() == Some(libc::EIO) && eio < 3 => eio += 1,
            Err(e) => panic!("read {} after {eio} EIOs: {e}; log:\n{}", path.display(), log_tail(&fx.store)),
        }
    };
    assert_eq!(eio, 3, "the failpoints should have failed one open and two reads with EIO");
    assert!(got == want, "{} reads back different bytes after the panics", path.display());
    // Still a working filesystem: write, read back, list; then a clean unmount.
    fs::write(m.path("after.txt"), b"still here").unwrap();
    assert_eq!(fs::read(m.path("after.txt")).unwrap(), b"still here");
    let names: BTreeSet<String> = fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.contains("example.warc.gz") && names.contains("after.txt"), "{names:?}");
    let log = fs::read_to_string(fx.store.join("warcfs.log")).unwrap();
    assert_eq!(log.matches("failpoint read fired").count(), 2, "both read panics should be in the log:\n{log}");
    assert_eq!(log.matches("failpoint open fired").count(), 1, "the open panic should be in the log:\n{log}");
    // The failed open left no count behind: unlinked and closed everywhere, the file is gone
    // at once rather than kept as an orphan until the next mount.
    // (The RELEASE of the last read's handle may still be on its way: wait for it.)
    fs::remove_file(&path).unwrap();
    let gone = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        num(&stats(&fx.store), "files") == 1
    });
    assert!(gone, "the unlinked file is still an inode 5 s after its last close: an open was leaked");
    m.unmount_clean();
}

/// A failed sync is not retried into a false success: after an EIO, Linux may have dropped
/// the pages that did not reach the disk (and will not report it twice), so every later
/// fsync and close of the file must report EIO too, until the file is truncated. A failpoint
/// (debug builds only) makes the first sync of a staged file at fsync or close fail with EIO,
/// as a failing disk would; a real sync after it would succeed.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_failed_fsync_fails_every_later_one_until_truncated() {
    let fx = MountFixture::new();
    let m = fx.mount_env(&[], &[("WARCFS_FAILPOINTS", "persist_sync=1")]);
    let record = |body: &str| format!("WARC/1.1\r\nWARC-Type: resource\r\nContent-Length: {}\r\n\r\n{body}\r\n\r\n", body.len()).repeat(100).into_bytes();
    let path = m.path("synced.warc");
    let mut f = File::create(&path).unwrap();
    f.write_all(&record("lost?")).unwrap();
    for what in ["the fsync that failed", "the next fsync", "the one after"] {
        match f.sync_all() {
            Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
            other => panic!("{what} gave {other:?}, not EIO; log:\n{}", log_tail(&fx.store)),
        }
    }
    match close_checked(f) {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => panic!("close after a failed sync gave {other:?}, not EIO"),
    }
    // Written again from nothing, the file syncs and closes cleanly, and is what remains.
    let want = record("written again");
    let mut f = OpenOptions::new().write(true).truncate(true).open(&path).unwrap();
    f.write_all(&want).unwrap();
    f.sync_all().unwrap_or_else(|e| panic!("fsync after truncating: {e}; log:\n{}", log_tail(&fx.store)));
    close_checked(f).unwrap();
    m.unmount_clean();
    let m = fx.mount();
    assert_bytes(&m.path("synced.warc"), &want, "after the failed sync, a rewrite and a remount");
    m.unmount_clean();
}

/// A tmpfs of `mib` MiB mounted at `dir`, unmounted (lazily) when dropped: a small disk
/// that a test can fill. Needs root, as every FUSE test here does in CI.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn new(dir: &Path, mib: u64) -> SmallDisk {
        fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={mib}m,mode=0700"), "tmpfs"]).arg(dir).output().expect("spawn mount");
        assert!(out.status.success(), "mounting a {mib} MiB tmpfs at {} (the full-disk test needs root): {}", dir.display(), String::from_utf8_lossy(&out.stderr));
        SmallDisk(dir.to_path_buf())
    }

    fn avail(&self) -> u64 {
        let st = nix::sys::statvfs::statvfs(&self.0).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes `data` to a new file in 1 MiB writes, then fsync and close; the first error.
fn write_synced(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = File::create(path)?;
    for part in data.chunks(1 << 20) {
        f.write_all(part)?;
    }
    f.sync_all()?;
    close_checked(f)
}

#[test]
fn a_full_disk_is_enospc_and_the_mount_goes_on() {
    let tmp = TempDir::new().unwrap();
    // RocksDB alone preallocates ~70 MiB for its log (64 MiB memtables).
    let disk = SmallDisk::new(&tmp.path().join("disk"), 256);
    let store = tmp.path().join("disk/store");
    // Data stops 16 MiB short of a full disk (the default, 256 MiB, is larger than the disk):
    // the room the index and the metadata log always need.
    const FLOOR: u64 = 16 << 20;
    let mount = || Mounted::with(&store, &tmp.path().join("mnt"), &[&format!("min_free={FLOOR}")]);
    let m = mount();
    let keep = real_file("webrecorder-pywb/iana.warc.gz");
    write_synced(&m.path("keep.warc.gz"), &keep).unwrap();
    wait_stored(&store);
    let mut rng = StdRng::seed_from_u64(14);
    let free_at_start = disk.avail();

    // 1. A writer fills the disk: it gets ENOSPC (at a write, its fsync or its close).
    let big = random_bytes(&mut rng, (free_at_start + (32 << 20)) as usize);
    match write_synced(&m.path("big"), &big) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
        other => panic!("filling the disk gave {other:?}, not ENOSPC; log:\n{}", log_tail(&store)),
    }
    // The mount is up, what was committed reads back, and one writer's thousands of failed
    // writes are a few log lines, not one each.
    assert!(is_mounted(&m.mnt));
    assert_bytes(&m.path("keep.warc.gz"), &keep, "with the disk full");
    let log = fs::read_to_string(store.join("warcfs.log")).unwrap_or_default();
    let full_lines = log.lines().filter(|l| l.contains("No space left")).count();
    assert!(full_lines <= 5, "{full_lines} log lines about the full disk:\n{}", log_tail(&store));
    assert!(disk.avail() >= FLOOR - (1 << 20), "data went below the floor: {} bytes free", disk.avail());
    assert!(disk.avail() < FLOOR + (32 << 20), "the disk was not filled: {} bytes free", disk.avail());
    // Deleting is what frees space, so it must work on a full disk (the metadata log is
    // above the floor); the staged bytes go once the kernel releases the file.
    fs::remove_file(m.path("big")).unwrap_or_else(|e| panic!("rm on a full disk: {e}; log:\n{}", log_tail(&store)));
    wait_until("the space of the removed file to come back", Duration::from_secs(30), || {
        if disk.avail() + (4 << 20) > free_at_start { Ok(()) } else { Err(format!("{} bytes free, {free_at_start} at the start", disk.avail())) }
    });
    let after = random_bytes(&mut rng, 1 << 20);
    write_synced(&m.path("after"), &after).unwrap_or_else(|e| panic!("a write after freeing space: {e}; log:\n{}", log_tail(&store)));
    fs::create_dir(m.path("dir")).unwrap();

    // 2. A file that fits in staging but not in the packs: its close succeeds, its ingest
    // fails, and it is tried again (and stored) once there is room. A file outside the
    // store takes the room meanwhile.
    wait_stored(&store);
    let filler = tmp.path().join("disk/filler");
    let room = disk.avail().saturating_sub(FLOOR + (20 << 20));
    fs::write(&filler, vec![0u8; room as usize]).unwrap();
    let staged = random_bytes(&mut rng, 14 << 20);
    write_synced(&m.path("dir/staged"), &staged).unwrap_or_else(|e| panic!("a file that fits in staging: {e}; log:\n{}", log_tail(&store)));
    assert!(disk.avail() < FLOOR + staged.len() as u64, "the staged file's chunks would fit: {} bytes free", disk.avail());
    wait_until("the ingest to fail for want of space", Duration::from_secs(60), || {
        let st = stats(&store);
        match st.get("ingests").and_then(|i| i.get("retrying")).and_then(|n| n.as_u64()) {
            Some(n) if n > 0 => Ok(()),
            _ => Err(format!("stats {st}; log:\n{}", log_tail(&store))),
        }
    });
    assert_bytes(&m.path("dir/staged"), &staged, "staged, its ingest failed");
    // `warcfs umount` now cannot say every file is stored: it says which are not (non-zero
    // exit), they stay staged, and the next mount stores them once there is room.
    let r = run(&["umount", &s(&m.mnt)]);
    assert!(!r.ok() && r.stderr.contains("1 files written through it could not be stored yet"), "{}", r.describe());
    drop(m);
    assert_eq!(fs::read_dir(store.join("staging")).unwrap().count(), 1, "the file stays staged");
    fs::remove_file(&filler).unwrap();
    let m = mount();
    wait_stored(&store);
    assert_bytes(&m.path("dir/staged"), &staged, "stored by the next mount");

    m.unmount_clean();
    assert_fsck_clean(&store, false);
    let m = mount();
    assert_bytes(&m.path("keep.warc.gz"), &keep, "after a remount");
    assert_bytes(&m.path("after"), &after, "after a remount");
    assert_bytes(&m.path("dir/staged"), &staged, "after a remount");
    assert!(!m.path("big").exists());
    m.unmount_clean();
    drop(disk);
}

/// Through the mount, a gzip member whose rebuild does not match its recorded CRC-32 is EIO
/// for that read and a log line naming the file's inode and the offset, never wrong bytes;
/// the next read (the failpoint used up) gets the exact file.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_member_that_does_not_rebuild_is_eio_and_a_log_line() {
    let fx = MountFixture::new();
    let src = fx.with_sample("webrecorder-warcio/example.warc.gz");
    let want = fs::read(&src).unwrap();
    let m = fx.mount_env(&[], &[("WARCFS_FAILPOINTS", "member_rebuilt=1")]);
    let path = m.path("example.warc.gz");
    let err = fs::read(&path).expect_err("a read of a damaged member should fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let got = fs::read(&path).unwrap();
    assert!(got == want, "{} reads back different bytes", path.display());
    let log = fs::read_to_string(fx.store.join("warcfs.log")).unwrap();
    let line = log.lines().find(|l| l.contains("does not rebuild")).unwrap_or_else(|| panic!("no log line for the damaged member:\n{log}"));
    assert!(line.contains("read of inode") && line.contains("gzip member at offset 0"), "{line}");
    m.unmount_clean();
}

/// A read-only mount asks the kernel for no writeback cache, so a reader's close is not a
/// FLUSH round trip (with the cache the kernel sends one at every close, whatever the open
/// said). Seen through a failpoint that fails every FLUSH: on a read-write mount a reader's
/// `close` reports it (EIO), on a read-only one nothing reaches it. Either way the bytes read
/// are the file's.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_read_only_mount_sends_no_flush_at_a_readers_close() {
    let fx = MountFixture::new();
    let src = fx.with_sample("webrecorder-warcio/example.warc.gz");
    let want = fs::read(&src).unwrap();
    // Open, read it all, close; the close's own result.
    let read_and_close = |path: &Path| -> (Vec<u8>, io::Result<()>) {
        let mut f = fs::File::open(path).unwrap();
        let mut got = Vec::new();
        io::Read::read_to_end(&mut f, &mut got).unwrap();
        // SAFETY: the descriptor is ours (taken from the File) and closed once.
        let rc = unsafe { libc::close(f.into_raw_fd()) };
        (got, if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) })
    };
    let failing = [("WARCFS_FAILPOINTS", "flush=1000")];
    for (opts, flushed) in [(&[][..], true), (&["ro"][..], false)] {
        let m = fx.mount_env(opts, &failing);
        let (got, closed) = read_and_close(&m.path("example.warc.gz"));
        assert!(got == want, "-o {opts:?}: the bytes read are not the file's");
        match (flushed, closed) {
            (true, Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "-o {opts:?}: {e}"),
            (true, Ok(())) => panic!("-o {opts:?}: the failing FLUSH did not reach the close: is the failpoint armed?"),
            (false, Ok(())) => {}
            (false, Err(e)) => panic!("-o {opts:?}: a reader's close on a read-only mount was sent a FLUSH: {e}"),
        }
        m.unmount_clean();
    }
}
