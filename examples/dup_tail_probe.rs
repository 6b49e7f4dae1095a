// Probe: how much of the gzip text lies in parse tails that a member before it already had
// (same text from the tail's lowest source on, same tokens, same table size)?
use std::collections::HashSet;
use warcfs::format::{deflate, gzip};
fn find(h: &[u8], n: &[u8]) -> Option<usize> { h.windows(n.len()).position(|w| w == n) }
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seen = HashSet::new(); let mut seen2 = HashSet::new(); let mut dup2 = 0u64; let mut seen3 = HashSet::new(); let mut dup3 = 0u64;
    let (mut total, mut tails, mut dup, mut prefix_of_dup, mut reach_back) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for f in &args {
        let (mut ft, mut fd) = (0u64, 0u64);
        let data = std::fs::read(f).unwrap();
        let mut plain = Vec::new();
        for r in gzip::split(&data, &mut plain) {
            let gzip::Region::Member(m) = r else { continue };
            let d0 = m.start as usize + m.header_len;
            let d = &data[d0..d0 + m.deflate_len as usize];
            let p = &plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
            total += p.len() as u64; ft += p.len() as u64;
            let parse = deflate::record(d, p).unwrap();
            let Some(cut) = find(p, b"\r\n\r\n").and_then(|a| find(&p[a + 4..], b"\r\n\r\n").map(|b| a + 4 + b + 4)).map(|c| c + 4096) else { continue };
            let k = parse.matches.partition_point(|mt| (mt.pos as usize) < cut);
            if parse.matches.len() - k < 64 { continue; }
            let cut = match k.checked_sub(1).map(|i| parse.matches[i]) { Some(mt) if mt.pos as usize + mt.len as usize > cut => mt.pos as usize + mt.len as usize, _ => cut };
            let tm = &parse.matches[k..];
            tails += (p.len() - cut) as u64;
            let min_src = tm.iter().map(|mt| mt.pos as usize - mt.dist as usize).min().unwrap().min(cut);
            let payload_start = cut - 4096;
            if min_src < payload_start { reach_back += 1; }
            let mut key = Vec::new();
            key.extend_from_slice(&p[min_src..]);
            key.extend_from_slice(&((cut - min_src) as u64).to_le_bytes());
            key.extend_from_slice(&(p.len().clamp(256, 1 << 15).next_power_of_two() as u64).to_le_bytes());
            for mt in tm { key.extend_from_slice(&((mt.pos as usize - cut) as u32).to_le_bytes()); key.extend_from_slice(&mt.len.to_le_bytes()); key.extend_from_slice(&mt.dist.to_le_bytes()); }
            let h = { use sha2::Digest; sha2::Sha256::digest(&key) };
            let mut k2 = Vec::new(); k2.extend_from_slice(&p[cut..]);
            for mt in tm { k2.extend_from_slice(&((mt.pos as usize - cut) as u32).to_le_bytes()); k2.extend_from_slice(&mt.len.to_le_bytes()); k2.extend_from_slice(&mt.dist.to_le_bytes()); }
            let h2 = { use sha2::Digest; sha2::Sha256::digest(&k2) };
            if !seen2.insert(h2) { dup2 += (p.len() - cut) as u64; }
            let h3 = { use sha2::Digest; sha2::Sha256::digest(&p[cut..]) };
            if !seen3.insert(h3) { dup3 += (p.len() - cut) as u64; }
            if !seen.insert(h) { dup += (p.len() - cut) as u64; fd += (p.len() - cut) as u64; prefix_of_dup += cut as u64; }
        }
        println!("{f}: text {:.1} MB, in repeated tails {:.1} MB", ft as f64 / 1e6, fd as f64 / 1e6);
    }
    println!("same tail text {:.1} MB, same tail text+tokens {:.1} MB", dup3 as f64 / 1e6, dup2 as f64 / 1e6); println!("text {:.1} MB; tails {:.1} MB; repeated tails {:.1} MB ({:.1}%), their members' prefixes {:.1} MB; tails reaching before the payload {reach_back}", total as f64 / 1e6, tails as f64 / 1e6, dup as f64 / 1e6, 100.0 * dup as f64 / total as f64, prefix_of_dup as f64 / 1e6);
}
