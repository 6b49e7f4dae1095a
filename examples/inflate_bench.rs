//! Inflating every gzip member of the files given, three times: warcfs's recording inflater
//! (`format::deflate::inflate`) against zlib's (flate2), in MB/s of plain text. Prints what
//! the text is made of (literals, matches by length) first.
//!
//! cargo run --release --example inflate_bench -- crawl-1.warc.gz
use std::time::Instant;
use warcfs::format::{deflate, gzip};

fn main() {
    let mut members = Vec::new();
    let mut total = 0usize;
    for f in std::env::args().skip(1) {
        let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let mut plain = Vec::new();
        for r in gzip::split(&data, &mut plain) {
            let gzip::Region::Member(m) = r else { continue };
            let d0 = m.start as usize + m.header_len;
            members.push(data[d0..d0 + m.deflate_len as usize].to_vec());
            total += m.plain_len as usize;
        }
    }
    let (mut matched, mut n, mut by_len) = (0usize, 0usize, [0usize; 5]);
    let mut out = Vec::new();
    for d in &members {
        out.clear();
        let (p, _) = deflate::inflate(d, &mut out, 64 << 20).expect("member inflates");
        for m in &p.matches {
            matched += m.len as usize;
            n += 1;
            by_len[match m.len {
                3..=8 => 0,
                9..=16 => 1,
                17..=32 => 2,
                33..=64 => 3,
                _ => 4,
            }] += 1;
        }
    }
    println!("{} members, {total} B of text: {} literals, {n} matches of {matched} B (lengths 3-8, 9-16, 17-32, 33-64, 65+: {by_len:?})", members.len(), total - matched);
    let mut text = vec![0u8; 64 << 20];
    for _ in 0..3 {
        let t = Instant::now();
        for d in &members {
            out.clear();
            deflate::inflate(d, &mut out, 64 << 20).expect("member inflates");
        }
        let ours = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for d in &members {
            let mut z = flate2::Decompress::new(false);
            z.decompress(d, &mut text, flate2::FlushDecompress::Finish).expect("zlib inflates");
        }
        let zlib = t.elapsed().as_secs_f64();
        let mbs = |s: f64| total as f64 / 1e6 / s;
        println!("warcfs {ours:.3} s, {:.0} MB/s; zlib {zlib:.3} s, {:.0} MB/s", mbs(ours), mbs(zlib));
    }
}
