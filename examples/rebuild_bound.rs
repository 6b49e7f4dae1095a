//! The bound for `cat` of gzip files: decodes the stored parse of every member of FILEs and
//! replays it, on two threads, largest first, and prints the compressed bytes, the seconds
//! and MB/s: the most any member-parallel reader can achieve (gathering the text from packs
//! left out). `scripts/bench-store` runs it; it was the hidden `warcfs rebuild-bound`.
//!
//!   cargo run --release --example rebuild_bound -- FILE.warc.gz...

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use warcfs::format::deflate;
use warcfs::format::gzip::{self, Region};

fn main() -> Result<()> {
    let files: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let mut jobs = Vec::new();
    let mut bytes = 0u64;
    for f in &files {
        let data = std::fs::read(f).with_context(|| format!("{}: cannot read", f.display()))?;
        let mut plain = Vec::new();
        for r in gzip::split(&data, &mut plain) {
            if let Region::Member(m) = r {
                let d0 = m.start as usize + m.header_len;
                let p = &plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
                if let Ok(parse) = deflate::record(&data[d0..d0 + m.deflate_len as usize], p) {
                    bytes += m.comp_len;
                    jobs.push((p.to_vec(), deflate::encode(&parse, p, None, true)));
                }
            }
        }
    }
    jobs.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let next = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut out = Vec::new();
                while let Some((p, r)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    out.clear();
                    if let Ok(parse) = deflate::decode(&r.prefix, r.tail.as_deref(), p) {
                        let _ = deflate::replay(&parse, p, &mut out);
                    }
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    println!("{bytes} {secs:.3} {:.1}", bytes as f64 / 1e6 / secs);
    Ok(())
}
