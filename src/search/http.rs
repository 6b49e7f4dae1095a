//! `warcfs serve`: the search over HTTP, on 127.0.0.1 unless told otherwise.
//!
//! * `GET /search?q=...`: captures found, one per line, with pywb's CDX server parameter
//!   names: `url` (with `matchType=prefix`, or a trailing `*`, a prefix), `from`, `to`,
//!   `limit`, `filter=mime:TYPE` or `filter=status:CODE` (a value's start), `output=json`
//!   (JSON lines; else CDXJ lines: urlkey, timestamp, JSON). Each row has the fields warcfs's
//!   CDXJ has (`filename` is the file's path in the store, as `/.warcfs/index.cdxj` names
//!   it) and `score`, `title`, `snippet`.
//! * `GET /`: a search page: a query box, results by URL with their dates, snippets and links
//!   to replay each capture in pywb (`--replay`: its collection's URL).
//!
//! A fixed pool of threads answers (each connection closed after its answer); the index is
//! opened again when it is over two seconds old, so a mount's updates show. Listening on a
//! loopback address, it answers only requests whose `Host` is a loopback name: a web page
//! cannot read the archive's search through a name of its own that resolves to 127.0.0.1
//! (DNS rebinding).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Capture, Query, Result, SearchError, Searcher};
use crate::store::Store;

/// Threads answering at once.
const THREADS: usize = 4;
/// The most bytes of a request's head read.
const MAX_HEAD: usize = 16 << 10;
/// The most results of one request.
const MAX_LIMIT: usize = 10_000;
/// The rows of an API answer given a snippet.
const SNIPPETS: usize = 100;

/// What a request found: the searcher, the query, and (score, title, capture) each.
type Found = (Arc<Searcher>, Query, Vec<(f32, String, Capture)>);

/// A request's query, the most results, and what the query itself does not filter.
struct Asked {
    query: Query,
    limit: usize,
    exact_url: Option<String>,
    status: Option<String>,
}

struct Server {
    store: Store,
    dir: PathBuf,
    replay: String,
    /// Listening on a loopback address: requests must name a loopback host (`host_allowed`).
    loopback: bool,
    searcher: Mutex<Option<(Instant, Arc<Searcher>)>>,
}

/// Serves the search index in `dir` of `store` on `listener` until the process ends.
pub fn serve(store: Store, dir: &Path, listener: TcpListener, replay: &str) -> Result<()> {
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    let server = Arc::new(Server { store, dir: dir.to_path_buf(), replay: replay.trim_end_matches('/').to_string(), loopback, searcher: Mutex::new(None) });
    server.searcher()?;
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        let l = listener.try_clone().map_err(|err| SearchError::Io { path: "(listener)".into(), err })?;
        let s = server.clone();
        threads.push(std::thread::spawn(move || {
            for conn in l.incoming() {
                match conn {
                    // (A bug in one answer, a panic, must not take the thread with it.)
                    Ok(c) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.answer(c))) {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => log::warn!("serve: {e}"),
                        Err(_) => log::error!("serve: a bug (a panic, above) answering a request"),
                    },
                    Err(e) => log::warn!("serve: accept: {e}"),
                }
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// Whether a request naming `host` (its `Host` field, port and all) is answered by a server
/// on a loopback address: a loopback name or address, or none given (HTTP/1.0).
fn host_allowed(host: Option<&str>) -> bool {
    let Some(h) = host.map(str::trim) else { return true };
    let name = match h.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => h.rsplit_once(':').map_or(h, |(n, port)| if port.bytes().all(|b| b.is_ascii_digit()) { n } else { h }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `%xx` and `+` decoded.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit() => match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                Ok(v) => {
                    out.push(v);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A snippet (words found in `[ ]`) as HTML, the words in `<b>`.
fn snippet_html(s: &str) -> String {
    escape(s).replace('[', "<b>").replace(']', "</b>")
}

impl Server {
    fn searcher(&self) -> Result<Arc<Searcher>> {
        if let Some((at, s)) = self.searcher.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if at.elapsed() < Duration::from_secs(2) {
                return Ok(s.clone());
            }
        }
        // (Opened with no lock held: two requests may both open it; the later one stays.)
        let s = Arc::new(Searcher::open(&self.dir)?);
        *self.searcher.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), s.clone()));
        Ok(s)
    }

    fn answer(&self, conn: TcpStream) -> std::io::Result<()> {
        // A client has 10 s to send its request head, and to take each write of the answer.
        let deadline = Instant::now() + Duration::from_secs(10);
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        conn.set_write_timeout(Some(Duration::from_secs(10)))?;
        let mut r = BufReader::new(conn.try_clone()?);
        let mut line = String::new();
        r.by_ref().take(MAX_HEAD as u64).read_line(&mut line)?;
        // The rest of the head (of its fields only `Host` is needed), bounded in bytes and time.
        let mut head = line.len();
        let mut host = None;
        loop {
            if Instant::now() > deadline {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "request head not sent within 10 s"));
            }
            let mut l = String::new();
            let n = r.by_ref().take((MAX_HEAD - head.min(MAX_HEAD)) as u64).read_line(&mut l)?;
            head += n;
            if n == 0 || l == "\r\n" || l == "\n" || head >= MAX_HEAD {
                break;
            }
            if let Some((name, value)) = l.split_once(':') {
                if name.trim().eq_ignore_ascii_case("host") {
                    host = Some(value.trim().to_string());
                }
            }
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let params: Vec<(String, String)> = query.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').map_or((decode(p), String::new()), |(k, v)| (decode(k), decode(v)))).collect();
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let (status, ctype, body) = match (method, path) {
            _ if self.loopback && !host_allowed(host.as_deref()) => ("403 Forbidden", "text/plain; charset=utf-8", "this server answers requests to a loopback name only (127.0.0.1, localhost)\n".to_string()),
            ("GET", "/search") => match self.api(&get) {
                Ok(b) => ("200 OK", if get("output").as_deref() == Some("json") { "application/x-ndjson" } else { "text/plain; charset=utf-8" }, b),
                Err(SearchError::Query(m)) => ("400 Bad Request", "text/plain; charset=utf-8", format!("{m}\n")),
                Err(e) => ("500 Internal Server Error", "text/plain; charset=utf-8", format!("{e}\n")),
            },
            ("GET", "/") => match self.page(&get) {
                Ok(b) => ("200 OK", "text/html; charset=utf-8", b),
                Err(e) => ("500 Internal Server Error", "text/plain; charset=utf-8", format!("{e}\n")),
            },
            ("GET", _) => ("404 Not Found", "text/plain; charset=utf-8", "not found\n".to_string()),
            _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", "GET only\n".to_string()),
        };
        let mut w = conn;
        write!(w, "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())?;
        w.write_all(body.as_bytes())?;
        w.flush()
    }

    /// What the parameters ask.
    fn asked(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Asked> {
        let q = get("q").filter(|q| !q.trim().is_empty()).ok_or_else(|| SearchError::Query("no q= given".into()))?;
        let mut url = get("url").filter(|u| !u.is_empty());
        let prefix = get("matchType").as_deref() == Some("prefix") || url.as_ref().is_some_and(|u| u.ends_with('*'));
        if let Some(u) = url.as_mut().filter(|u| u.ends_with('*')) {
            u.pop();
        }
        let (mut mime, mut status) = (None, None);
        if let Some(f) = get("filter") {
            match f.trim_start_matches(['=', '~']).split_once(':') {
                Some(("mime", v)) => mime = Some(v.to_string()),
                Some(("status", v)) => status = Some(v.to_string()),
                _ => return Err(SearchError::Query(format!("filter {f}: only mime: and status: are known"))),
            }
        }
        let limit = get("limit").and_then(|l| l.parse().ok()).unwrap_or(100).min(MAX_LIMIT);
        let (url_prefix, exact_url) = if prefix { (url, None) } else { (None, url) };
        let query = Query { q, from: get("from").filter(|s| !s.is_empty()), to: get("to").filter(|s| !s.is_empty()), url_prefix, mime, texts: limit.max(1) * 4 };
        Ok(Asked { query, limit, exact_url, status })
    }

    /// The captures asked for, best text first: (score, title, capture).
    fn captures(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<Found> {
        let a = self.asked(get)?;
        let s = self.searcher()?;
        let mut out = Vec::new();
        for h in s.search(&a.query)? {
            for c in h.captures {
                if a.exact_url.as_ref().is_some_and(|e| c.row.url != *e) || a.status.as_ref().is_some_and(|st| !c.row.status.starts_with(st.as_str())) {
                    continue;
                }
                out.push((h.score, h.title.clone(), c));
            }
        }
        out.truncate(a.limit);
        Ok((s, a.query, out))
    }

    fn api(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<String> {
        let (s, query, rows) = self.captures(get)?;
        let json = get("output").as_deref() == Some("json");
        let mut body = String::new();
        let started = Instant::now();
        for (i, (score, title, c)) in rows.into_iter().enumerate() {
            // Snippets for the first rows only: each reads its payload and extracts it again.
            let snippet = if i < SNIPPETS && started.elapsed() < Searcher::SNIPPET_TIME { s.snippet(&self.store, &query.q, &c).unwrap_or_default() } else { String::new() };
            let urlkey = crate::format::cdx::surt(&c.row.url);
            let mut j = serde_json::json!({
                "url": c.row.url, "mime": c.row.mime, "status": c.row.status, "digest": c.row.digest,
                "length": c.row.length.to_string(), "offset": c.offset.to_string(), "filename": c.file.trim_start_matches('/'),
                "score": score, "title": title, "snippet": snippet,
            });
            if json {
                j["urlkey"] = urlkey.into();
                j["timestamp"] = c.row.timestamp.clone().into();
                body.push_str(&j.to_string());
            } else {
                body.push_str(&format!("{urlkey} {} {j}", c.row.timestamp));
            }
            body.push('\n');
        }
        Ok(body)
    }

    fn page(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<String> {
        let q = get("q").unwrap_or_default();
        let v = |k: &str| escape(&get(k).unwrap_or_default());
        let mut html = format!(
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>warcfs search{}</title>\
             <style>body{{font-family:sans-serif;max-width:60em;margin:1em auto}} .hit{{margin:1em 0}} .url{{color:#060}} .dates a{{margin-right:.5em}} b{{background:#ff8}}</style></head><body>\
             <form action=\"/\" method=\"get\"><input name=\"q\" size=\"50\" value=\"{}\" autofocus> from <input name=\"from\" size=\"8\" value=\"{}\"> to <input name=\"to\" size=\"8\" value=\"{}\"> URL <input name=\"url\" size=\"25\" value=\"{}\"> <button>Search</button></form>\n",
            if q.is_empty() { String::new() } else { format!(": {}", escape(&q)) },
            escape(&q),
            v("from"),
            v("to"),
            v("url"),
        );
        if q.trim().is_empty() {
            html.push_str("</body></html>\n");
            return Ok(html);
        }
        let (s, query, rows) = match self.captures(&|k| if k == "limit" { Some("1000".into()) } else if k == "url" { get(k).map(|u| if u.is_empty() || u.ends_with('*') { u } else { format!("{u}*") }) } else { get(k) }) {
            Ok(x) => x,
            Err(SearchError::Query(m)) => {
                html.push_str(&format!("<p class=\"error\">{}</p></body></html>\n", escape(&m)));
                return Ok(html);
            }
            Err(e) => return Err(e),
        };
        // By URL, in the order of their best result; each with its captures by date.
        let mut urls: Vec<(String, String, Vec<Capture>)> = Vec::new();
        for (_, title, c) in rows {
            match urls.iter_mut().find(|(u, _, _)| *u == c.row.url) {
                Some(e) => e.2.push(c),
                None => urls.push((c.row.url.clone(), title, vec![c])),
            }
        }
        html.push_str(&format!("<p class=\"count\">{} pages</p>\n", urls.len()));
        let started = Instant::now();
        for (url, title, mut caps) in urls.into_iter().take(50) {
            caps.sort_by(|a, b| a.row.timestamp.cmp(&b.row.timestamp));
            let latest = caps.iter().rev().find(|c| !c.row.revisit).unwrap_or(&caps[caps.len() - 1]);
            let snippet = if started.elapsed() < Searcher::SNIPPET_TIME { s.snippet(&self.store, &query.q, latest).unwrap_or_default() } else { String::new() };
            let link = |c: &Capture| format!("{}/{}/{}", self.replay, c.row.timestamp, c.row.url);
            html.push_str(&format!(
                "<div class=\"hit\"><a class=\"title\" href=\"{}\">{}</a><br><span class=\"url\">{}</span><div class=\"snippet\">{}</div><div class=\"dates\">{} captures, {} to {}: ",
                escape(&link(latest)),
                escape(if title.is_empty() { &url } else { &title }),
                escape(&url),
                snippet_html(&snippet),
                caps.len(),
                caps[0].row.timestamp,
                caps[caps.len() - 1].row.timestamp
            ));
            for c in caps.iter().take(20) {
                html.push_str(&format!("<a class=\"capture\" href=\"{}\">{}</a>", escape(&link(c)), c.row.timestamp));
            }
            html.push_str("</div></div>\n");
        }
        html.push_str("</body></html>\n");
        Ok(html)
    }
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn only_loopback_names_are_answered_on_a_loopback_address() {
        for ok in [None, Some("127.0.0.1:8089"), Some("localhost:8089"), Some("LOCALHOST"), Some("[::1]:8089"), Some("127.0.0.2"), Some("app.localhost:1"), Some("localhost.")] {
            assert!(host_allowed(ok), "{ok:?}");
        }
        for bad in [Some("evil.example:8089"), Some("evil.example"), Some("127.0.0.1.evil.example"), Some("localhost.evil.example:80"), Some("[2001:db8::1]:80"), Some("10.0.0.1"), Some("")] {
            assert!(!host_allowed(bad), "{bad:?}");
        }
    }
}
