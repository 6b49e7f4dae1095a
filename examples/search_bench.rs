//! Queries against a store's search index, as `scripts/bench-search` runs them: N queries
//! (single words, pairs, two-word phrases, from the indexed pages' titles, spread over the
//! sorted vocabulary), each end to end: texts found, their captures, grouped by URL, and a
//! snippet for each of the first 10 results read from the store. Prints p50 and p99 (ms),
//! and, given a second index (one document per capture), whether every query finds the same
//! captures in both.
//!
//!   cargo run --release --example search_bench -- STORE INDEX_DIR N [PER_CAPTURE_DIR]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

use warcfs::search::{Query, Searcher};

fn query(q: &str, texts: usize) -> Query {
    Query { q: q.to_string(), texts, ..Query::default() }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (store, dir, n) = (PathBuf::from(&args[1]), PathBuf::from(&args[2]), args[3].parse::<usize>().unwrap());
    let s = warcfs::store::Store::open_for_reading(&store).unwrap();
    let searcher = Searcher::open(&dir).unwrap();
    let mut titles = BTreeSet::new();
    for q in ["the", "and", "of", "a", "to", "in"] {
        for h in searcher.search(&query(q, 100_000)).unwrap() {
            titles.insert(h.title);
        }
    }
    let words_of = |t: &str| t.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() >= 4 && w.chars().all(|c| c.is_ascii_alphabetic())).map(str::to_lowercase).collect::<Vec<_>>();
    let vocab: Vec<String> = titles.iter().flat_map(|t| words_of(t)).collect::<BTreeSet<_>>().into_iter().collect();
    let phrases: Vec<String> = titles.iter().flat_map(|t| words_of(t).windows(2).map(|w| format!("\"{} {}\"", w[0], w[1])).collect::<Vec<_>>()).collect::<BTreeSet<_>>().into_iter().collect();
    let third = n.div_ceil(3);
    let spread = |v: &[String], k: usize| v.iter().step_by((v.len() / k).max(1)).take(k).cloned().collect::<Vec<_>>();
    let singles = spread(&vocab, third);
    let mut qs = singles.clone();
    qs.extend(singles.iter().zip(singles.iter().rev()).map(|(a, b)| format!("{a} {b}")));
    qs.extend(spread(&phrases, third));
    qs.truncate(n);
    // Warm: every query once first.
    for q in &qs {
        let _ = searcher.search(&query(q, 40));
    }
    let mut ms = Vec::with_capacity(qs.len());
    let mut found = 0;
    for q in &qs {
        let t = Instant::now();
        let hits = searcher.search(&query(q, 40)).unwrap();
        let mut urls = BTreeSet::new();
        let firsts: Vec<_> = hits.iter().flat_map(|h| h.captures.iter()).filter(|c| urls.insert(c.row.url.clone())).take(10).cloned().collect();
        for c in &firsts {
            let _ = searcher.snippet(&s, q, c).unwrap();
        }
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        found += !hits.is_empty() as usize;
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
    println!("{} queries ({} found something), warm, end to end with captures and 10 snippets: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms", qs.len(), found, pct(0.5), pct(0.99), ms[ms.len() - 1]);
    if let Some(other) = args.get(4) {
        let o = Searcher::open(&PathBuf::from(other)).unwrap();
        let mut differ = 0;
        let mut captures = 0;
        for q in &qs {
            let (a, b) = (searcher.all_captures(&query(q, 0)).unwrap(), o.all_captures(&query(q, 0)).unwrap());
            differ += (a != b) as usize;
            captures += a.len();
        }
        println!("against the per-capture index: {differ} of {} queries find other captures ({captures} captures found in all)", qs.len());
    }
}
