//! pywb and HTTP for the replay tests (`tests/replay.rs`, `tests/warcprox.rs`): a `wayback`
//! server on 127.0.0.1 killed when dropped, a plain HTTP/1.0 GET, the headers two replays
//! must agree on, the captures of a CDXJ index and a plain collection of the original files
//! to compare with, and line helpers for comparing CDXJ indexes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use std::fs;

use super::{checked, s};

/// Where a collection's files and index go under a wayback root.
pub const COLL: &str = "collections/test";

/// An HTTP capture as a CDXJ line gives it.
#[derive(Debug, Clone)]
pub struct Capture {
    /// The URL as pywb looks it up (SURT), the line's first field.
    pub urlkey: String,
    pub timestamp: String,
    pub url: String,
    pub status: u16,
    pub mime: String,
    pub filename: String,
}

/// Every HTTP capture of a CDXJ index that a replay URL names alone. pywb addresses a capture
/// by its URL key and 14-digit timestamp; the test crawls are made seconds apart, so a URL can
/// be captured twice in one second (two crawls, or a redirect's target fetched again), and
/// which of the two pywb serves then follows the order of their index lines, whose JSON
/// differs between the original files and an export (a revisit's `mime`): such captures are
/// left out. At most a quarter may be (a few dozen of some 1,850 on the test corpus): more,
/// and a comparison over what is left would say little.
pub fn captures(cdxj: &[String]) -> Vec<Capture> {
    let all = every_capture(cdxj);
    let mut seen: std::collections::BTreeMap<(&str, &str), usize> = std::collections::BTreeMap::new();
    for c in &all {
        *seen.entry((&c.urlkey, &c.timestamp)).or_default() += 1;
    }
    let out: Vec<Capture> = all.iter().filter(|c| seen[&(c.urlkey.as_str(), c.timestamp.as_str())] == 1).cloned().collect();
    assert!(out.len() * 4 >= all.len() * 3, "{} of {} captures share their URL key and second with another (crawls made within a second of each other?): too few left to compare", all.len() - out.len(), all.len());
    out
}

/// Every HTTP capture of a CDXJ index (a response or a revisit with an HTTP status; not a
/// request, not a warcinfo).
fn every_capture(cdxj: &[String]) -> Vec<Capture> {
    let mut out = Vec::new();
    for line in cdxj {
        let mut parts = line.splitn(3, ' ');
        let (key, ts, json) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap_or_else(|| panic!("bad CDXJ line {line:?}")));
        let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("bad CDXJ JSON ({e}) in {line:?}"));
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or_default().to_string();
        let Ok(status) = field("status").parse::<u16>() else { continue };
        let c = Capture { urlkey: key.to_string(), timestamp: ts.to_string(), url: field("url"), status, mime: field("mime"), filename: field("filename") };
        if c.url.starts_with("http") {
            out.push(c);
        }
    }
    out
}

/// The reference: a plain directory holding `files` in pywb's layout, indexed by
/// cdxj-indexer (from the venv `bin`); gives it and its index's lines.
pub fn plain_collection(bin: &Path, tmp: &Path, files: &[PathBuf]) -> (PathBuf, Vec<String>) {
    let plain = tmp.join("plain");
    let plain_archive = plain.join(COLL).join("archive");
    fs::create_dir_all(&plain_archive).unwrap();
    fs::create_dir_all(plain.join(COLL).join("indexes")).unwrap();
    for f in files {
        fs::copy(f, plain_archive.join(f.file_name().unwrap())).unwrap();
    }
    let idx = sorted_lines(&tool(bin, "cdxj-indexer", &[&s(&plain_archive)], tmp));
    fs::write(plain.join(COLL).join("indexes/index.cdxj"), idx.join("\n") + "\n").unwrap();
    (plain, idx)
}

/// Runs a venv tool to completion; panics with its output unless it exits 0.
pub fn tool(bin: &Path, name: &str, args: &[&str], cwd: &Path) -> String {
    let out = checked(Command::new(bin.join(name)).args(args).current_dir(cwd), &format!("{name} {args:?} (in {})", cwd.display()));
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{name} {args:?}: output is not UTF-8: {e}"))
}

pub fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    v.sort();
    v
}

/// Describes how two sorted line lists differ (first few lines on each side).
pub fn line_diff(a_name: &str, a: &[String], b_name: &str, b: &[String]) -> String {
    let only_a: Vec<&String> = a.iter().filter(|l| b.binary_search(l).is_err()).take(10).collect();
    let only_b: Vec<&String> = b.iter().filter(|l| a.binary_search(l).is_err()).take(10).collect();
    format!("{} lines vs {} lines\nonly in {a_name}: {only_a:#?}\nonly in {b_name}: {only_b:#?}", a.len(), b.len())
}

/// A pywb `wayback` server on 127.0.0.1, killed when dropped.
pub struct Wayback {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Wayback {
    /// Starts `wayback` over ROOT (which holds `collections/` or a config.yaml) and waits
    /// until it answers.
    pub fn start(bin: &Path, root: &Path, log: &Path) -> Wayback {
        // Below the ephemeral range the crawls' own servers took their ports from (bind to
        // port 0): a replay server on a crawl's port would make its URLs and the archived
        // ones the same text, and `comparable_headers` would neutralise both.
        // Each port is handed out once in this process: two servers started at once (the
        // tests run in parallel) must not both find one port free before either binds it.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let first = 20_000 + std::process::id() % 10_000;
        let port = (0..12_000)
            .map(|_| (first + NEXT.fetch_add(1, Ordering::Relaxed) % 12_000 - 20_000) % 12_000 + 20_000)
            .map(|p| p as u16)
            .find(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
            .expect("a free port under 32000");
        let logf = fs::File::create(log).unwrap();
        let child = Command::new(bin.join("wayback"))
            .args(["-p", &port.to_string(), "-b", "127.0.0.1", "-d"])
            .arg(root)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("spawn wayback");
        let mut w = Wayback { child, port, log: log.to_path_buf() };
        let t0 = Instant::now();
        loop {
            if let Some(st) = w.child.try_wait().unwrap() {
                panic!("wayback over {} exited ({st}) before answering:\n{}", root.display(), w.log_text());
            }
            if let Ok(r) = http_get(port, "/") {
                assert_eq!(r.status, 200, "wayback over {} answers / with {}:\n{}", root.display(), r.status_line, w.log_text());
                return w;
            }
            assert!(t0.elapsed() < Duration::from_secs(90), "wayback over {} did not answer on port {port} within 90 s:\n{}", root.display(), w.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Wayback {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Response {
    pub status_line: String,
    pub status: u16,
    /// Header lines in order, as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A plain HTTP/1.0 GET (the server closes the connection after the response).
pub fn http_get(port: u16, path: &str) -> std::io::Result<Response> {
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: warcfs-replay-test\r\n\r\n")?;
    let mut raw = Vec::new();
    c.read_to_end(&mut raw)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what} in response to GET {path}"));
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let body = raw[end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default().to_string();
    let status = status_line.split(' ').nth(1).and_then(|x| x.parse().ok()).ok_or_else(|| bad("no status"))?;
    let headers: Vec<(String, String)> =
        lines.map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).unwrap_or((l.to_string(), String::new()))).collect();
    if let Some((_, len)) = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        if len.parse::<usize>().ok() != Some(body.len()) {
            return Err(bad(&format!("Content-Length {len} but {} body bytes", body.len())));
        }
    }
    Ok(Response { status_line, status, headers, body })
}

/// Headers that must agree between two servers replaying the same capture: all but Date,
/// with each server's own address made neutral (Link and Content-Location name it).
pub fn comparable_headers(r: &Response, port: u16) -> Vec<(String, String)> {
    let me = format!("127.0.0.1:{port}");
    r.headers.iter().filter(|(k, _)| !k.eq_ignore_ascii_case("date")).map(|(k, v)| (k.clone(), v.replace(&me, "127.0.0.1:PORT"))).collect()
}

/// Percent-encodes what cannot stand in a request line as is.
pub fn request_safe(url: &str) -> String {
    let mut out = String::new();
    for b in url.bytes() {
        if b.is_ascii_graphic() {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// GETs `path` (a capture archived with `status`) from both servers and gives what differs
/// between the two answers (`ours` named `name` in messages), or from the archived status;
/// and our answer, if both came.
pub fn compare_replays(ours: &Wayback, reference: &Wayback, path: &str, status: u16, name: &str) -> (Vec<String>, Option<Response>) {
    let mut problems = Vec::new();
    let (a, b) = match (http_get(ours.port, path), http_get(reference.port, path)) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            problems.push(format!("GET {path}: {name} {:?}, plain {:?}", a.err(), b.err()));
            return (problems, None);
        }
    };
    if a.status != status || b.status != status {
        problems.push(format!("GET {path}: archived status {status}, {name} {:?}, plain {:?}", a.status_line, b.status_line));
    }
    if a.status_line != b.status_line || comparable_headers(&a, ours.port) != comparable_headers(&b, reference.port) {
        problems.push(format!("GET {path}: headers differ\n{name}: {} {:?}\nplain: {} {:?}", a.status_line, comparable_headers(&a, ours.port), b.status_line, comparable_headers(&b, reference.port)));
    }
    if a.body != b.body {
        let first = super::first_diff(&a.body, &b.body);
        problems.push(format!("GET {path}: body differs: {} bytes from the {name}, {} from the plain copy, first difference at {first}", a.body.len(), b.body.len()));
    }
    (problems, Some(a))
}

/// Asserts that `/.warcfs/resolved.cdxj` (`cdxj`, of a store whose files are under `/first`
/// and `/later`) is what cdxj-indexer makes of the view's files copied to `copied`.
pub fn resolved_index_is_cdxj_indexers(bin: &Path, cdxj: &str, copied: &Path, tmp: &Path) {
    let ours = sorted_lines(&cdxj.replace("\"filename\": \".warcfs/resolved/first/", "\"filename\": \"").replace("\"filename\": \".warcfs/resolved/later/", "\"filename\": \""));
    let indexer = sorted_lines(&tool(bin, "cdxj-indexer", &[&s(copied)], tmp));
    assert!(ours == indexer, "resolved.cdxj against cdxj-indexer over the view: {}", line_diff("resolved.cdxj", &ours, "cdxj-indexer", &indexer));
}

/// pywb over the mount at `mnt` with the resolved view's index `cdxj`: its root (index and
/// config) in `tmp/pywb`, outside the mount.
pub fn wayback_over_resolved(bin: &Path, cdxj: &str, mnt: &Path, tmp: &Path) -> Wayback {
    let root = tmp.join("pywb");
    fs::create_dir_all(root.join("indexes")).unwrap();
    fs::write(root.join("indexes/index.cdxj"), cdxj).unwrap();
    fs::write(root.join("config.yaml"), format!("collections:\n  test:\n    index_paths: {}/indexes/\n    archive_paths: {}/\n", root.display(), mnt.display())).unwrap();
    Wayback::start(bin, &root, &tmp.join("wayback-resolved.log"))
}
