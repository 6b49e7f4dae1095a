//! A mount's daemon killed: `kill -9` during writes, the daemon killing itself at each
//! durability point of a write, and the recovery of a staged file; every file whose close
//! succeeded reads back exact, and fsck stays clean.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tempfile::TempDir;

use common::*;

/// Writes files one by one (fsync + checked close each) until an operation fails; records
/// every file whose close succeeded, as it happens.
fn writer_until_error(mnt: &Path, trial: usize, seed: u64, sources: &[(String, Vec<u8>)], completed: &Mutex<Vec<(String, usize)>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = format!("t{trial:02}");
    if fs::create_dir(mnt.join(&dir)).is_err() {
        return;
    }
    let mut written = 0usize;
    // At most ~40 files / 40 MB a trial (the kill may come after the last one: then it hits
    // the ingest of what was written).
    for k in 0..40 {
        if written > 40 << 20 {
            return;
        }
        // Mostly the small real-corpus files; now and then a large crawl (the last three).
        let i = if rng.gen_ratio(1, 10) { rng.gen_range(sources.len() - 3..sources.len()) } else { rng.gen_range(0..sources.len() - 3) };
        let rel = format!("{dir}/f{k:03}-{}", sources[i].0);
        if write_chunked(&mnt.join(&rel), &sources[i].1, &mut rng).is_err() {
            return;
        }
        written += sources[i].1.len();
        completed.lock().unwrap().push((rel, i));
    }
}

#[test]
fn kill_9_during_cp_loses_nothing_closed() {
    let seed = seed_from_env("WARCFS_MOUNT_CRASH_SEED");
    eprintln!("kill_9_during_cp_loses_nothing_closed: seed {seed} (rerun with WARCFS_MOUNT_CRASH_SEED={seed})");
    let ctx = |trial: usize| format!("(seed {seed}, trial {trial}; rerun with WARCFS_MOUNT_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let real = real_corpus();
    let mut sources: Vec<(String, Vec<u8>)> = expected_files(std::slice::from_ref(&real), "/")
        .into_iter()
        .map(|(p, src)| (p.trim_start_matches("/real/").replace('/', "_"), fs::read(src).unwrap()))
        .collect();
    for c in crawl_files() {
        sources.push((c.file_name().unwrap().to_str().unwrap().to_string(), fs::read(&c).unwrap()));
    }
    let sources = Arc::new(sources);

    let fx = MountFixture::new();
    const TRIALS: usize = 20;
    let mut all: Vec<(String, usize)> = Vec::new();
    let mut last: Vec<(String, usize)> = Vec::new();
    for trial in 0..TRIALS {
        let mut m = fx.mount();
        for (rel, i) in &last {
            assert_bytes(&m.path(rel), &sources[*i].1, &format!("remount after the kill of trial {} {}", trial - 1, ctx(trial)));
        }
        let completed = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (mnt, sources, completed) = (m.mnt.clone(), sources.clone(), completed.clone());
            let wseed = rng.gen();
            std::thread::spawn(move || writer_until_error(&mnt, trial, wseed, &sources, &completed))
        };
        let mut cp = Command::new("cp")
            .arg("-r")
            .arg(&real)
            .arg(m.path(&format!("cp-{trial:02}")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cp");
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..1000)));
        let exit = m.kill_daemon();
        assert_eq!(exit, Exit::Signal(libc::SIGKILL), "daemon status after kill -9 {}", ctx(trial));
        // With the daemon gone every request fails, so the clients end.
        let t0 = Instant::now();
        while !writer.is_finished() {
            assert!(t0.elapsed() < Duration::from_secs(60), "writer still blocked 60 s after the daemon died {}", ctx(trial));
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.join().unwrap();
        let _ = cp.wait();
        m.unmount_dead();
        if trial % 5 == 4 {
            // The store as the kill left it (open pack torn, files staged) checks out too.
            let r = run(&["fsck", &s(&fx.store)]);
            assert!(r.ok() && r.out().contains(": clean ("), "fsck right after killing the daemon {}:\n{}", ctx(trial), r.describe());
        }
        last = completed.lock().unwrap().clone();
        eprintln!("trial {trial}: {} files closed before the kill", last.len());
        all.extend(last.iter().cloned());
    }
    let m = fx.mount();
    let st = wait_stored(&fx.store);
    for (rel, i) in &all {
        assert_bytes(&m.path(rel), &sources[*i].1, &format!("after {TRIALS} kills and a final remount {}", ctx(TRIALS)));
    }
    eprintln!("kill -9: {} closed files checked over {TRIALS} trials; {st}", all.len());
    m.unmount_clean();
    let r = run(&["fsck", &s(&fx.store)]);
    assert!(r.ok() && r.out().contains(": clean ("), "fsck after {TRIALS} daemon kills {}:\n{}", ctx(TRIALS), r.describe());
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the crash points exist in debug builds only")]
fn a_daemon_killed_at_each_durability_point_of_a_write_loses_nothing_closed() {
    // The daemon SIGKILLs itself (WARCFS_CRASH_AT=point:k) at each point of the write path:
    // a staged file created and synced, its size recorded (a metadata log record), the
    // background ingest's chunks appended and synced, its log record, its commit, a pack
    // sealed. Every file whose close returned success must read back exact after a remount,
    // and fsck must pass. Deterministic: the same points on every run.
    let real = real_corpus();
    let files: Vec<(String, Vec<u8>)> = ["webrecorder-warcio/example.warc.gz", "iipc-jwarc", "webrecorder-pywb"]
        .iter()
        .flat_map(|d| expected_files(&[real.join(d)], "/").into_values())
        .take(6)
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
        .collect();
    assert!(files.len() >= 4);
    let tmp = TempDir::new().unwrap();
    let points = [
        ("staged_created", 1), ("staged_synced", 1), ("staged_synced", 3), ("log_synced", 2), ("log_synced", 5),
        ("pack_appended", 1), ("pack_appended", 8), ("pack_synced", 1), ("before_commit", 1), ("committed", 1), ("committed", 3), ("pack_footer_synced", 1),
    ];
    let mut killed_at: BTreeMap<&str, usize> = BTreeMap::new();
    for (trial, (point, k)) in points.into_iter().enumerate() {
        let store = tmp.path().join(format!("store{trial}"));
        let mnt = tmp.path().join(format!("mnt{trial}"));
        let ctx = format!("crash at {point}:{k}");
        // Created beforehand, with one file stored, so the daemon's passes are those of the
        // writes alone; the first write rewrites that file (copy on write into staging).
        let pre = tmp.path().join(format!("pre{trial}"));
        fs::create_dir(&pre).unwrap();
        fs::write(pre.join("rewritten"), &files[1].1).unwrap();
        ok(&["import", &s(&store), &s(&pre.join("rewritten"))]);
        let mut m = Mounted::with_env(&store, &mnt, &[], &[("WARCFS_CRASH_AT", &format!("{point}:{k}"))]);
        let mut closed = Vec::new();
        let rewrite = ("rewritten".to_string(), files[0].1.clone());
        for (name, bytes) in std::iter::once(&rewrite).chain(files.iter()) {
            let written = File::create(m.path(name)).and_then(|mut f| {
                f.write_all(bytes)?;
                close_checked(f)
            });
            if written.is_err() {
                break;
            }
            closed.push((name.clone(), bytes.clone()));
        }
        // The crash may come in the background ingest after the last close, or at the seal
        // when unmounting.
        let t0 = Instant::now();
        let mut exit = None;
        while exit.is_none() && num(&stats(&store), "staged_files") > 0 && t0.elapsed() < Duration::from_secs(120) {
            exit = try_reap(m.pid);
            std::thread::sleep(Duration::from_millis(50));
        }
        let exit = match exit.or_else(|| try_reap(m.pid)) {
            Some(e) => {
                m.live = false;
                let _ = fusermount_u(&m.mnt).or_else(|_| umount_lazy(&m.mnt));
                e
            }
            None => m.unmount(),
        };
        let killed = exit == Exit::Signal(libc::SIGKILL);
        assert!(killed || exit == Exit::Code(0), "daemon exit {exit:?} ({ctx})");
        *killed_at.entry(point).or_default() += killed as usize;
        let r = run(&["fsck", &s(&store)]);
        assert!(r.ok(), "fsck after a {ctx}:\n{}", r.describe());
        let m = Mounted::new(&store, &mnt);
        for (name, bytes) in &closed {
            assert_bytes(&m.path(name), bytes, &format!("closed before a {ctx}, after remount"));
        }
        wait_stored(&store);
        m.unmount_clean();
        assert!(run(&["fsck", &s(&store)]).ok(), "{ctx}");
    }
    eprintln!("daemons killed at each point: {killed_at:?}");
    for (point, n) in &killed_at {
        assert!(*n > 0, "no write passed through {point}: {killed_at:?}");
    }
}

#[test]
fn recovery_of_a_staged_file_never_silently_falls_back() {
    // A file being rewritten when the daemon died is staged: its new bytes are in
    // STORE/staging. If they are gone (never made durable), the file is what its last commit
    // made it, size included; if they are there but cannot be read, the mount refuses,
    // naming them, rather than serve the older bytes.
    let fx = MountFixture::new();
    let old = real_file("webrecorder-warcio/example.warc.gz");
    let m = fx.mount();
    fs::write(m.path("a.warc.gz"), &old).unwrap();
    wait_stored(&fx.store);
    m.unmount_clean();
    let leave_staged = || {
        let mut m = fx.mount();
        let mut f = OpenOptions::new().write(true).truncate(true).open(m.path("a.warc.gz")).unwrap();
        f.write_all(b"new bytes, staged when the daemon dies").unwrap();
        f.sync_all().unwrap();
        m.kill_daemon();
        drop(f);
        m.unmount_dead();
        let staged: Vec<PathBuf> = fs::read_dir(fx.store.join("staging")).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(staged.len(), 1, "one staged file after the kill");
        staged[0].clone()
    };
    // Staged bytes gone: the committed content, with its size.
    let staged = leave_staged();
    fs::remove_file(&staged).unwrap();
    let m = fx.mount();
    assert_bytes(&m.path("a.warc.gz"), &old, "staged bytes lost: the last commit");
    assert_eq!(fs::metadata(m.path("a.warc.gz")).unwrap().len(), old.len() as u64);
    m.unmount_clean();
    assert!(run(&["fsck", &s(&fx.store)]).ok());
    // Staged bytes unreadable (here: a directory in their place): the mount refuses.
    let staged = leave_staged();
    fs::remove_file(&staged).unwrap();
    fs::create_dir(&staged).unwrap();
    let r = run(&["mount", &s(&fx.store), &s(&fx.mnt)]);
    let name = staged.display().to_string();
    assert!(!r.ok() && r.stderr.contains(&name), "the mount refuses, naming the staged file:\n{}", r.describe());
    assert!(log_tail(&fx.store).contains(&name), "the log names it too:\n{}", log_tail(&fx.store));
    assert!(!is_mounted(&fx.mnt));
    fs::remove_dir(&staged).unwrap();
    let m = fx.mount();
    assert_bytes(&m.path("a.warc.gz"), &old, "after the unreadable staged file was removed");
    m.unmount_clean();
}
