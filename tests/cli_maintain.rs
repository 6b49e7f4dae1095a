//! End-to-end tests of the `warcfs` command line (real files, a real RocksDB index, real
//! pack files, and the binary run as a child process): maintenance. rm and gc reclaim
//! space, fsck finds a flipped byte and names its files, a missing or unreadable index is
//! refused, repair rebuilds the index from the packs alone, fsck and gc report in JSON, and
//! `stats --bytes` accounts for every byte of the store.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{symlink, FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use common::*;

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

/// In a `--parses compact-at-gc` store, a gc whose rewriting of parses fails (here at its
/// first file's ingest, as a full disk would) still collects, says so and exits 1; every file
/// reads back, and the next gc rewrites them all, once.
#[cfg(debug_assertions)]
#[test]
fn gc_goes_on_when_rewriting_parses_stops() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let real = real_corpus();
    ok(&["init", &s(&store), "--parses", "compact-at-gc"]);
    let srcs = vec![real.join("webrecorder-warcio"), real.join("iipc-jwarc")];
    ok(&["import", &s(&store), &s(&srcs[0]), &s(&srcs[1]), "--to", "/r"]);
    ok(&["import", &s(&store), &s(&real.join("webrecorder-pywb")), "--to", "/gone"]);
    ok(&["rm", &s(&store), "-r", "/gone"]);
    let gc = |env: &[(&str, &str)]| -> (Run, serde_json::Value) {
        let r = run_env(&["gc", &s(&store), "--json"], env);
        let v = serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.describe()));
        (r, v)
    };
    let (r, v) = gc(&[("WARCFS_FAILPOINTS", "ingest_start=1")]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.contains("rewriting parses stopped"), "{}", r.describe());
    assert!(v["reparse_stopped"].is_string() && num(&v, "files_reparsed") == 0, "{v}");
    assert!(num(&v, "chunks_dropped") > 0, "gc collected all the same: {v}");
    assert_fsck_clean(&store, false);
    let expected = expected_files(&srcs, "/r");
    let exact = || {
        for (p, src) in &expected {
            let r = ok(&["cat", &s(&store), p]);
            assert!(r.stdout == fs::read(src).unwrap(), "{p} reads back other than written");
        }
    };
    exact();
    let (r, v) = gc(&[]);
    assert!(r.ok() && v["reparse_stopped"].is_null(), "{}", r.describe());
    assert!(num(&v, "files_reparsed") > 0, "{v}");
    assert_eq!(num(&gc(&[]).1, "files_reparsed"), 0);
    assert_fsck_clean(&store, true);
    exact();
}

/// `stats --bytes` puts every byte under the store in one category: they add up to what
/// `du -sb` counts there, each category holds what it should, and the recipe pieces' split
/// adds up to the pieces' blobs as plain `stats` counts them.
#[test]
fn stats_bytes_accounts_for_every_byte_of_the_store() {
    let tmp = TempDir::new().unwrap();
    // A wget crawl: gzip members with dynamic blocks, payloads long enough for parse tails.
    let (store, _) = store_with_sample(tmp.path(), "webrecorder-pywb/iana.warc.gz");
    let du = |args: &[&str]| -> u64 {
        let out = std::process::Command::new("du").args(args).arg(&store).output().unwrap();
        String::from_utf8_lossy(&out.stdout).split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("du {args:?}: {out:?}"))
    };
    let breakdown = || {
        let v: serde_json::Value = serde_json::from_slice(&ok(&["stats", &s(&store), "--bytes", "--json"]).stdout).unwrap();
        let b = v["bytes"].clone();
        let cats: BTreeMap<String, u64> = b["categories"].as_object().unwrap().iter().map(|(k, n)| (k.clone(), n.as_u64().unwrap())).collect();
        assert_eq!(cats.len(), 15, "{b}");
        assert_eq!(cats.values().sum::<u64>(), num(&b, "total"), "{b}");
        assert_eq!(num(&b, "total"), num(&b, "under_store"), "{b}");
        // Outside index/ the store does not change once the command is done: exactly what
        // du counts. RocksDB may append to its info log (`index/LOG`, warnings only) as it
        // closes, so index/ may have grown since, by no more than that file.
        assert_eq!(du(&["-sb", "--exclude=index"]), num(&b, "total") - cats["index"], "{b}");
        let index_now = du(&["-sb"]) - du(&["-sb", "--exclude=index"]);
        let log = fs::metadata(store.join("index/LOG")).unwrap().len();
        assert!(index_now >= cats["index"] && index_now - cats["index"] <= log, "index/ is {index_now} bytes now, its LOG {log}: {b}");
        (v, b, cats)
    };

    let (v, b, cats) = breakdown();
    for k in ["payload", "headers", "parse_prefixes", "block_headers", "parse_tails", "recipes", "log", "blob_headers", "footers", "index", "other"] {
        assert!(cats[k] > 0, "{k} is 0: {b}");
    }
    assert_eq!((cats["deltas"], cats["dead"]), (0, 0), "{b}");
    let c = &b["counts"];
    assert_eq!(num(c, "members"), num(&v, "gzip_members"), "{b}");
    // Each piece's blob, split three ways by raw share, is whole again; so are the tails'
    // and the log's blobs (60-byte headers aside).
    let blobs = |kinds: &[&str], count: &str| kinds.iter().map(|k| cats[*k]).sum::<u64>() + 60 * num(c, count);
    assert_eq!(blobs(&["parse_prefixes", "block_headers", "recipes"], "recipe_pieces"), num(&v, "recipe_chunk_bytes"), "{b}");
    assert_eq!(blobs(&["parse_tails"], "parse_tails"), num(&v, "parse_tail_chunk_bytes"), "{b}");
    assert_eq!(blobs(&["log"], "log_records"), num(&v, "log_bytes"), "{b}");
    assert!(num(c, "parse_prefix_raw") > num(c, "block_header_raw"), "{b}");

    // gc settles every pack: the packs are then blobs and footers to the byte.
    ok(&["gc", &s(&store)]);
    let (_, b, cats) = breakdown();
    assert_eq!(cats["dead"], 0, "{b}");
    assert!(cats["payload"] > 0 && cats["parse_tails"] > 0, "{b}");

    // With the file removed, its chunks are dead until the next gc; but a chunk gc made a
    // delta's base counts that delta until gc drops it (a base outlives its last delta).
    let deltas = num(&b["counts"], "delta_chunks");
    ok(&["rm", &s(&store), "/iana.warc.gz"]);
    let (_, b, cats) = breakdown();
    assert_eq!((cats["parse_prefixes"], cats["recipes"]), (0, 0), "{b}");
    assert!(num(&b["counts"], "payload_chunks") <= deltas, "only bases of the {deltas} deltas stay: {b}");
    assert!(cats["dead"] >= num(&b["counts"], "dead_blob_bytes") && num(&b["counts"], "dead_blob_bytes") > 500_000, "{b}");
}
