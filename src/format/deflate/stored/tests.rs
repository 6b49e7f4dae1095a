//! Unit tests of `stored`: the parse's byte layout round-trips.

use super::*;
use flate2::{Compress, Compression, FlushCompress};

/// Every dynamic block zlib writes gets the header `trees` derives from its symbols, so
/// that no zlib member stores its header bits (the store-size budget counts on it).
#[test]
fn zlib_headers_are_derived_not_stored() {
    let mut streams: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for name in ["webrecorder-pywb/example-wget-1-14.warc.gz", "iipc-webarchive-commons/IAH-urls-wget.warc.gz", "webrecorder-pywb/iana.warc.gz"] {
        let data = std::fs::read(crate::test_support::real_corpus().join(name)).unwrap();
        let mut plain = Vec::new();
        for r in crate::format::gzip::split(&data, &mut plain) {
            let crate::format::gzip::Region::Member(m) = r else { continue };
            let d0 = m.start as usize + m.header_len;
            let t = plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize].to_vec();
            streams.push((data[d0..d0 + m.deflate_len as usize].to_vec(), t));
        }
    }
    let text: Vec<u8> = (0..400_000u32).map(|i| b"<a href=\"/doc/\">x</a>\n"[(i as usize * 7 + (i as usize >> 9)) % 22] ^ (i % 251 == 0) as u8).collect();
    for level in 1..=9 {
        let mut out = Vec::with_capacity(text.len());
        Compress::new(Compression::new(level), false).compress_vec(&text, &mut out, FlushCompress::Finish).unwrap();
        streams.push((out, text.clone()));
    }
    let mut dynamic = 0;
    for (d, t) in &streams {
        let p = super::super::record(d, t).unwrap();
        let mut start = 0usize;
        for b in &p.blocks {
            if let BlockKind::Dynamic { header, bits } = &b.kind {
                let from = p.matches.partition_point(|m| (m.pos as usize) < start);
                let to = p.matches.partition_point(|m| m.pos < b.end);
                let (l, dd) = block_freqs(t, &p.matches[from..to], start, b.end as usize).unwrap();
                assert_eq!(trees::zlib_header(&l, &dd), (header.clone(), *bits));
                dynamic += 1;
            }
            start = b.end as usize;
        }
    }
    assert!(dynamic > 300, "{dynamic}");
}

/// A damaged (or crafted) parse over repetitive text, every match naming a source far
/// down its chain: decoding stops at RANK_STEPS links a match, not a window's worth.
#[test]
fn a_damaged_parse_cannot_make_a_rebuild_walk_whole_windows() {
    // Every earlier position is a candidate: a rank of 30,000 is found 30,000 links down
    // (a walk per match of a window's length: hours for this text without the bound).
    let text = vec![b'a'; 1 << 20];
    let n = (text.len() - 40_000) / 4;
    let mut gaps = Vec::new();
    put_varint(&mut gaps, 40_000);
    gaps.extend(std::iter::repeat_n(1u8, n - 1));
    let mut refs = Vec::new();
    for _ in 0..n {
        put_varint(&mut refs, 3 * 30_000 + 1);
    }
    let mut prefix = Vec::new();
    put_varint(&mut prefix, 1);
    prefix.push(1 | 1 << 1); // last, fixed
    put_varint(&mut prefix, text.len() as u64);
    prefix.push(0);
    put_varint(&mut prefix, text.len() as u64);
    put_varint(&mut prefix, n as u64);
    put_varint(&mut prefix, gaps.len() as u64);
    put_varint(&mut prefix, refs.len() as u64);
    prefix.extend_from_slice(&gaps);
    prefix.extend_from_slice(&refs);
    prefix.extend(std::iter::repeat_n(1u8, n)); // length 3
    let t = std::time::Instant::now();
    let r = decode(&prefix, None, &text).map(|p| p.matches.len());
    assert_eq!(r, Err(ParseError::Damaged("rank beyond the chain")));
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    // A count of matches beyond the bytes that hold them is refused before it sizes
    // anything.
    let mut bad = Vec::new();
    put_varint(&mut bad, 1);
    bad.push(1 | 1 << 1);
    put_varint(&mut bad, text.len() as u64);
    bad.push(0);
    put_varint(&mut bad, text.len() as u64);
    put_varint(&mut bad, (text.len() / 3) as u64);
    put_varint(&mut bad, 1);
    put_varint(&mut bad, 1);
    bad.extend_from_slice(&[0, 0, 0]);
    assert_eq!(decode(&bad, None, &text).map(|p| p.matches.len()), Err(ParseError::Damaged("match count")));
}

/// Ingest's proof reads the stored bytes back against the refs as written: a stored form
/// that differs from them (a ref, position or length column, a match dropped or added) does
/// not read back.
#[test]
fn the_proof_refuses_bytes_other_than_written() {
    let text: Vec<u8> = (0..60_000u32).map(|i| b"<td class=\"n\">1</td>\n"[(i as usize * 5 + (i as usize >> 7)) % 21]).collect();
    let mut d = Vec::with_capacity(text.len());
    Compress::new(Compression::new(9), false).compress_vec(&text, &mut d, FlushCompress::Finish).unwrap();
    let p = super::super::record(&d, &text).unwrap();
    let mut proof = Vec::new();
    let s = encode_with(&p, &text, None, Some(&mut proof)).unwrap();
    assert_eq!(read_back(&s, &text, &proof).unwrap(), p);
    assert!(proof.len() > 100, "{}", proof.len());
    // Another ref, position or length column at one match: the same columns' lengths, other
    // bytes.
    let i = proof.iter().position(|w| w.r < 0x7f - 3 && w.lc == 0).unwrap();
    let bad = "reads back other than written";
    for change in [|w: &mut Resolved| w.r += 3, |w: &mut Resolved| w.pos += 1, |w: &mut Resolved| w.lc = 1] {
        let mut other = proof.clone();
        change(&mut other[i]);
        assert_eq!(read_back(&s, &text, &other), Err(ParseError::Damaged(bad)));
    }
    // One match fewer, or one more, than the bytes hold.
    assert_eq!(read_back(&s, &text, &proof[..proof.len() - 1]), Err(ParseError::Damaged(bad)));
    let mut more = proof.clone();
    more.push(Resolved::new(text.len() - 3, 0, 0, (1, None)).unwrap());
    assert_eq!(read_back(&s, &text, &more), Err(ParseError::Damaged(bad)));
}
