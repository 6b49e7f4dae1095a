//! Replay through a mounted store: the 3-crawl corpus is copied into a pywb collection
//! (`collections/test/archive/`) inside a mount; `warcio check` and `cdxj-indexer` read it
//! through FUSE exactly as they read the original files; `warcfs index` agrees with
//! cdxj-indexer; and pywb's `wayback` replays a seeded sample of captures (`id_` mode) from
//! the mount byte for byte as a second pywb does from a plain copy of the original WARCs.
//! The Python tools (pinned in tests/replay/requirements.txt) live in a venv under
//! CARGO_TARGET_TMPDIR, made once and reused while the pins are unchanged.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::pywb::*;
use common::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tempfile::TempDir;

const REQUIREMENTS: &str = include_str!("replay/requirements.txt");

/// The venv's bin/ with pywb, cdxj-indexer and warcio as pinned in requirements.txt. A pip
/// failure fails the test with pip's output.
fn venv_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        pinned_venv("replay-venv", REQUIREMENTS, |bin| {
            // The entry points must import (gevent's plugin loading breaks with some zope pins).
            for (tool, want) in [("wayback", "2.8.3"), ("cdxj-indexer", "usage"), ("warcio", "usage")] {
                let arg = if tool == "wayback" { "-V" } else { "-h" };
                let out = Command::new(bin.join(tool)).arg(arg).stdin(Stdio::null()).output().expect("spawn venv tool");
                let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
                assert!(out.status.success() && text.contains(want), "{tool} {arg} does not run in the venv ({}):\n{text}", out.status);
            }
        })
    })
    .clone()
}











/// The kind a capture is sampled as: its status when not 200, otherwise its type.
fn kind(c: &Capture) -> &'static str {
    match (c.status, c.mime.as_str()) {
        (301, _) => "301",
        (404, _) => "404",
        (200, "text/html") => "html",
        (200, "image/png") => "png",
        (200, "text/javascript" | "application/javascript") => "js",
        (200, "text/css") => "css",
        (200, "image/jpeg") => "jpeg",
        _ => "other",
    }
}

/// A seeded sample of ~50 HTTP captures from a CDXJ index: per crawl file, a few of each kind.
fn sample(cdxj: &[String]) -> Vec<Capture> {
    let mut groups: BTreeMap<(String, &'static str), Vec<Capture>> = BTreeMap::new();
    for c in captures(cdxj) {
        groups.entry((c.filename.clone(), kind(&c))).or_default().push(c);
    }
    let quota = |k: &str| match k {
        "html" => 4,
        "png" | "404" => 3,
        "js" | "301" => 2,
        _ => 1,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7265_706c_6179);
    let mut out = Vec::new();
    for ((_, k), caps) in &groups {
        out.extend(caps.choose_multiple(&mut rng, quota(k)).cloned());
    }
    out
}

/// The message of a replay that differs: the end of `ours`'s log (named `what`), then what
/// differs, last, where a truncated test log still shows it.
fn differences(problems: &[String], captures: usize, what: &str, ours: &Wayback) -> String {
    format!("--- {what}, the end of its log:\n{}\n--- {} of {captures} captures differ:\n{}", ours.log_tail(40), problems.len(), problems.join("\n"))
}

/// Replays each capture (`id_` mode) from both servers; what differs between them, or from
/// the archived status, and the bytes of body served.
fn replay_both(ours: &Wayback, reference: &Wayback, caps: &[Capture]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut body_bytes = 0;
    for c in caps {
        let path = format!("/test/{}id_/{}", c.timestamp, request_safe(&c.url));
        let (mut p, a) = compare_replays(ours, reference, &path, c.status, "mount");
        problems.append(&mut p);
        let Some(a) = a else { continue };
        if c.status == 200 && a.body.is_empty() {
            problems.push(format!("GET {path}: empty body for a 200 capture"));
        }
        body_bytes += a.body.len();
    }
    (problems, body_bytes)
}

#[test]
fn pywb_replays_and_cdxj_indexer_indexes_through_the_mount() {
    let t_start = Instant::now();
    let bin = venv_bin();
    let crawls = crawl_files();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");

    // The reference: a plain directory with the original WARCs in pywb's layout.
    let plain = tmp.path().join("plain");
    let plain_archive = plain.join(COLL).join("archive");
    fs::create_dir_all(&plain_archive).unwrap();
    fs::create_dir_all(plain.join(COLL).join("indexes")).unwrap();
    for f in &crawls {
        fs::copy(f, plain_archive.join(f.file_name().unwrap())).unwrap();
    }

    // 2. The same files copied into a pywb collection inside a fresh mount.
    let m = Mount::new(&store, &tmp.path().join("mnt"));
    let archive = m.mnt.join(COLL).join("archive");
    fs::create_dir_all(&archive).unwrap();
    fs::create_dir_all(m.mnt.join(COLL).join("indexes")).unwrap();
    for f in &crawls {
        fs::copy(f, archive.join(f.file_name().unwrap())).unwrap();
    }
    wait_ingested(&store);
    for f in &crawls {
        let got = fs::read(archive.join(f.file_name().unwrap())).unwrap();
        assert!(got == fs::read(f).unwrap(), "{} reads back differently through the mount", f.display());
    }

    // 3. warcio check passes on every WARC in the mount, record for record as on the originals.
    for f in &crawls {
        let name = f.file_name().unwrap().to_str().unwrap();
        let mounted = tool(&bin, "warcio", &["check", "-v", name], &archive);
        let original = tool(&bin, "warcio", &["check", "-v", name], &plain_archive);
        assert!(mounted.matches("digest pass").count() > 100, "warcio check -v {name} checked too few digests:\n{mounted}");
        assert!(mounted == original, "warcio check -v {name}: the mount's report differs from the original's:\n{mounted}");
    }

    // 4. cdxj-indexer over the mounted archive dir prints what it prints over the originals.
    let idx_mounted = sorted_lines(&tool(&bin, "cdxj-indexer", &[&s(&archive)], tmp.path()));
    let idx_plain = sorted_lines(&tool(&bin, "cdxj-indexer", &[&s(&plain_archive)], tmp.path()));
    assert!(idx_plain.len() > 1000, "cdxj-indexer found only {} captures in the crawl corpus", idx_plain.len());
    assert!(idx_mounted == idx_plain, "cdxj-indexer over the mount differs from over the originals: {}", line_diff("mount", &idx_mounted, "originals", &idx_plain));

    // 5. warcfs index (from the recipes) equals cdxj-indexer's output.
    let warcfs_index = ok(&["index", &s(&store), &format!("/{COLL}/archive")]).out();
    let idx_warcfs = sorted_lines(&warcfs_index);
    assert!(idx_warcfs == idx_plain, "warcfs index differs from cdxj-indexer: {}", line_diff("warcfs index", &idx_warcfs, "cdxj-indexer", &idx_plain));
    assert!(warcfs_index.lines().collect::<Vec<_>>().windows(2).all(|w| w[0] <= w[1]), "warcfs index output is not sorted");

    // 6. Replay: pywb over the mount (indexed by warcfs index) and over the plain copy
    //    (indexed by cdxj-indexer) serve every sampled capture identically.
    fs::write(m.mnt.join(COLL).join("indexes/index.cdxj"), &warcfs_index).unwrap();
    fs::write(plain.join(COLL).join("indexes/index.cdxj"), idx_plain.join("\n") + "\n").unwrap();
    wait_ingested(&store);
    // Declared after the mount, so both servers are stopped before it is unmounted.
    let ours = Wayback::start(&bin, &m.mnt, &tmp.path().join("wayback-mount.log"));
    let reference = Wayback::start(&bin, &plain, &tmp.path().join("wayback-plain.log"));

    let caps = sample(&idx_plain);
    let mut kinds: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for c in &caps {
        *kinds.entry((c.filename.as_str(), kind(c))).or_default() += 1;
    }
    for k in ["html", "png", "js", "404", "301"] {
        assert!(caps.iter().any(|c| kind(c) == k), "the sample has no {k} capture: {kinds:?}");
    }
    assert!(crawls.iter().all(|f| caps.iter().any(|c| f.ends_with(&c.filename))), "the sample misses a crawl: {kinds:?}");
    assert!((40..=60).contains(&caps.len()), "sampled {} captures: {kinds:?}", caps.len());

    let (problems, body_bytes) = replay_both(&ours, &reference, &caps);
    assert!(
        problems.is_empty(),
        "{} of {} replayed captures differ:\n{}\n--- wayback over the mount:\n{}\n--- wayback over the plain copy:\n{}",
        problems.len(),
        caps.len(),
        problems.join("\n"),
        ours.log_text(),
        reference.log_text()
    );
    eprintln!(
        "{} CDXJ lines identical (cdxj-indexer over the mount, over the originals, warcfs index); {} captures replayed identically ({body_bytes} body bytes; {kinds:?}) in {:.1} s",
        idx_plain.len(),
        caps.len(),
        t_start.elapsed().as_secs_f64()
    );
}

/// A WACZ in the mount (client-zip's layout, as browsertrix-crawler writes it) replays in
/// pywb straight from `/.warcfs/wacz/`, without `wb-manager add --unpack-wacz` copying its
/// WARC out: `archive_paths` is the mount's root, the index `warcfs index` of the WACZ, and
/// every sampled capture replays as pywb replays the crawl's own WARC from a plain copy.
#[test]
fn pywb_replays_the_warc_inside_a_wacz_from_its_view() {
    let bin = venv_bin();
    let crawl = &crawl_files()[0];
    let name = crawl.file_name().unwrap().to_str().unwrap();
    let tmp = TempDir::new().unwrap();
    let wacz = tmp.path().join("crawl.wacz");
    let pages = tmp.path().join("pages.jsonl");
    fs::write(&pages, "{\"format\": \"json-pages-1.0\", \"id\": \"pages\"}\n").unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/wacz/client_zip.py");
    checked(Command::new("python3").arg(script).arg(&wacz).arg(format!("archive/{name}={}", crawl.display())).arg(format!("pages/pages.jsonl={}", pages.display())), "client_zip.py");

    let (plain, idx_plain) = plain_collection(&bin, tmp.path(), std::slice::from_ref(crawl));

    let store = tmp.path().join("store");
    let m = Mount::new(&store, &tmp.path().join("mnt"));
    fs::create_dir_all(m.mnt.join("waczs")).unwrap();
    fs::copy(&wacz, m.mnt.join("waczs/crawl.wacz")).unwrap();
    wait_ingested(&store);
    let index = ok(&["index", &s(&store), "/waczs"]).out();
    let inner = format!("\"filename\": \".warcfs/wacz/waczs/crawl.wacz/archive/{name}\"");
    assert_eq!(index.lines().filter(|l| l.contains(&inner)).count(), idx_plain.len(), "every record of the WACZ's WARC indexed at its view path");
    // pywb over the mount: its own root outside the mount, reading the archives in it.
    let root = tmp.path().join("pywb");
    fs::create_dir_all(root.join("indexes")).unwrap();
    fs::write(root.join("indexes/index.cdxj"), &index).unwrap();
    fs::write(root.join("config.yaml"), format!("collections:\n  test:\n    index_paths: {}/indexes/\n    archive_paths: {}/\n", root.display(), m.mnt.display())).unwrap();
    let ours = Wayback::start(&bin, &root, &tmp.path().join("wayback-wacz.log"));
    let reference = Wayback::start(&bin, &plain, &tmp.path().join("wayback-plain.log"));
    let caps = sample(&idx_plain);
    assert!(caps.len() >= 10, "sampled {} captures", caps.len());
    let (problems, body_bytes) = replay_both(&ours, &reference, &caps);
    assert!(problems.is_empty(), "{}", differences(&problems, caps.len(), "wayback over the WACZ view", &ours));
    eprintln!("{} captures of the WACZ's WARC replayed identically from /.warcfs/wacz/ ({body_bytes} body bytes)", caps.len());
}

/// `warcfs export --revisits` of the crawl corpus: every response whose payload an earlier
/// one holds becomes a revisit naming it; `warcio check` passes on the export; cdxj-indexer
/// indexes it; and pywb over the export, its revisits resolved by pywb itself, replays every
/// capture (revisits among them) as pywb replays the original files. That export stored and
/// exported `--resolved` has no revisit left, and replays the same.
#[test]
fn pywb_replays_exports_with_revisits_and_resolved_as_the_originals() {
    let bin = venv_bin();
    let crawls = crawl_files();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    for f in &crawls {
        ok(&["import", &s(&store), &s(f), "--to", "/crawls"]);
    }
    let (plain, idx_plain) = plain_collection(&bin, tmp.path(), &crawls);

    let export = tmp.path().join("export");
    let archive = export.join(COLL).join("archive");
    let r = ok(&["export", "--revisits", &s(&store), "/crawls", "--to", &s(&archive)]);
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(archive.join("export.json")).unwrap()).unwrap();
    fs::remove_file(archive.join("export.json")).unwrap();
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), crawls.len(), "{manifest}");
    let revisits: u64 = files.iter().map(|f| f["revisits"].as_u64().unwrap()).sum();
    assert!(revisits > 100, "{revisits} revisits: {}", r.describe());
    assert!(files[0]["requires"].as_array().unwrap().is_empty(), "the first crawl names no other file: {manifest}");
    assert!(files[1]["requires"].as_array().unwrap().iter().any(|n| n == crawls[0].file_name().unwrap().to_str().unwrap()), "crawl 2's revisits name crawl 1: {manifest}");
    let (bytes_in, bytes_out): (u64, u64) = files.iter().fold((0, 0), |a, f| (a.0 + f["bytes_in"].as_u64().unwrap(), a.1 + f["bytes_out"].as_u64().unwrap()));
    assert!(bytes_out < bytes_in, "the export is smaller: {bytes_out} against {bytes_in}");
    for f in &crawls {
        let name = f.file_name().unwrap().to_str().unwrap();
        let report = tool(&bin, "warcio", &["check", "-v", name], &archive);
        assert!(!report.contains("fail"), "warcio check -v {name} of the export:\n{report}");
    }
    let idx_export = sorted_lines(&tool(&bin, "cdxj-indexer", &[&s(&archive)], tmp.path()));
    assert_eq!(idx_export.len(), idx_plain.len(), "a line per record, as before");
    let revisit_lines: std::collections::BTreeSet<(String, String)> = idx_export
        .iter()
        .filter(|l| l.contains("\"mime\": \"warc/revisit\""))
        .map(|l| {
            let j: serde_json::Value = serde_json::from_str(l.splitn(3, ' ').nth(2).unwrap()).unwrap();
            (l.split(' ').nth(1).unwrap().to_string(), j["url"].as_str().unwrap().to_string())
        })
        .collect();
    let revisit_count = idx_export.iter().filter(|l| l.contains("\"mime\": \"warc/revisit\"")).count();
    assert_eq!(revisit_count as u64, revisits, "cdxj-indexer sees every revisit as one");
    fs::create_dir_all(export.join(COLL).join("indexes")).unwrap();
    fs::write(export.join(COLL).join("indexes/index.cdxj"), idx_export.join("\n") + "\n").unwrap();

    let ours = Wayback::start(&bin, &export, &tmp.path().join("wayback-export.log"));
    let reference = Wayback::start(&bin, &plain, &tmp.path().join("wayback-plain.log"));
    // Every capture: each revisit must find its original, whatever URL that has.
    let caps = captures(&idx_plain);
    let as_revisits = caps.iter().filter(|c| revisit_lines.contains(&(c.timestamp.clone(), c.url.clone()))).count();
    assert!(as_revisits as u64 * 2 >= revisits, "only {as_revisits} of {} captures are revisits in the export", caps.len());
    let (problems, body_bytes) = replay_both(&ours, &reference, &caps);
    assert!(problems.is_empty(), "{}", differences(&problems, caps.len(), "wayback over the export", &ours));
    eprintln!("{} captures ({as_revisits} of them revisits in the export) replayed identically ({body_bytes} body bytes); {revisits} revisits, {bytes_out} bytes exported of {bytes_in}", caps.len());
    drop(ours);

    // And back: the deduplicated export stored, then exported `--resolved`: every revisit
    // is the response it stands for again, and pywb replays every capture from those files
    // with no revisit to resolve.
    let store2 = tmp.path().join("store2");
    ok(&["import", &s(&store2), &s(&archive), "--to", "/"]);
    let whole = tmp.path().join("whole");
    let whole_archive = whole.join(COLL).join("archive");
    ok(&["export", "--resolved", &s(&store2), "/archive", "--to", &s(&whole_archive)]);
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(whole_archive.join("export.json")).unwrap()).unwrap();
    fs::remove_file(whole_archive.join("export.json")).unwrap();
    let files = manifest["files"].as_array().unwrap();
    let resolved: u64 = files.iter().map(|f| f["resolved"].as_u64().unwrap()).sum();
    let unresolved: u64 = files.iter().map(|f| f["unresolved"].as_u64().unwrap()).sum();
    assert_eq!((resolved, unresolved), (revisits, 0), "{manifest}");
    for f in &crawls {
        let name = f.file_name().unwrap().to_str().unwrap();
        let report = tool(&bin, "warcio", &["check", "-v", name], &whole_archive);
        assert!(!report.contains("fail") && !report.contains("revisit"), "warcio check -v {name} of the resolved export:\n{report}");
    }
    let idx_whole = sorted_lines(&tool(&bin, "cdxj-indexer", &[&s(&whole_archive)], tmp.path()));
    assert_eq!(idx_whole.len(), idx_plain.len());
    assert!(!idx_whole.iter().any(|l| l.contains("warc/revisit")), "no revisit is left");
    fs::create_dir_all(whole.join(COLL).join("indexes")).unwrap();
    fs::write(whole.join(COLL).join("indexes/index.cdxj"), idx_whole.join("\n") + "\n").unwrap();
    let ours = Wayback::start(&bin, &whole, &tmp.path().join("wayback-whole.log"));
    let (problems, _) = replay_both(&ours, &reference, &caps);
    assert!(problems.is_empty(), "{}", differences(&problems, caps.len(), "wayback over the resolved export", &ours));
}

/// `/.warcfs/resolved/` of a collection deduplicated by revisits (`export --revisits` of
/// the crawls), its originals in another directory than most of their revisits (another
/// collection): every revisit whose original is stored reads as the response it stands for,
/// the view's files are what `export --resolved` writes (a gzip file's records inflate to
/// the same text), `/.warcfs/resolved.cdxj` is what cdxj-indexer makes of them, and pywb
/// over the view, with no revisit to resolve, replays every capture as over the original
/// crawls. A revisit whose original is not stored yet is shown as it is.
#[test]
fn pywb_replays_the_resolved_view_of_a_collection_deduplicated_by_revisits() {
    let bin = venv_bin();
    let crawls = crawl_files();
    let names: Vec<String> = crawls.iter().map(|f| f.file_name().unwrap().to_str().unwrap().to_string()).collect();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    for f in &crawls {
        ok(&["import", &s(&store), &s(f), "--to", "/crawls"]);
    }
    let (plain, idx_plain) = plain_collection(&bin, tmp.path(), &crawls);
    let dedup = tmp.path().join("dedup");
    ok(&["export", "--revisits", &s(&store), "/crawls", "--to", &s(&dedup)]);

    let store2 = tmp.path().join("store2");
    let m = Mount::new(&store2, &tmp.path().join("mnt"));
    let dir_of = |i: usize| if i == 0 { "first" } else { "later" };
    let copy_in = |i: usize| {
        fs::create_dir_all(m.mnt.join(dir_of(i))).unwrap();
        fs::copy(dedup.join(&names[i]), m.mnt.join(dir_of(i)).join(&names[i])).unwrap();
    };
    let revisit_lines = |cdxj: &str| cdxj.lines().filter(|l| l.contains("warc/revisit")).count();
    // The later crawls alone: the revisits of the first crawl's payloads have no original.
    for i in 1..crawls.len() {
        copy_in(i);
    }
    wait_ingested(&store2);
    let alone = fs::read_to_string(m.mnt.join(".warcfs/resolved.cdxj")).unwrap();
    let dedup_idx = sorted_lines(&tool(&bin, "cdxj-indexer", &[&s(&dedup)], tmp.path()));
    let unresolved = revisit_lines(&alone);
    assert!(unresolved > 0 && unresolved < revisit_lines(&dedup_idx.join("\n")), "{unresolved} revisits left of {}", revisit_lines(&dedup_idx.join("\n")));
    // Then the first crawl, in a directory of its own: the store has changed (the tables
    // are made again once they are a second old).
    copy_in(0);
    wait_ingested(&store2);
    std::thread::sleep(Duration::from_millis(1500));
    let cdxj = fs::read_to_string(m.mnt.join(".warcfs/resolved.cdxj")).unwrap();
    assert_eq!(revisit_lines(&cdxj), 0, "every revisit resolved:\n{}", cdxj.lines().filter(|l| l.contains("warc/revisit")).take(5).collect::<Vec<_>>().join("\n"));
    assert_eq!(cdxj.lines().count(), idx_plain.len(), "a line per record");

    // The view's files, copied out, are what cdxj-indexer indexes as the view's own index
    // says, and warcio finds nothing wrong and no revisit in them.
    let copied = tmp.path().join("view-copy");
    fs::create_dir_all(&copied).unwrap();
    for (i, n) in names.iter().enumerate() {
        fs::copy(m.mnt.join(".warcfs/resolved").join(dir_of(i)).join(n), copied.join(n)).unwrap();
        let report = tool(&bin, "warcio", &["check", "-v", n], &copied);
        assert!(!report.contains("fail") && !report.contains("revisit"), "warcio check -v of the view of {n}:\n{report}");
    }
    resolved_index_is_cdxj_indexers(&bin, &cdxj, &copied, tmp.path());

    // pywb over the mount with the view's index replays every capture as over the crawls.
    let ours = wayback_over_resolved(&bin, &cdxj, &m.mnt, tmp.path());
    let reference = Wayback::start(&bin, &plain, &tmp.path().join("wayback-plain.log"));
    let caps = captures(&idx_plain);
    let (problems, body_bytes) = replay_both(&ours, &reference, &caps);
    assert!(problems.is_empty(), "{}", differences(&problems, caps.len(), "wayback over the resolved view", &ours));
    eprintln!("{} captures replayed identically from /.warcfs/resolved/ ({body_bytes} body bytes); {unresolved} revisits shown as they are before their originals were stored", caps.len());
    drop((ours, reference, m));

    // `export --resolved` writes the same records (a gzip file's members compressed).
    let whole = tmp.path().join("whole");
    ok(&["export", "--resolved", &s(&store2), "/first", "/later", "--to", &s(&whole)]);
    for n in &names {
        let (view, export) = (fs::read(copied.join(n)).unwrap(), fs::read(whole.join(n)).unwrap());
        let text = |b: &[u8]| {
            let mut t = Vec::new();
            flate2::read::MultiGzDecoder::new(b).read_to_end(&mut t).unwrap();
            t
        };
        if n.ends_with(".gz") {
            assert!(text(&view) == text(&export), "{n}: the view and the export differ inflated");
        } else {
            assert!(view == export, "{n}: the view and the export differ");
        }
    }
}
