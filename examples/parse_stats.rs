//! Measures recorded deflate parses over `.warc.gz` files: how large the stored form is
//! against the compressed bytes, how much of it the shared tails save across files, and how
//! fast recording and replaying are against zlib level 9 on the same members.
//!
//!   cargo run --release --example parse_stats -- [--skip N] FILE...

use std::collections::HashSet;
use std::time::{Duration, Instant};

use warcfs::format::{deflate, gzip};

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut skip = 4096usize;
    if args.first().map(String::as_str) == Some("--skip") {
        skip = args[1].parse().unwrap();
        args.drain(..2);
    }
    let (mut comp, mut plain_total, mut prefix, mut tails, mut uniq, mut members, mut failed) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut prefix_z = 0u64;
    let mut lvl = [0u64; 3];
    let (mut blocks, mut hdr_bytes) = (0u64, 0u64);
    let mut uniq_z = 0u64;
    let mut seen = HashSet::new();
    let (mut t_record, mut t_replay, mut t_inflate) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for f in &args {
        let data = std::fs::read(f).unwrap();
        let mut plain = Vec::new();
        let t = Instant::now();
        let regions = gzip::split(&data, &mut plain);
        t_inflate += t.elapsed();
        for r in regions {
            let gzip::Region::Member(m) = r else { continue };
            let d0 = m.start as usize + m.header_len;
            let d = &data[d0..d0 + m.deflate_len as usize];
            let p = &plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
            members += 1;
            comp += m.comp_len;
            plain_total += p.len() as u64;
            let t = Instant::now();
            let Ok(parse) = deflate::record(d, p) else {
                failed += 1;
                continue;
            };
            t_record += t.elapsed();
            for b in &parse.blocks {
                blocks += 1;
                if let deflate::BlockKind::Dynamic { header, .. } = &b.kind {
                    hdr_bytes += header.len() as u64;
                }
            }
            // Payload: after the WARC header and the HTTP header.
            let cut = find(p, b"\r\n\r\n").and_then(|a| find(&p[a + 4..], b"\r\n\r\n").map(|b| a + 4 + b + 4)).map(|c| c + skip);
            let s = deflate::encode(&parse, p, cut, true);
            prefix += s.prefix.len() as u64;
            prefix_z += zstd::bulk::compress(&s.prefix, 3).unwrap().len().min(s.prefix.len()) as u64;
            if let Some(tail) = &s.tail {
                tails += tail.len() as u64;
                if seen.insert(sha2_like(tail)) {
                    uniq += tail.len() as u64;
                    uniq_z += zstd::bulk::compress(tail, 3).unwrap().len() as u64;
                    for (i, lv) in [9, 15, 19].iter().enumerate() {
                        lvl[i] += zstd::bulk::compress(tail, *lv).unwrap().len() as u64;
                    }
                }
            }
            let mut out = Vec::with_capacity(d.len());
            let t = Instant::now();
            let parse = deflate::decode(&s.prefix, s.tail.as_deref(), p).unwrap();
            deflate::replay(&parse, p, &mut out).unwrap();
            t_replay += t.elapsed();
            assert!(out == d);
        }
    }
    let mb = |b: u64| b as f64 / 1e6;
    println!("members {members} (not recorded: {failed}); compressed {:.1} MB, plain {:.1} MB", mb(comp), mb(plain_total));
    println!("prefix {:.2} MB ({:.1}% of compressed; zstd each {:.2} MB), tails {:.2} MB, unique tails {:.2} MB (zstd {:.2} MB)", mb(prefix), 100.0 * prefix as f64 / comp as f64, mb(prefix_z), mb(tails), mb(uniq), mb(uniq_z));
    println!("stored parse after dedup: {:.2} MB = {:.1}% of compressed", mb(prefix_z + uniq_z), 100.0 * (prefix_z + uniq_z) as f64 / comp as f64);
    println!("unique tails at zstd 9/15/19: {:?}", lvl);
    println!("blocks {blocks}, dynamic headers {:.2} MB", mb(hdr_bytes));
    println!("inflate (split) {:.2} s, record {:.2} s, decode+replay {:.2} s: {:.0} MB/s of plain", t_inflate.as_secs_f64(), t_record.as_secs_f64(), t_replay.as_secs_f64(), mb(plain_total) / t_replay.as_secs_f64());
}

fn sha2_like(b: &[u8]) -> (u64, usize, u32) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    (h.finish(), b.len(), crc32fast::hash(b))
}
