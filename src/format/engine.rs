//! Guards the deflate engine. Stored recipes say "zlib at level N"; they rebuild the original
//! bytes only with the exact zlib they were verified with. A silent swap (cargo feature
//! unification turning on zlib-ng, a different libz) would rebuild other bytes, so the store
//! refuses to open unless this build compresses a golden input to the recorded output.

use flate2::{Compress, Compression, FlushCompress};
use sha2::{Digest, Sha256};

/// SHA-256 (first 8 bytes, hex) of the raw deflate of `golden_input()` at levels 1..=9.
const EXPECTED: [&str; 9] = [
    "199717f433758c41",
    "57aa8e31efeb3ec4",
    "f89d0024a5ec4e97",
    "2ee6cf74752c61a3",
    "6ff567c6daa1e85d",
    "4cd5445c019442ca",
    "3e3fb2755d5c8748",
    "8674a8e356336757",
    "8674a8e356336757",
];

/// About 64 KiB of HTML-like text with repeats at varied distances, deterministic.
fn golden_input() -> Vec<u8> {
    let words: [&[u8]; 12] = [
        b"<div class=\"", b"archive", b"</a>", b"WARC-Record-ID", b" ", b"http://example.org/",
        b"\r\n", b"payload", b"<p>", b"dedup", b"0123456789", b"Content-Length: ",
    ];
    let mut x: u32 = 0x1234_5678;
    let mut out = Vec::with_capacity(70_000);
    while out.len() < 65_536 {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let w = words[(x >> 24) as usize % words.len()];
        out.extend_from_slice(w);
        if x & 0x100 != 0 {
            out.push(b'a' + ((x >> 9) % 26) as u8);
        }
    }
    out
}

fn deflate_raw(input: &[u8], level: u32) -> Vec<u8> {
    let mut c = Compress::new(Compression::new(level), false);
    let mut out = Vec::with_capacity(input.len() + 1024);
    loop {
        let consumed = c.total_in() as usize;
        let status = c.compress_vec(&input[consumed..], &mut out, FlushCompress::Finish);
        match status {
            Ok(flate2::Status::StreamEnd) => break,
            Ok(_) => out.reserve(64 * 1024),
            Err(_) => break,
        }
    }
    out
}

fn fingerprint(level: u32) -> String {
    let d = Sha256::digest(deflate_raw(&golden_input(), level));
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Ok if this build's zlib produces exactly the recorded streams.
pub fn self_test() -> Result<(), String> {
    for level in 1..=9u32 {
        let got = fingerprint(level);
        if got != EXPECTED[level as usize - 1] {
            return Err(format!("level {level} gives {got}, expected {}", EXPECTED[level as usize - 1]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn pinned_zlib_passes_self_test() {
        let all: Vec<String> = (1..=9).map(super::fingerprint).collect();
        assert_eq!(super::self_test(), Ok(()), "fingerprints of this build: {all:?}");
    }
}
