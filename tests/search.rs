//! Full-text search (`warcfs search`): each unique text one document, each capture a row.
//! The crawl corpus, and the same crawls exported `--revisits` (so that most captures are
//! revisits in other files than their originals), are indexed, and every one of several
//! hundred queries (words, pairs, phrases, taken from the pages' titles) finds exactly the
//! captures an index of one document per capture finds; a removed crawl leaves no hit and an
//! index like one built without it; an update killed after its text index committed is
//! finished by the next, with no text twice.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use tempfile::TempDir;
use warcfs::search::{Query, Searcher};

fn query(q: &str) -> Query {
    Query { q: q.to_string(), texts: 100_000, ..Query::default() }
}

/// Queries from the titles of the pages indexed in `dir`: single words, pairs of words and
/// two-word phrases, at most `n` of each, spread over the sorted vocabulary.
fn queries(dir: &Path, n: usize) -> Vec<String> {
    let s = Searcher::open(dir).unwrap();
    let mut titles = BTreeSet::new();
    for q in ["the", "and", "of", "a", "to", "in"] {
        for h in s.search(&query(q)).unwrap() {
            titles.insert(h.title);
        }
    }
    let words_of = |t: &str| t.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() >= 4 && w.chars().all(|c| c.is_ascii_alphabetic())).map(str::to_lowercase).collect::<Vec<_>>();
    let vocab: Vec<String> = titles.iter().flat_map(|t| words_of(t)).collect::<BTreeSet<_>>().into_iter().collect();
    let phrases: Vec<String> = titles.iter().flat_map(|t| words_of(t).windows(2).map(|w| format!("\"{} {}\"", w[0], w[1])).collect::<Vec<_>>()).collect::<BTreeSet<_>>().into_iter().collect();
    assert!(vocab.len() >= 50 && phrases.len() >= 50, "{} words, {} phrases from {} titles", vocab.len(), phrases.len(), titles.len());
    let spread = |v: &[String], k: usize| v.iter().step_by((v.len() / k).max(1)).take(k).cloned().collect::<Vec<_>>();
    let mut out = spread(&vocab, n);
    let singles = out.clone();
    out.extend(singles.iter().zip(singles.iter().rev()).map(|(a, b)| format!("{a} {b}")).take(n));
    out.extend(spread(&phrases, n));
    out
}

/// Every capture each query finds in the index at `a` and at `b`: the queries on which they
/// differ, and how many found something.
fn compare(a: &Path, b: &Path, qs: &[String]) -> (Vec<String>, usize) {
    let (sa, sb) = (Searcher::open(a).unwrap(), Searcher::open(b).unwrap());
    let mut diffs = Vec::new();
    let mut found = 0;
    for q in qs {
        let (x, y) = (sa.all_captures(&query(q)).unwrap(), sb.all_captures(&query(q)).unwrap());
        if x != y {
            diffs.push(format!("{q}: {} against {} captures; only in the first {:?}, only in the second {:?}", x.len(), y.len(), x.difference(&y).take(3).collect::<Vec<_>>(), y.difference(&x).take(3).collect::<Vec<_>>()));
        }
        found += !x.is_empty() as usize;
    }
    (diffs, found)
}

fn stats(store: &Path, dir: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&["search", "stats", &s(store), "--json", "--index-dir", &s(dir)]).out()).unwrap()
}

/// `files` imported into `store` under `to`, and its search index brought up to date.
fn import_and_index(store: &Path, files: &[&PathBuf], to: &str) {
    let mut args = vec!["import".to_string(), s(store)];
    args.extend(files.iter().map(|f| s(f)));
    args.extend(["--to".to_string(), to.to_string()]);
    ok(&args);
    ok(&["search", "update", &s(store)]);
}

/// The test crawls, and a directory holding them exported `--revisits` (so that most
/// captures are revisits in other files than their originals), under the same names.
fn crawls_and_their_revisits(tmp: &Path) -> (Vec<PathBuf>, PathBuf) {
    let crawls = crawl_files();
    let store = tmp.join("exported-from");
    ok(&["import", &s(&store), &s(&crawls[0]), &s(&crawls[1]), &s(&crawls[2]), "--to", "/crawls"]);
    let dedup = tmp.join("dedup");
    ok(&["export", "--revisits", &s(&store), "/crawls", "--to", &s(&dedup)]);
    (crawls, dedup)
}

/// "N revisits wait for their original", from an update's summary.
fn waiting(out: &str) -> u64 {
    out.split(" revisits wait").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap()
}

/// Renames files of `store` (paths from its root, no leading `/`) through a mount that does
/// not index (its index, if any, set aside meanwhile), so that the next update is the one
/// that meets them.
fn rename_unindexed(store: &Path, tmp: &Path, renames: &[(&str, &str)]) {
    let (index, aside) = (store.join("search"), tmp.join("search-aside"));
    let had = index.exists();
    if had {
        std::fs::rename(&index, &aside).unwrap();
    }
    let m = Mount::new(store, &tmp.join("mnt"));
    for (from, to) in renames {
        std::fs::create_dir_all(m.mnt.join(to).parent().unwrap()).unwrap();
        std::fs::rename(m.mnt.join(from), m.mnt.join(to)).unwrap();
    }
    // (`warcfs umount` returns once the daemon has released the store.)
    ok(&["umount", &s(&m.mnt)]);
    drop(m);
    if had {
        std::fs::rename(&aside, &index).unwrap();
    }
}

/// Every query of `qs` finds the same captures in `store`'s index as in one built afresh at
/// `fresh`, and more than 20 of them find something.
fn finds_what_a_fresh_index_finds(store: &Path, fresh: &Path, qs: &[String]) {
    ok(&["search", "rebuild", &s(store), "--index-dir", &s(fresh)]);
    let (diffs, found) = compare(&store.join("search"), fresh, qs);
    assert!(diffs.is_empty() && found > 20, "{found} found; {}", diffs.join("\n"));
}

/// The crawls exported `--revisits`, stored later crawls first: their revisits wait for the
/// first crawl's texts, then find them; then the text index against a per-capture one.
#[test]
fn every_query_finds_the_captures_an_index_per_capture_finds_revisits_included() {
    let tmp = TempDir::new().unwrap();
    let (crawls, dedup) = crawls_and_their_revisits(tmp.path());
    let names: Vec<PathBuf> = crawls.iter().map(|c| dedup.join(c.file_name().unwrap())).collect();

    let b = tmp.path().join("b");
    ok(&["import", &s(&b), &s(&names[1]), &s(&names[2]), "--to", "/later"]);
    let first = ok(&["search", "update", &s(&b)]).out();
    ok(&["import", &s(&b), &s(&names[0]), "--to", "/first"]);
    let second = ok(&["search", "update", &s(&b)]).out();
    // (Those left wait for originals that are no text the index holds: a 404 page, a redirect.)
    assert!(second.contains("1 files indexed") && waiting(&second) * 3 < waiting(&first), "revisits of the first crawl's pages wait for it, then find it: {first}\n{second}");
    let per_capture = tmp.path().join("per-capture");
    ok(&["search", "rebuild", &s(&b), "--per-capture", "--index-dir", &s(&per_capture)]);
    let (ours, theirs) = (stats(&b, &b.join("search")), stats(&b, &per_capture));
    assert_eq!(ours["captures"], theirs["captures"], "the same captures: {ours} {theirs}");
    assert!(ours["texts"].as_u64().unwrap() * 2 < theirs["documents"].as_u64().unwrap(), "a text per text, fewer than documents per capture: {ours} {theirs}");
    assert!(ours["text_index_bytes"].as_u64().unwrap() < theirs["text_index_bytes"].as_u64().unwrap(), "{ours} {theirs}");

    let qs = queries(&b.join("search"), 120);
    let (diffs, found) = compare(&b.join("search"), &per_capture, &qs);
    assert!(diffs.is_empty(), "{} of {} queries differ:\n{}", diffs.len(), qs.len(), diffs.join("\n"));
    assert!(found * 3 >= qs.len() * 2, "only {found} of {} queries found anything", qs.len());

    // A revisit is a capture of its original's text, in its own file.
    let s2 = Searcher::open(&b.join("search")).unwrap();
    let revisit_hits: usize = qs.iter().take(40).map(|q| s2.search(&query(q)).unwrap().iter().flat_map(|h| &h.captures).filter(|c| c.row.revisit && c.file.starts_with("/later/")).count()).sum();
    assert!(revisit_hits > 0, "revisits are found");
    // The command line: JSON lines with pywb's fields, and a snippet of the found word.
    let word = qs[0].clone();
    let out = ok(&["search", &s(&b), &word, "--json", "--captures", "--limit", "5"]).out();
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty(), "{word}: {out}");
    for l in &lines {
        for f in ["urlkey", "timestamp", "url", "mime", "status", "digest", "length", "offset", "filename", "score", "title", "snippet"] {
            assert!(l.get(f).is_some(), "{f} in {l}");
        }
    }
    assert!(lines.iter().any(|l| l["snippet"].as_str().unwrap().to_lowercase().contains(&format!("[{word}"))), "{out}");
}

/// `rm` of a crawl and an update: no hit names it, and the index is about as large as one
/// built without it.
#[test]
fn a_removed_crawl_leaves_no_hit() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    import_and_index(&store, &[&crawls[0], &crawls[1], &crawls[2]], "/crawls");
    let qs = queries(&store.join("search"), 60);
    let gone = format!("/crawls/{}", crawls[1].file_name().unwrap().to_str().unwrap());
    let before: usize = {
        let s1 = Searcher::open(&store.join("search")).unwrap();
        qs.iter().map(|q| s1.all_captures(&query(q)).unwrap().iter().filter(|(f, _)| *f == gone).count()).sum()
    };
    assert!(before > 0, "the crawl is found before");
    ok(&["rm", &s(&store), &gone]);
    let out = ok(&["search", "update", &s(&store)]).out();
    assert!(out.contains("1 removed"), "{out}");
    let s1 = Searcher::open(&store.join("search")).unwrap();
    for q in &qs {
        assert!(s1.all_captures(&query(q)).unwrap().iter().all(|(f, _)| *f != gone), "{q} still finds {gone}");
    }
    let fresh = tmp.path().join("fresh");
    ok(&["search", "rebuild", &s(&store), "--index-dir", &s(&fresh)]);
    let (a, b) = (stats(&store, &store.join("search")), stats(&store, &fresh));
    assert_eq!((a["documents"].clone(), a["captures"].clone()), (b["documents"].clone(), b["captures"].clone()), "{a} {b}");
    let (x, y) = (a["text_index_bytes"].as_f64().unwrap(), b["text_index_bytes"].as_f64().unwrap());
    assert!(x <= y * 1.05, "text index {x} B after the removal against {y} B built without it");
    let (diffs, _) = compare(&store.join("search"), &fresh, &qs);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// An update killed (SIGKILL) after its text index committed and before its rows did: the
/// next update indexes the files again, and each text is one document still.
#[test]
fn an_update_killed_between_its_two_commits_is_finished_by_the_next() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&crawls[0]), &s(&crawls[2]), "--to", "/crawls"]);
    for point in ["search_text_committed", "search_round_committed"] {
        let r = run_env(&["search", "update", &s(&store)], &[("WARCFS_CRASH_AT", &format!("{point}:1"))]);
        assert!(!r.ok(), "killed at {point}: {}", r.describe());
        ok(&["search", "update", &s(&store)]);
        let fresh = tmp.path().join(format!("fresh-{point}"));
        ok(&["search", "rebuild", &s(&store), "--index-dir", &s(&fresh)]);
        let (a, b) = (stats(&store, &store.join("search")), stats(&store, &fresh));
        assert_eq!((a["documents"].clone(), a["captures"].clone(), a["texts"].clone()), (b["documents"].clone(), b["captures"].clone(), b["texts"].clone()), "after a kill at {point}: {a} {b}");
        let (diffs, found) = compare(&store.join("search"), &fresh, &queries(&fresh, 30));
        assert!(diffs.is_empty() && found > 0, "after a kill at {point}: {}", diffs.join("\n"));
        // The next kill finds a new file to index.
        ok(&["import", &s(&store), &s(&crawls[1]), "--to", &format!("/more-{point}")]);
    }
}

/// A mount keeps an existing search index up to date: files copied in are found once
/// stored and indexed (by the mount's own thread), and `warcfs search` reads the index of
/// the mounted store.
#[test]
fn a_mount_indexes_what_is_written_through_it() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    ok(&["init", &s(&store)]);
    let made = ok(&["search", "update", &s(&store)]).out();
    assert!(made.contains("0 files indexed"), "{made}");
    // What the same file gives indexed by the command line, for comparison.
    let reference = tmp.path().join("reference");
    ok(&["import", &s(&reference), &s(&crawls[0]), "--to", "/crawls"]);
    ok(&["search", "update", &s(&reference)]);
    let want = stats(&reference, &reference.join("search"));

    let m = Mount::new(&store, &tmp.path().join("mnt"));
    std::fs::create_dir_all(m.mnt.join("crawls")).unwrap();
    std::fs::copy(&crawls[0], m.mnt.join("crawls").join(crawls[0].file_name().unwrap())).unwrap();
    wait_ingested(&store);
    let t0 = std::time::Instant::now();
    loop {
        let now = stats(&store, &store.join("search"));
        if now["captures"] == want["captures"] {
            // Read again: `stats` opens the text index before the catalog, and the mount may
            // have committed both in between; the catalog's rows come after the text
            // index's commit, so a second look sees that commit.
            let now = stats(&store, &store.join("search"));
            assert_eq!(now["documents"], want["documents"], "{now} against {want}");
            break;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(120), "the mount did not index the file within 2 minutes: {now} against {want}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let qs = queries(&reference.join("search"), 20);
    let mounted = ok(&["search", &s(&store), &qs[0], "--captures", "--json", "--limit", "1000"]).out();
    let unmounted = ok(&["search", &s(&reference), &qs[0], "--captures", "--json", "--limit", "1000"]).out();
    let keys = |out: &str| out.lines().map(|l| {
        let j: serde_json::Value = serde_json::from_str(l).unwrap();
        (j["filename"].as_str().unwrap().to_string(), j["offset"].as_str().unwrap().to_string())
    }).collect::<BTreeSet<_>>();
    assert!(!keys(&mounted).is_empty() && keys(&mounted) == keys(&unmounted), "{}: {mounted}\nagainst {unmounted}", qs[0]);
}

/// `warcfs serve`, killed when dropped.
struct Serve(std::process::Child, String);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `path` from `addr`: status code and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    (head.split_whitespace().nth(1).unwrap().parse().unwrap(), body.to_string())
}

/// The search over HTTP: `/search` with pywb's CDX parameter names gives the captures the
/// command line gives, and the search page, loaded in a real headless browser (Chromium),
/// shows the pages found with their snippets and links to replay each capture in pywb.
#[test]
fn the_search_page_and_api_answer_over_http() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    import_and_index(&store, &[&crawls[0], &crawls[2]], "/crawls");
    let word = queries(&store.join("search"), 10)[3].clone();
    let mut child = warcfs().args(["serve", &s(&store), "--listen", "127.0.0.1:0", "--replay", "http://127.0.0.1:9/coll"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let addr = line.trim().rsplit("http://").next().unwrap().to_string();
    let server = Serve(child, addr.clone());

    let (code, body) = get(&server.1, &format!("/search?q={word}&output=json&limit=1000"));
    assert_eq!(code, 200, "{body}");
    let keys = |out: &str| out.lines().map(|l| {
        let j: serde_json::Value = serde_json::from_str(l).unwrap();
        (j["filename"].as_str().unwrap().to_string(), j["offset"].as_str().unwrap().to_string(), j["url"].as_str().unwrap().to_string())
    }).collect::<BTreeSet<_>>();
    let cli = ok(&["search", &s(&store), &word, "--captures", "--json", "--limit", "1000"]).out();
    assert!(!keys(&body).is_empty() && keys(&body) == keys(&cli), "{word}: {body}\nagainst the command line's {cli}");
    // A URL prefix (pywb's trailing *), and CDXJ lines without output=json.
    let some_url = keys(&body).into_iter().next().unwrap().2;
    let prefix = &some_url[..some_url.rfind('/').unwrap() + 1];
    let (code, cdxj) = get(&server.1, &format!("/search?q={word}&url={prefix}*&limit=1000"));
    assert_eq!(code, 200);
    assert!(!cdxj.is_empty() && cdxj.lines().all(|l| l.split(' ').nth(2).is_some_and(|j| serde_json::from_str::<serde_json::Value>(&l[l.find('{').unwrap()..]).unwrap()["url"].as_str().unwrap().starts_with(prefix) && j.starts_with('{'))), "{cdxj}");
    assert_eq!(get(&server.1, "/search?limit=3").0, 400, "no q");
    assert_eq!(get(&server.1, "/nothing").0, 404);
    // A page of another site cannot reach it through a name that resolves to 127.0.0.1.
    let rebound = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&server.1).unwrap();
        write!(c, "GET /search?q={word} HTTP/1.1\r\nHost: rebind.example:{}\r\nConnection: close\r\n\r\n", server.1.rsplit(':').next().unwrap()).unwrap();
        let mut r = String::new();
        c.read_to_string(&mut r).unwrap();
        r
    };
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");

    // The page, as a browser renders it.
    let out = std::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", &format!("--user-data-dir={}", s(&tmp.path().join("chromium"))), "--dump-dom", &format!("http://{}/?q={word}", server.1)])
        .output()
        .expect("chromium (scripts/setup-tests installs it)");
    let dom = String::from_utf8_lossy(&out.stdout);
    let hits = dom.matches("class=\"hit\"").count();
    assert!(hits > 0, "no result in the page:\n{dom}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(dom.contains("href=\"http://127.0.0.1:9/coll/20") && dom.contains("<b>"), "results link to replay and show the words found:\n{dom}");
    assert!(dom.contains(&format!("value=\"{word}\"")), "the query box keeps the query");
}

/// A one-page PDF showing `words`, with `title` as its Info Title if given.
fn pdf(title: Option<&str>, words: &str) -> Vec<u8> {
    warcfs::test_support::one_page_pdf(title.map(|t| format!("({t})")).as_deref(), words)
}

/// A WARC of 200 responses, each (URL, Content-Type, body).
fn warc_of(path: &Path, responses: &[(&str, &str, &[u8])]) {
    let mut w = Vec::new();
    for (i, (url, mime, body)) in responses.iter().enumerate() {
        let http = [format!("HTTP/1.1 200 OK\r\nContent-Type: {mime}\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(), body].concat();
        let head = format!(
            "WARC/1.0\r\nWARC-Type: response\r\nWARC-Date: 2024-03-0{}T12:00:00Z\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-00000000000{i}>\r\nWARC-Target-URI: {url}\r\nContent-Type: application/http; msgtype=response\r\nContent-Length: {}\r\n\r\n",
            i + 1,
            http.len()
        );
        w.extend_from_slice(head.as_bytes());
        w.extend_from_slice(&http);
        w.extend_from_slice(b"\r\n\r\n");
    }
    std::fs::write(path, w).unwrap();
}

const PAGE: &[u8] = b"<html><head><title>Harvest page</title></head><body><p>An htmlword about the harvest.</p></body></html>";

/// `warcfs search STORE QUERY --json`: the results, one JSON object each.
fn found(store: &Path, q: &str) -> Vec<serde_json::Value> {
    let r = ok(&["search", &s(store), q, "--json"]);
    assert!(!r.stderr.contains("panicked"), "{}", r.describe());
    r.out().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A PDF response is a text: found by the words of its page and of its Info Title, with a
/// snippet of its words (extracted again, for the snippet, by a child process as well).
#[test]
#[cfg(feature = "pdf")]
fn a_pdf_is_found_by_its_words_and_its_title() {
    let tmp = TempDir::new().unwrap();
    let warc = tmp.path().join("pdf.warc");
    warc_of(&warc, &[("http://example.org/report.pdf", "application/pdf", &pdf(Some("Harvest report 2024"), "Quarterly harvest of warcfs pdfword")), ("http://example.org/page.html", "text/html", PAGE)]);
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&warc), "--to", "/crawls"]);
    let r = ok(&["search", "update", &s(&store)]);
    assert!(r.out().contains("2 captures") && r.out().contains("2 extracted") && !r.stderr.contains("skipped"), "{}", r.describe());
    let hits = found(&store, "pdfword");
    assert_eq!(hits.len(), 1, "{hits:?}");
    let h = &hits[0];
    assert_eq!((h["url"].as_str(), h["mime"].as_str(), h["title"].as_str()), (Some("http://example.org/report.pdf"), Some("application/pdf"), Some("Harvest report 2024")), "{h}");
    assert!(h["snippet"].as_str().unwrap().contains("[pdfword]") && h["snippet"].as_str().unwrap().contains("Quarterly harvest"), "{h}");
    let by_title = found(&store, "title:report");
    assert_eq!(by_title.iter().map(|h| h["url"].as_str().unwrap()).collect::<Vec<_>>(), ["http://example.org/report.pdf"]);
    let both = found(&store, "harvest");
    assert_eq!(both.len(), 2, "the page and the PDF: {both:?}");
}

/// PDFs the parser cannot read (cut short, or not a PDF at all) are skipped, each with a log
/// line naming it, and the update goes on: the page beside them is found.
#[test]
#[cfg(feature = "pdf")]
fn a_broken_pdf_is_skipped_with_a_log_line() {
    let tmp = TempDir::new().unwrap();
    let warc = tmp.path().join("broken.warc");
    let whole = pdf(Some("Cut report"), "Words of a brokenword report");
    warc_of(
        &warc,
        &[
            ("http://example.org/cut.pdf", "application/pdf", &whole[..whole.len() / 2]),
            ("http://example.org/page.html", "text/html", PAGE),
            ("http://example.org/not.pdf", "application/pdf", b"<html>brokenword</html>"),
        ],
    );
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&warc), "--to", "/crawls"]);
    let r = ok(&["search", "update", &s(&store)]);
    let skipped: Vec<&str> = r.stderr.lines().filter(|l| l.contains("PDF text skipped")).collect();
    assert!(skipped.len() == 2 && skipped[0].contains("http://example.org/cut.pdf (/crawls/broken.warc at 0)") && skipped[1].contains("http://example.org/not.pdf"), "{}", r.describe());
    assert!(!r.stderr.contains("panicked"), "{}", r.describe());
    assert!(r.out().contains("1 captures") && r.out().contains("3 extracted"), "{}", r.describe());
    assert_eq!(found(&store, "htmlword").len(), 1);
    assert!(found(&store, "brokenword").is_empty());
}

/// A PDF parser that hangs (the failpoint `pdf_hang` in its child) is killed at the timeout:
/// the update finishes, the PDF skipped with a log line, the page beside it indexed.
#[test]
#[cfg(feature = "pdf")]
fn a_pdf_parser_that_hangs_is_killed_and_the_update_goes_on() {
    let tmp = TempDir::new().unwrap();
    let warc = tmp.path().join("hang.warc");
    warc_of(&warc, &[("http://example.org/report.pdf", "application/pdf", &pdf(None, "A pdfword report")), ("http://example.org/page.html", "text/html", PAGE)]);
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&warc), "--to", "/crawls"]);
    let t0 = std::time::Instant::now();
    let r = run_env(&["search", "update", &s(&store)], &[("WARCFS_FAILPOINTS", "pdf_hang=1"), ("WARCFS_PDF_TIMEOUT_MS", "700")]);
    let took = t0.elapsed();
    assert!(r.ok(), "{}", r.describe());
    assert!(took < std::time::Duration::from_secs(20), "{took:?}: not the timeout of 0.7 s");
    assert!(r.stderr.contains("http://example.org/report.pdf (/crawls/hang.warc at 0): PDF text skipped: no answer in 0.7 s: killed"), "{}", r.describe());
    assert_eq!(found(&store, "htmlword").len(), 1);
    assert!(found(&store, "pdfword").is_empty());
}

/// Built without the feature `pdf`, a PDF is no text: not read, not found, no log line.
#[test]
#[cfg(not(feature = "pdf"))]
fn without_the_pdf_feature_a_pdf_is_no_text() {
    let tmp = TempDir::new().unwrap();
    let warc = tmp.path().join("pdf.warc");
    warc_of(&warc, &[("http://example.org/report.pdf", "application/pdf", &pdf(None, "A pdfword report")), ("http://example.org/page.html", "text/html", PAGE)]);
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&warc), "--to", "/crawls"]);
    let r = ok(&["search", "update", &s(&store)]);
    assert!(r.out().contains("1 captures") && r.out().contains("1 text payloads read") && !r.stderr.contains("PDF"), "{}", r.describe());
    assert!(found(&store, "pdfword").is_empty());
    assert_eq!(found(&store, "htmlword").len(), 1);
}

/// A crawl renamed in the store (through the mount: one into another directory, one moved
/// over another crawl) keeps its captures: the next update moves their rows, reads none of
/// their payloads, and every query finds what it found before at the new paths (and an
/// index built afresh finds the same).
#[test]
fn a_renamed_crawl_is_moved_not_read_again() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&crawls[0]), &s(&crawls[1]), &s(&crawls[2]), "--to", "/crawls"]);
    import_and_index(&store, &[&crawls[0]], "/old");
    let qs = queries(&store.join("search"), 40);
    let name = |i: usize| crawls[i].file_name().unwrap().to_str().unwrap().to_string();
    let (a, b) = (format!("/crawls/{}", name(0)), format!("/crawls/{}", name(1)));
    let (a_to, b_to) = (format!("/elsewhere/{}", name(0)), format!("/old/{}", name(0)));
    let before: Vec<BTreeSet<(String, u64)>> = {
        let s1 = Searcher::open(&store.join("search")).unwrap();
        qs.iter().map(|q| s1.all_captures(&query(q)).unwrap()).collect()
    };
    rename_unindexed(&store, tmp.path(), &[(&a[1..], &a_to[1..]), (&b[1..], &b_to[1..])]);
    let out = ok(&["search", "update", &s(&store)]).out();
    assert!(out.contains("0 files indexed, 1 removed, 2 moved") && out.contains(" 0 text payloads read"), "{out}");
    // What each query found, at the new paths; the crawl moved over is gone.
    let s1 = Searcher::open(&store.join("search")).unwrap();
    let renamed = |f: &str| if f == a { a_to.clone() } else if f == b { b_to.clone() } else { f.to_string() };
    let over = b_to.clone();
    for (q, was) in qs.iter().zip(&before) {
        let want: BTreeSet<(String, u64)> = was.iter().filter(|(f, _)| *f != over).map(|(f, o)| (renamed(f), *o)).collect();
        assert_eq!(s1.all_captures(&query(q)).unwrap(), want, "{q}");
    }
    finds_what_a_fresh_index_finds(&store, &tmp.path().join("fresh"), &qs);
}

/// In a `--parses compact-at-gc` store gc gives each crawl a new recipe of the same bytes:
/// the next update keeps their rows, reads none of their payloads, and every query finds
/// what it found before (and what an index built afresh finds).
#[test]
fn files_whose_parses_gc_rewrote_are_kept_not_read_again() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    ok(&["init", &s(&store), "--parses", "compact-at-gc"]);
    import_and_index(&store, &[&crawls[0], &crawls[1]], "/c");
    let qs = queries(&store.join("search"), 40);
    let captures = || -> Vec<BTreeSet<(String, u64)>> {
        let s1 = Searcher::open(&store.join("search")).unwrap();
        qs.iter().map(|q| s1.all_captures(&query(q)).unwrap()).collect()
    };
    let before = captures();
    let gc: serde_json::Value = serde_json::from_str(&ok(&["gc", &s(&store), "--json"]).out()).unwrap();
    let gz = crawls[..2].iter().filter(|c| c.to_string_lossy().ends_with(".gz")).count() as u64;
    assert!(gz > 0 && num(&gc, "files_reparsed") == gz, "{gc}");
    let out = ok(&["search", "update", &s(&store)]).out();
    assert!(out.contains(&format!("0 files indexed, 0 removed, 0 moved, {gz} kept")) && out.contains(" 0 text payloads read"), "{out}");
    assert_eq!(captures(), before);
    let again = ok(&["search", "update", &s(&store)]).out();
    assert!(again.contains("0 files indexed, 0 removed, 0 moved, 0 kept"), "{again}");
    finds_what_a_fresh_index_finds(&store, &tmp.path().join("fresh"), &qs);
}

/// Revisits whose originals are not stored yet wait; they follow their file when it is
/// renamed, and leave with it when it is removed in the update that brings their originals;
/// the others are then captures at their file's new place, as in an index built afresh.
#[test]
fn waiting_revisits_follow_their_file() {
    let tmp = TempDir::new().unwrap();
    let (crawls, dedup) = crawls_and_their_revisits(tmp.path());
    let name = |i: usize| crawls[i].file_name().unwrap().to_str().unwrap().to_string();
    let b = tmp.path().join("b");
    ok(&["import", &s(&b), &s(&dedup.join(name(1))), "--to", "/later"]);
    ok(&["import", &s(&b), &s(&dedup.join(name(2))), "--to", "/later2"]);
    let first = ok(&["search", "update", &s(&b)]).out();

    rename_unindexed(&b, tmp.path(), &[(&format!("later/{}", name(1)), &format!("moved/{}", name(1)))]);
    let second = ok(&["search", "update", &s(&b)]).out();
    assert!(second.contains("0 removed, 1 moved") && waiting(&second) == waiting(&first), "{first}\n{second}");

    // In one update: a file with waiting revisits goes, and the originals they wait for come.
    ok(&["rm", &s(&b), &format!("/later2/{}", name(2))]);
    ok(&["import", &s(&b), &s(&crawls[0]), "--to", "/first"]);
    let third = ok(&["search", "update", &s(&b)]).out();
    assert!(third.contains("1 removed") && waiting(&third) * 3 < waiting(&second), "the originals came: {second}\n{third}");
    let qs = queries(&b.join("search"), 60);
    let s1 = Searcher::open(&b.join("search")).unwrap();
    let files: BTreeSet<String> = qs.iter().flat_map(|q| s1.all_captures(&query(q)).unwrap()).map(|(f, _)| f).collect();
    assert!(files.contains(&format!("/moved/{}", name(1))) && files.iter().all(|f| !f.starts_with("/later")), "{files:?}");
    let fresh = tmp.path().join("fresh");
    finds_what_a_fresh_index_finds(&b, &fresh, &qs);
    assert_eq!(stats(&b, &b.join("search"))["captures"], stats(&b, &fresh)["captures"]);
}

/// A chain of renames in one update (`mv b c; mv a b`): each file's rows end at its new path,
/// none is lost to the other's move, and nothing is indexed again after.
#[test]
fn a_chain_of_renames_moves_every_row() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&crawls[0]), "--to", "/c"]);
    ok(&["import", &s(&store), &s(&crawls[1]), "--to", "/d"]);
    let (n0, n1) = (crawls[0].file_name().unwrap().to_str().unwrap().to_string(), crawls[1].file_name().unwrap().to_str().unwrap().to_string());
    rename_unindexed(&store, tmp.path(), &[(&format!("c/{n0}"), "c/a.warc.gz"), (&format!("d/{n1}"), "c/b.warc.gz")]);
    ok(&["search", "update", &s(&store)]);
    let before = stats(&store, &store.join("search"));
    rename_unindexed(&store, tmp.path(), &[("c/b.warc.gz", "c/c.warc.gz"), ("c/a.warc.gz", "c/b.warc.gz")]);
    let out = ok(&["search", "update", &s(&store)]).out();
    assert!(out.contains("0 files indexed, 0 removed, 2 moved") && out.contains(" 0 text payloads read"), "{out}");
    let again = ok(&["search", "update", &s(&store)]).out();
    assert!(again.contains("0 files indexed, 0 removed, 0 moved"), "every file's row names its new path: {again}");
    let after = stats(&store, &store.join("search"));
    assert_eq!((after["captures"].clone(), after["catalog_tables"]["G"].clone()), (before["captures"].clone(), before["catalog_tables"]["G"].clone()));
    let qs = queries(&store.join("search"), 40);
    finds_what_a_fresh_index_finds(&store, &tmp.path().join("fresh"), &qs);
    let s1 = Searcher::open(&store.join("search")).unwrap();
    let files: BTreeSet<String> = qs.iter().flat_map(|q| s1.all_captures(&query(q)).unwrap()).map(|(f, _)| f).collect();
    assert_eq!(files, ["/c/b.warc.gz", "/c/c.warc.gz"].map(String::from).into_iter().collect());
}

/// A fragment's identity is kept in one row (`H`), and a payload's or digest's text in rows
/// (`P`, `D`) nothing finds from the text: the removal of their last text leaves them; once
/// the texts and fragments gone are an eighth of those held, an update sweeps them. After a
/// crawl is removed the catalog holds the rows a fresh index holds, and the same crawl
/// stored again shares the fragments the others hold (each one document) and gets new ids
/// for the rest.
#[test]
fn a_removed_crawl_leaves_no_fragment_rows() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    import_and_index(&store, &[&crawls[0], &crawls[1]], "/crawls");
    let before = stats(&store, &store.join("search"));
    ok(&["rm", &s(&store), &format!("/crawls/{}", crawls[0].file_name().unwrap().to_str().unwrap())]);
    ok(&["search", "update", &s(&store)]);
    let rows = |j: &serde_json::Value, t: &str| j["catalog_tables"][t]["rows"].as_u64().unwrap_or(0);
    let compare_rows = |name: &str| {
        let fresh = tmp.path().join(name);
        let qs = queries(&store.join("search"), 30);
        finds_what_a_fresh_index_finds(&store, &fresh, &qs);
        let (ours, theirs) = (stats(&store, &store.join("search")), stats(&store, &fresh));
        assert_eq!(ours["documents"], theirs["documents"], "{name}: {ours} {theirs}");
        for t in ["H", "Q", "R", "V", "T", "S", "P", "D"] {
            assert_eq!(rows(&ours, t), rows(&theirs, t), "{name}: {t} rows: {ours} {theirs}");
        }
        ours
    };
    let after = compare_rows("fresh-without");
    assert!(rows(&before, "H") > rows(&after, "H") * 9 / 8, "the removal left fewer than an eighth of the fragments to sweep: {before} {after}");
    import_and_index(&store, &[&crawls[0]], "/again");
    compare_rows("fresh-again");
}

/// An index an earlier warcfs made (layout 1: ids from hashes) is not read as it is: what
/// only reads it says how to make it anew, and an update (a query of a store not mounted
/// brings the index up to date first) does, of nothing it held; so is one from before the
/// `unit` file. One a later warcfs made, or whose `unit` file this warcfs does not know, is
/// refused and left as it is.
#[test]
fn an_index_of_another_layout_is_made_anew_or_refused() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    import_and_index(&store, &[&crawls[2]], "/crawls");
    let dir = store.join("search");
    let made = stats(&store, &dir);
    let (unit, marker) = (dir.join("unit"), dir.join("text/left-by-an-earlier-warcfs"));
    assert_eq!(std::fs::read_to_string(&unit).unwrap(), "fragments 2");
    std::fs::write(&unit, "fragments").unwrap();
    std::fs::write(&marker, "").unwrap();
    fails_with(&["search", "stats", &s(&store)], &["layout 1", "layout 2", "search update"]);
    let r = ok(&["search", &s(&store), "the"]);
    assert!(r.stderr.contains("made by an earlier warcfs (layout 1") && r.out().contains("captures"), "{}", r.describe());
    let again = stats(&store, &dir);
    assert_eq!((&again["documents"], &again["captures"]), (&made["documents"], &made["captures"]), "{made} {again}");
    assert_eq!(std::fs::read_to_string(&unit).unwrap(), "fragments 2");
    assert!(!marker.exists(), "made anew, not updated");
    // An index from before the `unit` file.
    std::fs::remove_file(&unit).unwrap();
    std::fs::write(&marker, "").unwrap();
    ok(&["search", "update", &s(&store)]);
    assert_eq!((std::fs::read_to_string(&unit).unwrap().as_str(), marker.exists()), ("fragments 2", false));
    for (said, needles) in [("fragments 3", &["layout 3", "later warcfs"][..]), ("trigrams 1", &["does not know", "trigrams 1"][..]), ("fragments x", &["does not know"][..])] {
        std::fs::write(&unit, said).unwrap();
        fails_with(&["search", "update", &s(&store)], needles);
        fails_with(&["search", "stats", &s(&store)], needles);
        assert_eq!(std::fs::read_to_string(&unit).unwrap(), said, "left as it was");
        assert!(dir.join("db").is_dir() && dir.join("text").is_dir());
    }
}

/// Updates killed after each of a round's three commits, the round removing a crawl: the
/// next update leaves the index a fresh build's (documents, rows, every query's captures),
/// and once every file is removed the index holds nothing (no count left too high, no
/// document left behind).
#[test]
fn an_update_that_removes_killed_at_each_commit_is_finished_by_the_next() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let rows = |j: &serde_json::Value, t: &str| j["catalog_tables"][t]["rows"].as_u64().unwrap_or(0);
    for point in ["search_deletions_committed", "search_text_committed", "search_round_committed"] {
        let store = tmp.path().join(point);
        import_and_index(&store, &[&crawls[0], &crawls[1]], "/crawls");
        let first = format!("/crawls/{}", crawls[0].file_name().unwrap().to_str().unwrap());
        ok(&["rm", &s(&store), &first]);
        let r = run_env(&["search", "update", &s(&store)], &[("WARCFS_CRASH_AT", &format!("{point}:1"))]);
        assert!(!r.ok(), "killed at {point}: {}", r.describe());
        ok(&["search", "update", &s(&store)]);
        let fresh = tmp.path().join(format!("fresh-{point}"));
        ok(&["search", "rebuild", &s(&store), "--index-dir", &s(&fresh)]);
        let (a, b) = (stats(&store, &store.join("search")), stats(&store, &fresh));
        assert_eq!((&a["documents"], &a["captures"], &a["texts"]), (&b["documents"], &b["captures"], &b["texts"]), "after a kill at {point}: {a} {b}");
        for t in ["Q", "R", "V", "T", "S"] {
            assert_eq!(rows(&a, t), rows(&b, t), "after a kill at {point}, {t} rows: {a} {b}");
        }
        let (diffs, found) = compare(&store.join("search"), &fresh, &queries(&fresh, 30));
        assert!(diffs.is_empty() && found > 0, "after a kill at {point}: {}", diffs.join("\n"));
        ok(&["rm", &s(&store), &format!("/crawls/{}", crawls[1].file_name().unwrap().to_str().unwrap())]);
        ok(&["search", "update", &s(&store)]);
        let empty = stats(&store, &store.join("search"));
        assert_eq!((empty["documents"].as_u64(), rows(&empty, "Q"), rows(&empty, "T"), rows(&empty, "C")), (Some(0), 0, 0, 0), "after a kill at {point}, everything removed: {empty}");
    }
}

/// An update killed after its text index committed, the store changed before the next one:
/// the documents the killed one added (no row names them, and their ids are given to fewer
/// texts now) are deleted by the next.
#[test]
fn documents_a_killed_update_left_are_deleted_when_the_store_changed_since() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&crawls[2]), "--to", "/c"]);
    let r = run_env(&["search", "update", &s(&store)], &[("WARCFS_CRASH_AT", "search_text_committed:1")]);
    assert!(!r.ok(), "{}", r.describe());
    ok(&["rm", &s(&store), &format!("/c/{}", crawls[2].file_name().unwrap().to_str().unwrap())]);
    let small = tmp.path().join("small.warc");
    warc_of(&small, &[("http://example.org/one", "text/html", b"<title>one</title><p>a page of a few words</p>")]);
    ok(&["import", &s(&store), &s(&small), "--to", "/c"]);
    ok(&["search", "update", &s(&store)]);
    let fresh = tmp.path().join("fresh");
    ok(&["search", "rebuild", &s(&store), "--index-dir", &s(&fresh)]);
    let (a, b) = (stats(&store, &store.join("search")), stats(&store, &fresh));
    assert_eq!((&a["documents"], &a["captures"]), (&b["documents"], &b["captures"]), "{a} {b}");
    assert_eq!(b["documents"].as_u64(), Some(2), "{b}");
}

/// A fragment whose last text went, its `H` row not swept yet (the texts gone too few), met
/// again: it gets a new id and a document again, and the index is a fresh build's.
#[test]
fn a_fragment_met_again_before_its_row_is_swept_is_indexed_again() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    let page = |w: &str| format!("<html><head><title>{w} page</title></head><body><p>{}</p></body></html>", (0..400).map(|i| format!("{w}{i}")).collect::<Vec<_>>().join(" ")).into_bytes();
    let (one, two) = (page("quetzalcoatl"), page("xiuhtecuhtli"));
    let small = tmp.path().join("small.warc");
    warc_of(&small, &[("http://example.org/one", "text/html", &one[..]), ("http://example.org/two", "text/html", &two[..])]);
    ok(&["import", &s(&store), &s(&crawls[0]), &s(&small), "--to", "/c"]);
    ok(&["search", "update", &s(&store)]);
    ok(&["rm", &s(&store), "/c/small.warc"]);
    ok(&["search", "update", &s(&store)]);
    let rows = |j: &serde_json::Value, t: &str| j["catalog_tables"][t]["rows"].as_u64().unwrap_or(0);
    let left = stats(&store, &store.join("search"));
    assert!(rows(&left, "H") > rows(&left, "Q"), "rows left to sweep: {left}");
    assert!(found(&store, "quetzalcoatl7").is_empty());
    ok(&["import", &s(&store), &s(&small), "--to", "/again"]);
    ok(&["search", "update", &s(&store)]);
    for w in ["quetzalcoatl7", "xiuhtecuhtli399", "\"quetzalcoatl5 quetzalcoatl6\""] {
        let hits = found(&store, w);
        assert!(hits.len() == 1 && hits[0]["filename"].as_str().unwrap().starts_with("again/"), "{w}: {hits:?}");
    }
    let fresh = tmp.path().join("fresh");
    ok(&["search", "rebuild", &s(&store), "--index-dir", &s(&fresh)]);
    let (a, b) = (stats(&store, &store.join("search")), stats(&store, &fresh));
    assert_eq!(a["documents"], b["documents"], "{a} {b}");
    for t in ["H", "Q", "R", "V", "T", "S"] {
        assert_eq!(rows(&a, t), rows(&b, t), "{t} rows: {a} {b}");
    }
}

/// A first update leaves its catalog compacted (rows overwritten by later rounds dropped, the
/// keys' sequence numbers zeros): compacting it again gains nothing.
#[test]
fn a_first_update_leaves_its_catalog_compacted() {
    let tmp = TempDir::new().unwrap();
    let crawls = crawl_files();
    let store = tmp.path().join("store");
    import_and_index(&store, &[&crawls[0], &crawls[1]], "/crawls");
    let tables = |db: &rocksdb::DB| db.property_int_value("rocksdb.total-sst-files-size").unwrap().unwrap();
    let db_path = store.join("search/db");
    let (before, after) = {
        // (The catalog's own table options: compacting with others would change its size.)
        let mut opts = rocksdb::Options::default();
        opts.set_compression_type(rocksdb::DBCompressionType::Zstd);
        let mut t = rocksdb::BlockBasedOptions::default();
        t.set_block_size(64 << 10);
        opts.set_block_based_table_factory(&t);
        let db = rocksdb::DB::open(&opts, &db_path).unwrap();
        let before = tables(&db);
        let mut o = rocksdb::CompactOptions::default();
        o.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        db.compact_range_opt(None::<&[u8]>, None::<&[u8]>, &o);
        (before, tables(&db))
    };
    assert!(before > 100_000 && after * 100 >= before * 99, "compacting again takes {before} B to {after} B");
}
