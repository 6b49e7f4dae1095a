//! End-to-end tests of the `warcfs` command line: real files, a real RocksDB index, real
//! pack files, and the binary run as a child process.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use tempfile::TempDir;

use common::*;

fn count_files(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir).into_iter().filter(|e| e.as_ref().unwrap().file_type().is_file()).count() as u64
}

/// Asserts `fsck` (and `fsck --deep` if `deep`) exits 0 and reports clean.
fn assert_fsck_clean(store: &Path, deep: bool) {
    let mut args = vec!["fsck".to_string(), s(store)];
    if deep {
        args.push("--deep".into());
    }
    let r = run(&args);
    assert!(r.ok() && r.out().contains(": clean ("), "fsck should be clean:\n{}", r.describe());
}

/// Cats every expected file and checks its bytes; also checks `ls` lists it with its size.
fn assert_all_exact(store: &Path, files: &BTreeMap<String, PathBuf>, listed: &BTreeMap<String, LsEntry>) {
    for (p, src) in files {
        let e = listed.get(p).unwrap_or_else(|| panic!("ls does not show {p}"));
        assert_eq!(e.kind, '-', "{p} should be a regular file: {e:?}");
        assert_eq!(e.size, fs::metadata(src).unwrap().len(), "ls size of {p}");
        assert_cat_eq(store, p, src);
    }
}

#[test]
fn round_trip_real_corpus() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let corpus = real_corpus();
    let r = ok(&["import", &s(&store), &s(&corpus)]);
    let n = count_files(&corpus);
    assert_eq!(n, 30, "the real corpus should hold 29 archives and a README");
    let sum = parse_import_summary(&r.out());
    assert_eq!(sum.files, n, "{}", r.describe());

    let files = expected_files(std::slice::from_ref(&corpus), "/");
    assert_eq!(files.len() as u64, n);
    let listed = ls_tree(&store, "/");
    // Nothing but the copied tree: /real, its subdirectories and its files.
    let listed_files: BTreeSet<&String> = listed.iter().filter(|(_, e)| e.kind != 'd').map(|(p, _)| p).collect();
    assert_eq!(listed_files, files.keys().collect::<BTreeSet<_>>(), "ls shows exactly the imported files");
    assert!(listed.get("/real").is_some_and(|e| e.kind == 'd'), "a directory SRC lands as /basename(SRC)");
    assert_all_exact(&store, &files, &listed);

    let st = stats(&store);
    assert_eq!(num(&st, "files"), n);
    assert_eq!(num(&st, "logical_bytes"), files.values().map(|p| fs::metadata(p).unwrap().len()).sum::<u64>());
    assert!(num(&st, "gzip_members") > 1800, "gzip_members: {st}");
    assert!(num(&st, "gzip_members_raw") <= 10, "gzip_members_raw: {st}");
    assert_eq!(num(&st, "collisions"), 0, "{st}");
    assert!(num(&st, "records") > 0 && num(&st, "payloads") > 0, "{st}");
    assert_fsck_clean(&store, false);
    assert_fsck_clean(&store, true);
}

#[test]
fn round_trip_crawl_corpus_and_dedup() {
    let corpus = crawl_corpus();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let r1 = ok(&["import", &s(&store), &s(corpus)]);
    let first = parse_import_summary(&r1.out());
    let files = expected_files(&[corpus.to_path_buf()], "/");
    assert_eq!(first.files, files.len() as u64);
    let logical: u64 = files.values().map(|p| fs::metadata(p).unwrap().len()).sum();
    assert_eq!(first.bytes_in, logical, "{}", r1.describe());
    assert_all_exact(&store, &files, &ls_tree(&store, "/"));

    let st = stats(&store);
    let (lb, sb) = (num(&st, "logical_bytes"), num(&st, "stored_bytes"));
    let (payloads, unique) = (num(&st, "payloads"), num(&st, "unique_payloads"));
    eprintln!(
        "crawl corpus: logical {lb}, stored {sb} ({:.3}), payloads {payloads}, unique {unique}, first import new bytes {}",
        sb as f64 / lb as f64,
        first.new_bytes
    );
    assert_eq!(lb, logical);
    // Measured: stored/logical = 0.27 (7.0 MB of 26.1 MB). Without cross-crawl dedup the
    // store would hold each crawl's payloads again, about 0.65.
    assert!((sb as f64) < 0.4 * lb as f64, "stored_bytes {sb} should be well below logical_bytes {lb}: {st}");
    assert_eq!(num(&st, "gzip_members_raw"), 0, "wget writes zlib level 9, every member should rebuild: {st}");
    assert!(num(&st, "gzip_members") > 2000, "{st}");
    assert!(unique < payloads, "repeated crawls should share payloads: {st}");
    assert_eq!(num(&st, "collisions"), 0, "{st}");

    // The same corpus again, elsewhere: almost nothing new.
    let r2 = ok(&["import", &s(&store), &s(corpus), "--to", "/again"]);
    let second = parse_import_summary(&r2.out());
    eprintln!("re-import: {} bytes in, {} new bytes stored", second.bytes_in, second.new_bytes);
    assert_eq!(second.files, first.files);
    assert_eq!(second.bytes_in, logical);
    assert!((second.new_bytes as f64) < 0.05 * second.bytes_in as f64, "re-import stored too much: {}", r2.describe());
    let again = expected_files(&[corpus.to_path_buf()], "/again");
    let listed = ls_tree(&store, "/");
    assert_all_exact(&store, &again, &listed);
    assert_all_exact(&store, &files, &listed);
    let st2 = stats(&store);
    assert_eq!(num(&st2, "files"), 2 * first.files);
    assert_eq!(num(&st2, "logical_bytes"), 2 * logical);
    assert!(num(&st2, "stored_bytes") < sb + sb / 20, "re-import grew the packs: {sb} -> {st2}");
    assert_fsck_clean(&store, false);
}

#[test]
fn rm_then_gc_reclaims() {
    let corpus = crawl_corpus();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(corpus)]);
    let files = expected_files(&[corpus.to_path_buf()], "/");
    let top = format!("/{}", corpus.file_name().unwrap().to_str().unwrap());
    let victim = join(&top, "crawl-1.warc.gz");
    assert!(files.contains_key(&victim));
    let before = stats(&store);

    ok(&["rm", &s(&store), &victim]);
    fails_with(&["cat", &s(&store), &victim], &[&victim]);
    let mid = stats(&store);
    assert_eq!(num(&mid, "files"), num(&before, "files") - 1);
    assert!(num(&mid, "unreferenced_chunks") > 0, "crawl-1's own header chunks lose their last reference: {mid}");
    let gc = ok(&["gc", &s(&store)]);
    let reclaimed = gc_reclaimed(&gc);
    eprintln!("rm one crawl: gc reclaimed {reclaimed} of {} stored bytes", num(&before, "stored_bytes"));
    assert!(reclaimed > 0, "{}", gc.describe());
    let after = stats(&store);
    assert_eq!(num(&after, "unreferenced_chunks"), 0, "{after}");
    assert_eq!(num(&after, "stored_bytes"), num(&mid, "stored_bytes") - reclaimed, "gc's figure matches stats");
    assert_fsck_clean(&store, true);
    let remaining: BTreeMap<String, PathBuf> = files.iter().filter(|(p, _)| **p != victim).map(|(p, s)| (p.clone(), s.clone())).collect();
    let listed = ls_tree(&store, "/");
    assert!(!listed.contains_key(&victim));
    assert_all_exact(&store, &remaining, &listed);

    // rm everything: the packs go.
    fails_with(&["rm", &s(&store), &top], &[&top, "is a directory"]);
    ok(&["rm", &s(&store), "-r", &top]);
    assert!(ls(&store, "/").is_empty(), "store root should be empty");
    let gc2 = ok(&["gc", &s(&store)]);
    assert!(gc_reclaimed(&gc2) > 0, "{}", gc2.describe());
    let empty = stats(&store);
    assert_eq!(num(&empty, "files"), 0, "{empty}");
    assert_eq!(num(&empty, "chunks"), 0, "{empty}");
    // Its zstd dictionaries (one per 4 GiB of new data, ~35 KB) stay for the store's life.
    assert!(num(&empty, "dictionaries") <= 1, "{empty}");
    assert!(num(&empty, "stored_bytes") - num(&empty, "dictionary_bytes") < 4096, "an empty store keeps no pack bytes but its dictionaries: {empty}");
    assert_fsck_clean(&store, true);

    // The emptied store still works.
    let one = &remaining.values().find(|p| p.extension().is_some_and(|e| e == "warc")).unwrap().clone();
    ok(&["import", &s(&store), &s(one), "--to", "/back"]);
    assert_cat_eq(&store, &join("/back", one.file_name().unwrap().to_str().unwrap()), one);
    assert_fsck_clean(&store, false);
}

fn gc_reclaimed(r: &Run) -> u64 {
    let out = r.out();
    let line = out.lines().find(|l| l.starts_with("reclaimed ")).unwrap_or_else(|| panic!("no 'reclaimed' line:\n{}", r.describe()));
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("bad gc line {line:?}"))
}

/// Fresh incompressible bytes, so that every trial appends new blobs to the open pack.
fn random_file(path: &Path, len: usize, rng: &mut impl RngCore) {
    let mut buf = vec![0u8; len];
    rng.fill_bytes(&mut buf);
    fs::write(path, buf).unwrap();
}

/// Every file visible under `to` cats exact against its source in `expected`; returns how
/// many there were.
fn visible_files_exact(store: &Path, to: &str, expected: &BTreeMap<String, PathBuf>, ctx: &str) -> usize {
    let root: BTreeMap<String, LsEntry> = ls(store, "/").into_iter().map(|(n, e)| (join("/", &n), e)).collect();
    let listed = if root.contains_key(to) { ls_tree(store, to) } else { BTreeMap::new() };
    let mut n = 0;
    for (p, e) in listed.iter().filter(|(_, e)| e.kind != 'd') {
        let src = expected.get(p).unwrap_or_else(|| panic!("{p} appeared but was never imported ({ctx})"));
        assert_eq!(e.size, fs::metadata(src).unwrap().len(), "ls size of {p} ({ctx})");
        let got = run(&["cat", &s(store), p]);
        assert!(got.ok() && got.stdout == fs::read(src).unwrap(), "{p} is visible but does not cat exact ({ctx}):\n{}", got.stderr);
        n += 1;
    }
    n
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the crash points exist in debug builds only")]
fn a_crash_at_every_durability_point_loses_nothing_committed() {
    // The process is killed (SIGKILL, from inside: WARCFS_CRASH_AT=point:k) on the k-th pass
    // through each durability point of an import and of gc. After each kill the next command
    // recovers, fsck passes, every file that was visible reads back exact, and what was
    // committed before stays exact. Deterministic: the same points on every run.
    let real = real_corpus();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    ok(&["init", &s(&store)]);
    let base_src = vec![real.join("webrecorder-pywb")];
    ok(&[vec!["import".to_string(), s(&store)], base_src.iter().map(|p| s(p)).collect(), vec!["--to".into(), "/base".into()]].concat());
    let base = expected_files(&base_src, "/base");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut trial = 0;
    let crash = |point: &str, k: u64, args: Vec<String>| -> bool {
        let out = warcfs().args(&args).env("WARCFS_CRASH_AT", format!("{point}:{k}")).output().expect("run warcfs");
        use std::os::unix::process::ExitStatusExt;
        let killed = out.status.signal() == Some(libc::SIGKILL);
        assert!(killed || out.status.success(), "{args:?} with a crash at {point}:{k} failed on its own: {}", String::from_utf8_lossy(&out.stderr));
        killed
    };
    let import_points = ["pack_appended", "pack_synced", "before_commit", "log_synced", "committed", "pack_footer_synced", "pack_renamed"];
    let mut killed_at: BTreeMap<&str, usize> = BTreeMap::new();
    for point in import_points {
        for k in [1u64, 4, 16] {
            trial += 1;
            let to = format!("/t{trial}");
            let d = tmp.path().join(format!("src{trial}"));
            fs::create_dir(&d).unwrap();
            random_file(&d.join("fresh.bin"), 3 << 20, &mut rng);
            let srcs = vec![real.join("ukwa-webarchive-discovery"), real.join("webrecorder-warcio"), d.join("fresh.bin")];
            let args = [vec!["import".to_string(), s(&store)], srcs.iter().map(|p| s(p)).collect(), vec!["--to".into(), to.clone()]].concat();
            let killed = crash(point, k, args);
            *killed_at.entry(point).or_default() += killed as usize;
            let ctx = format!("crash at {point}:{k}, killed: {killed}");
            if point == "log_synced" && k == 1 {
                // The next open is killed too, after it sealed what the crash left open but
                // before it applied the logged change: the open after that must apply it.
                assert!(crash("packs_recovered", 1, vec!["fsck".into(), s(&store)]), "fsck did not pass through packs_recovered ({ctx})");
            }
            let r = run(&["fsck", &s(&store)]);
            assert!(r.ok(), "fsck after a {ctx}:\n{}", r.describe());
            visible_files_exact(&store, &to, &expected_files(&srcs, &to), &ctx);
            if point == "log_synced" && k == 1 {
                // The import's first change (creating its directory) reached the metadata
                // log but not the index: the next open applied it.
                assert!(ls(&store, "/").iter().any(|(n, _)| format!("/{n}") == to), "{to} was logged, so it must exist ({ctx})");
            }
            assert_eq!(visible_files_exact(&store, "/base", &base, &ctx), base.len(), "{ctx}");
        }
    }
    eprintln!("imports killed at each point (of 3): {killed_at:?}");
    for point in import_points {
        assert!(killed_at.get(point).copied().unwrap_or(0) > 0, "no import passed through {point}: {killed_at:?}");
    }
    // gc, killed at each of its points with garbage to collect (half the trials removed).
    for (i, point) in ["log_synced", "checkpoint_synced", "gc_before_index", "gc_after_index", "gc_pack_removed"].into_iter().enumerate() {
        ok(&["rm", "-r", &s(&store), &format!("/t{}", 1 + 2 * i)]);
        ok(&["rm", "-r", &s(&store), &format!("/t{}", 2 + 2 * i)]);
        assert!(crash(point, 1, vec!["gc".into(), s(&store)]), "gc did not pass through {point}");
        let r = run(&["fsck", &s(&store)]);
        assert!(r.ok(), "fsck after a crash at {point}:\n{}", r.describe());
        assert_eq!(visible_files_exact(&store, "/base", &base, point), base.len());
    }
    // A clean gc after all of it: nothing unreferenced left, everything still exact.
    ok(&["gc", &s(&store)]);
    assert_fsck_clean(&store, true);
    assert_eq!(num(&stats(&store), "unreferenced_chunks"), 0);
    assert_eq!(visible_files_exact(&store, "/base", &base, "after gc"), base.len());
}

#[test]
fn crash_during_store_creation_leaves_a_usable_dir() {
    // An import that creates its store and is killed while doing so must leave a directory
    // that a later import can still use (either no store yet, or a whole one).
    let tmp = TempDir::new().unwrap();
    let src = tmp.path().join("small.bin");
    random_file(&src, 64 << 10, &mut rand::rngs::StdRng::seed_from_u64(1));
    let mut broken = Vec::new();
    for i in 0..40u64 {
        let store = tmp.path().join(format!("store{i}"));
        let mut child = warcfs().arg("import").arg(&store).arg(&src).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_micros(i * 500));
        let _ = child.kill();
        child.wait().unwrap();
        let r = run(&["import", &s(&store), &s(&src)]);
        if !r.ok() {
            let contents: Vec<String> = fs::read_dir(&store).map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
            broken.push(format!("kill after {} us: {} (store holds {contents:?})", i * 500, r.stderr.trim()));
        } else {
            assert_cat_eq(&store, "/small.bin", &src);
        }
    }
    // BUG (src/store/mod.rs, Store::open_with): the store directory, lock, packs/, index/ and
    // warcfs.tmp are created before warcfs.json is renamed into place; a kill in between
    // (usually during write_file_atomic's fsync) leaves a non-empty directory without
    // warcfs.json, which every later command rejects as "not a warcfs store".
    assert!(broken.is_empty(), "a killed store creation left unusable stores:\n{}", broken.join("\n"));
}

#[test]
fn fsck_reports_flipped_byte_with_files() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let corpus = real_corpus();
    ok(&["import", &s(&store), &s(&corpus)]);
    let files = expected_files(std::slice::from_ref(&corpus), "/");
    assert_fsck_clean(&store, false);

    // Flip one byte in the middle of the stored data of a blob in the middle of the largest pack.
    let pack = sealed_packs(&store).into_iter().max_by_key(|p| fs::metadata(p).unwrap().len()).expect("a sealed pack");
    let data = fs::read(&pack).unwrap();
    let blobs = pack_blobs(&data);
    assert!(blobs.len() > 10, "{} blobs in {}", blobs.len(), pack.display());
    let blob = blobs[blobs.len() / 2..].iter().find(|b| b.stored_len >= 16).expect("a blob with some data");
    let at = blob.offset + BLOB_HEADER_LEN as u64 + blob.stored_len as u64 / 2;
    let mut perms = fs::metadata(&pack).unwrap().permissions();
    perms.set_mode(0o644);
    fs::set_permissions(&pack, perms).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&pack).unwrap();
    f.write_all_at(&[data[at as usize] ^ 0x5a], at).unwrap();
    drop(f);

    let r = run(&["fsck", &s(&store)]);
    assert!(r.code == Some(1), "fsck must find problems (exit 1) in a flipped byte:\n{}", r.describe());
    let out = r.out();
    let mut affected = BTreeSet::new();
    for line in out.lines().filter(|l| l.contains("(files: ")) {
        let list = &line[line.rfind("(files: ").unwrap() + 8..line.rfind(')').unwrap()];
        affected.extend(list.split(", ").filter(|p| p.starts_with('/')).map(str::to_string));
    }
    assert!(!affected.is_empty(), "fsck should name the damaged files (a line with 'files: /'):\n{}", r.describe());
    for p in &affected {
        assert!(files.contains_key(p), "fsck names {p}, which was never imported:\n{out}");
        // Reading a damaged file fails; whatever it wrote before failing is a correct prefix.
        let c = run(&["cat", &s(&store), p]);
        assert!(c.code.is_some() && !c.ok(), "cat of damaged {p} must fail:\n{}", c.describe());
        assert!(c.stderr.starts_with("warcfs: ") && c.stderr.contains(p.as_str()), "{}", c.describe());
        let want = fs::read(&files[p]).unwrap();
        assert!(c.stdout.len() < want.len() && want.starts_with(&c.stdout), "cat of damaged {p} printed wrong bytes");
    }
    // Files that share nothing with the damaged blob still read back exactly.
    let intact: Vec<_> = files.iter().filter(|(p, _)| !affected.contains(*p)).take(5).collect();
    assert!(!intact.is_empty());
    for (p, src) in intact {
        assert_cat_eq(&store, p, src);
    }
    let deep = run(&["fsck", &s(&store), "--deep"]);
    assert!(!deep.ok() && deep.out().contains("files: /"), "{}", deep.describe());

    // --json: the same problems in one object, and the same exit status.
    for (text, json) in [(&r, run(&["fsck", &s(&store), "--json"])), (&deep, run(&["fsck", &s(&store), "--deep", "--json"]))] {
        assert_eq!(json.code, text.code, "{}", json.describe());
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.describe()));
        assert_eq!(v["clean"], false, "{v}");
        let problems: Vec<&str> = v["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
        assert_eq!(problems, text.out().lines().collect::<Vec<_>>(), "{v}");
        assert_eq!(num(&v, "problem_count"), problems.len() as u64);
        assert_eq!(num(&v, "more_problems"), 0);
    }
}

/// A bug (a panic) in one of the threads that rebuild a file's parts for `cat` must end the
/// `cat` with an error naming the file, not leave it waiting for that part forever (in the
/// mount, the same copy runs while a copy-on-write holds the staged files: a wait there would
/// stall every request). A failpoint (debug builds only) panics in the first part taken.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_panic_while_copying_out_is_an_error_not_a_hang() {
    let tmp = TempDir::new().unwrap();
    let (store, src) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    let args = ["cat".to_string(), s(&store), "/example.warc.gz".to_string()];
    let mut child = warcfs().args(&args).env("WARCFS_FAILPOINTS", "copy_to=1").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn warcfs cat");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("warcfs {args:?} still running 60 s after a part's rebuild panicked: it waits for that part forever");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success(), "cat succeeded although a part of the file panicked");
    // (Above it, the panic's own report, as for any bug.)
    let last = stderr.lines().rev().find(|l| l.starts_with("warcfs: ")).unwrap_or_default();
    assert!(last.contains("/example.warc.gz") && last.contains("failpoint copy_to fired"), "no error line naming the file and the bug; stderr:\n{stderr}");
    // Without the failpoint the same command gives the file's bytes.
    assert_cat_eq(&store, "/example.warc.gz", &src);
}

#[test]
fn bad_input_gets_one_line_and_nonzero_exit() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let st = s(&store);

    // A missing source: named, and nothing is created.
    let missing = tmp.path().join("no-such-source.warc.gz");
    fails_with(&["import", &st, &s(&missing)], &[&s(&missing)]);
    assert!(!store.exists(), "a failed import must not create the store");

    // No such store: named, and not created by a read-only command.
    let nostore = tmp.path().join("nostore");
    fails_with(&["cat", &s(&nostore), "/x"], &[&s(&nostore), "no such store"]);
    fails_with(&["ls", &s(&nostore)], &[&s(&nostore), "no such store"]);
    fails_with(&["stats", &s(&nostore)], &[&s(&nostore)]);
    assert!(!nostore.exists(), "cat/ls/stats must not create a store");
    // An empty directory is no store either, for commands that do not create one.
    let emptydir = tmp.path().join("emptydir");
    fs::create_dir(&emptydir).unwrap();
    fails_with(&["ls", &s(&emptydir)], &[&s(&emptydir), "no such store"]);
    assert_eq!(fs::read_dir(&emptydir).unwrap().count(), 0);

    // A store with a file; missing paths in it.
    let src = tmp.path().join("a.txt");
    fs::write(&src, b"hello\n").unwrap();
    ok(&["import", &st, &s(&src), "--to", "/d"]);
    fails_with(&["cat", &st, "/d/missing.warc"], &["/d/missing.warc"]);
    fails_with(&["cat", &st, "/d"], &["/d", "is a directory"]);
    fails_with(&["ls", &st, "/nowhere"], &["/nowhere"]);
    fails_with(&["rm", &st, "/d/missing"], &["/d/missing"]);
    assert_cat_eq(&store, "/d/a.txt", &src);

    // A non-empty directory that is not a store: refused and left alone.
    let notstore = tmp.path().join("notstore");
    fs::create_dir(&notstore).unwrap();
    fs::write(notstore.join("keep.txt"), b"mine").unwrap();
    fails_with(&["import", &s(&notstore), &s(&src)], &[&s(&notstore), "not a warcfs store"]);
    fails_with(&["stats", &s(&notstore)], &[&s(&notstore), "not a warcfs store"]);
    fails_with(&["init", &s(&notstore)], &[&s(&notstore), "not a warcfs store"]);
    let names: Vec<_> = fs::read_dir(&notstore).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("keep.txt")], "nothing may be written into a foreign directory");
    // A plain file where the store should be.
    fails_with(&["stats", &s(&src)], &[&s(&src)]);

    // A store of a future format version.
    let future = tmp.path().join("future");
    ok(&["init", &s(&future)]);
    let cfg_path = future.join("warcfs.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    assert_eq!(cfg["format"], "warcfs-store");
    assert_eq!(cfg["version"], 7);
    // And one of the version before (no metadata in the packs), which this warcfs refuses too.
    let old = tmp.path().join("old");
    ok(&["init", &s(&old)]);
    let mut old_cfg = cfg.clone();
    old_cfg["version"] = 2.into();
    fs::write(old.join("warcfs.json"), serde_json::to_vec(&old_cfg).unwrap()).unwrap();
    let line = fails_with(&["ls", &s(&old)], &[&s(&old), "unsupported store format", "version 2", "versions 3, 4"]);
    assert!(line.contains("import"), "should say what to do: {line}");
    cfg["version"] = 99.into();
    fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    for cmd in [vec!["stats", &s(&future)], vec!["ls", &s(&future)], vec!["import", &s(&future), &s(&src)]] {
        let line = fails_with(&cmd, &[&s(&future), "unsupported store format"]);
        assert!(line.contains("99"), "should say which version it found: {line}");
    }

    // A busy store: another process holds the lock (and wrote its pid into it).
    let lock = FileLock::exclusive(&store.join("lock"));
    lock.file().set_len(0).unwrap();
    writeln!(lock.file(), "{}", std::process::id()).unwrap();
    let busy = format!("in use by process {}", std::process::id());
    fails_with(&["import", &st, &s(&src), "--to", "/e"], &[&st, &busy]);
    fails_with(&["rm", &st, "/d/a.txt"], &[&st, &busy]);
    fails_with(&["fsck", &st], &[&st, &busy]);
    fails_with(&["gc", &st], &[&st, &busy]);
    // Reading works on a store another process owns (a live mount): read-only.
    ok(&["stats", &st]);
    assert_cat_eq(&store, "/d/a.txt", &src);
    drop(lock);
    assert_cat_eq(&store, "/d/a.txt", &src);
    assert!(ls(&store, "/").iter().all(|(n, _)| n != "e"), "a refused import must not have written");

    // Bad arguments are refused by the parser with the usage exit status.
    let r = run(&["init", &s(&tmp.path().join("x")), "--verify", "sometimes"]);
    assert_eq!(r.code, Some(2), "{}", r.describe());
    assert!(!tmp.path().join("x").exists());
}

#[test]
fn init_modes_and_import_of_plain_files() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let st = s(&store);
    let r = ok(&["init", &st, "--verify", "size", "--compression", "none"]);
    assert!(r.out().contains(&st), "{}", r.describe());
    let cfg: serde_json::Value = serde_json::from_slice(&fs::read(store.join("warcfs.json")).unwrap()).unwrap();
    assert_eq!((cfg["format"].as_str(), cfg["version"].as_u64()), (Some("warcfs-store"), Some(7)), "{cfg}");
    assert_eq!((cfg["verify"].as_str(), cfg["compression"].as_str()), (Some("size"), Some("none")), "{cfg}");
    fails_with(&["init", &st], &[&st, "already exists"]);
    fails_with(&["init", &st, "--compression", "zstd"], &[&st, "already exists"]);
    let cfg2: serde_json::Value = serde_json::from_slice(&fs::read(store.join("warcfs.json")).unwrap()).unwrap();
    assert_eq!(cfg, cfg2, "a refused init must not change the store's settings");

    // A tree of non-WARC files.
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let src = tmp.path().join("plain");
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::create_dir_all(src.join("empty-dir")).unwrap();
    let sizes: [(&str, usize); 7] =
        [("zero.bin", 0), ("one.bin", 1), ("a/page.bin", 4095), ("a/b/odd.bin", 65543), ("a/b/c/big.bin", 5 << 20), ("a/b/c/mid.bin", 1 << 20), ("copy-of-mid.bin", 0)];
    for (name, len) in sizes {
        if name == "copy-of-mid.bin" {
            fs::copy(src.join("a/b/c/mid.bin"), src.join(name)).unwrap();
        } else {
            random_file(&src.join(name), len, &mut rng);
        }
    }
    let text: String = (0..2000).map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog\n")).collect();
    fs::write(src.join("a/notes.txt"), &text).unwrap();
    fs::write(src.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(src.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    symlink("a/notes.txt", src.join("link-to-notes")).unwrap();
    symlink("/nonexistent/target", src.join("a/dangling")).unwrap();

    let r = ok(&["import", &st, &s(&src), "--to", "/in/here"]);
    let files = expected_files(std::slice::from_ref(&src), "/in/here");
    assert_eq!(files.len(), 9);
    let sum = parse_import_summary(&r.out());
    assert_eq!(sum.files, files.len() as u64, "{}", r.describe());
    let total: u64 = files.values().map(|p| fs::metadata(p).unwrap().len()).sum();
    assert_eq!(sum.bytes_in, total);
    // The duplicate 1 MiB file is stored once.
    assert!(sum.new_bytes < total - (1 << 20) + (64 << 10), "{}", r.describe());

    let listed = ls_tree(&store, "/");
    assert_all_exact(&store, &files, &listed);
    for d in ["/in", "/in/here", "/in/here/plain", "/in/here/plain/a/b/c", "/in/here/plain/empty-dir"] {
        assert_eq!(listed.get(d).map(|e| e.kind), Some('d'), "{d} should be a directory");
    }
    assert!(ls(&store, "/in/here/plain/empty-dir").is_empty());
    let link = &listed["/in/here/plain/link-to-notes"];
    assert_eq!((link.kind, link.target.as_deref()), ('l', Some("a/notes.txt")), "{link:?}");
    let raw_ls = ok(&["ls", &st, "/in/here/plain"]).out();
    assert!(raw_ls.lines().any(|l| l.starts_with('l') && l.ends_with("link-to-notes -> a/notes.txt")), "{raw_ls}");
    assert_eq!(listed["/in/here/plain/a/dangling"].target.as_deref(), Some("/nonexistent/target"));
    assert_eq!(listed["/in/here/plain/run.sh"].perms, "rwxr-xr-x", "modes are kept");
    fails_with(&["cat", &st, "/in/here/plain/link-to-notes"], &["/in/here/plain/link-to-notes", "symbolic link"]);
    assert!(cat(&store, "/in/here/plain/zero.bin").is_empty());
    // ls of one file lists that file.
    let one = ls(&store, "/in/here/plain/a/b/c/big.bin");
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].1.kind, one[0].1.size), ('-', 5 << 20));

    let stt = stats(&store);
    assert_eq!(num(&stt, "files"), files.len() as u64, "{stt}");
    assert_eq!(num(&stt, "logical_bytes"), total, "{stt}");
    assert_eq!(num(&stt, "gzip_members"), 0, "{stt}");
    assert_eq!(num(&stt, "collisions"), 0, "{stt}");
    assert!(num(&stt, "stored_bytes") < total, "the duplicate is stored once: {stt}");
    // --compression none: every blob in every pack is stored as is.
    let packs = sealed_packs(&store);
    assert!(!packs.is_empty());
    let mut blobs = 0;
    for p in &packs {
        for b in pack_blobs(&fs::read(p).unwrap()) {
            assert_eq!(b.codec, 0, "{}: blob at {} is compressed despite --compression none", p.display(), b.offset);
            assert_eq!(b.raw_len, b.stored_len);
            blobs += 1;
        }
    }
    assert!(blobs > 0);
    // The text file would shrink a lot under zstd; here the packs hold at least the unique bytes.
    assert!(num(&stt, "stored_bytes") >= total - (1 << 20), "{stt}");
    assert_fsck_clean(&store, true);

    // Importing onto an existing name replaces it (as cp would); and a second default store
    // compresses the text file.
    fs::write(src.join("a/notes.txt"), b"short now\n").unwrap();
    ok(&["import", &st, &s(&src.join("a/notes.txt")), "--to", "/in/here/plain/a"]);
    assert_eq!(cat(&store, "/in/here/plain/a/notes.txt"), b"short now\n");
    assert_fsck_clean(&store, false);

    let zstore = tmp.path().join("zstore");
    fs::write(src.join("a/notes.txt"), &text).unwrap();
    ok(&["import", &s(&zstore), &s(&src.join("a/notes.txt"))]);
    let zst = stats(&zstore);
    assert!(num(&zst, "stored_bytes") < text.len() as u64 / 4, "default compression is zstd: {zst}");
    assert_eq!(cat(&zstore, "/notes.txt"), text.as_bytes());
}

/// What a store keeps on disk: packs and index data (RocksDB's own text logs left out).
fn store_data_bytes(store: &Path) -> u64 {
    walkdir::WalkDir::new(store)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter(|e| {
            let n = e.file_name().to_string_lossy();
            !(n.starts_with("LOG") || n.starts_with("OPTIONS") || n == "warcfs.log")
        })
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// gzip members written by other deflate engines than wget's zlib dedup like wget's: the
/// test crawl compressed again member by member with GNU gzip (and, for its first members,
/// zopfli) and imported after the original adds little more than the members' own parses
/// (the issue's budget: 15 % of the file), keeps no member raw, and reads back exact.
#[test]
fn a_crawl_regzipped_by_other_writers_dedups_against_the_original() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let orig_path = crawl_files().into_iter().find(|p| p.to_string_lossy().ends_with("crawl-1.warc.gz")).unwrap();
    let orig = fs::read(&orig_path).unwrap();
    let gnu = tmp.path().join("gnu-gzip.warc.gz");
    fs::write(&gnu, regzip_members(&orig, &["gzip", "-9", "-n", "-c"], usize::MAX)).unwrap();
    let zop = tmp.path().join("zopfli.warc.gz");
    fs::write(&zop, regzip_members(&orig, &["zopfli", "--i1", "-c"], 60)).unwrap();
    assert_ne!(fs::read(&gnu).unwrap(), orig, "gzip should write other bytes than wget's zlib");

    ok(&["import", &s(&store), &s(&orig_path), "--to", "/a"]);
    let before = store_data_bytes(&store);
    for (f, name) in [(&gnu, "gnu-gzip.warc.gz"), (&zop, "zopfli.warc.gz")] {
        let size = fs::metadata(f).unwrap().len();
        let at = store_data_bytes(&store);
        ok(&["import", &s(&store), &s(f), "--to", "/a"]);
        let grew = store_data_bytes(&store).saturating_sub(at);
        eprintln!("{name}: {size} bytes, the store grew {grew} ({:.1} %)", 100.0 * grew as f64 / size as f64);
        assert!(grew * 100 <= size * 15, "{name} grew the store by {grew} bytes, over 15 % of its {size}");
        assert_cat_eq(&store, &format!("/a/{name}"), f);
    }
    let st = stats(&store);
    assert_eq!(num(&st, "gzip_members_raw"), 0, "{st}");
    assert!(store_data_bytes(&store) > before);
    assert_cat_eq(&store, "/a/crawl-1.warc.gz", &orig_path);
    assert_fsck_clean(&store, true);
}

/// A member whose rebuild does not give its original bytes (the recipe keeps their CRC-32)
/// is an error naming the file and the member's offset, never wrong bytes. A failpoint
/// (debug builds only) damages the first rebuilt member after its replay, as a damaged store
/// or a bug would.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_member_that_does_not_rebuild_exactly_is_an_error_not_wrong_bytes() {
    let tmp = TempDir::new().unwrap();
    let (store, src) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    let out = warcfs().args(["cat", &s(&store), "/example.warc.gz"]).env("WARCFS_FAILPOINTS", "member_rebuilt=1").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "cat succeeded with a damaged member");
    let line = stderr.lines().rev().find(|l| l.starts_with("warcfs: ")).unwrap_or_default();
    assert!(line.contains("/example.warc.gz") && line.contains("gzip member at offset") && line.contains("does not rebuild"), "stderr:\n{stderr}");
    let full = fs::read(&src).unwrap();
    assert!(out.stdout.len() < full.len() && full.starts_with(&out.stdout), "cat wrote bytes past the damaged member, or wrong ones");
    assert_cat_eq(&store, "/example.warc.gz", &src);
}

#[test]
fn a_store_whose_index_is_missing_or_unreadable_is_refused_not_taken_for_empty() {
    // An index that went missing used to open as an empty store, and the next gc deleted
    // every pack. Every command must refuse it, naming the index, and leave the packs alone.
    let tmp = TempDir::new().unwrap();
    let sample = "webrecorder-warcio/example.warc.gz";
    let (store, src) = store_with_sample(tmp.path(), sample);
    let packs = store.join("packs");
    let packs_before = tree_bytes(&packs);
    assert!(packs_before > 0);
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let commands = |store: &Path| -> Vec<Vec<String>> {
        let st = s(store);
        [
            vec!["gc", &st],
            vec!["ls", &st],
            vec!["cat", &st, "/example.warc.gz"],
            vec!["stats", &st],
            vec!["fsck", &st],
            vec!["index", &st],
            vec!["import", &st, &s(&src)],
            vec!["mount", &st, &s(&mnt)],
        ]
        .iter()
        .map(|v| v.iter().map(|a| a.to_string()).collect())
        .collect()
    };
    let refused = |why: &str| {
        for args in commands(&store) {
            let r = run(&args);
            assert!(!r.ok() && r.stderr.contains("index") && r.stderr.contains(why), "{args:?} should refuse ({why}):\n{}", r.describe());
            assert_eq!(tree_bytes(&packs), packs_before, "{args:?} touched the packs");
        }
    };
    fs::rename(store.join("index"), tmp.path().join("index.saved")).unwrap();
    refused("is missing");
    assert!(!store.join("index").exists(), "no command may create an empty index in its place");
    // An index directory RocksDB cannot open (its CURRENT names a manifest that is not there).
    fs::create_dir(store.join("index")).unwrap();
    fs::write(store.join("index/CURRENT"), "MANIFEST-999999\n").unwrap();
    refused("cannot be opened");
    assert!(refused_msg(&store).contains("warcfs repair index"), "the refusal says how to rebuild");
    // Rebuilt from the packs: the unreadable index is kept aside, the store is whole again.
    let r = ok(&["repair", "index", &s(&store)]);
    assert!(store.join("index.unreadable.1/CURRENT").exists(), "{}", r.describe());
    assert_cat_eq(&store, "/example.warc.gz", &src);
    assert_fsck_clean(&store, true);
    // An index that opens is never replaced.
    let r = run(&["repair", "index", &s(&store)]);
    assert!(!r.ok() && r.stderr.contains("index opens"), "{}", r.describe());
}

fn refused_msg(store: &Path) -> String {
    run(&["ls", &s(store)]).stderr
}

#[test]
fn repair_index_rebuilds_every_file_name_and_refcount_from_the_packs_alone() {
    // A store with history: imports, a file replaced, files and a directory removed, a
    // symlink. After `rm -rf STORE/index`, repair must give back exactly what was there:
    // names, sizes, modes, bytes, the CDXJ index, refcounts (fsck), and gc must then find
    // exactly the garbage it found before.
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let real = real_corpus();
    let crawl = crawl_files()[0].clone();
    ok(&["import", &s(&store), &s(&real), &s(&crawl)]);
    ok(&["import", &s(&store), &s(&real.join("webrecorder-warcio")), "--to", "/again"]);
    ok(&["rm", &s(&store), "/real/README.md"]);
    ok(&["rm", "-r", &s(&store), "/real/iipc-jwarc"]);
    // A file replaced by other bytes under the same name.
    let other = real.join("webrecorder-pywb");
    let replaced = fs::read_dir(&other).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_file()).unwrap();
    let target = tmp.path().join("warcio");
    fs::create_dir(&target).unwrap();
    let name = fs::read_dir(real.join("webrecorder-warcio")).unwrap().map(|e| e.unwrap().file_name()).next().unwrap();
    fs::copy(&replaced, target.join(&name)).unwrap();
    ok(&["import", &s(&store), &s(&target.join(&name)), "--to", "/again/webrecorder-warcio"]);
    let link_src = tmp.path().join("a-link");
    symlink("real/webrecorder-warcio", &link_src).unwrap();
    ok(&["import", &s(&store), &s(&link_src)]);

    let tree = ls_tree(&store, "/");
    let cdxj = ok(&["index", &s(&store)]).stdout;
    let bytes: BTreeMap<String, Vec<u8>> = tree.iter().filter(|(_, e)| e.kind == '-').map(|(p, _)| (p.clone(), ok(&["cat", &s(&store), p]).stdout)).collect();
    let before = stats(&store);
    assert_fsck_clean(&store, true);

    fs::remove_dir_all(store.join("index")).unwrap();
    let r = ok(&["repair", "index", &s(&store)]);
    assert!(r.out().contains("metadata log records"), "{}", r.describe());
    assert_fsck_clean(&store, true);
    assert_eq!(ls_tree(&store, "/"), tree, "names, kinds, sizes and modes come back");
    for (p, want) in &bytes {
        assert!(ok(&["cat", &s(&store), p]).stdout == *want, "{p} reads back exact after repair");
    }
    assert!(ok(&["index", &s(&store)]).stdout == cdxj, "the CDXJ index is the same");
    let after = stats(&store);
    for k in ["files", "directories", "logical_bytes", "chunks", "unreferenced_chunks", "records", "unique_payloads"] {
        assert_eq!(num(&after, k), num(&before, k), "stats {k} after repair");
    }
    // The store goes on: gc drops what was garbage before (and checkpoints the log, whose
    // older records it collects), a new import dedups, fsck clean.
    let log_before_gc = num(&stats(&store), "log_bytes");
    ok(&["gc", &s(&store)]);
    let st = stats(&store);
    assert_eq!(num(&st, "unreferenced_chunks"), 0);
    assert!(num(&st, "log_bytes") < log_before_gc, "a checkpoint replaces the history: {} -> {}", log_before_gc, num(&st, "log_bytes"));
    // Lost again after the checkpoint: repair starts from it.
    fs::remove_dir_all(store.join("index")).unwrap();
    ok(&["repair", "index", &s(&store)]);
    assert_fsck_clean(&store, true);
    assert_eq!(ls_tree(&store, "/"), tree, "the tree again, from the checkpoint");
    assert!(ok(&["index", &s(&store)]).stdout == cdxj, "the CDXJ index again");
    let again = ok(&["import", &s(&store), &s(&crawl), "--to", "/after-repair"]);
    assert!(parse_import_summary(&again.out()).new_bytes * 50 < fs::metadata(&crawl).unwrap().len(), "a crawl stored before repair dedups after it:\n{}", again.describe());
    assert_fsck_clean(&store, true);

    // A backup of the packs alone (no settings file, no scratch directories) is a store
    // once repaired: the settings come back as the defaults, and it says so.
    let tree = ls_tree(&store, "/");
    let restored = tmp.path().join("restored");
    fs::create_dir(&restored).unwrap();
    let cp = std::process::Command::new("cp").arg("-a").arg(store.join("packs")).arg(&restored).status().unwrap();
    assert!(cp.success());
    let r = ok(&["repair", "index", &s(&restored)]);
    assert!(r.out().contains("warcfs.json was missing"), "{}", r.describe());
    assert_fsck_clean(&restored, true);
    assert_eq!(ls_tree(&restored, "/"), tree, "the tree, from the packs alone");
    // Packs that hold chunks but no metadata log (not a whole store's) are refused, and
    // leave no settings file behind that would make the directory look like a store.
    let partial = tmp.path().join("partial");
    fs::create_dir_all(partial.join("packs")).unwrap();
    let data_pack = fs::read_dir(store.join("packs")).unwrap().map(|e| e.unwrap().path()).max_by_key(|p| fs::metadata(p).unwrap().len()).unwrap();
    fs::copy(&data_pack, partial.join("packs").join(data_pack.file_name().unwrap())).unwrap();
    let err = fails_with(&["repair", "index", &s(&partial)], &["no metadata log record"]);
    assert!(!partial.join("warcfs.json").exists(), "{err}");
}

#[test]
fn a_record_claiming_more_than_its_file_is_indexed_not_allocated() {
    // A 181-byte WARC whose one record claims a Content-Length of 10^15 - 1: `warcfs index`
    // used to abort allocating that much. It must print what cdxj-indexer prints (the record
    // ends with the file), and the same for the file gzipped as one member.
    let tmp = TempDir::new().unwrap();
    let warc = tmp.path().join("claims.warc");
    fs::write(
        &warc,
        b"WARC/1.0\r\nWARC-Type: resource\r\nWARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Record-ID: <urn:uuid:1>\r\nWARC-Target-URI: http://x/999999999999999\r\nContent-Length: 999999999999999\r\n\r\nhello\r\n\r\n",
    )
    .unwrap();
    let gz = tmp.path().join("claims.warc.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    e.write_all(&fs::read(&warc).unwrap()).unwrap();
    fs::write(&gz, e.finish().unwrap()).unwrap();
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&warc), &s(&gz)]);
    let r = ok(&["index", &s(&store)]);
    let out = r.out();
    let lines: Vec<&str> = out.lines().collect();
    let want = r#"x)/999999999999999 20240101000000 {"url": "http://x/999999999999999", "digest": "sha1:KVJNE6CJ6MRYFCUPAVZIOPGPYW46DVUY", "length": "181", "offset": "0", "filename": "claims.warc"}"#;
    assert!(lines.contains(&want), "the plain record as cdxj-indexer indexes it:\n{}", r.describe());
    assert!(lines.iter().any(|l| l.contains("\"filename\": \"claims.warc.gz\"") && l.contains("KVJNE6CJ6MRYFCUPAVZIOPGPYW46DVUY")), "the gzip record:\n{}", r.describe());
    assert_cat_eq(&store, "/claims.warc", &warc);
    assert_cat_eq(&store, "/claims.warc.gz", &gz);
}

/// A record with no payload digest in a plain `.warc` is indexed from its block, which
/// `warcfs index` read whole: a 600 MB block was a 600 MB allocation (a multi-GB one aborts
/// the command). Under a 300 MB limit on the process's data, the line comes out with the
/// digest cdxj-indexer computes.
#[test]
fn a_large_block_is_digested_as_it_is_read_not_held() {
    use sha1::Digest as _;
    let tmp = TempDir::new().unwrap();
    let warc = tmp.path().join("big.warc");
    let size: usize = 600 << 20;
    let mut f = std::io::BufWriter::new(fs::File::create(&warc).unwrap());
    write!(f, "WARC/1.0\r\nWARC-Type: resource\r\nWARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Record-ID: <urn:uuid:1>\r\nWARC-Target-URI: http://x/big.bin\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n").unwrap();
    let mut h = sha1::Sha1::new();
    let chunk = vec![7u8; 1 << 20];
    for _ in 0..size >> 20 {
        f.write_all(&chunk).unwrap();
        h.update(&chunk);
    }
    f.write_all(b"\r\n\r\n").unwrap();
    drop(f);
    let digest = format!("sha1:{}", data_encoding::BASE32.encode(&h.finalize()));
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&warc)]);
    let out = std::process::Command::new("bash").arg("-c").arg(format!("ulimit -d {}; exec \"$0\" index \"$1\"", 300 << 10)).arg(env!("CARGO_BIN_EXE_warcfs")).arg(&store).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("\"digest\": \"{digest}\"")) && stdout.contains("\"filename\": \"big.warc\""), "{stdout}");
}

/// Imports a real `.warc.gz` and a directory with `failpoint` armed: the import fails with
/// an error line naming the file and saying `says`, and commits nothing of the file; imported
/// again without the failpoint, it is stored exact. Returns the store (in `tmp`).
fn import_fails_naming_the_file(tmp: &TempDir, failpoint: &str, says: &str) -> PathBuf {
    let real = real_corpus();
    let (a, b) = (real.join("webrecorder-warcio/example.warc.gz"), real.join("iipc-jwarc"));
    let store = tmp.path().join("store");
    let r = run_env(&["import", &s(&store), &s(&a), &s(&b)], &[("WARCFS_FAILPOINTS", failpoint)]);
    assert!(!r.ok(), "{}", r.describe());
    // The error line, not only a panic hook's message: the failure came back as this file's.
    let line = r.stderr.lines().find(|l| l.contains("example.warc.gz")).unwrap_or_default();
    assert!(line.contains("import failed") && line.contains(says), "{}", r.describe());
    assert!(!ls(&store, "/").iter().any(|(n, _)| n == "example.warc.gz"), "a file whose import failed must not be committed");
    ok(&["import", &s(&store), &s(&a)]);
    assert_cat_eq(&store, "/example.warc.gz", &a);
    assert_fsck_clean(&store, false);
    store
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_file_that_changes_during_its_import_is_an_error_naming_it_and_not_stored() {
    // The change itself is detected from the file's size and times (unit test in cli.rs);
    // here a failpoint makes the first file look changed, at the moment import checks.
    let tmp = TempDir::new().unwrap();
    import_fails_naming_the_file(&tmp, "source_changed=1", "changed while it was being imported");
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_bug_while_proving_parses_is_that_files_error() {
    // The proofs run on threads of the thread that reads windows ahead: a panic there (a
    // parser bug, here at every proof) must come back as that file's error, with its own
    // message, and leave the store as it was.
    let tmp = TempDir::new().unwrap();
    let store = import_fails_naming_the_file(&tmp, "prove=1000000", "ingest panicked: failpoint prove fired");
    // A panic in the loader that splits the next file's first window ahead leaves that
    // window to the ingest: the import goes on.
    let c = real_corpus().join("webrecorder-pywb/example-wget-1-14.warc.gz");
    let r = run_env(&["import", &s(&store), &s(&c)], &[("WARCFS_FAILPOINTS", "presplit=1")]);
    assert!(r.ok() && r.stderr.contains("failpoint presplit fired"), "{}", r.describe());
    assert_cat_eq(&store, "/example-wget-1-14.warc.gz", &c);
}

/// A store in `tmp` where `name` is a directory (a file imported under that name fails at
/// its commit: "is a directory"), made by importing a directory of that name.
fn store_with_dir_named(tmp: &TempDir, name: &str) -> PathBuf {
    let store = tmp.path().join("store");
    let dir = tmp.path().join("src").join(name);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("inside"), b"x").unwrap();
    ok(&["import", &s(&store), &s(&dir)]);
    store
}

#[test]
fn a_file_whose_commit_fails_stops_the_import_and_the_file_before_it_stays_stored() {
    // A file's commit is made while the next file's first windows are proven (import's
    // overlap of the two): each failure must still be its own file's, and a file before it
    // stored as if they had been imported one after another.
    let real = real_corpus();
    let (a, b) = (real.join("webrecorder-warcio/example.warc.gz"), real.join("webrecorder-pywb/example-wget-1-14.warc.gz"));
    // The second file's commit fails: the first is stored, the second is not.
    let tmp = TempDir::new().unwrap();
    let store = store_with_dir_named(&tmp, "example-wget-1-14.warc.gz");
    let r = run(&["import", &s(&store), &s(&a), &s(&b)]);
    assert!(!r.ok(), "{}", r.describe());
    let line = r.stderr.lines().find(|l| l.contains("import failed")).unwrap_or_default();
    assert!(line.contains("example-wget-1-14.warc.gz") && line.contains("is a directory") && !line.contains("example.warc.gz"), "{}", r.describe());
    assert_cat_eq(&store, "/example.warc.gz", &a);
    assert_fsck_clean(&store, false);
    // The first file's commit fails (made during the second's ingest): the error names the
    // first, and the second, ingested after it, is not stored either.
    let tmp = TempDir::new().unwrap();
    let store = store_with_dir_named(&tmp, "example-wget-1-14.warc.gz");
    let r = run(&["import", &s(&store), &s(&b), &s(&a)]);
    assert!(!r.ok(), "{}", r.describe());
    let line = r.stderr.lines().find(|l| l.contains("import failed")).unwrap_or_default();
    assert!(line.contains("example-wget-1-14.warc.gz") && line.contains("is a directory"), "{}", r.describe());
    assert!(!ls(&store, "/").iter().any(|(n, _)| n == "example.warc.gz"), "a file after one whose commit failed must not be committed\n{}", r.describe());
    assert_fsck_clean(&store, false);
    // The file before one that cannot be opened (a failpoint at the second file's open,
    // made by the loader while the first is ingested) is stored too.
    if cfg!(debug_assertions) {
        let tmp = TempDir::new().unwrap();
        let store = tmp.path().join("store");
        let r = run_env(&["import", &s(&store), &s(&a), &s(&b)], &[("WARCFS_FAILPOINTS", "load=1+1")]);
        assert!(!r.ok() && r.stderr.contains("example-wget-1-14.warc.gz: cannot open"), "{}", r.describe());
        assert_cat_eq(&store, "/example.warc.gz", &a);
        assert!(!ls(&store, "/").iter().any(|(n, _)| n == "example-wget-1-14.warc.gz"), "{}", r.describe());
        assert_fsck_clean(&store, false);
        // The second file's ingest stops before it would commit the first (an I/O error at
        // its start): the first is committed all the same.
        let tmp = TempDir::new().unwrap();
        let store = tmp.path().join("store");
        let r = run_env(&["import", &s(&store), &s(&a), &s(&b)], &[("WARCFS_FAILPOINTS", "ingest_start=1+1")]);
        let line = r.stderr.lines().find(|l| l.contains("import failed")).unwrap_or_default();
        assert!(!r.ok() && line.contains("example-wget-1-14.warc.gz"), "{}", r.describe());
        assert_cat_eq(&store, "/example.warc.gz", &a);
        assert_fsck_clean(&store, false);
        // A bug met by the first file's commit (made inside the second's ingest) is the
        // first file's error, and the second is not stored.
        let tmp = TempDir::new().unwrap();
        let store = tmp.path().join("store");
        let r = run_env(&["import", &s(&store), &s(&a), &s(&b)], &[("WARCFS_FAILPOINTS", "commit=1")]);
        let line = r.stderr.lines().find(|l| l.contains("import failed")).unwrap_or_default();
        assert!(!r.ok() && line.contains("example.warc.gz") && line.contains("commit panicked"), "{}", r.describe());
        assert!(ls(&store, "/").iter().all(|(n, _)| !n.ends_with(".warc.gz")), "{}", r.describe());
        assert_fsck_clean(&store, false);
    }
}

/// Runs `warcfs ARGS...` with the soft descriptor limit lowered to `nofile`.
fn run_limited(nofile: u32, args: &[&str]) -> Run {
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\"")).arg(BIN).args(args).env_remove("RUST_LOG").stdin(Stdio::null());
    let out = c.output().expect("spawn sh");
    Run { args: args.iter().map(|a| a.to_string()).collect(), code: out.status.code(), stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned() }
}

#[test]
fn thousands_of_packs_work_under_a_low_descriptor_limit() {
    // 16 KiB packs make a store of the real corpus, the gzip crawls and 96 MiB of random
    // bytes (64 KiB chunks) in some 1,700 pack files; every command must work with 128
    // descriptors (it kept one per pack open).
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let real = real_corpus();
    let crawls: Vec<PathBuf> = crawl_files().into_iter().filter(|p| p.extension().is_some_and(|e| e == "gz")).collect();
    let crawl = crawls[0].clone();
    ok(&["init", &s(&store), "--pack-size", "16384"]);
    let st = s(&store);
    let noise = tmp.path().join("noise.bin");
    random_file(&noise, 96 << 20, &mut rand::rngs::StdRng::seed_from_u64(5));
    let mut args = vec!["import".to_string(), st.clone(), s(&real), s(&noise)];
    args.extend(crawls.iter().map(|p| s(p)));
    let args: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
    let r = run_limited(128, &args);
    assert!(r.ok(), "{}", r.describe());
    let packs = fs::read_dir(store.join("packs")).unwrap().count();
    assert!(packs > 1500, "only {packs} packs");
    let files = expected_files(&[vec![real.clone(), noise.clone()], crawls.clone()].concat(), "/");
    for (p, src) in &files {
        let got = run_limited(128, &["cat", &st, p]);
        assert!(got.ok() && got.stdout == fs::read(src).unwrap(), "{p} under ulimit -n 128 ({packs} packs):\n{}", got.stderr);
    }
    for args in [vec!["fsck", &st, "--deep"], vec!["index", &st], vec!["stats", &st]] {
        let r = run_limited(128, &args);
        assert!(r.ok(), "{args:?} under ulimit -n 128 ({packs} packs):\n{}", r.describe());
    }
    ok(&["rm", &st, &format!("/{}", crawl.file_name().unwrap().to_string_lossy())]);
    let r = run_limited(128, &["gc", &st]);
    assert!(r.ok(), "gc under ulimit -n 128:\n{}", r.describe());
    assert_fsck_clean(&store, false);
    fs::remove_dir_all(store.join("index")).unwrap();
    let r = run_limited(128, &["repair", "index", &st]);
    assert!(r.ok(), "repair under ulimit -n 128:\n{}", r.describe());
    assert_fsck_clean(&store, true);
}

/// Every subcommand of the binary, as its `--help` is asked for.
const SUBCOMMANDS: &[&[&str]] = &[
    &["init"],
    &["import"],
    &["cat"],
    &["ls"],
    &["rm"],
    &["stats"],
    &["fsck"],
    &["gc"],
    &["index"],
    &["snapshot"],
    &["mount"],
    &["umount"],
    &["repair"],
    &["repair", "index"],
    &["completions"],
    &["man"],
];

/// The entries of a `--help` (`  <STORE>`, `  -r, --recursive`, ...) with the first line of
/// their description: on the same line after two spaces, or (long help) on the next.
fn help_entries(help: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = help.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(e) = l.strip_prefix("  ").filter(|e| e.starts_with(['<', '[', '-'])) else { continue };
        let (entry, description) = match e.split_once("  ") {
            Some((entry, d)) => (entry, d.trim().to_string()),
            None => (e, lines.get(i + 1).map(|d| d.trim().to_string()).unwrap_or_default()),
        };
        out.push((entry.trim().to_string(), description));
    }
    out
}

/// What a user sees of each subcommand: its usage and, for every argument and option, a
/// description (the unit test in src/cli/args.rs checks the definitions themselves).
#[test]
fn every_subcommand_explains_every_argument_in_its_help() {
    for sub in SUBCOMMANDS {
        let args: Vec<&str> = sub.iter().copied().chain(["--help"]).collect();
        let r = ok(&args);
        let help = r.out();
        assert!(help.contains(&format!("Usage: warcfs {}", sub.join(" "))), "{}", r.describe());
        let entries = help_entries(&help);
        assert!(entries.iter().any(|(e, _)| e.starts_with("-h, --help")), "{}", r.describe());
        for (entry, description) in &entries {
            assert!(!description.is_empty() && !description.starts_with(['<', '[', '-']), "`warcfs {} --help`: {entry} is not described:\n{help}", sub.join(" "));
        }
        // The store-taking commands name it as a described argument.
        if !matches!(sub[..], ["umount"] | ["repair"] | ["completions"] | ["man"]) {
            assert!(entries.iter().any(|(e, _)| e == "<STORE>"), "{}", r.describe());
        }
    }
    let top = ok(&["--help"]).out();
    assert!(top.contains("Examples:") && top.contains("warcfs import"), "{top}");
    for sub in ["import", "mount", "index", "snapshot", "repair index"] {
        let args: Vec<&str> = sub.split(' ').chain(["--help"]).collect();
        let help = ok(&args).out();
        assert!(help.contains("Example") && help.contains(&format!("  warcfs {sub} /")), "`warcfs {sub} --help` has no example:\n{help}");
    }
}

#[test]
fn index_format_is_a_closed_list() {
    let tmp = TempDir::new().unwrap();
    let (store, _) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    // Refused by the parser, before the store is opened: clap's usage error, exit 2.
    let r = run(&["index", &s(&store), "--format", "cdx"]);
    assert_eq!(r.code, Some(2), "{}", r.describe());
    assert!(r.stderr.contains("invalid value 'cdx' for '--format <FORMAT>'") && r.stderr.contains("[possible values: cdxj]"), "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    let named = ok(&["index", &s(&store), "--format", "cdxj"]);
    let default = ok(&["index", &s(&store)]);
    assert!(!named.stdout.is_empty() && named.stdout == default.stdout, "{}", named.describe());
}

/// Runs `warcfs ARGS...` on a terminal (util-linux `script` gives it one for stdin, stdout
/// and stderr), as at a shell; returns whether it exited 0 and all the terminal received.
fn on_a_terminal(args: &[&str]) -> (bool, String) {
    let quoted: Vec<String> = std::iter::once(BIN).chain(args.iter().copied()).map(|a| format!("'{}'", a.replace('\'', r"'\''"))).collect();
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("stty cols 200 && exec {}", quoted.join(" ")), "/dev/null"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn script (util-linux)");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// On a terminal every long command shows what it is doing on stderr (import a bar, the
/// others a spinner) and clears it before its report; --quiet (before or after the command)
/// draws nothing and leaves the report as it was. Off a terminal nothing is drawn either.
#[test]
fn long_commands_show_progress_on_a_terminal_unless_quiet() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let (st, sample) = (s(&store), s(&real_corpus().join("webrecorder-warcio")));
    let snap = s(&tmp.path().join("snap"));
    let cases: &[(&[&str], &str, &str)] = &[
        (&["import", &st, &sample], "B/s ", "imported "),
        (&["fsck", &st], "checking files, refcounts and packs", ": clean ("),
        (&["index", &st], "reading record headers", "\"filename\": \"webrecorder-warcio/"),
        (&["snapshot", &st, &snap], "linking packs", "snapshot "),
        (&["gc", &st], "dropping unreferenced chunks", "reclaimed "),
    ];
    for (args, progress, report) in cases {
        let (ok, shown) = on_a_terminal(args);
        assert!(ok && shown.contains(progress) && shown.contains(report), "warcfs {args:?} on a terminal:\n{shown}");
        assert!(shown.contains("\u{1b}[2K"), "the progress line is cleared: {shown:?}");
        for quiet in [[&["--quiet"][..], args].concat(), [args, &["-q"][..]].concat()] {
            let (ok, quiet_out) = on_a_terminal(&quiet);
            assert!(ok && quiet_out.contains(report), "warcfs {quiet:?}:\n{quiet_out}");
            assert!(!quiet_out.contains(progress) && !quiet_out.contains('\u{1b}'), "warcfs {quiet:?} drew progress:\n{quiet_out}");
        }
        let piped = run(args);
        assert!(piped.ok() && piped.stderr.is_empty(), "no progress off a terminal:\n{}", piped.describe());
    }
    // repair index, on a store whose index is gone.
    fs::remove_dir_all(store.join("index")).unwrap();
    let (ok, shown) = on_a_terminal(&["repair", "index", &st]);
    assert!(ok && shown.contains("rebuilding the index from the packs") && shown.contains("rebuilt the index of"), "{shown}");
    fs::remove_dir_all(store.join("index")).unwrap();
    let (ok, quiet_out) = on_a_terminal(&["repair", "index", &st, "--quiet"]);
    assert!(ok && quiet_out.contains("rebuilt the index of") && !quiet_out.contains('\u{1b}'), "{quiet_out}");
    assert_fsck_clean(&store, false);
}

/// `fsck --json` and `gc --json`: one JSON object each on stdout, for scripts, saying what
/// the text report says.
#[test]
fn fsck_and_gc_report_in_json() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let real = real_corpus();
    ok(&["import", &s(&store), &s(&real.join("webrecorder-warcio")), &s(&real.join("iipc-jwarc"))]);
    let json = |args: &[&str]| -> serde_json::Value {
        let r = ok(args);
        assert_eq!(r.out().lines().count(), 1, "one line of JSON:\n{}", r.describe());
        serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.describe()))
    };
    let st = s(&store);
    for deep in [false, true] {
        let args = ["fsck", &st, "--json", "--deep"];
        let v = json(&args[..if deep { 4 } else { 3 }]);
        assert_eq!((v["clean"].as_bool(), v["deep"].as_bool(), v["store"].as_str()), (Some(true), Some(deep), Some(st.as_str())), "{v}");
        assert_eq!(num(&v, "files"), num(&stats(&store), "files"), "{v}");
        assert!(num(&v, "chunks_checked") > 0 && num(&v, "packs_checked") > 0, "{v}");
        assert_eq!((num(&v, "problem_count"), num(&v, "more_problems"), v["problems"].as_array().map(Vec::len)), (0, 0, Some(0)), "{v}");
    }
    ok(&["rm", &s(&store), "-r", "/iipc-jwarc"]);
    let v = json(&["gc", &s(&store), "--json"]);
    assert!(num(&v, "chunks_dropped") > 0 && num(&v, "packs_rewritten") + num(&v, "packs_deleted") > 0, "{v}");
    assert_eq!(num(&v, "reclaimed_bytes"), num(&v, "bytes_before") - num(&v, "bytes_after"), "{v}");
    assert!(num(&v, "reclaimed_bytes") > 0, "{v}");
    assert_fsck_clean(&store, false);
}

/// The exit statuses `warcfs --help` documents: 0 done, 1 problems found in the store, 2 a
/// usage error (clap's), 3 any other error, in one line on stderr.
#[test]
fn the_exit_status_says_what_happened() {
    for args in [&["--help"][..], &["--version"], &["help", "fsck"], &["fsck", "--help"], &["repair", "index", "-h"]] {
        let r = ok(args);
        assert!(!r.stdout.is_empty() && r.stderr.is_empty(), "{}", r.describe());
    }
    assert!(ok(&["--help"]).out().contains("Exit status:\n  0  done"), "--help documents the exit statuses");
    let tmp = TempDir::new().unwrap();
    let (store, _) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    let st = s(&store);
    for args in [&["frobnicate"][..], &["fsck"], &["gc", &st, "--bogus"], &["init", "x", "--verify", "maybe"], &["init", "x", "--pack-size", "12"], &[]] {
        let r = run(args);
        assert_eq!(r.code, Some(2), "a usage error: {}", r.describe());
        assert!(r.stdout.is_empty() && (r.stderr.starts_with("error: ") || r.stderr.contains("Usage: warcfs")), "{}", r.describe());
    }
    fails_with(&["fsck", &s(&tmp.path().join("nostore"))], &["no such store"]);
    fails_with(&["cat", &st, "/no-such-file"], &["/no-such-file"]);

    // Problems in the store: its data pack gone, fsck finds them, and a repair of its index
    // (from what packs are left) finishes, says so and exits 1 too.
    assert_fsck_clean(&store, false);
    let biggest = sealed_packs(&store).into_iter().max_by_key(|p| fs::metadata(p).unwrap().len()).unwrap();
    fs::remove_file(&biggest).unwrap();
    let r = run(&["fsck", &st]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.ends_with(" problems\n"), "{}", r.describe());
    fs::remove_dir_all(store.join("index")).unwrap();
    let r = run(&["repair", "index", &st]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.out().starts_with("rebuilt the index of "), "{}", r.describe());
    assert!(r.stderr.lines().last().is_some_and(|l| l.starts_with("warcfs: ") && l.contains("the index is rebuilt, but")), "{}", r.describe());
    assert_eq!(run(&["fsck", &st, "--json"]).code, Some(1));
}

/// Shell completions and man pages come from the same definitions as --help: bash completes
/// the commands and options with them, and there is a page for every command.
#[test]
fn completions_and_man_pages_are_generated_from_the_definitions() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let r = ok(&["completions", shell]);
        let text = r.out();
        assert!(text.contains("warcfs") && text.contains("snapshot") && text.contains("deep"), "{}", r.describe());
    }
    assert_eq!(run(&["completions", "tcsh"]).code, Some(2), "an unknown shell is a usage error");
    // What bash offers, with the script loaded as a user's shell would.
    let complete = |words: &str| -> String {
        let script = format!(
            "source <('{BIN}' completions bash) && COMP_WORDS=({words}) && COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)) && _warcfs warcfs \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\" && echo \"${{COMPREPLY[*]}}\""
        );
        let out = std::process::Command::new("bash").args(["-c", &script]).stdin(Stdio::null()).output().expect("spawn bash");
        assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let offered = complete("warcfs in");
    assert_eq!(offered.split(' ').collect::<BTreeSet<_>>(), BTreeSet::from(["init", "index"]), "{offered}");
    assert!(complete("warcfs fsck --").split(' ').any(|w| w == "--deep"), "{}", complete("warcfs fsck --"));
    assert_eq!(complete("warcfs index /s --format ''"), "cdxj");

    let page = ok(&["man"]).out();
    assert!(page.contains(".TH warcfs 1") && page.contains(".SH SYNOPSIS") && page.contains("warcfs\\-import(1)"), "{page}");
    assert!(page.contains("Exit status:"), "the man page documents the exit statuses:\n{page}");
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("man1");
    ok(&["man", "--dir", &s(&dir)]);
    let mut want: BTreeSet<String> = SUBCOMMANDS.iter().map(|sub| format!("warcfs-{}.1", sub.join("-"))).collect();
    want.insert("warcfs.1".into());
    let got: BTreeSet<String> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(got, want);
    let fsck = fs::read_to_string(dir.join("warcfs-fsck.1")).unwrap();
    assert!(fsck.contains("\\-\\-json") && fsck.contains("re\\-hash every chunk"), "{fsck}");
}
