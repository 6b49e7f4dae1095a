//! What the parse benches share: the gzip members of the files they are given, each with
//! its text and its recorded deflate parse.
// (Each bench includes this module and uses what it needs of it.)
#![allow(dead_code)]
use warcfs::format::{deflate, gzip};

pub struct Member {
    pub plain: Vec<u8>,
    pub parse: deflate::Parse,
    /// Its deflate stream's length.
    pub deflate_len: usize,
}

/// Every gzip member of `files` (a member whose parse cannot be recorded is left out).
pub fn members(files: &[String]) -> Vec<Member> {
    let mut out = Vec::new();
    for f in files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let mut plain = Vec::new();
        for r in gzip::split(&data, &mut plain) {
            let gzip::Region::Member(m) = r else { continue };
            let d0 = m.start as usize + m.header_len;
            let d = &data[d0..d0 + m.deflate_len as usize];
            let p = plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize].to_vec();
            if let Ok(parse) = deflate::record(d, &p) {
                out.push(Member { plain: p, parse, deflate_len: d.len() });
            }
        }
    }
    out
}

/// Where a record's payload starts in its member's text: after the WARC headers and the
/// HTTP headers (None if the text holds no two header ends).
pub fn payload_start(p: &[u8]) -> Option<usize> {
    let find = |h: &[u8], n: &[u8]| h.windows(n.len()).position(|w| w == n);
    find(p, b"\r\n\r\n").and_then(|a| find(&p[a + 4..], b"\r\n\r\n").map(|b| a + 4 + b + 4))
}
