//! How many positions a search index keeps of a store's text (issue 46's first measurement,
//! after Zhang and Suel): every capture's tokens; each unique text's once (warcfs's index);
//! and each distinct content-defined fragment's once, fragments cut by winnowing over the
//! tokens (k-grams of `B` tokens, windows of `w`), shared among the versions of one URL
//! ("local") or across all texts ("global"), each fragment carrying the `B - 1` tokens before
//! it so that a phrase over a cut still lies within one fragment. Also the unique texts of
//! the captures of the file(s) named `FIRST` alone ("one copy").
//!
//!   cargo run --release --example fragments -- STORE INDEX_DIR FIRST_FILE_PREFIX

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use warcfs::search::catalog::CaptureRow;
use warcfs::search::Searcher;

/// Tokens as tantivy's default tokenizer makes them: alphanumeric runs, at most 40 bytes,
/// lowercased.
fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty() && t.len() <= 40).map(str::to_lowercase).collect()
}

fn h(s: &[String]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut x = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut x);
    x.finish()
}

/// Winnowing: the hash of each k-gram of `b` tokens; in every window of `w` hashes, a cut
/// before its least (the rightmost of equals). The fragments' token ranges.
fn fragments(t: &[String], b: usize, w: usize) -> Vec<(usize, usize)> {
    if t.len() <= b + w {
        return vec![(0, t.len())];
    }
    let grams: Vec<u64> = (0..=t.len() - b).map(|i| h(&t[i..i + b])).collect();
    let mut cuts = vec![0usize];
    let mut last = usize::MAX;
    for s in 0..=grams.len() - w {
        let win = &grams[s..s + w];
        let (mut at, mut min) = (0, u64::MAX);
        for (i, &g) in win.iter().enumerate() {
            if g <= min {
                min = g;
                at = i;
            }
        }
        let pos = s + at;
        if pos != last && pos > 0 {
            cuts.push(pos);
            last = pos;
        }
    }
    cuts.dedup();
    let mut out: Vec<(usize, usize)> = cuts.windows(2).map(|c| (c[0], c[1])).collect();
    out.push((*cuts.last().unwrap(), t.len()));
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (store, dir, first) = (PathBuf::from(&args[1]), PathBuf::from(&args[2]), args[3].clone());
    let s = warcfs::store::Store::open_for_reading(&store).unwrap();
    let searcher = Searcher::open(&dir).unwrap();
    // Each text: one capture to read it from, its first URL, its captures, whether the first file holds one.
    let mut texts: BTreeMap<u64, (String, u64, CaptureRow, u64, bool)> = BTreeMap::new();
    searcher
        .catalog()
        .each_capture(&mut |tid, file, off, row| {
            let e = texts.entry(tid).or_insert_with(|| (file.to_string(), off, row.clone(), 0, false));
            e.3 += 1;
            e.4 |= file.starts_with(&first);
            if e.2.revisit && !row.revisit {
                (e.0, e.1, e.2) = (file.to_string(), off, row);
            }
            Ok(true)
        })
        .unwrap();
    let (mut all, mut unique, mut one) = (0u64, 0u64, 0u64);
    let mut toks: Vec<(String, Vec<String>)> = Vec::new();
    for (file, off, row, n, in_first) in texts.into_values() {
        let c = warcfs::search::Capture { file, offset: off, row };
        let Some(text) = warcfs::search::query::capture_text(&s, &c).unwrap() else { continue };
        let t = tokens(&text);
        all += n * t.len() as u64;
        unique += t.len() as u64;
        if in_first {
            one += t.len() as u64;
        }
        toks.push((c.row.url.clone(), t));
    }
    println!("{} texts: positions of every capture {all}, of each unique text {unique} ({:.3}x), of the first file's texts {one}", toks.len(), unique as f64 / all as f64);
    for (b, w) in [(5usize, 50usize), (5, 100), (5, 200), (10, 100)] {
        let (mut local, mut global, mut frags_local, mut frags_global) = (0u64, 0u64, 0u64, 0u64);
        let mut seen_local: HashMap<String, HashSet<u64>> = HashMap::new();
        let mut seen_global: HashSet<u64> = HashSet::new();
        for (url, t) in &toks {
            for (a, e) in fragments(t, b, w) {
                let key = h(&t[a..e]);
                // Its positions, with the tokens before it that a phrase over the cut needs.
                let n = (e - a + a.min(b - 1)) as u64;
                if seen_local.entry(url.clone()).or_default().insert(key) {
                    local += n;
                    frags_local += 1;
                }
                if seen_global.insert(key) {
                    global += n;
                    frags_global += 1;
                }
            }
        }
        println!(
            "k-grams of {b}, windows of {w}: local sharing {local} positions ({frags_local} fragments; {:.3}x of unique texts, {:.3}x of every capture, {:.2}x of the first file's), global {global} ({frags_global}; {:.3}x, {:.3}x, {:.2}x)",
            local as f64 / unique as f64,
            local as f64 / all as f64,
            local as f64 / one as f64,
            global as f64 / unique as f64,
            global as f64 / all as f64,
            global as f64 / one as f64
        );
    }
}
