//! Record lookups inside one process, without FUSE: opens STORE read-only and reads each
//! record of RECORDS (lines `name offset length`, as scripts/bench-mount writes them) with
//! `Store::read_at`, the call the mount's READ makes. Prints the p50 and mean time of a
//! lookup and the store's read counters: what a lookup costs the daemon, its round trips
//! left out.
//!
//!   cargo run --release --example lookup_bench -- STORE RECORDS [gz|all]

use std::path::PathBuf;

use anyhow::{Context, Result};
use warcfs::store::Store;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [store, records, ..] = &args[..] else { anyhow::bail!("usage: lookup_bench STORE RECORDS [gz|all]") };
    let store = PathBuf::from(store);
    let only_gz = args.get(2).map(|a| a != "all").unwrap_or(true);
    let s = Store::open_for_reading(&store)?;
    let text = std::fs::read_to_string(records).with_context(|| format!("{records}: cannot read"))?;
    let mut times = Vec::new();
    // Lookups that found their recipe piece loaded already.
    let mut no_piece = Vec::new();
    let mut buf = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [name, off, len] = f[..] else { anyhow::bail!("{records}: not `name offset length`: {line}") };
        let (off, len): (u64, usize) = (off.parse()?, len.parse()?);
        if only_gz && !name.ends_with(".gz") {
            continue;
        }
        let loaded = s.read_counters().pieces_loaded;
        let t = std::time::Instant::now();
        let ino = s.resolve(&format!("/{name}"))?;
        let inode = s.inode(ino)?.context("no inode")?;
        let head = inode.recipe.context("no recipe")?;
        buf.resize(len, 0);
        let n = s.read_at(&head, off, &mut buf)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        times.push(us);
        if s.read_counters().pieces_loaded == loaded {
            no_piece.push(us);
        }
        anyhow::ensure!(n == len, "{name}: short read");
    }
    anyhow::ensure!(!times.is_empty(), "{records}: no records to look up");
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(|a, b| a.total_cmp(b));
    no_piece.sort_by(|a, b| a.total_cmp(b));
    let c = s.read_counters();
    let m = c.members_rebuilt.max(1);
    println!(
        "{} lookups: p25 {:.1} p50 {:.1} p75 {:.1} us, mean {mean:.1} us; {} members rebuilt ({} us gather, {} us decode each), {} chunks, {} pieces",
        times.len(),
        times[times.len() / 4],
        times[times.len() / 2],
        times[times.len() * 3 / 4],
        c.members_rebuilt,
        c.member_gather_us / m,
        c.member_deflate_us / m,
        c.chunks_read,
        c.pieces_loaded
    );
    if !no_piece.is_empty() {
        println!("{} lookups that loaded no recipe piece: p50 {:.1} us", no_piece.len(), no_piece[no_piece.len() / 2]);
    }
    Ok(())
}
