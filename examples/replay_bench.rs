use std::time::Instant;
use warcfs::format::deflate;

mod common;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let items: Vec<_> = common::members(&args)
        .into_iter()
        .map(|m| {
            let cut = common::payload_start(&m.plain).map(|c| c + 4096);
            let s = deflate::encode(&m.parse, &m.plain, cut, true);
            (m.plain, s, m.deflate_len)
        })
        .collect();
    let total: usize = items.iter().map(|i| i.0.len()).sum();
    let t = Instant::now();
    let mut out = Vec::new();
    let reps: usize = std::env::var("REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(1);
    for (p, s, dl) in items.iter().cycle().take(items.len() * reps) {
        out.clear();
        out.reserve(*dl);
        let parse = deflate::decode(&s.prefix, s.tail.as_deref(), p).unwrap();
        deflate::replay(&parse, p, &mut out).unwrap();
    }
    let e = t.elapsed().as_secs_f64();
    println!("decode+replay {e:.2} s, {:.0} MB/s of plain", (total * reps) as f64 / 1e6 / e);
    // Replay alone, of the parses decoded once.
    let parses: Vec<deflate::Parse> = items.iter().map(|(p, s, _)| deflate::decode(&s.prefix, s.tail.as_deref(), p).unwrap()).collect();
    let t = Instant::now();
    for ((p, _, dl), parse) in items.iter().zip(&parses).cycle().take(items.len() * reps) {
        out.clear();
        out.reserve(*dl);
        deflate::replay(parse, p, &mut out).unwrap();
    }
    let e = t.elapsed().as_secs_f64();
    println!("replay {e:.2} s, {:.0} MB/s of plain", (total * reps) as f64 / 1e6 / e);
}
