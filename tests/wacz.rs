//! WACZ packages (ZIPs whose `archive/*.warc.gz` entries are stored as they are): made by
//! py-wacz 0.6.0 and in client-zip's layout (browsertrix-crawler, ArchiveWeb.page: data
//! descriptors, ZIP64), each stored as its framing plus its entries, so the crawl inside
//! shares its records with the same crawl stored as a file; every one byte-exact through
//! `cat` and the mount, at random offsets too; damaged ZIPs stored byte-exact all the same.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rand::{Rng, SeedableRng};
use tempfile::TempDir;

use common::*;

/// `wacz` (py-wacz 0.6.0) in a venv under CARGO_TARGET_TMPDIR, made once and reused.
fn wacz_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let reqs = include_str!("wacz/requirements.txt");
        let bin = pinned_venv("wacz-0.6.0-venv", reqs, |bin| {
            assert!(bin.join("wacz").exists(), "pip installed wacz==0.6.0 but bin/wacz is missing");
        });
        bin.join("wacz")
    })
    .clone()
}

/// A WACZ of `warc` as py-wacz writes one: its CDXJ index first, then the WARC, then
/// `datapackage.json`.
fn py_wacz(warc: &Path, out: &Path) {
    let dir = out.parent().unwrap();
    checked(Command::new(wacz_bin()).current_dir(dir).arg("create").arg("-o").arg(out).arg(warc), "wacz create");
}

/// A ZIP in client-zip's layout (`tests/wacz/client_zip.py`) of `entries` (name, file).
fn client_zip(out: &Path, zip64: bool, entries: &[(&str, &Path)]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/wacz/client_zip.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(out);
    if zip64 {
        cmd.arg("--zip64");
    }
    for (name, path) in entries {
        cmd.arg(format!("{name}={}", path.display()));
    }
    checked(&mut cmd, "client_zip.py");
}

/// Python's `zipfile` reads every entry of `zip` and finds each CRC-32 right (the files
/// made here are real ZIPs, not only what warcfs takes for one).
fn assert_valid_zip(zip: &Path) {
    let check = "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); bad = z.testzip(); assert bad is None, bad; print(len(z.infolist()))";
    let out = checked(Command::new("python3").args(["-c", check]).arg(zip), "python3 zipfile testzip");
    assert!(String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().unwrap() >= 2, "{}", zip.display());
}

fn import(store: &Path, files: &[&Path]) -> Run {
    let mut args = vec!["import".to_string(), s(store)];
    args.extend(files.iter().map(|f| s(f)));
    ok(&args)
}

fn len(p: &Path) -> u64 {
    fs::metadata(p).unwrap().len()
}

fn name(p: &Path) -> String {
    format!("/{}", p.file_name().unwrap().to_str().unwrap())
}

/// The WACZs of a crawl (py-wacz's, client-zip's with and without ZIP64), in `dir`.
fn waczs_of(crawl: &Path, dir: &Path) -> Vec<PathBuf> {
    let pages = dir.join("pages.jsonl");
    fs::write(&pages, "{\"format\": \"json-pages-1.0\", \"id\": \"pages\"}\n{\"url\": \"http://example.com/\", \"ts\": \"2026-12-05T00:00:00Z\"}\n").unwrap();
    let (py, cz, cz64) = (dir.join("py.wacz"), dir.join("client.wacz"), dir.join("client64.wacz"));
    py_wacz(crawl, &py);
    let entries = [("archive/crawl.warc.gz", crawl), ("pages/pages.jsonl", pages.as_path())];
    client_zip(&cz, false, &entries);
    client_zip(&cz64, true, &entries);
    for w in [&py, &cz, &cz64] {
        assert_valid_zip(w);
    }
    vec![py, cz, cz64]
}

/// A WACZ imported after its crawl's WARC stores little more than what the WARC lacks (its
/// index, its small files, its framing), whichever writer laid it out; and a WARC imported
/// after a WACZ that holds it stores nothing but its recipe's own pieces.
#[test]
fn a_wacz_shares_its_crawl_with_the_warc_stored_beside_it() {
    let tmp = TempDir::new().unwrap();
    let crawl = &crawl_files()[0];
    let waczs = waczs_of(crawl, tmp.path());
    let store = tmp.path().join("store");
    import(&store, &[crawl]);
    for w in &waczs {
        let new = parse_import_summary(&import(&store, &[w]).out()).new_bytes;
        let extra = len(w) - len(crawl);
        eprintln!("{}: {} bytes, {extra} besides the WARC; {new} new bytes stored", w.display(), len(w));
        assert!(new <= 2 * extra + (16 << 10), "{}: {new} new bytes for {extra} bytes besides the crawl", w.display());
        assert!(new * 20 < len(crawl), "{}: {new} new bytes, the crawl is {} bytes", w.display(), len(crawl));
        assert_cat_eq(&store, &name(w), w);
    }
    assert_cat_eq(&store, &name(crawl), crawl);

    // A plain WARC inside a WACZ (ArchiveWeb.page can write `archive/data.warc`) shares its
    // records with the same WARC stored as a file just as well.
    let plain = &crawl_files()[2];
    assert!(plain.extension().unwrap() == "warc", "{}", plain.display());
    import(&store, &[plain]);
    let wp = tmp.path().join("plain.wacz");
    client_zip(&wp, false, &[("archive/data.warc", plain.as_path())]);
    let new = parse_import_summary(&import(&store, &[&wp]).out()).new_bytes;
    assert!(new < 16 << 10, "a WACZ of a plain WARC stored beside it: {new} new bytes");
    assert_cat_eq(&store, &name(&wp), &wp);

    // The other way round: the WACZ first, then its WARC.
    let store2 = tmp.path().join("store2");
    import(&store2, &[&waczs[0]]);
    let new = parse_import_summary(&import(&store2, &[crawl]).out()).new_bytes;
    assert!(new < 16 << 10, "the WARC after its WACZ: {new} new bytes");
    assert_cat_eq(&store2, &name(crawl), crawl);
    assert_cat_eq(&store2, &name(&waczs[0]), &waczs[0]);
    assert_fsck_clean(&store, true);
    assert_fsck_clean(&store2, false);
}

/// ZIPs that lie, overlap, end early or hold a damaged entry are stored byte-exact: as
/// files of no known layout, or (an entry whose CRC-32 is wrong) as a ZIP with a warning
/// that names the file and the entry.
#[test]
fn damaged_zips_are_stored_byte_exact() {
    let tmp = TempDir::new().unwrap();
    let crawl = &crawl_files()[0];
    let zip = tmp.path().join("good.wacz");
    let pages = tmp.path().join("pages.jsonl");
    fs::write(&pages, "{\"format\": \"json-pages-1.0\"}\n".repeat(4000)).unwrap();
    client_zip(&zip, false, &[("archive/crawl.warc.gz", crawl), ("pages/pages.jsonl", &pages)]);
    let good = fs::read(&zip).unwrap();
    let n = good.len();
    let end = n - 22;
    let cd_at = u32::from_le_bytes(good[end + 16..end + 20].try_into().unwrap()) as usize;
    let second = cd_at + 46 + "archive/crawl.warc.gz".len();
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push(("truncated", good[..n * 2 / 3].to_vec()));
    let mut z = good.clone();
    z[cd_at + 42..cd_at + 46].copy_from_slice(&1u32.to_le_bytes());
    cases.push(("lying-offset", z));
    let mut z = good.clone();
    z[second + 42..second + 46].copy_from_slice(&0u32.to_le_bytes());
    cases.push(("overlapping", z));
    let mut z = good.clone();
    z[n / 2] ^= 0x55;
    cases.push(("bad-crc", z));
    let mut z = good.clone();
    z.extend_from_slice(b"trailing bytes after the end record");
    cases.push(("trailing", z));
    let mut z = b"a prefix before the first local header".to_vec();
    z.extend_from_slice(&good);
    cases.push(("prefixed", z));
    let store = tmp.path().join("store");
    import(&store, &[crawl]);
    for (what, bytes) in &cases {
        let path = tmp.path().join(format!("{what}.wacz"));
        fs::write(&path, bytes).unwrap();
        let r = import(&store, &[&path]);
        if *what == "bad-crc" {
            assert!(r.stderr.contains("bad-crc.wacz") && r.stderr.contains("archive/crawl.warc.gz") && r.stderr.contains("CRC-32"), "{}", r.describe());
        } else {
            assert!(!r.stderr.contains("CRC-32"), "{what}: {}", r.describe());
        }
        assert_cat_eq(&store, &name(&path), &path);
    }
    assert_fsck_clean(&store, true);
}

/// The entry names of the ZIP `zip`, sorted, as Python's `zipfile` lists them.
fn extract_names(zip: &Path) -> Vec<String> {
    let list = "import sys, zipfile; print('\\n'.join(sorted(i.filename for i in zipfile.ZipFile(sys.argv[1]).infolist() if not i.is_dir())))";
    let out = checked(Command::new("python3").args(["-c", list]).arg(zip), "python3 zipfile list");
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

/// The bytes of entry `name` of the ZIP `zip`, as Python's `zipfile` extracts them.
fn extract(zip: &Path, name: &str) -> Vec<u8> {
    let cat = "import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))";
    checked(Command::new("python3").args(["-c", cat]).arg(zip).arg(name), "python3 zipfile read").stdout
}

/// `warcfs index` gives the records of the WARCs inside a WACZ at their offsets in those
/// WARCs, named where `/.warcfs/wacz/` shows them: the very lines of the same WARC stored as
/// a file, and the offsets and lengths of the WACZ's own CDXJ index.
#[test]
fn index_gives_the_records_of_the_warcs_inside_a_wacz() {
    let tmp = TempDir::new().unwrap();
    let crawl = &crawl_files()[0];
    let src = tmp.path().join("py.wacz");
    py_wacz(crawl, &src);
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(crawl)]);
    ok(&["import", &s(&store), &s(&src), "--to", "/sub"]);
    let inner = format!(".warcfs/wacz/sub/py.wacz/archive/{}", crawl.file_name().unwrap().to_str().unwrap());
    let lines = |out: &str, file: &str| -> Vec<String> {
        let mut v: Vec<String> = out.lines().filter(|l| l.contains(&format!("\"filename\": \"{file}\""))).map(|l| l.replace(file, "F")).collect();
        v.sort();
        v
    };
    let all = ok(&["index", &s(&store)]).out();
    let plain = lines(&all, crawl.file_name().unwrap().to_str().unwrap());
    assert!(plain.len() > 100, "{} lines for the crawl", plain.len());
    assert_eq!(lines(&all, &inner), plain, "the WACZ's WARC indexes as the crawl does");
    let one = ok(&["index", &s(&store), "/sub/py.wacz"]).out();
    assert_eq!(lines(&one, &inner), plain, "the WACZ alone");
    // The WACZ's own index (cdxj-indexer through py-wacz): the same offsets and lengths.
    let own = String::from_utf8(checked(Command::new("python3").args(["-c", "import sys, zipfile, gzip; sys.stdout.write(gzip.decompress(zipfile.ZipFile(sys.argv[1]).read('indexes/index.cdx.gz')).decode())"]).arg(&src), "read the WACZ's index").stdout).unwrap();
    let places = |out: &str| -> Vec<(String, String, String)> {
        let mut v: Vec<(String, String, String)> = out
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let j: serde_json::Value = serde_json::from_str(l.splitn(3, ' ').nth(2).unwrap()).unwrap();
                (l.split(' ').next().unwrap().to_string(), j["offset"].as_str().unwrap().to_string(), j["length"].as_str().unwrap().to_string())
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(places(&one), places(&own), "offsets and lengths as the WACZ's own index gives them");
}

/// A WACZ copied into the mount reads back exactly, whole and by random reads of 4 KiB to
/// 1 MiB at random offsets (as ReplayWeb.page reads one over HTTP: the tail, the central
/// directory, a range per record), before and after a remount.
#[test]
fn a_wacz_reads_back_exactly_through_the_mount_at_random_offsets() {
    let fx = MountFixture::new();
    let crawl = &crawl_files()[0];
    let src = fx.path("py.wacz");
    py_wacz(crawl, &src);
    let want = fs::read(&src).unwrap();
    let m = fx.mount();
    fs::copy(crawl, m.path("crawl.warc.gz")).unwrap();
    fs::copy(&src, m.path("py.wacz")).unwrap();
    wait_stored(&fx.store);
    let check = |m: &Mounted, round: u64| {
        assert!(fs::read(m.path("py.wacz")).unwrap() == want, "py.wacz read whole differs (round {round})");
        let f = fs::File::open(m.path("py.wacz")).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(round);
        let tail = 65557.min(want.len());
        let mut reads: Vec<(usize, usize)> = vec![(want.len() - tail, tail)];
        for _ in 0..200 {
            let n = rng.gen_range(4096..=1 << 20).min(want.len());
            reads.push((rng.gen_range(0..=want.len() - n), n));
        }
        for (at, n) in reads {
            let mut buf = vec![0u8; n];
            f.read_exact_at(&mut buf, at as u64).unwrap();
            assert!(buf == want[at..at + n], "{n} bytes at {at} differ (round {round})");
        }
    };
    check(&m, 1);
    // The WACZ as a directory of its entries: its WARC is the crawl's bytes, its deflated
    // files inflated as `zipfile` extracts them; nothing there can be written.
    let view = m.path(".warcfs/wacz/py.wacz");
    let mut names: Vec<String> = walkdir::WalkDir::new(&view).into_iter().map(|e| e.unwrap()).filter(|e| e.file_type().is_file()).map(|e| e.path().strip_prefix(&view).unwrap().to_str().unwrap().to_string()).collect();
    names.sort();
    let listed = extract_names(&src);
    assert_eq!(names, listed, "the view lists the WACZ's entries");
    assert!(fs::read(view.join("archive").join(crawl.file_name().unwrap())).unwrap() == fs::read(crawl).unwrap(), "the WARC inside the WACZ reads as the crawl");
    for n in &names {
        assert_eq!(fs::read(view.join(n)).unwrap(), extract(&src, n), "{n} reads as zipfile extracts it");
    }
    assert_eq!(fs::read_dir(m.path(".warcfs/wacz")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect::<Vec<_>>(), ["py.wacz"], "only WACZs and directories");
    assert!(!m.path(".warcfs/wacz/crawl.warc.gz").exists());
    for (what, r) in [("create", fs::write(view.join("new"), b"x").err()), ("mkdir", fs::create_dir(view.join("d")).err()), ("unlink", fs::remove_file(view.join("datapackage.json")).err())] {
        let code = r.unwrap_or_else(|| panic!("{what} in the view succeeded")).raw_os_error();
        assert!(code == Some(libc::EROFS) || code == Some(libc::EPERM), "{what}: {code:?}");
    }
    m.unmount_clean();
    let m = fx.mount();
    check(&m, 2);
    m.unmount_clean();
    let st = stats(&fx.store);
    assert_eq!(num(&st, "files"), 2, "{st}");
    // The WACZ's records were found (its payloads counted with the crawl's), and share
    // their payloads with the crawl's: each unique payload at least twice.
    assert!(2 * num(&st, "unique_payloads") <= num(&st, "payloads"), "{st}");
}

/// `warcfs search` indexes the WARCs inside a stored WACZ: every query finds the same
/// captures as over the crawl stored as a file, named by their paths in `/.warcfs/wacz/`
/// and their offsets there (as `warcfs index` names them), with snippets read through the
/// WACZ; removing the WACZ removes them.
#[test]
fn search_finds_the_captures_of_the_warcs_inside_a_wacz() {
    use warcfs::search::{Query, Searcher};
    let tmp = TempDir::new().unwrap();
    let crawl = &crawl_files()[0];
    let src = tmp.path().join("py.wacz");
    py_wacz(crawl, &src);
    let (plain, packed) = (tmp.path().join("plain"), tmp.path().join("packed"));
    ok(&["import", &s(&plain), &s(crawl)]);
    ok(&["import", &s(&packed), &s(&src), "--to", "/sub"]);
    for store in [&plain, &packed] {
        ok(&["search", "update", &s(store)]);
    }
    let inner = format!("/.warcfs/wacz/sub/py.wacz/archive/{}", crawl.file_name().unwrap().to_str().unwrap());
    let (a, b) = (Searcher::open(&plain.join("search")).unwrap(), Searcher::open(&packed.join("search")).unwrap());
    let query = |q: &str| Query { q: q.to_string(), texts: 100_000, ..Query::default() };
    // Words from the crawl's titles.
    let mut words = std::collections::BTreeSet::new();
    for h in a.search(&query("the")).unwrap() {
        words.extend(h.title.split(|c: char| !c.is_ascii_alphabetic()).filter(|w| w.len() >= 4).map(str::to_lowercase));
    }
    assert!(words.len() >= 20, "{words:?}");
    let mut found = 0;
    for w in words.iter().step_by((words.len() / 40).max(1)) {
        let want: std::collections::BTreeSet<(String, u64)> = a.all_captures(&query(w)).unwrap().into_iter().map(|(_, o)| (inner.clone(), o)).collect();
        assert_eq!(b.all_captures(&query(w)).unwrap(), want, "{w}");
        found += want.len();
    }
    assert!(found > 100, "{found} captures found");
    // The command line names them so, with a snippet read from the WACZ.
    let word = words.iter().next().unwrap();
    let out = ok(&["search", &s(&packed), word, "--json", "--captures", "--limit", "3"]).out();
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty(), "{out}");
    assert!(lines.iter().all(|l| l["filename"].as_str().unwrap().ends_with(inner.trim_start_matches('/'))), "{out}");
    assert!(lines.iter().any(|l| l["snippet"].as_str().unwrap().to_lowercase().contains(&format!("[{word}"))), "{out}");
    // Removed, and updated: nothing found.
    ok(&["rm", &s(&packed), "/sub/py.wacz"]);
    ok(&["search", "update", &s(&packed)]);
    let b = Searcher::open(&packed.join("search")).unwrap();
    for w in words.iter().take(10) {
        assert!(b.all_captures(&query(w)).unwrap().is_empty(), "{w}");
    }
}
