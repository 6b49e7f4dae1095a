//! Helpers for the end-to-end tests of the `warcfs` binary: running it, parsing its output,
//! checking a store, walking source trees, pack files, and the shared crawl corpus; mounts
//! are in `mount`, the object-store cluster in `remote`, pywb and HTTP in `pywb`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub mod mount;
pub mod pywb;
pub mod remote;
// Each test file uses some of these, none all of them.
#[allow(unused_imports)]
pub use mount::*;
#[allow(unused_imports)]
pub use remote::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_warcfs");

/// The real sample corpus (29 WARC/ARC files and a README).
pub fn real_corpus() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/real"))
}

/// A `warcfs` command with a deterministic environment (no RUST_LOG from the caller, so
/// stderr holds only what the binary reports at its default level).
pub fn warcfs() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("RUST_LOG");
    c.stdin(Stdio::null());
    c
}

pub struct Run {
    pub args: Vec<String>,
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn describe(&self) -> String {
        let out = self.out();
        let out = if out.len() > 4000 { format!("{}...", &out[..4000]) } else { out };
        format!("warcfs {:?}\nexit: {:?}\nstdout:\n{}\nstderr:\n{}", self.args, self.code, out, self.stderr)
    }
}

fn to_args<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<String> {
    args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect()
}

/// Runs `warcfs ARGS...` to completion.
pub fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let out: Output = warcfs().args(args).output().expect("spawn warcfs");
    Run { args: to_args(args), code: out.status.code(), stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned() }
}

/// Runs `warcfs ARGS...` to completion with extra environment variables.
pub fn run_env<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Run {
    let out: Output = warcfs().args(args).envs(env.iter().copied()).output().expect("spawn warcfs");
    Run { args: to_args(args), code: out.status.code(), stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned() }
}

/// Runs `warcfs ARGS...` and panics unless it exits 0; returns the run.
pub fn ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let r = run(args);
    assert!(r.ok(), "expected success:\n{}", r.describe());
    r
}

/// The exit status of an error (`warcfs --help` documents them all).
pub const EXIT_ERROR: i32 = 3;

/// Runs `warcfs ARGS...`, expects the exit status of an error and exactly one stderr line of
/// the form "warcfs: ..." containing every needle. Returns that line.
pub fn fails_with<S: AsRef<std::ffi::OsStr>>(args: &[S], needles: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, Some(EXIT_ERROR), "expected the exit status of an error:\n{}", r.describe());
    assert!(r.stderr.ends_with('\n') && r.stderr.matches('\n').count() == 1, "expected exactly one stderr line:\n{}", r.describe());
    let line = r.stderr.trim_end_matches('\n').to_string();
    assert!(line.starts_with("warcfs: "), "stderr line must start with 'warcfs: ':\n{}", r.describe());
    for n in needles {
        assert!(line.contains(n), "stderr line should contain {n:?}:\n{}", r.describe());
    }
    line
}

pub fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

/// `warcfs cat STORE PATH`, which must succeed.
pub fn cat(store: &Path, path: &str) -> Vec<u8> {
    ok(&["cat", &s(store), path]).stdout
}

/// Asserts that `warcfs cat STORE PATH` gives exactly the bytes of `src`.
pub fn assert_cat_eq(store: &Path, path: &str, src: &Path) {
    let want = fs::read(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let got = cat(store, path);
    if got != want {
        let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!(
            "cat {path} differs from {}: {} bytes vs {} expected, first difference at byte {first}",
            src.display(),
            got.len(),
            want.len()
        );
    }
}

/// Asserts `fsck` (and `fsck --deep` if `deep`) exits 0 and reports clean.
pub fn assert_fsck_clean(store: &Path, deep: bool) {
    let mut args = vec!["fsck".to_string(), s(store)];
    if deep {
        args.push("--deep".into());
    }
    let r = run(&args);
    assert!(r.ok() && r.out().contains(": clean ("), "fsck should be clean:\n{}", r.describe());
}

/// Cats every expected file and checks its bytes; also checks `ls` lists it with its size.
pub fn assert_all_exact(store: &Path, files: &BTreeMap<String, PathBuf>, listed: &BTreeMap<String, LsEntry>) {
    for (p, src) in files {
        let e = listed.get(p).unwrap_or_else(|| panic!("ls does not show {p}"));
        assert_eq!(e.kind, '-', "{p} should be a regular file: {e:?}");
        assert_eq!(e.size, fs::metadata(src).unwrap().len(), "ls size of {p}");
        assert_cat_eq(store, p, src);
    }
}

/// Fresh incompressible bytes, so that every trial appends new blobs to the open pack.
pub fn random_file(path: &Path, len: usize, rng: &mut impl rand::RngCore) {
    let mut buf = vec![0u8; len];
    rng.fill_bytes(&mut buf);
    fs::write(path, buf).unwrap();
}

pub fn stats(store: &Path) -> serde_json::Value {
    let r = ok(&["stats", &s(store), "--json"]);
    serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("stats --json is not JSON ({e}):\n{}", r.describe()))
}

pub fn num(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(|x| x.as_u64()).unwrap_or_else(|| panic!("stats has no numeric {key:?}: {v}"))
}

/// Waits (up to 5 minutes) until a mounted store has nothing staged, every written file
/// ingested; returns the stats that said so.
pub fn wait_ingested(store: &Path) -> serde_json::Value {
    let t0 = std::time::Instant::now();
    loop {
        let st = stats(store);
        if num(&st, "staged_files") == 0 {
            return st;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(300), "staged files were not ingested within 5 minutes: {st}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Runs `cmd` (stdin closed) to completion; fails the test with `what`, the exit status and
/// both outputs unless it exits 0.
pub fn checked(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    assert!(out.status.success(), "{what} failed ({}):\n{}\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// A Python venv under CARGO_TARGET_TMPDIR/`name` with `requirements` (pip's file format)
/// installed, made once and reused while its `.complete` marker holds the same requirements.
/// `check` runs on the venv's bin/ before the venv is marked complete. Returns that bin/.
/// A failing venv or pip fails the test with their output.
pub fn pinned_venv(name: &str, requirements: &str, check: impl FnOnce(&Path)) -> PathBuf {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(&base).unwrap();
    let _lock = FileLock::exclusive(&base.join(format!("{name}.lock")));
    let venv = base.join(name);
    let bin = venv.join("bin");
    if fs::read_to_string(venv.join(".complete")).is_ok_and(|r| r == requirements) {
        return bin;
    }
    let _ = fs::remove_dir_all(&venv);
    let out = Command::new("python3").args(["-m", "venv"]).arg(&venv).stdin(Stdio::null()).output().expect("spawn python3 -m venv");
    assert!(out.status.success(), "python3 -m venv failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let reqs = venv.join("requirements.txt");
    fs::write(&reqs, requirements).unwrap();
    checked(Command::new(bin.join("python")).args(["-m", "pip", "install", "--disable-pip-version-check", "-r"]).arg(&reqs), &format!("pip install -r {}", reqs.display()));
    check(&bin);
    fs::write(venv.join(".complete"), requirements).unwrap();
    bin
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LsEntry {
    /// 'd', '-' or 'l'.
    pub kind: char,
    pub perms: String,
    pub size: u64,
    /// Symlink target, shown after " -> ".
    pub target: Option<String>,
}

/// Parses one `warcfs ls` output: "{t}{rwxrwxrwx} {size:>12} {name}[ -> target]".
pub fn parse_ls(out: &str) -> Vec<(String, LsEntry)> {
    out.lines()
        .map(|line| {
            assert!(line.len() > 24 && line.is_char_boundary(10), "unexpected ls line {line:?}");
            let kind = line.chars().next().unwrap();
            assert!("d-l".contains(kind), "unexpected ls type in {line:?}");
            let perms = line[1..10].to_string();
            let size: u64 = line[11..23].trim().parse().unwrap_or_else(|_| panic!("bad size in ls line {line:?}"));
            let rest = &line[24..];
            let (name, target) = match (kind, rest.split_once(" -> ")) {
                ('l', Some((n, t))) => (n.to_string(), Some(t.to_string())),
                ('l', None) => panic!("symlink without ' -> ' in ls line {line:?}"),
                _ => (rest.to_string(), None),
            };
            (name, LsEntry { kind, perms, size, target })
        })
        .collect()
}

pub fn ls(store: &Path, dir: &str) -> Vec<(String, LsEntry)> {
    parse_ls(&ok(&["ls", &s(store), dir]).out())
}

pub fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// Every entry under `dir` in the store (not `dir` itself), by full path, via `warcfs ls`.
pub fn ls_tree(store: &Path, dir: &str) -> BTreeMap<String, LsEntry> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_string()];
    while let Some(d) = todo.pop() {
        for (name, e) in ls(store, &d) {
            let p = join(&d, &name);
            if e.kind == 'd' {
                todo.push(p.clone());
            }
            out.insert(p, e);
        }
    }
    out
}

/// The regular files that `warcfs import STORE SRCS... --to TO` creates, as `cp -r` would:
/// store path -> source path. Symlinks are not followed (and not listed).
pub fn expected_files(srcs: &[PathBuf], to: &str) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for src in srcs {
        let base = src.file_name().expect("source has a name").to_str().expect("utf-8").to_string();
        let top = join(to, &base);
        for e in walkdir::WalkDir::new(src).follow_links(false) {
            let e = e.expect("walk source");
            if !e.file_type().is_file() {
                continue;
            }
            let rel = e.path().strip_prefix(src).unwrap();
            let p = if rel.as_os_str().is_empty() { join(to, &base) } else { join(&top, rel.to_str().unwrap()) };
            out.insert(p, e.path().to_path_buf());
        }
    }
    out
}

/// Parsed "imported N files, B bytes in (...), M new bytes stored (...); ..." line.
#[derive(Debug, Clone, Copy)]
pub struct ImportSummary {
    pub files: u64,
    pub bytes_in: u64,
    pub new_bytes: u64,
}

pub fn parse_import_summary(stdout: &str) -> ImportSummary {
    let line = stdout.lines().find(|l| l.starts_with("imported ")).unwrap_or_else(|| panic!("no summary line in {stdout:?}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert!(words.len() > 6 && words[2] == "files," && words[4] == "bytes" && words[5] == "in", "unexpected summary line {line:?}");
    let files: u64 = words[1].parse().unwrap_or_else(|_| panic!("bad file count in {line:?}"));
    let bytes_in: u64 = words[3].parse().unwrap_or_else(|_| panic!("bad bytes in {line:?}"));
    let i = line.find(" new bytes stored").unwrap_or_else(|| panic!("no 'new bytes stored' in {line:?}"));
    let new_bytes: u64 = line[..i].rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("bad new bytes in {line:?}"));
    ImportSummary { files, bytes_in, new_bytes }
}

/// One blob of a pack file, walked from offset 0 with the layout of `warcfs::pack`.
#[derive(Debug, Clone, Copy)]
pub struct Blob {
    pub offset: u64,
    pub codec: u8,
    pub kind: u8,
    pub raw_len: u32,
    pub stored_len: u32,
}

pub use warcfs::pack::BLOB_HEADER_LEN;

/// Walks a sealed pack's blobs (a header of `BLOB_HEADER_LEN` bytes starting with
/// `BLOB_MAGIC`, then the stored bytes) up to the footer, with the code's own offsets.
pub fn pack_blobs(data: &[u8]) -> Vec<Blob> {
    use warcfs::pack::{BLOB_CODEC_AT, BLOB_KIND_AT, BLOB_MAGIC, BLOB_RAW_LEN_AT, BLOB_STORED_LEN_AT, FOOTER_MAGIC};
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + BLOB_HEADER_LEN <= data.len() && &data[off..off + 4] == BLOB_MAGIC {
        let u32at = |i: usize| u32::from_le_bytes(data[off + i..off + i + 4].try_into().unwrap());
        let b = Blob { offset: off as u64, codec: data[off + BLOB_CODEC_AT], kind: data[off + BLOB_KIND_AT], raw_len: u32at(BLOB_RAW_LEN_AT), stored_len: u32at(BLOB_STORED_LEN_AT) };
        out.push(b);
        off += BLOB_HEADER_LEN + b.stored_len as usize;
    }
    assert!(data.len() >= off + 4 && &data[off..off + 4] == FOOTER_MAGIC, "pack: blobs should be followed by the footer magic at {off}");
    out
}

pub fn sealed_packs(store: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(store.join("packs"))
        .expect("packs dir")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .collect();
    v.sort();
    v
}

/// Holds an exclusive flock on a file until dropped.
pub struct FileLock(File);

impl FileLock {
    pub fn exclusive(path: &Path) -> FileLock {
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).expect("open lock file");
        // SAFETY: flock on a descriptor we own.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock {}: {}", path.display(), std::io::Error::last_os_error());
        FileLock(f)
    }
    pub fn file(&self) -> &File {
        &self.0
    }
}

const CRAWL_NAME: &str = "crawls-p200-c3-s7";

/// The 3-crawl corpus (`make-crawls.py --pages 200 --crawls 3 --seed 7`), generated once into
/// a cache dir under CARGO_TARGET_TMPDIR and reused while its manifest.json exists. Panics
/// with the script's stderr if it cannot be made.
pub fn crawl_corpus() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        fs::create_dir_all(&base).unwrap();
        let dir = base.join(CRAWL_NAME);
        // The file lock also serialises separate test processes sharing the target dir.
        let _lock = FileLock::exclusive(&base.join(format!("{CRAWL_NAME}.lock")));
        if dir.join("manifest.json").exists() {
            return dir;
        }
        let tmp = base.join(format!("{CRAWL_NAME}.tmp"));
        let _ = fs::remove_dir_all(&tmp);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/make-crawls.py");
        let out = Command::new("python3")
            .args([script, "--out", tmp.to_str().unwrap(), "--pages", "200", "--crawls", "3", "--seed", "7"])
            .stdin(Stdio::null())
            .output()
            .expect("spawn python3 make-crawls.py");
        assert!(
            out.status.success() && tmp.join("manifest.json").exists(),
            "make-crawls.py failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        let _ = fs::remove_dir_all(&dir);
        fs::rename(&tmp, &dir).expect("move the crawl corpus into place");
        dir
    })
}

/// The crawl files (crawl-1.warc.gz, crawl-2.warc.gz, crawl-3.warc) of the crawl corpus.
pub fn crawl_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(crawl_corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("crawl-"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 3, "expected 3 crawl files in {}", crawl_corpus().display());
    v
}

/// `data`, a `.warc.gz`, with each of its first `upto` gzip members compressed again by
/// another deflate writer: `cmd` (e.g. `gzip -9 -n -c`, `zopfli -c`) run on the member's
/// text in a file of its own, its output in place of the member. Other bytes stay as they are.
pub fn regzip_members(data: &[u8], cmd: &[&str], upto: usize) -> Vec<u8> {
    use warcfs::format::gzip::{split, Region};
    let tmp = tempfile::tempdir().unwrap();
    let text_path = tmp.path().join("member");
    let mut plain = Vec::new();
    let mut out = Vec::with_capacity(data.len());
    let mut done = 0;
    for r in split(data, &mut plain) {
        match r {
            Region::Member(m) if done < upto => {
                fs::write(&text_path, &plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize]).unwrap();
                let o = Command::new(cmd[0]).args(&cmd[1..]).arg(&text_path).output().unwrap_or_else(|e| panic!("{} (scripts/setup installs it): {e}", cmd[0]));
                assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
                out.extend_from_slice(&o.stdout);
                done += 1;
            }
            Region::Member(m) => out.extend_from_slice(&data[m.start as usize..(m.start + m.comp_len) as usize]),
            Region::Raw { start, len } => out.extend_from_slice(&data[start as usize..(start + len) as usize]),
        }
    }
    out
}

/// Bytes of every file under `dir` (what `du -sb` would count, directories left out).
pub fn tree_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir).into_iter().filter_map(|e| e.ok()).filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// A store in `tmp` with one real sample imported: returns (store, the sample's path). The
/// failpoint tests all start from `webrecorder-warcio/example.warc.gz`, a few gzip members.
pub fn store_with_sample(tmp: &Path, sample: &str) -> (PathBuf, PathBuf) {
    let store = tmp.join("store");
    let src = real_corpus().join(sample);
    ok(&["import", &s(&store), &s(&src)]);
    (store, src)
}

/// While its file exists, a daemon started with `WARCFS_HOLD=place:FILE` waits at that place
/// (debug builds): a test closes it, looks at the state there, and opens it again. Opened
/// when dropped, so a failing test does not leave a daemon waiting.
pub struct Gate(pub PathBuf);

impl Gate {
    pub fn close(&self) {
        fs::write(&self.0, b"").unwrap();
    }

    pub fn open(&self) {
        let _ = fs::remove_file(&self.0);
    }

    /// `WARCFS_HOLD`'s entry for holding `place` at this gate.
    pub fn hold(&self, place: &str) -> String {
        format!("{place}:{}", s(&self.0))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}
