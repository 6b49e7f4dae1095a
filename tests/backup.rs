//! Backups: snapshot a mounted store, rsync the snapshot elsewhere, mount the copy and read
//! every file back; a second snapshot after one more crawl moves far fewer bytes.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use tempfile::TempDir;

fn wait_released(store: &Path) {
    // After unmount the daemon exits and drops the lock; a writing command then works.
    let t0 = Instant::now();
    while !run(&["fsck", &s(store)]).ok() {
        assert!(t0.elapsed() < Duration::from_secs(60), "store still busy or unclean after unmount: {}", run(&["fsck", &s(store)]).describe());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Bytes rsync sent, from `--stats`.
fn rsync(from: &Path, to: &Path) -> u64 {
    let out = Command::new("rsync").args(["-a", "--delete", "--stats", &format!("{}/", s(from)), &s(to)]).output().expect("rsync runs (scripts/setup installs it)");
    assert!(out.status.success(), "rsync failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("Total transferred file size:")).unwrap_or_else(|| panic!("no stats in rsync output: {text}"));
    line.split(':').nth(1).unwrap().trim().trim_end_matches(" bytes").replace(',', "").parse().unwrap()
}

#[test]
fn snapshot_of_a_mounted_store_rsyncs_and_mounts_elsewhere() {
    let tmp = TempDir::new().unwrap();
    let (store, snap, copy) = (tmp.path().join("store"), tmp.path().join("snap"), tmp.path().join("copy"));
    let crawls = crawl_files();
    let (first, last) = crawls.split_at(crawls.len() - 1);

    let m = Mount::new(&store, &tmp.path().join("mnt"));
    for f in first {
        std::fs::copy(f, m.mnt.join(f.file_name().unwrap())).unwrap();
    }
    wait_ingested(&store);
    let r = ok(&["snapshot", &s(&store), &s(&snap)]);
    assert!(r.out().contains("packs linked"), "{}", r.describe());
    let sent_first = rsync(&snap, &copy);

    // One more crawl, written while mounted; the second backup moves mostly the new packs.
    for f in last {
        std::fs::copy(f, m.mnt.join(f.file_name().unwrap())).unwrap();
    }
    wait_ingested(&store);
    ok(&["snapshot", &s(&store), &s(&snap)]);
    let sent_second = rsync(&snap, &copy);
    eprintln!("rsync sent {sent_first} bytes, then {sent_second} bytes");
    assert!(sent_second * 10 < sent_first * 3, "second rsync sent {sent_second} bytes, first {sent_first}: not under 30 %");
    drop(m);
    wait_released(&store);

    // The copy is a complete store: fsck-clean, mountable, byte-exact.
    let r = ok(&["fsck", &s(&copy)]);
    assert!(r.out().contains("clean"), "{}", r.describe());
    let m2 = Mount::new(&copy, &tmp.path().join("mnt2"));
    for f in &crawls {
        let got = std::fs::read(m2.mnt.join(f.file_name().unwrap())).unwrap();
        assert!(got == std::fs::read(f).unwrap(), "{} differs in the restored copy", f.display());
    }
}

#[test]
fn snapshot_of_an_unmounted_store_outlives_gc_and_refuses_foreign_dirs() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let src = real_corpus().join("webrecorder-pywb/iana.warc.gz");
    ok(&["import", &s(&store), &s(&src)]);
    // A non-empty directory that is not a store is never overwritten.
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("keep.txt"), b"mine").unwrap();
    fails_with(&["snapshot", &s(&store), &s(&foreign)], &[&s(&foreign), "not a warcfs store"]);
    assert_eq!(std::fs::read(foreign.join("keep.txt")).unwrap(), b"mine");
    // Unmounted snapshot, then read the copy with the CLI.
    let snap = tmp.path().join("snap");
    ok(&["snapshot", &s(&store), &s(&snap)]);
    assert_cat_eq(&snap, "/iana.warc.gz", &src);
    // gc in the source cannot hurt the snapshot: its packs are its own links.
    ok(&["rm", &s(&store), "/iana.warc.gz"]);
    ok(&["gc", &s(&store)]);
    assert_cat_eq(&snap, "/iana.warc.gz", &src);
    ok(&["fsck", &s(&snap), "--deep"]);
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the crash points exist in debug builds only")]
fn a_snapshot_killed_at_any_point_leaves_the_old_copy_or_the_new_one() {
    // DEST holds a snapshot; more files arrive; the next snapshot is killed (SIGKILL from
    // inside) after its index copy is made, and after the swap. DEST must then be a whole
    // store, as of the first snapshot or the second, and a rerun completes it.
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let dest = tmp.path().join("dest");
    let real = real_corpus();
    ok(&["import", &s(&store), &s(&real.join("webrecorder-warcio")), "--to", "/one"]);
    ok(&["snapshot", &s(&store), &s(&dest)]);
    ok(&["import", &s(&store), &s(&real.join("iipc-jwarc")), "--to", "/two"]);
    for point in ["snapshot_index_copied", "snapshot_swapped"] {
        let r = run_env(&["snapshot", &s(&store), &s(&dest)], &[("WARCFS_CRASH_AT", &format!("{point}:1"))]);
        assert!(!r.ok() && r.code.is_none(), "the snapshot should have been killed at {point}: {}", r.describe());
        let fsck = run(&["fsck", &s(&dest), "--deep"]);
        assert!(fsck.ok(), "DEST after a kill at {point}:\n{}", fsck.describe());
        let has_two = ls(&dest, "/").iter().any(|(n, _)| n == "two");
        assert_eq!(has_two, point == "snapshot_swapped", "after a kill at {point}, DEST is the old copy before the swap and the new one after it");
        for f in expected_files(&[real.join("webrecorder-warcio")], "/one").iter() {
            assert_cat_eq(&dest, f.0, f.1);
        }
    }
    ok(&["snapshot", &s(&store), &s(&dest)]);
    let expected = [expected_files(&[real.join("webrecorder-warcio")], "/one"), expected_files(&[real.join("iipc-jwarc")], "/two")];
    for (p, src) in expected.iter().flatten() {
        assert_cat_eq(&dest, p, src);
    }
    let fsck = run(&["fsck", &s(&dest), "--deep"]);
    assert!(fsck.ok(), "{}", fsck.describe());
}
