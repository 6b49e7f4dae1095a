use std::time::Instant;
use warcfs::format::{deflate, gzip};
fn find(h: &[u8], n: &[u8]) -> Option<usize> { h.windows(n.len()).position(|w| w == n) }
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut items = Vec::new();
    for f in &args {
        let data = std::fs::read(f).unwrap();
        let mut plain = Vec::new();
        for r in gzip::split(&data, &mut plain) {
            let gzip::Region::Member(m) = r else { continue };
            let d0 = m.start as usize + m.header_len;
            let d = &data[d0..d0 + m.deflate_len as usize];
            let p = plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize].to_vec();
            let parse = deflate::record(d, &p).unwrap();
            let cut = find(&p, b"\r\n\r\n").and_then(|a| find(&p[a + 4..], b"\r\n\r\n").map(|b| a + 4 + b + 4)).map(|c| c + 4096);
            let s = deflate::encode(&parse, &p, cut, true);
            items.push((p, s, d.len()));
        }
    }
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
