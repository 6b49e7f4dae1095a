//! Power loss at every durability point of import, a mount's writes, gc (making deltas and
//! rewriting parses too) and snapshot.
//!
//! Each process runs with `WARCFS_POWER_CUT=1` and `WARCFS_CRASH_AT=POINT:K`: at the K-th
//! pass through POINT it undoes on the disk every write it made that no fsync of the file
//! and of its directory made durable (`src/disk.rs`), then SIGKILLs itself. `exited` is the
//! point every command passes just before it exits 0: a power cut right after it returned.
//! The next command recovers; then every file a command that returned wrote, or a mount's
//! close or fsync returned on, must read back exact, and fsck must be clean. RocksDB (the
//! index) is outside the seam: it is written with synced batches, so it counts as durable.
#![cfg(debug_assertions)]

mod common;
use common::*;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Runs `warcfs ARGS` with the power cut at `point:k`; returns whether it was cut (killed
/// there) rather than done.
fn cut(point: &str, k: u64, args: &[String]) -> bool {
    let out = warcfs().args(args).env("WARCFS_POWER_CUT", "1").env("WARCFS_CRASH_AT", format!("{point}:{k}")).output().expect("run warcfs");
    let killed = out.status.signal() == Some(libc::SIGKILL);
    assert!(killed || out.status.success(), "{args:?} with a power cut at {point}:{k} failed on its own: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("power cut:"), "undoing failed: {}", String::from_utf8_lossy(&out.stderr));
    killed
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn fsck_clean(store: &Path, ctx: &str) {
    let r = run(&["fsck", &s(store)]);
    assert!(r.ok(), "fsck after a {ctx}:\n{}", r.describe());
}

/// Every file of `expected` that `ls` shows reads back exact; returns how many there were.
fn visible_exact(store: &Path, expected: &BTreeMap<String, PathBuf>, ctx: &str) -> usize {
    let mut n = 0;
    for (p, src) in expected {
        let r = run(&["cat", &s(store), p]);
        if r.ok() {
            assert!(r.stdout == fs::read(src).unwrap(), "{p} reads back, but not exact, after a {ctx}");
            n += 1;
        }
    }
    n
}

fn all_exact(store: &Path, expected: &BTreeMap<String, PathBuf>, ctx: &str) {
    for (p, src) in expected {
        let r = run(&["cat", &s(store), p]);
        assert!(r.ok() && r.stdout == fs::read(src).unwrap(), "{p} was written by a command that returned, and is lost or changed after a {ctx}:\n{}", r.describe());
    }
}

/// A file of `len` bytes no other file shares.
fn fresh_file(path: &Path, len: usize, seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    fs::write(path, bytes).unwrap();
}

const IMPORT_POINTS: [&str; 8] = ["pack_appended", "pack_synced", "log_synced", "before_commit", "committed", "pack_footer_synced", "pack_renamed", "exited"];

#[test]
fn import_and_gc_lose_nothing_committed_at_a_power_cut() {
    let real = real_corpus();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    // The store's creation and a first import, each cut right after it returned.
    assert!(cut("exited", 1, &args(&["init", &s(&store)])));
    let base_src = vec![real.join("webrecorder-pywb")];
    let base = expected_files(&base_src, "/base");
    assert!(cut("exited", 1, &args(&["import", &s(&store), &s(&base_src[0]), "--to", "/base"])));
    fsck_clean(&store, "power cut after an import returned");
    all_exact(&store, &base, "power cut after an import returned");
    let mut killed_at: BTreeMap<&str, usize> = BTreeMap::new();
    let mut trial = 0;
    for point in IMPORT_POINTS {
        for k in [1u64, 4] {
            trial += 1;
            let to = format!("/t{trial}");
            let d = tmp.path().join(format!("src{trial}"));
            fs::create_dir(&d).unwrap();
            fresh_file(&d.join("fresh.bin"), 3 << 20, trial);
            let srcs = vec![real.join("webrecorder-warcio"), d.join("fresh.bin")];
            let a = [vec!["import".to_string(), s(&store)], srcs.iter().map(|p| s(p)).collect(), vec!["--to".into(), to.clone()]].concat();
            let killed = cut(point, k, &a);
            *killed_at.entry(point).or_default() += killed as usize;
            let ctx = format!("power cut at {point}:{k} (cut: {killed})");
            if point == "log_synced" && k == 1 {
                // The recovering open is cut too, after sealing what was left open and
                // before applying the logged change: the open after that applies it.
                assert!(cut("packs_recovered", 1, &args(&["fsck", &s(&store)])), "fsck did not pass through packs_recovered ({ctx})");
            }
            fsck_clean(&store, &ctx);
            let expected = expected_files(&srcs, &to);
            let seen = visible_exact(&store, &expected, &ctx);
            if !killed || point == "exited" {
                assert_eq!(seen, expected.len(), "an import that returned lost files ({ctx})");
            }
            assert_eq!(visible_exact(&store, &base, &ctx), base.len(), "{ctx}");
        }
    }
    eprintln!("imports cut at each point (of 2): {killed_at:?}");
    for point in IMPORT_POINTS {
        assert!(killed_at.get(point).copied().unwrap_or(0) > 0, "no import passed through {point}: {killed_at:?}");
    }
    // gc, cut at each of its points with garbage to collect.
    let gc_points = ["log_synced", "checkpoint_synced", "gc_before_index", "gc_after_index", "gc_pack_removed", "pack_footer_synced", "pack_renamed", "exited"];
    for (i, point) in gc_points.into_iter().enumerate() {
        // (A trial cut before its first commit left nothing to remove.)
        run(&["rm", "-r", &s(&store), &format!("/t{}", 1 + 2 * i)]);
        run(&["rm", "-r", &s(&store), &format!("/t{}", 2 + 2 * i)]);
        assert!(cut(point, 1, &args(&["gc", &s(&store)])), "gc did not pass through {point}");
        let ctx = format!("power cut in gc at {point}");
        fsck_clean(&store, &ctx);
        all_exact(&store, &base, &ctx);
    }
    ok(&["gc", &s(&store)]);
    let r = run(&["fsck", &s(&store), "--deep"]);
    assert!(r.ok(), "{}", r.describe());
    assert_eq!(num(&stats(&store), "unreferenced_chunks"), 0);
    all_exact(&store, &base, "gc after the power cuts");
}

#[test]
fn a_rebuilt_index_after_a_power_cut_loses_no_file() {
    // The index is outside the seam (synced batches); the packs alone must be enough:
    // deleted after a power cut and rebuilt, it names every file the log committed.
    let real = real_corpus();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let one = vec![real.join("webrecorder-warcio")];
    assert!(cut("exited", 1, &args(&["import", &s(&store), &s(&one[0]), "--to", "/one"])));
    let d = tmp.path().join("src");
    fs::create_dir(&d).unwrap();
    fresh_file(&d.join("fresh.bin"), 3 << 20, 99);
    let two = vec![real.join("iipc-jwarc"), d.join("fresh.bin")];
    let a = [vec!["import".to_string(), s(&store)], two.iter().map(|p| s(p)).collect(), vec!["--to".into(), "/two".into()]].concat();
    assert!(cut("committed", 2, &a));
    fsck_clean(&store, "power cut at committed:2");
    let two = expected_files(&two, "/two");
    let before: Vec<String> = two.keys().filter(|p| run(&["cat", &s(&store), p]).ok()).cloned().collect();
    assert!(!before.is_empty(), "the first commit was made before the cut");
    fs::remove_dir_all(store.join("index")).unwrap();
    ok(&["repair", "index", &s(&store)]);
    fsck_clean(&store, "rebuilt index");
    all_exact(&store, &expected_files(&one, "/one"), "rebuilt index");
    let after = visible_exact(&store, &two, "rebuilt index");
    assert!(after >= before.len(), "the rebuilt index lost files: {} of {:?}", after, before);
}

/// A crawl of `pages` pages of one site as a plain WARC: each a response of its own URL,
/// its body changed by `crawl` in one line (so a later crawl's pages are near copies).
fn site_crawl(path: &Path, crawl: u32, pages: u32) {
    let mut out = Vec::new();
    for p in 0..pages {
        let mut body = String::from("<!doctype html><html><head><title>Handbook</title></head><body><nav>Home | Catalogue | About</nav>");
        for k in 0..300u32 {
            body.push_str(&format!("<p>Section {p}.{k}: how the archive keeps item {} of shelf {}.</p>\n", (p * 7919 + k * 104729) % 100_003, k % 37));
            if k == 150 {
                body.push_str(&format!("<p>Revised in crawl {crawl}.</p>\n"));
            }
        }
        body.push_str("</body></html>");
        let http = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        out.extend_from_slice(format!("WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{crawl:04}-{p:08}>\r\nWARC-Target-URI: http://handbook.test/{p}.html\r\nContent-Type: application/http; msgtype=response\r\nContent-Length: {}\r\n\r\n", http.len()).as_bytes());
        out.extend_from_slice(http.as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
    }
    fs::write(path, out).unwrap();
}

/// A gc cut at `point:k`, then: fsck clean and every file of `expected` exact; a whole gc
/// after it, then a deep fsck clean and every file exact again.
fn gc_cut_then_whole(store: &Path, point: &str, k: u64, expected: &BTreeMap<String, PathBuf>, ctx: &str) {
    assert!(cut(point, k, &args(&["gc", &s(store)])), "gc did not pass through {point}:{k}");
    fsck_clean(store, ctx);
    all_exact(store, expected, ctx);
    ok(&["gc", &s(store)]);
    let r = run(&["fsck", &s(store), "--deep"]);
    assert!(r.ok(), "{ctx}, then gc: {}", r.describe());
    all_exact(store, expected, ctx);
}

/// gc making deltas (the later crawl's pages against the earlier's), cut at each of its
/// durability points: every file reads back exact and fsck is clean, whether the deltas and
/// their bases' counts were written or not; a whole gc after that makes them.
#[test]
fn gc_making_deltas_loses_nothing_at_a_power_cut() {
    let tmp = TempDir::new().unwrap();
    let (one, two) = (tmp.path().join("crawl-1.warc"), tmp.path().join("crawl-2.warc"));
    site_crawl(&one, 1, 40);
    site_crawl(&two, 2, 40);
    let expected: BTreeMap<String, PathBuf> = [("/crawl-1.warc".to_string(), one.clone()), ("/crawl-2.warc".to_string(), two.clone())].into();
    let gc_points = ["checkpoint_synced", "gc_before_index", "gc_after_index", "gc_pack_removed", "pack_footer_synced", "pack_renamed", "exited"];
    for (trial, point) in gc_points.into_iter().enumerate() {
        let store = tmp.path().join(format!("store{trial}"));
        ok(&["init", &s(&store)]);
        ok(&["import", &s(&store), &s(&one)]);
        ok(&["gc", &s(&store)]);
        ok(&["import", &s(&store), &s(&two)]);
        let ctx = format!("power cut in a gc making deltas at {point}");
        gc_cut_then_whole(&store, point, 1, &expected, &ctx);
        assert!(num(&stats(&store), "delta_chunks") >= 30, "the later crawl's pages are deltas after a whole gc ({ctx}): {}", stats(&store));
    }
}

/// gc rewriting fast parses compact (`init --parses compact-at-gc`), cut at each
/// durability point of its files' commits and of its own: every file reads back exact and
/// fsck is clean, whichever files were rewritten; a whole gc after that leaves every parse
/// compact.
#[test]
fn gc_reparsing_loses_nothing_at_a_power_cut() {
    let real = real_corpus();
    let tmp = TempDir::new().unwrap();
    let srcs = vec![real.join("webrecorder-warcio"), real.join("iipc-jwarc"), real.join("webrecorder-pywb")];
    let expected = expected_files(&srcs, "/r");
    let mut compact = None;
    let points = [("pack_synced", 1), ("before_commit", 1), ("committed", 1), ("log_synced", 3), ("committed", 4), ("reparse_marked", 1), ("gc_before_index", 1), ("gc_after_index", 1), ("pack_renamed", 1), ("exited", 1)];
    for (trial, (point, k)) in points.into_iter().enumerate() {
        let store = tmp.path().join(format!("store{trial}"));
        ok(&["init", &s(&store), "--parses", "compact-at-gc"]);
        ok(&[vec!["import".to_string(), s(&store)], srcs.iter().map(|p| s(p)).collect(), vec!["--to".into(), "/r".into()]].concat());
        let fast = num(&stats(&store), "parse_bytes");
        let ctx = format!("power cut in a reparsing gc at {point}:{k}");
        gc_cut_then_whole(&store, point, k, &expected, &ctx);
        // Every file compact after a whole gc, as after a gc never cut.
        let parse = num(&stats(&store), "parse_bytes");
        assert!(parse * 2 < fast, "{ctx}: {parse} parse bytes after gc, {fast} before");
        assert_eq!(*compact.get_or_insert(parse), parse, "{ctx}");
    }
}

#[test]
fn a_snapshot_cut_at_any_point_leaves_the_old_copy_or_the_new_one() {
    let real = real_corpus();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let dest = tmp.path().join("dest");
    let one = expected_files(&[real.join("webrecorder-warcio")], "/one");
    let two = expected_files(&[real.join("iipc-jwarc")], "/two");
    ok(&["import", &s(&store), &s(&real.join("webrecorder-warcio")), "--to", "/one"]);
    // The first snapshot, cut right after it returned: DEST is whole.
    assert!(cut("exited", 1, &args(&["snapshot", &s(&store), &s(&dest)])));
    fsck_clean(&dest, "power cut after a snapshot returned");
    all_exact(&dest, &one, "power cut after a snapshot returned");
    ok(&["import", &s(&store), &s(&real.join("iipc-jwarc")), "--to", "/two"]);
    for point in ["snapshot_index_copied", "snapshot_swapped", "exited"] {
        assert!(cut(point, 1, &args(&["snapshot", &s(&store), &s(&dest)])), "the snapshot did not pass through {point}");
        let ctx = format!("power cut in a snapshot at {point}");
        fsck_clean(&store, &ctx);
        let r = run(&["fsck", &s(&dest), "--deep"]);
        assert!(r.ok(), "DEST after a {ctx}:\n{}", r.describe());
        all_exact(&dest, &one, &ctx);
        let seen = visible_exact(&dest, &two, &ctx);
        assert!(seen == 0 || seen == two.len(), "DEST is neither the old copy nor the new one after a {ctx}");
        if point == "exited" {
            assert_eq!(seen, two.len(), "a snapshot that returned is lost after a {ctx}");
        }
        all_exact(&store, &one, &ctx);
        all_exact(&store, &two, &ctx);
        // Something new to seal for the next point's snapshot.
        let f = tmp.path().join(point);
        fresh_file(&f, 100_000, point.len() as u64);
        ok(&["import", &s(&store), &s(&f), "--to", &format!("/{point}")]);
    }
    ok(&["snapshot", &s(&store), &s(&dest)]);
    all_exact(&dest, &two, "the snapshot after the cuts");
    let r = run(&["fsck", &s(&dest), "--deep"]);
    assert!(r.ok(), "{}", r.describe());
}

/// Unmounts and tells whether the daemon was cut (SIGKILLed at its point) or exited 0.
fn cut_or_exited(m: Mounted) -> bool {
    match m.finish() {
        Exit::Signal(libc::SIGKILL) => true,
        Exit::Code(0) => false,
        e => panic!("the daemon ended with {e:?}, neither cut nor done"),
    }
}

/// The files a mount test writes: (name, bytes).
fn mount_files() -> Vec<(String, Vec<u8>)> {
    let real = real_corpus();
    ["webrecorder-warcio/example.warc.gz", "iipc-jwarc", "webrecorder-pywb"]
        .iter()
        .flat_map(|d| expected_files(&[real.join(d)], "/").into_values())
        .take(6)
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
        .collect()
}

/// One mount, its daemon's power cut at `point:k` (the background ingest held if `held`):
/// every file whose close returned must read back exact after a remount, and fsck must be
/// clean. Returns whether the daemon was cut.
fn mount_trial(tmp: &Path, trial: usize, point: &str, k: u64, held: bool, files: &[(String, Vec<u8>)]) -> bool {
    let store = tmp.join(format!("store{trial}"));
    let mnt = tmp.join(format!("mnt{trial}"));
    let ctx = format!("power cut at {point}:{k}{}", if held { ", ingest held" } else { "" });
    let gate = tmp.join(format!("gate{trial}"));
    let hold = format!("ingest:{}", s(&gate));
    if held {
        fs::write(&gate, b"").unwrap();
    }
    // One file stored beforehand: the first write rewrites it (copied into staging).
    let pre = tmp.join(format!("pre{trial}"));
    fs::create_dir(&pre).unwrap();
    fs::write(pre.join("rewritten"), &files[1].1).unwrap();
    ok(&["import", &s(&store), &s(&pre.join("rewritten"))]);
    let m = Mounted::with_env(&store, &mnt, &[], &[("WARCFS_POWER_CUT", "1"), ("WARCFS_CRASH_AT", &format!("{point}:{k}")), ("WARCFS_HOLD", &hold)]);
    let mut done = Vec::new();
    let rewrite = ("rewritten".to_string(), files[0].1.clone());
    for (i, (name, bytes)) in std::iter::once(&rewrite).chain(files.iter()).enumerate() {
        let written = File::create(m.path(name)).and_then(|mut f| {
            f.write_all(bytes)?;
            // Every other file fsynced before its close.
            if i % 2 == 1 {
                f.sync_all()?;
            }
            close_checked(f)
        });
        if written.is_err() {
            break;
        }
        done.push((name.clone(), bytes.clone()));
    }
    // The cut may come in the background ingest after the last close, or at the seal and
    // exit when unmounting.
    let t0 = Instant::now();
    while !held && m.running() && num(&stats(&store), "staged_files") > 0 && t0.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = fs::remove_file(&gate);
    let was_cut = cut_or_exited(m);
    fsck_clean(&store, &ctx);
    let m = Mounted::new(&store, &mnt);
    for (name, bytes) in &done {
        let got = fs::read(m.path(name)).unwrap_or_else(|e| panic!("{name}, closed before a {ctx}: {e}"));
        assert!(&got == bytes, "{name}, closed before a {ctx} (cut: {was_cut}), reads back {} bytes, not its {}, after a remount", got.len(), bytes.len());
    }
    wait_ingested(&store);
    assert!(!cut_or_exited(m), "{ctx}: the remount died");
    fsck_clean(&store, &format!("{ctx}, remounted"));
    was_cut
}

#[test]
fn a_mount_loses_nothing_closed_or_fsynced_at_a_power_cut() {
    // At each point of the write path (a staged file created and synced, its size logged, the
    // background ingest's chunks appended and synced, its record, its commit, a pack sealed,
    // the daemon's exit after the unmount) the daemon's power is cut. Every file whose fsync
    // or close returned success must read back exact after a remount, and fsck must be clean.
    let files = mount_files();
    assert!(files.len() >= 4);
    let tmp = TempDir::new().unwrap();
    let points = [
        ("staged_created", 1),
        ("staged_synced", 1),
        ("staged_synced", 3),
        ("log_synced", 2),
        ("log_synced", 5),
        ("pack_appended", 1),
        ("pack_appended", 8),
        ("pack_synced", 1),
        ("before_commit", 1),
        ("committed", 1),
        ("committed", 3),
        ("pack_footer_synced", 1),
        ("pack_renamed", 1),
        ("unmounted", 1),
    ];
    let mut cut_at: BTreeMap<&str, usize> = BTreeMap::new();
    for (trial, (point, k)) in points.into_iter().enumerate() {
        let was_cut = mount_trial(tmp.path(), trial, point, k, false, &files);
        *cut_at.entry(point).or_default() += was_cut as usize;
    }
    eprintln!("daemons cut at each point: {cut_at:?}");
    for (point, n) in &cut_at {
        assert!(*n > 0, "no write passed through {point}: {cut_at:?}");
    }
}

#[test]
fn files_closed_while_the_ingest_waits_survive_a_power_cut() {
    // The background ingest held: the files closed before the cut are still staged, their
    // bytes and their names in STORE/staging only.
    let files = mount_files();
    let tmp = TempDir::new().unwrap();
    for (trial, k) in [3u64, 5].into_iter().enumerate() {
        assert!(mount_trial(tmp.path(), trial, "staged_synced", k, true, &files), "no close passed through staged_synced:{k}");
    }
}

#[test]
fn packs_waiting_to_go_up_survive_a_power_cut() {
    // A writer of a bucket cut as it starts uploading a sealed pack (step 4 of the durable
    // order): the pack must wait, durable, in its packs/. The next import starts by uploading
    // it and is cut there too; the open after that (fsck's) uploads what waits, and another
    // node of the bucket reads every file.
    let real = real_corpus();
    let tmp = TempDir::new().unwrap();
    let (_shared, url, a, b) = file_bucket(tmp.path());
    ok(&["init", &s(&a), "--backend", &url, "--writers", "several", "--node-name", "alpha"]);
    ok(&["init", &s(&b), "--backend", &url, "--node-name", "beta"]);
    let mut all = BTreeMap::new();
    for trial in 1..=3u64 {
        let d = tmp.path().join(format!("src{trial}"));
        fs::create_dir(&d).unwrap();
        fresh_file(&d.join("fresh.bin"), 3 << 20, 100 + trial);
        let srcs = vec![real.join("webrecorder-warcio"), d.join("fresh.bin")];
        let to = format!("/alpha/t{trial}");
        let a_args = [vec!["import".to_string(), s(&a)], srcs.iter().map(|p| s(p)).collect(), vec!["--to".into(), to.clone()]].concat();
        let expected = expected_files(&srcs, &to);
        let ctx = format!("power cut at pack_uploading in import {trial}");
        if trial == 3 {
            ok(&a_args);
            assert!(sealed_packs(&a).is_empty(), "packs still wait on A after an import returned: {:?}", sealed_packs(&a));
            all.extend(expected);
            continue;
        }
        assert!(cut("pack_uploading", 1, &a_args), "import {trial} did not pass through pack_uploading");
        assert!(!sealed_packs(&a).is_empty(), "no pack waits in A's packs/ after a {ctx}");
        if trial == 1 {
            // Its pack was sealed at its end, after its commits: they must survive.
            all.extend(expected);
        } else {
            // Cut as it started, uploading import 1's pack: it stored nothing.
            fsck_clean(&a, &ctx);
            assert_eq!(visible_exact(&a, &expected, &ctx), 0, "an import cut as it started stored files ({ctx})");
        }
    }
    all_exact(&a, &all, "power cuts at pack_uploading, then an import");
    all_exact(&b, &all, "power cuts at pack_uploading on another node, then an import");
    let r = run(&["fsck", "--deep", &s(&b)]);
    assert!(r.ok(), "{}", r.describe());
}
