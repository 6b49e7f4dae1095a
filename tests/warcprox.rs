//! A real deduplicating crawler's revisits through `/.warcfs/resolved/`: warcprox (pinned in
//! tests/warcprox/requirements.txt, with pywb, cdxj-indexer and warcio, in a venv under
//! CARGO_TARGET_TMPDIR) crawls a small site served by this test three times, one warcprox
//! run per crawl sharing one sqlite dedup db, so that it writes a revisit for every payload
//! it has seen before (an unchanged page, a page whose body came back, another URL's body, a
//! 404 page, a chunked and a gzip-encoded response). Those WARCs, copied into a mount (the
//! first crawl in one directory, the later ones in another), show no revisit in the resolved
//! view; its index is cdxj-indexer's over the view's files; warcio checks them; and pywb
//! over the view replays every capture as pywb replays warcprox's own WARCs (resolving the
//! revisits itself) and as the site served it in that crawl.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::pywb::*;
use common::*;
use tempfile::TempDir;

const REQUIREMENTS: &str = include_str!("warcprox/requirements.txt");
const WARCPROX_VERSION: &str = "2.13.1";
/// The site's pages, in the order each crawl fetches them (`/copy.html` after `/`, whose
/// body it repeats).
const PAGES: [&str; 10] = ["/", "/copy.html", "/news.html", "/cycle.html", "/logo.png", "/photo.jpg", "/app.js", "/style.css", "/missing.html", "/old"];
const CRAWLS: usize = 3;

/// The venv's bin/ with warcprox, pywb, cdxj-indexer and warcio as pinned in
/// requirements.txt. A pip failure fails the test with pip's output.
fn venv_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        pinned_venv("warcprox-venv", REQUIREMENTS, |bin| {
            // The entry points must run (gevent's plugin loading breaks with some zope pins).
            for (tool, arg, want) in [("warcprox", "--version", WARCPROX_VERSION), ("wayback", "-V", "2.8.3"), ("cdxj-indexer", "-h", "usage"), ("warcio", "-h", "usage")] {
                let out = Command::new(bin.join(tool)).arg(arg).stdin(Stdio::null()).output().expect("spawn venv tool");
                let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
                assert!(out.status.success() && text.contains(want), "{tool} {arg} does not run in the venv ({}):\n{text}", out.status);
            }
        })
    })
    .clone()
}




fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------
// The site: fixed pages, some of them different in each crawl.

/// A page as the site serves it in one crawl.
#[derive(Clone, Debug)]
struct Page {
    status: u16,
    reason: &'static str,
    /// Header lines after the status line, without the framing (Content-Length or
    /// Transfer-Encoding) and Connection.
    headers: Vec<(String, String)>,
    /// The entity: the body as a client has it once any chunking is undone.
    entity: Vec<u8>,
    chunked: bool,
}

impl Page {
    /// The bytes after the header block, as sent.
    fn wire_body(&self) -> Vec<u8> {
        if !self.chunked {
            return self.entity.clone();
        }
        let mut out = Vec::new();
        for chunk in self.entity.chunks(100) {
            out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            out.extend_from_slice(chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    fn wire(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, self.reason);
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if self.chunked {
            head.push_str("Transfer-Encoding: chunked\r\n");
        } else {
            head.push_str(&format!("Content-Length: {}\r\n", self.entity.len()));
        }
        head.push_str("Connection: close\r\n\r\n");
        let mut out = head.into_bytes();
        out.extend(self.wire_body());
        out
    }
}

/// Deterministic filler bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out).expect("gunzip");
    out
}

/// What the site serves at `path` in crawl `crawl` (1-based). Every response's headers say
/// which crawl it is (Date, X-Crawl, ETag), so a revisit's HTTP header is never its
/// original's; the bodies of `/`, `/copy.html` (the same as `/`), `/logo.png`, `/app.js`,
/// `/style.css` and `/missing.html` never change, `/cycle.html` alternates between two
/// bodies, `/news.html` and `/photo.jpg` change every crawl, and `/old` (a redirect) has
/// none.
fn page(path: &str, crawl: usize) -> Option<Page> {
    let index = b"<!doctype html>\n<html><head><title>warcfs test site</title><link rel=\"stylesheet\" href=\"/style.css\"><script src=\"/app.js\"></script></head>\n<body><h1>Home</h1><img src=\"/logo.png\"><img src=\"/photo.jpg\"><a href=\"/news.html\">news</a> <a href=\"/cycle.html\">cycle</a> <a href=\"/copy.html\">copy</a> <a href=\"/old\">old</a> <a href=\"/missing.html\">missing</a></body></html>\n".to_vec();
    let (status, reason, ctype, entity, chunked, gzipped) = match path {
        "/" | "/copy.html" => (200, "OK", "text/html; charset=utf-8", index, false, false),
        "/news.html" => (200, "OK", "text/html; charset=utf-8", format!("<!doctype html>\n<html><body><h1>News</h1><p>What is new in crawl {crawl}.</p></body></html>\n").into_bytes(), false, false),
        "/cycle.html" => {
            let phase = if crawl % 2 == 1 { "odd" } else { "even" };
            (200, "OK", "text/html; charset=utf-8", format!("<!doctype html>\n<html><body><p>An {phase} crawl.</p></body></html>\n").into_bytes(), false, false)
        }
        "/logo.png" => {
            let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
            png.extend(noise(1, 6000));
            (200, "OK", "image/png", png, false, false)
        }
        "/photo.jpg" => {
            let mut jpg = b"\xff\xd8\xff\xe0".to_vec();
            jpg.extend(noise(100 + crawl as u64, 9000));
            (200, "OK", "image/jpeg", jpg, false, false)
        }
        "/app.js" => {
            let js: String = (0..40).map(|i| format!("function f{i}(x) {{ return x * {i} + 1; }}\n")).collect();
            (200, "OK", "application/javascript", js.into_bytes(), true, false)
        }
        "/style.css" => {
            let css: String = (0..60).map(|i| format!(".c{i} {{ margin: {i}px; color: #{:06x}; }}\n", i * 4099)).collect();
            (200, "OK", "text/css", gzip(css.as_bytes()), false, true)
        }
        "/missing.html" => (404, "Not Found", "text/html; charset=utf-8", b"<!doctype html>\n<html><body><h1>Not Found</h1><p>Nothing here.</p></body></html>\n".to_vec(), false, false),
        "/old" => (301, "Moved Permanently", "text/html; charset=utf-8", Vec::new(), false, false),
        _ => return None,
    };
    let mut headers = vec![
        ("Date".to_string(), format!("Sat, 0{crawl} Dec 2026 10:00:0{crawl} GMT")),
        ("Server".to_string(), "warcfs-test-site".to_string()),
        ("X-Crawl".to_string(), crawl.to_string()),
        ("Content-Type".to_string(), ctype.to_string()),
    ];
    if gzipped {
        headers.push(("Content-Encoding".to_string(), "gzip".to_string()));
    }
    if status == 200 {
        headers.push(("ETag".to_string(), format!("\"{crawl}-{}\"", entity.len())));
    }
    if status == 301 {
        headers.push(("Location".to_string(), "/".to_string()));
    }
    Some(Page { status, reason, headers, entity, chunked })
}

/// The site on 127.0.0.2 (warcprox refuses to fetch from 127.0.0.1 and ::1, "localhost
/// access is not permitted"; the rest of 127/8 is loopback as well), a thread per
/// connection; stopped when dropped.
struct Site {
    addr: SocketAddr,
    crawl: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Site {
    fn start() -> Site {
        let listener = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2 (loopback)");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let crawl = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (crawl.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let n = c.load(Ordering::SeqCst);
                        std::thread::spawn(move || serve(conn, n));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => panic!("site accept: {e}"),
                }
            }
        });
        Site { addr, crawl, stop, thread: Some(thread) }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request on `conn` with the page of crawl `crawl` (or a bare 500), then closes.
fn serve(mut conn: TcpStream, crawl: usize) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&req[..req.iter().position(|&b| b == b'\r').unwrap_or(0)]).into_owned();
    let path = line.split(' ').nth(1).unwrap_or_default().to_string();
    let resp = match page(&path, crawl) {
        Some(p) => p.wire(),
        None => b"HTTP/1.1 500 Unexpected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    };
    let _ = conn.write_all(&resp);
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Write);
    // Let the peer read to the end before the socket closes.
    let _ = conn.read(&mut buf);
}

// ---------------------------------------------------------------------------------------
// warcprox.

/// A warcprox on 127.0.0.1 writing gzip WARCs into `dir`, its revisits found in the sqlite
/// dedup db `db`; killed when dropped, unless `stop` ended it.
struct Warcprox {
    child: Child,
    port: u16,
    log: PathBuf,
    stopped: bool,
}

impl Warcprox {
    /// Starts warcprox and waits until its `/status` answers. A port taken between choosing
    /// it and warcprox binding it is retried with another.
    fn start(bin: &Path, work: &Path, dir: &Path, prefix: &str, db: &Path, log: &Path) -> Warcprox {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let logf = fs::File::create(log).unwrap();
            let child = Command::new(bin.join("warcprox"))
                .args(["-b", "127.0.0.1", "-p", &port.to_string(), "-z", "-n", prefix, "--stats-db-file", ""])
                .arg("-d")
                .arg(dir)
                .arg("-j")
                .arg(db)
                .arg("-c")
                .arg(work.join("warcprox-ca.pem"))
                .arg("--certs-dir")
                .arg(work.join("warcprox-certs"))
                .current_dir(work)
                .stdin(Stdio::null())
                .stdout(logf.try_clone().unwrap())
                .stderr(logf)
                .spawn()
                .expect("spawn warcprox");
            let mut w = Warcprox { child, port, log: log.to_path_buf(), stopped: false };
            let t0 = Instant::now();
            loop {
                if let Some(st) = w.child.try_wait().unwrap() {
                    w.stopped = true;
                    last = format!("warcprox exited ({st}) before answering:\n{}", w.log_text());
                    break;
                }
                if w.status().is_ok() {
                    return w;
                }
                assert!(t0.elapsed() < Duration::from_secs(120), "warcprox did not answer on port {port} within 120 s:\n{}", w.log_text());
                std::thread::sleep(Duration::from_millis(100));
            }
            if !last.contains("in use") {
                break;
            }
        }
        panic!("{last}");
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// warcprox's own `GET /status` (not proxied), as JSON.
    fn status(&self) -> Result<serde_json::Value, String> {
        let r = http_get(self.port, "/status").map_err(|e| e.to_string())?;
        if r.status != 200 {
            return Err(r.status_line);
        }
        serde_json::from_slice(&r.body).map_err(|e| format!("/status is not JSON: {e}"))
    }

    /// Fetches `url` through the proxy; gives the status it answered with.
    fn fetch(&self, url: &str) -> u16 {
        let host = url.trim_start_matches("http://").split('/').next().unwrap();
        let get = || -> std::io::Result<Vec<u8>> {
            let mut c = TcpStream::connect(("127.0.0.1", self.port))?;
            c.set_read_timeout(Some(Duration::from_secs(120)))?;
            write!(c, "GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: warcfs-warcprox-test\r\nAccept: */*\r\nConnection: close\r\n\r\n")?;
            let mut raw = Vec::new();
            c.read_to_end(&mut raw)?;
            Ok(raw)
        };
        let raw = get().unwrap_or_else(|e| panic!("GET {url} through warcprox: {e}\n{}", self.log_text()));
        let line = String::from_utf8_lossy(&raw[..raw.iter().position(|&b| b == b'\r').unwrap_or(raw.len())]).into_owned();
        line.split(' ').nth(1).and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("GET {url} through warcprox: bad status line {line:?}\n{}", self.log_text()))
    }

    /// Waits until warcprox has processed `n` URLs all the way (written, and stored in the
    /// dedup db, which comes before the running stats in its postfetch chain), so that the
    /// next fetch of the same payload finds it.
    fn wait_processed(&self, n: u64) {
        wait_until(&format!("warcprox to process {n} URLs"), Duration::from_secs(120), || {
            let st = self.status()?;
            let done = st["urls_processed"].as_u64().ok_or_else(|| format!("no urls_processed in {st}"))?;
            if done >= n {
                Ok(())
            } else {
                Err(format!("{done} processed: {st}"))
            }
        });
    }

    /// SIGTERM, then waits for it to close its WARCs and exit.
    fn stop(&mut self) -> ExitStatus {
        // SAFETY: kill(2) of our own child, which has not been reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                self.stopped = true;
                return st;
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "warcprox did not exit within 120 s of SIGTERM:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Warcprox {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// pywb (as in tests/replay.rs).









/// Replays each capture (`id_` mode) from both servers; what differs between them, from the
/// archived status, or from what the site served in that capture's crawl (`served`: the
/// page by capture), and the bytes of body served.
fn replay_both(ours: &Wayback, reference: &Wayback, caps: &[Capture], served: &dyn Fn(&Capture) -> Page) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut body_bytes = 0;
    for c in caps {
        let path = format!("/test/{}id_/{}", c.timestamp, request_safe(&c.url));
        let (mut found, a) = compare_replays(ours, reference, &path, c.status, "view");
        problems.append(&mut found);
        let Some(a) = a else { continue };
        // The truth, which no revisit resolution made: what the site sent in that crawl.
        let p = served(c);
        // pywb undoes the chunking, and a content coding unless it keeps Content-Encoding.
        let gzipped = p.headers.iter().any(|(k, v)| k == "Content-Encoding" && v == "gzip");
        let entity = if gzipped && a.header("Content-Encoding").is_none() { gunzip(&p.entity) } else { p.entity.clone() };
        if a.status != p.status || a.header("X-Crawl") != p.headers.iter().find(|(k, _)| k == "X-Crawl").map(|(_, v)| v.as_str()) || a.body != entity {
            problems.push(format!(
                "GET {path}: not what the site served: status {} (served {}), X-Crawl {:?} (served {:?}), {} body bytes (served {}, first difference at {})",
                a.status,
                p.status,
                a.header("X-Crawl"),
                p.headers.iter().find(|(k, _)| k == "X-Crawl").map(|(_, v)| v.as_str()),
                a.body.len(),
                entity.len(),
                first_diff(&a.body, &entity)
            ));
        }
        body_bytes += a.body.len();
    }
    (problems, body_bytes)
}

/// The records of a WARC as `warcio index` sees them, with the fields a revisit names.
fn warc_records(bin: &Path, file: &Path) -> Vec<serde_json::Value> {
    let fields = "warc-type,warc-target-uri,warc-date,warc-record-id,warc-profile,warc-refers-to,warc-refers-to-target-uri,warc-refers-to-date,warc-payload-digest,warc-truncated,content-type";
    let out = tool(bin, "warcio", &["index", "-f", fields, &s(file)], file.parent().unwrap());
    out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("warcio index line {l:?}: {e}"))).collect()
}

/// `warcio check -v FILE` (which exits 1 when a digest fails): each record's id, its
/// WARC-Type and what the check says of it; and the whole report.
fn warcio_check(bin: &Path, file: &Path) -> (BTreeMap<String, (String, String)>, String) {
    let out = Command::new(bin.join("warcio")).args(["check", "-v"]).arg(file).stdin(Stdio::null()).output().expect("spawn warcio");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.code().is_some_and(|c| c <= 1), "warcio check -v {} ({}):\n{report}{}", file.display(), out.status, String::from_utf8_lossy(&out.stderr));
    let mut checks: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in report.lines() {
        if let Some(rest) = line.strip_prefix("  offset ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            assert!(words.len() == 4 && words[1] == "WARC-Record-ID", "unexpected warcio check line {line:?}");
            current = Some(words[2].to_string());
            checks.insert(words[2].to_string(), (words[3].to_string(), String::new()));
        } else if let Some(result) = line.strip_prefix("    ") {
            let id = current.as_ref().unwrap_or_else(|| panic!("a result before any record in:\n{report}"));
            let r = &mut checks.get_mut(id).unwrap().1;
            r.push_str(result.trim());
            r.push('\n');
        }
    }
    assert_eq!(out.status.success(), !checks.values().any(|(_, r)| r.contains("fail")), "warcio check's status against its report:\n{report}");
    (checks, report)
}

// ---------------------------------------------------------------------------------------

#[test]
fn pywb_replays_warcprox_crawls_deduplicated_by_revisits_from_the_resolved_view() {
    let t_start = Instant::now();
    let bin = venv_bin();
    let tmp = TempDir::new().unwrap();
    let work = tmp.path().join("warcprox");
    fs::create_dir_all(&work).unwrap();
    let db = work.join("dedup.sqlite");
    let site = Site::start();

    // 1. Three crawls, one warcprox run each (a crawl job), one dedup db for all: each run
    //    writes one WARC, its revisits naming responses of its own or of earlier runs.
    let mut files: Vec<PathBuf> = Vec::new();
    // What warcprox is expected to dedup: a payload (the bytes after the HTTP header) of
    // any URL seen before, unless it is empty.
    let mut seen: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut expected_revisits = vec![0usize; CRAWLS];
    for crawl in 1..=CRAWLS {
        site.crawl.store(crawl, Ordering::SeqCst);
        let dir = work.join(format!("warcs-{crawl}"));
        fs::create_dir_all(&dir).unwrap();
        let mut wp = Warcprox::start(&bin, &work, &dir, &format!("crawl{crawl}"), &db, &tmp.path().join(format!("warcprox-{crawl}.log")));
        for (i, path) in PAGES.iter().enumerate() {
            let want = page(path, crawl).unwrap();
            let got = wp.fetch(&site.url(path));
            assert_eq!(got, want.status, "crawl {crawl}: GET {path} through warcprox:\n{}", wp.log_text());
            wp.wait_processed(i as u64 + 1);
            let body = want.wire_body();
            if !body.is_empty() && !seen.insert(body) {
                expected_revisits[crawl - 1] += 1;
            }
        }
        let st = wp.stop();
        assert!(st.success() || st.signal() == Some(libc::SIGTERM), "warcprox exited with {st}:\n{}", wp.log_text());
        let mut written: Vec<PathBuf> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        written.sort();
        assert!(
            written.len() == 1 && written[0].to_str().unwrap().ends_with(".warc.gz") && written[0].file_name().unwrap().to_str().unwrap().starts_with(&format!("crawl{crawl}-")),
            "crawl {crawl}: warcprox should have written (and closed) one crawl{crawl}-*.warc.gz: {written:?}\n{}",
            wp.log_text()
        );
        files.push(written.pop().unwrap());
        // WARC-Date has whole seconds: the next crawl's captures must not share them.
        std::thread::sleep(Duration::from_millis(1100));
    }
    drop(site);
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_str().unwrap().to_string()).collect();

    // 2. warcprox wrote the revisits expected, each naming its original by record id, URI
    //    and date.
    let records: Vec<Vec<serde_json::Value>> = files.iter().map(|f| warc_records(&bin, f)).collect();
    let mut fields_seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids: BTreeMap<String, (String, String)> = BTreeMap::new();
    for r in records.iter().flatten() {
        if r["warc-type"] == "response" {
            ids.insert(r["warc-record-id"].as_str().unwrap().to_string(), (r["warc-target-uri"].as_str().unwrap().to_string(), r["warc-date"].as_str().unwrap().to_string()));
        }
    }
    let mut cross_url = 0;
    let mut cross_file = 0;
    for (i, recs) in records.iter().enumerate() {
        let revisits: Vec<&serde_json::Value> = recs.iter().filter(|r| r["warc-type"] == "revisit").collect();
        assert_eq!(revisits.len(), expected_revisits[i], "crawl {}: revisits written by warcprox: {revisits:#?}", i + 1);
        for r in revisits {
            for (k, v) in r.as_object().unwrap() {
                if k.starts_with("warc-") && k != "warc-type" {
                    *fields_seen.entry(format!("{k}: {}", if k == "warc-profile" || k == "warc-truncated" { v.as_str().unwrap() } else { "…" })).or_default() += 1;
                }
            }
            let id = r["warc-refers-to"].as_str().unwrap_or_else(|| panic!("a revisit without WARC-Refers-To: {r}"));
            let (uri, date) = ids.get(id).unwrap_or_else(|| panic!("a revisit refers to {id}, no response of the crawls: {r}"));
            assert_eq!((r["warc-refers-to-target-uri"].as_str(), r["warc-refers-to-date"].as_str()), (Some(uri.as_str()), Some(date.as_str())), "{r}");
            cross_url += usize::from(r["warc-target-uri"].as_str() != Some(uri));
            cross_file += usize::from(!recs.iter().any(|o| o["warc-record-id"].as_str() == Some(id)));
        }
    }
    let revisits: usize = expected_revisits.iter().sum();
    assert!(revisits > 0 && cross_url > 0 && cross_file > 0, "{revisits} revisits, {cross_url} of another URL, {cross_file} of another file");

    // 3. The reference: pywb over warcprox's WARCs in a plain directory, resolving their
    //    revisits itself.
    let (plain, idx_plain) = plain_collection(&bin, tmp.path(), &files);
    let revisit_lines = |lines: &[String]| lines.iter().filter(|l| l.contains("\"mime\": \"warc/revisit\"")).count();
    assert_eq!(revisit_lines(&idx_plain), revisits, "cdxj-indexer indexes every revisit of warcprox's");

    // 4. The WARCs in a mount: the first crawl in one directory, the later ones in another.
    let store = tmp.path().join("store");
    let m = Mount::new(&store, &tmp.path().join("mnt"));
    let dir_of = |i: usize| if i == 0 { "first" } else { "later" };
    for (i, f) in files.iter().enumerate() {
        fs::create_dir_all(m.mnt.join(dir_of(i))).unwrap();
        fs::copy(f, m.mnt.join(dir_of(i)).join(&names[i])).unwrap();
    }
    wait_ingested(&store);
    // The view's tables are made again once they are a second old.
    std::thread::sleep(Duration::from_millis(1500));
    let cdxj = fs::read_to_string(m.mnt.join(".warcfs/resolved.cdxj")).unwrap();
    let left: Vec<&str> = cdxj.lines().filter(|l| l.contains("warc/revisit")).collect();
    assert!(left.is_empty(), "{} of {revisits} warcprox revisits are left in resolved.cdxj:\n{}", left.len(), left.join("\n"));
    assert_eq!(cdxj.lines().count(), idx_plain.len(), "a line per record of the originals:\n{cdxj}");
    for (i, n) in names.iter().enumerate() {
        let want = format!("\"filename\": \".warcfs/resolved/{}/{n}\"", dir_of(i));
        assert!(cdxj.lines().any(|l| l.contains(&want)), "no line of resolved.cdxj names {want}:\n{cdxj}");
    }

    // The view's files, copied out: warcio finds nothing wrong and no revisit in them, and
    // cdxj-indexer indexes them as the view's own index says.
    let copied = tmp.path().join("view-copy");
    fs::create_dir_all(&copied).unwrap();
    // warcprox digests a chunked response's payload with its chunking undone, warcio with
    // it kept (warcio check: "payload digest failed"): each record of the view must check
    // as the record holding its payload checks in warcprox's files.
    let refers: BTreeMap<String, String> = records
        .iter()
        .flatten()
        .filter(|r| r["warc-type"] == "revisit")
        .map(|r| (r["warc-record-id"].as_str().unwrap().to_string(), r["warc-refers-to"].as_str().unwrap().to_string()))
        .collect();
    let mut original_checks: BTreeMap<String, (String, String)> = BTreeMap::new();
    for f in &files {
        original_checks.extend(warcio_check(&bin, f).0);
    }
    let chunked_fails = original_checks.values().filter(|(_, r)| r.contains("fail")).count();
    for (id, (_, r)) in &original_checks {
        assert!(!r.contains("fail") || ids.get(id).is_some_and(|(uri, _)| uri.ends_with("/app.js")), "warcio check fails {id} of warcprox's, not the chunked /app.js: {r}");
    }
    let mut view_records = 0;
    for (i, n) in names.iter().enumerate() {
        fs::copy(m.mnt.join(".warcfs/resolved").join(dir_of(i)).join(n), copied.join(n)).unwrap();
        let (checks, report) = warcio_check(&bin, &copied.join(n));
        assert!(!report.contains("revisit") && report.contains("digest pass"), "warcio check -v of the view of {n}:\n{report}");
        for (id, (kind, result)) in &checks {
            let (orig_kind, _) = original_checks.get(id).unwrap_or_else(|| panic!("the view of {n} has a record {id} that warcprox did not write:\n{report}"));
            let want = match refers.get(id) {
                Some(orig) => {
                    assert_eq!((orig_kind.as_str(), kind.as_str()), ("revisit", "response"), "{id} in the view of {n}");
                    &original_checks[orig].1
                }
                None => {
                    assert_eq!(orig_kind, kind, "{id} in the view of {n}");
                    &original_checks[id].1
                }
            };
            assert_eq!(result, want, "warcio check -v of {id} ({kind}) in the view of {n}, against the record with its payload in warcprox's files:\n{report}");
        }
        view_records += checks.len();
    }
    assert_eq!(view_records, original_checks.len(), "the view's files hold every record");
    resolved_index_is_cdxj_indexers(&bin, &cdxj, &copied, tmp.path());

    // 5. pywb over the mount with the view's index (its own root outside the mount) replays
    //    every capture as pywb over the plain copy does, and as the site served it.
    let ours = wayback_over_resolved(&bin, &cdxj, &m.mnt, tmp.path());
    let reference = Wayback::start(&bin, &plain, &tmp.path().join("wayback-plain.log"));
    let caps = captures(&idx_plain);
    assert_eq!(caps.len(), CRAWLS * PAGES.len(), "a capture per page per crawl: {caps:#?}");
    let served = |c: &Capture| {
        let crawl = names.iter().position(|n| *n == c.filename).unwrap_or_else(|| panic!("a capture in no crawl: {c:?}")) + 1;
        let path = c.url.split_once("://").unwrap().1;
        let path = &path[path.find('/').unwrap_or(path.len())..];
        page(if path.is_empty() { "/" } else { path }, crawl).unwrap_or_else(|| panic!("a capture of no page: {c:?}"))
    };
    let (problems, body_bytes) = replay_both(&ours, &reference, &caps, &served);
    assert!(
        problems.is_empty(),
        "{} of {} captures differ:\n{}\n--- wayback over the resolved view:\n{}\n--- wayback over the plain copy:\n{}",
        problems.len(),
        caps.len(),
        problems.join("\n"),
        ours.log_text(),
        reference.log_text()
    );
    drop((ours, reference, m));
    eprintln!(
        "warcprox {WARCPROX_VERSION}: {revisits} revisits written ({expected_revisits:?} by crawl; {cross_url} of another URL, {cross_file} of an earlier crawl's file); revisit fields {fields_seen:?}; {chunked_fails} records of warcprox's fail warcio's payload digest check (chunked), as they do in the view; {} captures ({} revisits in the plain index) replayed identically from /.warcfs/resolved/ ({body_bytes} body bytes) in {:.1} s",
        caps.len(),
        caps.iter().filter(|c| c.mime == "warc/revisit").count(),
        t_start.elapsed().as_secs_f64()
    );
}
