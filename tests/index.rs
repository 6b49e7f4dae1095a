//! `warcfs index`: the CDXJ index built from recipes equals what cdxj-indexer 1.5.0 prints
//! for the original files (expected outputs in tests/data/cdxj/, made with cdxj-indexer).

mod common;

use std::io::Read;
use std::path::Path;

use common::*;
use tempfile::TempDir;

fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    v.sort();
    v
}

fn expected(name: &str) -> Vec<String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cdxj").join(format!("{name}.cdxj"));
    sorted_lines(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

/// Files cdxj-indexer cannot index to the end (it aborts part-way: a non-chunked or
/// record-spanning gzip, an invalid date). Members Go's deflate wrote (gowarc's
/// `test.warc.gz`) are stored from their parse, and a member cut short (`clipped.warc.gz`)
/// is kept raw and inflated by the index: both are indexed line for line.
const SKIP: [&str; 3] = ["clueweb-quirk.warc.gz", "example-bad-non-chunked.warc.gz", "example-wrong-chunks.warc.gz"];

#[test]
fn index_equals_cdxj_indexer_on_the_real_corpus() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut names = Vec::new();
    for entry in walk(&real_corpus()) {
        let name = entry.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".warc.gz") || SKIP.contains(&name.as_str()) {
            continue;
        }
        std::fs::copy(&entry, src.join(&name)).unwrap();
        names.push(name.clone());
        // The gunzipped form too, where cdxj-indexer's output for it was recorded.
        let plain = name.trim_end_matches(".gz").to_string();
        if Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/cdxj/{plain}.cdxj")).exists() {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(std::fs::File::open(&entry).unwrap()).read_to_end(&mut out).unwrap();
            std::fs::write(src.join(&plain), out).unwrap();
            names.push(plain);
        }
    }
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cdxj/synthetic.warc"), src.join("synthetic.warc")).unwrap();
    names.push("synthetic.warc".into());
    assert!(names.len() >= 24, "{names:?}");
    ok(&["import", &s(&store), &s(&src), "--to", "/"]);
    let mut total = 0;
    for name in &names {
        let got = sorted_lines(&ok(&["index", &s(&store), &format!("/src/{name}")]).out());
        let want = expected(name);
        let missing: Vec<_> = want.iter().filter(|l| !got.contains(l)).collect();
        let extra: Vec<_> = got.iter().filter(|l| !want.contains(l)).collect();
        assert!(missing.is_empty() && extra.is_empty(), "{name}: warcfs index differs from cdxj-indexer\nmissing: {missing:#?}\nextra: {extra:#?}");
        total += got.len();
    }
    // Indexing the directory gives every line once, sorted, with paths relative to it.
    let all = ok(&["index", &s(&store), "/src"]).out();
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), total);
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "index output must be sorted");
    eprintln!("{} files, {total} CDXJ lines identical to cdxj-indexer", names.len());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn mount_exposes_a_current_index_in_dot_warcfs() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let m = Mount::new(&store, &tmp.path().join("mnt"));
    let crawls = crawl_files();
    std::fs::create_dir_all(m.mnt.join("c")).unwrap();
    std::fs::copy(&crawls[0], m.mnt.join("c").join(crawls[0].file_name().unwrap())).unwrap();
    wait_ingested(&store);
    let index = m.mnt.join(".warcfs/index.cdxj");
    let first = std::fs::read_to_string(&index).unwrap();
    assert!(first.lines().count() > 100, "{first}");
    assert_eq!(first, ok(&["index", &s(&store)]).out(), "the mount's index is `warcfs index` of the whole store");
    assert!(first.lines().all(|l| l.contains("\"filename\": \"c/")), "paths relative to the mount's root");

    // Kept current: another crawl shows up (within the one-second refresh).
    std::fs::copy(&crawls[1], m.mnt.join("c").join(crawls[1].file_name().unwrap())).unwrap();
    wait_ingested(&store);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = std::fs::read_to_string(&index).unwrap();
    assert!(second.lines().count() > first.lines().count());
    assert_eq!(second, ok(&["index", &s(&store)]).out());

    // Every stored file answers user.warcfs.* with its own figures.
    let c1 = m.mnt.join("c").join(crawls[0].file_name().unwrap());
    let c2 = m.mnt.join("c").join(crawls[1].file_name().unwrap());
    assert_eq!(xattr(&c1, "user.warcfs.logical_size"), std::fs::metadata(&crawls[0]).unwrap().len().to_string());
    let st = stats(&store);
    let records: u64 = xattr(&c1, "user.warcfs.records").parse().unwrap();
    assert!(records > 100 && records < num(&st, "records"), "{records}");
    let share: f64 = xattr(&c2, "user.warcfs.duplicate_share").parse().unwrap();
    assert!(share > 0.3 && share <= 1.0, "the second crawl shares most payloads with the first: {share}");
    let own: u64 = xattr(&c2, "user.warcfs.stored_bytes").parse().unwrap();
    assert!(own > 0 && own < std::fs::metadata(&crawls[1]).unwrap().len() / 2, "{own}");

    // Read-only, reserved, and not listed (so cp -r and rsync of the mount copy only WARCs).
    let err = std::fs::write(&index, b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert_eq!(std::fs::create_dir(m.mnt.join(".warcfs")).unwrap_err().raw_os_error(), Some(libc::EEXIST));
    assert_eq!(std::fs::File::create(m.mnt.join(".warcfs/new")).unwrap_err().raw_os_error(), Some(libc::EROFS));
    let names: Vec<String> = std::fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    assert_eq!(names, vec!["c".to_string()]);

    // A replay tool's lookup on a freshly mounted store: open, read at a record's offset with
    // a large buffer. The read comes back with that record's gzip member, byte-exact, and
    // stops there (the members after it would each have to be rebuilt); reading on gives the
    // bytes that follow.
    let mnt = m.mnt.clone();
    drop(m);
    let m = Mount::new(&store, &mnt);
    let original = std::fs::read(&crawls[0]).unwrap();
    let name = format!("c/{}", crawls[0].file_name().unwrap().to_string_lossy());
    let mut members: Vec<(u64, u64)> = first
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.splitn(3, ' ').nth(2)?).ok())
        .filter(|j| j["filename"] == name.as_str())
        .map(|j| (j["offset"].as_str().unwrap().parse().unwrap(), j["length"].as_str().unwrap().parse().unwrap()))
        .collect();
    members.sort_unstable();
    // Never two neighbours: a member that an earlier lookup rebuilt is cached, and a read
    // that reaches it carries on through it.
    let lookups: Vec<(u64, u64)> = members.into_iter().step_by(7).collect();
    assert!(lookups.len() > 20);
    for (i, &(offset, length)) in lookups.iter().enumerate() {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(m.mnt.join(&name)).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let n = f.read_at(&mut buf, offset).unwrap();
        // (A page-aligned read might come from the page cache, which needs it whole.)
        let whole = (original.len() as u64 - offset).min(buf.len() as u64);
        assert_eq!(n as u64, if offset % 4096 == 0 { whole } else { length }, "one member from {offset}");
        assert_eq!(&buf[..n], &original[offset as usize..offset as usize + n]);
        if i + 1 == lookups.len() {
            let n2 = f.read_at(&mut buf, offset + length).unwrap();
            let want = (original.len() as u64 - offset - length).min(buf.len() as u64) as usize;
            assert_eq!(n2, want, "reading on from a lookup is a plain sequential read");
            assert_eq!(&buf[..n2], &original[(offset + length) as usize..(offset + length) as usize + n2]);
        }
    }
    // These files are opened for direct I/O; mapping one still works, through the page cache.
    let f = std::fs::File::open(m.mnt.join(&name)).unwrap();
    // SAFETY: the file is not changed while mapped (nothing writes to the mount now).
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    assert!(map[..] == original[..], "mmap of a gzip file reads back byte-exact");
}

fn xattr(path: &Path, name: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and a buffer of the length given.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(len >= 0, "getxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error());
    buf.truncate(len as usize);
    String::from_utf8(buf).unwrap()
}
