//! Files staged by a mount until they are ingested, and the mount's lifecycle: staged files
//! hold no descriptor, a reopened staging file is the current one, the index build holds no
//! request thread, the CLI refuses staged files, `umount` returns once all is stored and a
//! mount waits for a draining daemon; bad mount input is refused.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use common::*;

/// Files written through the mount wait for their ingest without holding a descriptor
/// each: with the ingest held and the daemon's open files limited to 256, a copy of 600
/// files in succeeds (it failed with EMFILE past about 240), and once the ingest goes on
/// every file is stored exact.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the hold exists in debug builds only")]
fn files_waiting_for_their_ingest_hold_no_descriptor() {
    let fx = MountFixture::new();
    let gate = Gate(fx.path("gate"));
    gate.close();
    let hold = gate.hold("ingest");
    let m = Mounted::with_limit(&fx.store, &fx.mnt, &[], &[("WARCFS_HOLD", &hold)], Some(256));
    fs::create_dir(m.path("d")).unwrap();
    let body = |i: usize| format!("file {i}\n").repeat(1 + i % 7).into_bytes();
    let failed: Vec<String> = (0..600).filter_map(|i| fs::write(m.path(&format!("d/f{i}")), body(i)).err().map(|e| format!("f{i}: {e}"))).collect();
    assert!(failed.is_empty(), "{} of 600 writes failed, the first: {:?}", failed.len(), failed.first());
    // Still staged (the ingest is held), and readable from staging.
    assert_eq!(fs::read(m.path("d/f599")).unwrap(), body(599));
    gate.open();
    wait_stored(&fx.store);
    for i in 0..600 {
        assert_eq!(fs::read(m.path(&format!("d/f{i}"))).unwrap(), body(i), "f{i}");
    }
    m.unmount_clean();
}

/// A staging file let go while its file waited is opened again by path, outside the staged
/// map's lock; if the file was stored and staged anew meanwhile, the path names another file.
/// Held there (`staged_reopen`) while the file is stored and written again, a reader must not
/// bring the old staging file back: it would have been read, synced and stored in place of
/// the new bytes, which the writer's close had reported durable.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the holds exist in debug builds only")]
fn a_reopened_staging_file_is_the_current_one() {
    let fx = MountFixture::new();
    let (ingest, reopen) = (Gate(fx.path("ingest")), Gate(fx.path("reopen")));
    ingest.close();
    reopen.close();
    let holds = format!("{},{}", ingest.hold("ingest"), reopen.hold("staged_reopen"));
    let m = fx.mount_env(&[], &[("WARCFS_HOLD", &holds)]);
    let (v1, v2) = (b"first bytes\n".repeat(100), b"second bytes, kept\n".repeat(100));
    let path = m.path("f.warc");
    fs::write(&path, &v1).unwrap();
    // The kernel sends the writer's release after `close` returns: until the daemon has
    // taken it, the staging file is still open and a reader would not reopen it.
    let staging = fx.store.join("staging");
    wait_until("the writer's release", Duration::from_secs(10), || {
        let open = fs::read_dir(format!("/proc/{}/fd", m.pid)).map_err(|e| e.to_string())?.flatten().filter(|e| fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&staging))).count();
        if open == 0 { Ok(()) } else { Err(format!("{open} staging files open")) }
    });
    // A reader of the staged file, past the page cache (O_DIRECT: no page of the file is
    // locked while its request waits, which any open would wait for): it opens the staging
    // file by path and is held before it takes it.
    let reader = std::thread::spawn({
        let path = path.clone();
        move || {
            use std::os::unix::fs::OpenOptionsExt;
            let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
            let mut buf = vec![0u8; 64 << 10];
            let n = f.read_at(&mut buf, 0)?;
            buf.truncate(n);
            io::Result::Ok(buf)
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!reader.is_finished(), "the reader is held at the reopen");
    // Meanwhile the file is stored, then written again (staged anew, its ingest held).
    ingest.open();
    wait_stored(&fx.store);
    ingest.close();
    fs::write(&path, &v2).unwrap();
    let want = v2.clone();
    reopen.open();
    let got = reader.join().unwrap().unwrap();
    assert!(got == v1 || got == want, "the reader gets one version or the other");
    ingest.open();
    wait_stored(&fx.store);
    drop_caches();
    assert!(fs::read(&path).unwrap() == want, "the bytes written last are the ones stored");
    m.unmount_clean();
}

/// Building `/.warcfs/index.cdxj` (seconds on a large store) holds no FUSE thread: with a
/// build held (`WARCFS_HOLD=index_build`), more requests for the index than the daemon has
/// threads wait for it, and a stored file still reads; they answer once it is built, with
/// the index of the store as it is then. (The build ran under a mutex on the request's
/// thread, so four such requests stalled every other file of the mount.)
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the hold exists in debug builds only")]
fn a_build_of_the_index_file_holds_no_request_thread() {
    let fx = MountFixture::new();
    let real = real_corpus();
    ok(&["import", &s(&fx.store), &s(&real.join("iipc-jwarc/cc.warc.gz"))]);
    let gate = Gate(fx.path("gate"));
    let hold = gate.hold("index_build");
    let m = fx.mount_env(&[], &[("WARCFS_HOLD", &hold)]);
    let index = m.path(".warcfs/index.cdxj");
    // Handles on the index, so that each fstat below is a request of its own (stats by
    // path would wait in the kernel behind one lookup).
    let handles: Vec<File> = (0..4).map(|_| File::open(&index).unwrap()).collect();
    let before = handles[0].metadata().unwrap().len();
    // The store changes: the next request for the index builds it again, held at the gate.
    fs::copy(real.join("N0taN3rd-node-warc/parseMe.warc.gz"), m.path("parseMe.warc.gz")).unwrap();
    wait_stored(&fx.store);
    std::thread::sleep(Duration::from_millis(1100));
    gate.close();
    let waiting: Vec<_> = handles.into_iter().map(|f| std::thread::spawn(move || f.metadata().map(|md| md.len()))).collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(waiting.iter().all(|t| !t.is_finished()), "the requests wait for the held build");
    let path = m.path("cc.warc.gz");
    let read = std::thread::spawn(move || fs::read(path));
    let t0 = Instant::now();
    while !read.is_finished() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = read.is_finished();
    gate.open();
    assert!(done, "a stored file must read while the index is being built");
    assert_eq!(read.join().unwrap().unwrap(), fs::read(real.join("iipc-jwarc/cc.warc.gz")).unwrap());
    for t in waiting {
        t.join().unwrap().unwrap();
    }
    let now = fs::read_to_string(&index).unwrap();
    assert!(now.len() as u64 > before && now.contains("http://stringjs.com/"), "the index of the store as it is now:\n{now}");
    m.unmount_clean();
}

#[test]
fn the_cli_on_a_mounted_store_refuses_staged_files_instead_of_stale_bytes() {
    // A WARC still being written through the mount: `warcfs cat` and `warcfs index` of the
    // store used to print its old bytes (or none) and exit 0. They must fail, naming it,
    // until the mount has stored it; then they give the new bytes.
    let fx = MountFixture::new();
    let warc = real_file("webrecorder-warcio/example.warc.gz");
    let m = fx.mount();
    let mut f = File::create(m.path("live.warc.gz")).unwrap();
    f.write_all(&warc).unwrap();
    f.sync_all().unwrap();
    for args in [vec!["cat", &s(&fx.store) as &str, "/live.warc.gz"], vec!["index", &s(&fx.store)]] {
        let r = run(&args);
        assert!(!r.ok() && r.stderr.contains("live.warc.gz") && r.stderr.contains("being written through a mount"), "{args:?} while staged:\n{}", r.describe());
    }
    // The mount's own live index leaves it out until it is stored, rather than fail.
    let live = fs::read_to_string(m.path(".warcfs/index.cdxj")).unwrap();
    assert!(!live.contains("live.warc.gz"), "{live}");
    drop(f);
    wait_stored(&fx.store);
    // The mount rebuilds its index at most once a second.
    std::thread::sleep(Duration::from_millis(1100));
    let live = fs::read_to_string(m.path(".warcfs/index.cdxj")).unwrap();
    assert!(live.contains("live.warc.gz") && live == ok(&["index", &s(&fx.store)]).out(), "the mount's index once stored equals `warcfs index`");
    let r = ok(&["cat", &s(&fx.store), "/live.warc.gz"]);
    assert!(r.stdout == warc, "cat after the mount stored it");
    assert!(ok(&["index", &s(&fx.store)]).out().contains("live.warc.gz"));
    m.unmount_clean();
}

#[test]
fn umount_returns_once_everything_is_stored_and_mount_waits_for_a_draining_daemon() {
    // `fusermount3 -u` returns while the daemon still ingests what was written; `warcfs
    // umount` must return only once it is all stored and the daemon is gone, and a `warcfs
    // mount` issued while a daemon drains must wait for it rather than fail "in use".
    let fx = MountFixture::new();
    let crawls = crawl_files();
    let m = fx.mount();
    fs::copy(&crawls[0], m.path("c1.warc.gz")).unwrap();
    let r = ok(&["umount", &s(&m.mnt)]);
    assert!(r.out().contains("every file written through it is stored"), "{}", r.describe());
    assert!(!is_mounted(&m.mnt));
    // No waiting here: the lock is free and the file is stored.
    let st = stats(&fx.store);
    assert_eq!(num(&st, "staged_files"), 0, "{st}");
    assert!(ok(&["cat", &s(&fx.store), "/c1.warc.gz"]).stdout == fs::read(&crawls[0]).unwrap());
    drop(m);

    let mut m = fx.mount();
    fs::copy(&crawls[1], m.path("c2.warc.gz")).unwrap();
    fusermount_u(&m.mnt).unwrap();
    // Unmounted by hand: this guard must not unmount what comes next at the same path.
    m.live = false;
    let old_pid = m.pid;
    // At once: the old daemon is (most likely) still storing c2.
    let r = run(&["mount", &s(&fx.store), &s(&fx.mnt)]);
    let pid = fs::read_to_string(fx.store.join("lock")).ok().and_then(|p| p.trim().parse::<i32>().ok()).unwrap_or(-1);
    let m2 = Mounted { mnt: fx.mnt.canonicalize().unwrap(), store: fx.store.clone(), pid, live: true };
    assert!(r.ok(), "mount while the previous daemon drains:\n{}", r.describe());
    assert_ne!(pid, old_pid, "a new daemon holds the store");
    assert!(wait_exit(old_pid, Duration::from_secs(60)).is_some(), "the old daemon is gone");
    for (name, src) in [("c1.warc.gz", &crawls[0]), ("c2.warc.gz", &crawls[1])] {
        assert_bytes(&m2.path(name), &fs::read(src).unwrap(), "after mounting over a draining daemon");
    }
    m2.unmount_clean();
}

#[test]
fn bad_mount_input() {
    become_subreaper();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt_a = tmp.path().join("a");
    let mnt_b = tmp.path().join("b");
    fs::create_dir(&mnt_b).unwrap();
    let mnt_b_c = mnt_b.canonicalize().unwrap();
    let mut doubled = Vec::new();

    let missing = tmp.path().join("no-such-dir");
    let line = fails_with(&["mount", &s(&store), &s(&missing)], &[&s(&missing)]);
    eprintln!("missing mount point: {line}");
    let file = tmp.path().join("plain-file");
    fs::write(&file, b"x").unwrap();
    let line = fails_with(&["mount", &s(&store), &s(&file)], &[&s(&file)]);
    eprintln!("mount point is a file: {line}");

    let line = fails_with(&["mount", &s(&store), &s(&mnt_b), "-o", "frobnicate"], &["frobnicate"]);
    eprintln!("unknown option: {line}");
    let line = fails_with(&["mount", &s(&store), &s(&mnt_b), "-o", "ro,bogus_opt"], &["bogus_opt"]);
    eprintln!("unknown option in a list: {line}");
    assert!(!is_mounted(&mnt_b_c));

    let notstore = tmp.path().join("notstore");
    fs::create_dir(&notstore).unwrap();
    fs::write(notstore.join("data.txt"), b"not a store").unwrap();
    let line = fails_with(&["mount", &s(&notstore), &s(&mnt_b)], &[&s(&notstore)]);
    eprintln!("not a store: {line}");
    if line.starts_with("warcfs: warcfs: ") {
        doubled.push(line.clone());
    }
    assert!(!is_mounted(&mnt_b_c));

    // A store that is already mounted: the second mount names the holder.
    let m = Mounted::new(&store, &mnt_a);
    let line = fails_with(&["mount", &s(&store), &s(&mnt_b)], &[&m.pid.to_string(), "in use"]);
    eprintln!("already mounted: {line}");
    if line.starts_with("warcfs: warcfs: ") {
        doubled.push(line.clone());
    }
    assert!(!is_mounted(&mnt_b_c), "the failed second mount left {} mounted", mnt_b.display());
    // The first mount is unaffected.
    fs::write(m.path("hello.txt"), b"hello\n").unwrap();
    assert_bytes(&m.path("hello.txt"), b"hello\n", "first mount after a refused second mount");
    m.unmount_clean();

    // -o ro: reads work, writes fail with EROFS.
    let m = Mounted::with(&store, &mnt_a, &["ro"]);
    assert_bytes(&m.path("hello.txt"), b"hello\n", "read-only mount");
    assert_eq!(errno_of(fs::write(m.path("new.txt"), b"x")), Some(libc::EROFS), "create on a read-only mount");
    assert_eq!(errno_of(OpenOptions::new().write(true).open(m.path("hello.txt"))), Some(libc::EROFS), "open for writing on a read-only mount");
    m.unmount_clean();

    // Regression (fixed): errors the daemon reported back came out as "warcfs: warcfs: ...".
    assert!(doubled.is_empty(), "error lines with a doubled 'warcfs: ' prefix:\n{}", doubled.join("\n"));
}
