//! `warcfs search`: queries, and `search update | rebuild | stats` (`crate::search`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use super::{exit, human, SearchCmd};
use crate::search::{self, Capture, Query, Searcher, Unit};
use crate::store::{Store, StoreError};

fn dir_of(store: &Path, index_dir: Option<PathBuf>) -> PathBuf {
    index_dir.unwrap_or_else(|| crate::store::layout::search(store))
}

/// Opens the store to update its search index: None if it is mounted (its mount does it).
fn writable(store: &Path) -> Result<Option<Store>> {
    match Store::open(store, false) {
        Ok(s) => Ok(Some(s)),
        Err(StoreError::Busy { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The store, its search index in `dir` brought up to date first if the store is not
/// mounted (a mount keeps it so itself).
fn up_to_date(store: &Path, dir: &Path) -> Result<Store> {
    match writable(store)? {
        Some(s) => {
            if search::exists(dir) {
                search::build::update(&s, dir, None, &|| false).with_context(|| format!("{}: bringing the search index up to date", store.display()))?;
            }
            Ok(s)
        }
        None => Ok(Store::open_read_only(store)?),
    }
}

pub fn command(cmd: SearchCmd, _quiet: bool) -> Result<i32> {
    match cmd {
        SearchCmd::Update(i) => update(&i.store, dir_of(&i.store, i.index_dir.clone()), unit(i.per_capture, i.whole_texts), false),
        SearchCmd::Rebuild(i) => update(&i.store, dir_of(&i.store, i.index_dir.clone()), unit(i.per_capture, i.whole_texts), true),
        SearchCmd::Stats { store, json, index_dir } => stats(&dir_of(&store, index_dir), json),
    }
}

/// The unit asked for (None: the index's own, or warcfs's for a new one).
fn unit(per_capture: bool, whole_texts: bool) -> Option<Unit> {
    match (per_capture, whole_texts) {
        (true, _) => Some(Unit::Capture),
        (false, true) => Some(Unit::Text),
        (false, false) => None,
    }
}

fn update(store: &Path, dir: PathBuf, unit: Option<Unit>, rebuild: bool) -> Result<i32> {
    let Some(s) = writable(store)? else {
        std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        println!("{} is mounted: its mount indexes it in the background (into {})", store.display(), dir.display());
        return Ok(exit::OK);
    };
    if rebuild && dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("{}: cannot remove", dir.display()))?;
    }
    let t = Instant::now();
    let u = search::build::update(&s, &dir, unit, &|| false).with_context(|| format!("{}: indexing for search", store.display()))?;
    println!(
        "search index {}: {} files indexed, {} removed, {} moved, {} kept (their parses rewritten by gc); {} captures ({} of them revisits; {} revisits wait for their original), {} text payloads read ({}), {} extracted, {} documents added, {} deleted; {:.1} s",
        dir.display(),
        u.files_indexed,
        u.files_removed,
        u.files_moved,
        u.files_reparsed,
        u.captures,
        u.revisits,
        u.revisits_waiting,
        u.payloads_read,
        human(u.payload_bytes),
        u.texts_extracted,
        u.documents_added,
        u.documents_deleted,
        t.elapsed().as_secs_f64()
    );
    Ok(exit::OK)
}

fn stats(dir: &Path, json: bool) -> Result<i32> {
    let s = Searcher::open(dir)?;
    let (docs, text_bytes) = s.text_usage()?;
    let census = s.catalog().census()?;
    let rows = |t: char| census.iter().find(|c| c.0 == t).map_or((0, 0), |c| (c.1, c.2));
    let db_bytes: u64 = walkdir::WalkDir::new(dir.join("db")).into_iter().filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum();
    if json {
        let tables: serde_json::Map<String, serde_json::Value> = census.iter().map(|(t, n, b)| (t.to_string(), serde_json::json!({ "rows": n, "bytes": b }))).collect();
        let (parts, segments) = s.text_parts()?;
        let parts: serde_json::Map<String, serde_json::Value> = parts.into_iter().map(|(n, b)| (n.to_string(), b.into())).collect();
        println!("{}", serde_json::json!({ "documents": docs, "text_index_bytes": text_bytes, "text_index_parts": parts, "segments": segments, "captures": rows('C').0, "texts": rows('T').0, "catalog_bytes_on_disk": db_bytes, "catalog_tables": tables }));
    } else {
        println!("{docs} documents, text index {} ({text_bytes} B); {} captures of {} texts; catalog {} on disk", human(text_bytes), rows('C').0, rows('T').0, human(db_bytes));
    }
    Ok(exit::OK)
}

/// Prints what `q` finds: per URL (or per capture), best first, at most `limit`.
pub fn search(store: PathBuf, index_dir: Option<PathBuf>, mut q: Query, limit: usize, per_capture: bool, json: bool) -> Result<i32> {
    let dir = dir_of(&store, index_dir);
    let s = up_to_date(&store, &dir)?;
    let searcher = Searcher::open(&dir)?;
    q.texts = limit.max(1) * 4;
    let hits = searcher.search(&q)?;
    // (score, title, capture) per result.
    let mut results: Vec<(f32, String, Capture, u64, String)> = Vec::new();
    if per_capture {
        for h in &hits {
            for c in &h.captures {
                results.push((h.score, h.title.clone(), c.clone(), 1, c.row.timestamp.clone()));
            }
        }
    } else {
        // Grouped by URL: its best text's score, its latest capture, first and count.
        let mut by_url: HashMap<String, usize> = HashMap::new();
        for h in &hits {
            for c in &h.captures {
                match by_url.get(&c.row.url) {
                    Some(&i) => {
                        let r = &mut results[i];
                        r.3 += 1;
                        if c.row.timestamp < r.4 {
                            r.4 = c.row.timestamp.clone();
                        }
                        if c.row.timestamp > r.2.row.timestamp && !c.row.revisit {
                            r.2 = c.clone();
                        }
                    }
                    None => {
                        by_url.insert(c.row.url.clone(), results.len());
                        results.push((h.score, h.title.clone(), c.clone(), 1, c.row.timestamp.clone()));
                    }
                }
            }
        }
    }
    results.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.2.row.url.cmp(&b.2.row.url)).then_with(|| a.2.row.timestamp.cmp(&b.2.row.timestamp)));
    results.truncate(limit);
    let started = Instant::now();
    for (score, title, c, count, first) in &results {
        let snippet = if started.elapsed() < Searcher::SNIPPET_TIME { searcher.snippet(&s, &q.q, c).unwrap_or_default() } else { String::new() };
        let filename = c.file.trim_start_matches('/');
        if json {
            let mut j = serde_json::json!({
                "urlkey": crate::format::cdx::surt(&c.row.url),
                "timestamp": c.row.timestamp, "url": c.row.url, "mime": c.row.mime, "status": c.row.status,
                "digest": c.row.digest, "length": c.row.length.to_string(), "offset": c.offset.to_string(), "filename": filename,
                "score": score, "title": title, "snippet": snippet,
            });
            if !per_capture {
                j["first"] = first.clone().into();
                j["captures"] = (*count).into();
            }
            println!("{j}");
        } else if per_capture {
            println!("{score:6.2}  {}  {}  {filename} @{}  {title}", c.row.timestamp, c.row.url, c.offset);
            println!("        {snippet}");
        } else {
            println!("{score:6.2}  {}  {first}..{} ({count} captures)  {title}", c.row.url, c.row.timestamp);
            println!("        {snippet}");
        }
    }
    if results.is_empty() && !json {
        eprintln!("nothing found");
    }
    Ok(exit::OK)
}

/// `warcfs serve`: the search page and API until the process is stopped.
pub fn serve(store: PathBuf, listen: &str, replay: &str) -> Result<i32> {
    let dir = dir_of(&store, None);
    // (Brought up to date, then read as a mounted store is: a mount may start meanwhile.)
    drop(up_to_date(&store, &dir)?);
    let s = Store::open_read_only(&store)?;
    let listener = std::net::TcpListener::bind(listen).with_context(|| format!("{listen}: cannot listen"))?;
    println!("serving the search of {} on http://{}", store.display(), listener.local_addr()?);
    use std::io::Write as _;
    std::io::stdout().flush()?;
    search::http::serve(s, &dir, listener, replay)?;
    Ok(exit::OK)
}
