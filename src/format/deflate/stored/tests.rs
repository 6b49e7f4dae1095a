//! Unit tests of `stored`: the parse's byte layout round-trips.

use super::*;
use chain::Counted;
use crate::format::deflate::Block;
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
    let (_, p) = zlib9(&text);
    let mut proof = Vec::new();
    let s = encode_with(&p, &text, None, false, Some(&mut proof), false).unwrap();
    assert_eq!(read_back(&s, &text, &proof, &p.matches, None).unwrap(), p);
    assert!(proof.len() > 100, "{}", proof.len());
    // Another ref, position or length column at one match: the same columns' lengths, other
    // bytes.
    let i = proof.iter().position(|w| w.r < 0x7f - 3 && w.lc == 0).unwrap();
    let bad = "reads back other than written";
    for change in [|w: &mut Resolved| w.r += 3, |w: &mut Resolved| w.pos += 1, |w: &mut Resolved| w.lc = 1] {
        let mut other = proof.clone();
        change(&mut other[i]);
        assert_eq!(read_back(&s, &text, &other, &p.matches, None), Err(ParseError::Damaged(bad)));
    }
    // One match fewer, or one more, than the bytes hold.
    assert_eq!(read_back(&s, &text, &proof[..proof.len() - 1], &p.matches, None), Err(ParseError::Damaged(bad)));
    let mut more = proof.clone();
    more.push(Resolved::new(text.len() - 3, 0, 0, (1, None)).unwrap());
    assert_eq!(read_back(&s, &text, &more, &p.matches, None), Err(ParseError::Damaged(bad)));
}

/// Bytes that look random (no three repeat by chance often enough to matter).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Appends `n` words of a small markup vocabulary in a random order: many short matches,
/// their sources near.
fn push_markup(text: &mut Vec<u8>, n: usize, seed: u64) {
    let words = ["<td>", "</td>", "<a href=\"/", "item", "\">", "</a>", "price ", "12", "7", " class=\"n\"", "<tr>\n", "</tr>\n"];
    for b in noise(n, seed) {
        text.extend_from_slice(words[b as usize % words.len()].as_bytes());
    }
}

/// `text` compressed by zlib at level 9, and its recorded parse.
fn zlib9(text: &[u8]) -> (Vec<u8>, Parse) {
    let mut d = Vec::with_capacity(text.len());
    Compress::new(Compression::new(9), false).compress_vec(text, &mut d, FlushCompress::Finish).unwrap();
    let p = super::super::record(&d, text).unwrap();
    (d, p)
}

/// A chain that skips text no walk can reach (a reader that met only distances there) finds
/// the same candidates as one that holds every position, up to one exactly a window back.
#[test]
fn a_chain_skips_only_what_no_walk_reaches() {
    let mut text = noise(3 * WINDOW, 7);
    let (q, pos) = (WINDOW / 2, WINDOW / 2 + WINDOW);
    // The same three bytes at `pos`, exactly a window back, and further back still (left out
    // of the skipping chain, but `q`'s link in the full one).
    for at in [q - 1000, q, pos] {
        text[at..at + 3].copy_from_slice(b"\x01\x02\x03");
    }
    // After `pos`, long chains: text of two letters.
    for (i, b) in noise(WINDOW, 9).into_iter().enumerate() {
        text[pos + 3 + i] = b'a' + (b & 1);
    }
    let mut full = Chain::new(text.len());
    let mut skipping = Chain::new(text.len());
    full.insert_to(&text, 10);
    skipping.insert_to(&text, 10);
    for p in 11..=pos {
        full.insert_to(&text, p);
    }
    // Straight from 10 to `pos`: everything below `pos - WINDOW` = q is left out.
    skipping.insert_to(&text, pos);
    for chain in [&full, &skipping] {
        assert_eq!(chain.at_counted(&text, pos, 0, Counted::All), Some((q, None)), "the source a window back is found");
    }
    for p in pos + 1..pos + 3000 {
        full.insert_to(&text, p);
        skipping.insert_to(&text, p);
        for k in [0, 1, 2, 5, 20, RANK_STEPS as u64 - 1] {
            assert_eq!(full.at_counted(&text, p, k, Counted::All), skipping.at_counted(&text, p, k, Counted::All), "at {p}, candidate {k}");
        }
    }
}

/// Text whose sources lie far down long chains has them stored as distances for more than a
/// window at a time, where the encoder still fills its chain and a reader does not; the refs
/// after it name sources up to a window back: a reader finds each where the encoder did.
#[test]
fn a_reader_skipping_the_chain_under_distances_reads_what_was_written() {
    // 2,000 letters of two kinds at random, over and over: zlib copies each from 2,000 back,
    // some 250 links down the chains (every three bytes recur every eight positions).
    let unit: Vec<u8> = noise(2000, 5).into_iter().map(|b| b'a' + (b & 1)).collect();
    let mut text = unit.repeat(50);
    // Unique markers in its last 32 KB, one in each repeat, each copied (with the 20 bytes
    // after it) once the repeats end: its only candidate, so a rank, up to a window back.
    let end = text.len();
    let marked: Vec<usize> = (1..=16).map(|i| end - 2000 * i + 500).collect();
    for (i, &at) in marked.iter().enumerate() {
        text[at..at + 3].copy_from_slice(&[0xf0, 0x80 + i as u8, 0xa0 + i as u8]);
    }
    for (i, &at) in marked.iter().enumerate() {
        let copy = text[at..at + 23].to_vec();
        text.extend_from_slice(&copy);
        text.extend_from_slice(&[0xf2, i as u8, 0xf3, 0xf4]);
    }
    // Then markup and four letters at random, many near sources: the text as a whole is far
    // from sparse (over 50 matches a KiB, the rule for implied lengths).
    push_markup(&mut text, 8000, 3);
    text.extend(noise(60_000, 23).into_iter().map(|b| b'w' + b % 4));
    let (_, p) = zlib9(&text);
    assert!(p.matches.len() * 1024 > 50 * text.len(), "{} matches in {} bytes", p.matches.len(), text.len());
    let mut proof = Vec::new();
    let s = encode_with(&p, &text, None, false, Some(&mut proof), false).unwrap();
    let ranked: Vec<&Resolved> = proof.iter().filter(|w| w.r % 3 != 2).collect();
    let far = ranked.iter().filter(|w| (w.pos as usize) >= end && w.dist as usize > WINDOW * 3 / 4).count();
    assert!(far >= 3, "{far} ranks name sources more than three quarters of a window back");
    let unranked = ranked.iter().map(|w| w.pos as usize).find(|&pos| pos >= 4000).unwrap_or(0);
    assert!(unranked >= end, "a ref at {unranked}, inside the repeats, needs the chain");
    assert_eq!(decode(&s.prefix, None, &text).unwrap(), p);
}

/// Text with few matches (a compressed payload) has them stored as distances, its reader
/// builds no chain there, and a dense tail after it still gets ranks: the member rebuilds.
#[test]
fn sparse_text_is_stored_with_distances() {
    let mut text = noise(48 << 10, 11);
    // A few short repeats in the noise: about 0.3 matches a KiB.
    for i in 1..16 {
        let at = i * 3000;
        let copy = text[at - 1000..at - 980].to_vec();
        text[at..at + 20].copy_from_slice(&copy);
    }
    let cut = text.len();
    // Then markup, many short matches.
    push_markup(&mut text, 6000, 13);
    let (d, p) = zlib9(&text);
    let mut proof = Vec::new();
    let s = encode_with(&p, &text, Some(Cut::at(cut)), false, Some(&mut proof), false).unwrap();
    assert!(s.tail.is_some());
    let (sparse, dense): (Vec<&Resolved>, Vec<&Resolved>) = proof.iter().partition(|w| (w.pos as usize) < cut);
    assert!(sparse.len() >= 10 && sparse.iter().all(|w| w.r % 3 == 2), "sparse text: distances ({} matches)", sparse.len());
    let ranked = dense.iter().filter(|w| w.r % 3 != 2).count();
    // (Not all: a source far down a chain of this small vocabulary is stored as its distance.)
    assert!(dense.len() > 1000 && ranked * 4 > dense.len(), "dense text: ranks ({ranked} of {} matches)", dense.len());
    let back = decode(&s.prefix, s.tail.as_deref(), &text).unwrap();
    assert_eq!(back, p);
    let mut out = Vec::new();
    super::super::replay(&back, &text, &mut out).unwrap();
    assert!(out == d);
}

/// Text of 20-50 matches a KiB has them stored as distances when every match takes all its
/// source allows (zlib's), and ranks when one states a shorter length (an optimal parser's).
#[test]
fn implied_lengths_are_stored_as_distances_up_to_a_denser_rule() {
    let mut text = noise(64 << 10, 17);
    let mut seed = noise(4096, 19).into_iter();
    // An 8-byte copy of earlier text every 29 bytes: about 35 matches a KiB.
    let mut at = 4096;
    while at + 8 < text.len() {
        let back = 64 + seed.next().unwrap_or(1) as usize * 12;
        let copy = text[at - back..at - back + 8].to_vec();
        text[at..at + 8].copy_from_slice(&copy);
        at += 29;
        if seed.len() == 0 {
            seed = noise(4096, at as u64).into_iter();
        }
    }
    let (_, p) = zlib9(&text);
    let per_kib = p.matches.len() * 1024 / text.len();
    assert!((25..45).contains(&per_kib), "{per_kib} matches a KiB");
    let stored_refs = |p: &Parse| {
        let mut proof = Vec::new();
        let s = encode_with(p, &text, None, false, Some(&mut proof), false).unwrap();
        assert_eq!(decode(&s.prefix, s.tail.as_deref(), &text).unwrap(), *p);
        proof.iter().map(|w| w.r % 3).collect::<Vec<_>>()
    };
    assert!(stored_refs(&p).iter().all(|&r| r == 2), "zlib's matches: distances");
    let mut stated = p.clone();
    let m = stated.matches.iter_mut().find(|m| m.len > 4).unwrap();
    m.len -= 1;
    let refs = stored_refs(&stated);
    assert!(refs.iter().filter(|&&r| r != 2).count() * 2 > refs.len(), "a stated length keeps ranks: {refs:?}");
}

/// `text` compressed by zopfli (an optimal parser: scripts/setup installs it), and its
/// recorded parse.
fn zopfli(text: &[u8]) -> (Vec<u8>, Parse) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("text");
    std::fs::write(&input, text).unwrap();
    let out = std::process::Command::new("zopfli").args(["--i1", "--deflate", "-c"]).arg(&input).output().unwrap_or_else(|e| panic!("zopfli (scripts/setup installs it): {e}"));
    assert!(out.status.success());
    let p = super::super::record(&out.stdout, text).unwrap();
    (out.stdout, p)
}

fn markup(n: usize, seed: u64) -> Vec<u8> {
    let mut t = Vec::new();
    push_markup(&mut t, n, seed);
    t
}

/// An optimal parser's matches (zopfli shortens many of them) are stored in the longest
/// form, which reads back as the same parse, replays to the same bytes, and takes less room
/// than the ranked form; zlib's parses (none shortened) keep the ranked form.
#[test]
fn an_optimal_parsers_matches_are_stored_in_the_longest_form() {
    let text = markup(30_000, 5);
    let (d, p) = zopfli(&text);
    assert!(is_optimal(&p, &text));
    let cut = Some(text.len() / 3);
    let (s, back) = encode_read_back(&p, &text, cut, true).unwrap();
    assert!(s.prefix.windows(2).any(|w| w == LONGEST_MARK) && s.tail.as_ref().unwrap().starts_with(&LONGEST_MARK));
    assert_eq!(back, p);
    assert_eq!(decode(&s.prefix, s.tail.as_deref(), &text).unwrap(), p);
    let mut again = Vec::new();
    super::super::replay(&back, &text, &mut again).unwrap();
    assert!(again == d);
    let (ranked, _) = encode_read_back(&p, &text, cut, false).unwrap();
    let size = |s: &Stored| zstd::bulk::compress(&[s.prefix.clone(), s.tail.clone().unwrap_or_default()].concat(), 3).unwrap().len();
    assert!(size(&s) * 10 < size(&ranked) * 8, "longest {} against ranked {}", size(&s), size(&ranked));

    let (_, zp) = zlib9(&text);
    assert!(!is_optimal(&zp, &text));
    let zs = encode(&zp, &text, cut, true);
    assert!(!zs.prefix.windows(2).any(|w| w == LONGEST_MARK) && !zs.tail.unwrap().starts_with(&LONGEST_MARK));
}

/// A longest-form parse that is cut short or has bytes changed is an error or another
/// parse, never a panic, and its reading stays bounded by the text.
#[test]
fn a_damaged_longest_form_is_an_error_not_a_panic() {
    let text = markup(8_000, 9);
    let (_, p) = zopfli(&text);
    let s = encode(&p, &text, Some(text.len() / 2), true);
    let tail = s.tail.clone().unwrap();
    assert!(tail.starts_with(&LONGEST_MARK));
    for n in (0..tail.len()).step_by(7) {
        assert!(decode(&s.prefix, Some(&tail[..n]), &text).is_err(), "a tail cut at {n} read as a parse");
    }
    // Changed bytes may still read as some parse (the member's CRC-32 catches its replay);
    // what they must not do is panic or read past the text.
    for (i, x) in (2..tail.len()).step_by(3).zip([0x01u8, 0x80, 0xff, 0x7f].iter().cycle()) {
        let mut t = tail.clone();
        t[i] ^= x;
        if let Ok(q) = decode(&s.prefix, Some(&t), &text) {
            assert!(q.matches.iter().all(|m| m.pos as usize + m.len as usize <= text.len() && m.dist as usize <= m.pos as usize));
        }
    }
}

/// Two copies of a payload behind headers of one length that differ where the payload's
/// matches walk (one header has a more recent candidate for a source the payload takes from
/// the other's headers): cut at the payload, with its start as the base, their tails are the
/// same bytes, as their identities say; with the headers' sources ranked (base 0), they
/// differ, and so would their chunks.
#[test]
fn a_tail_based_at_its_payload_is_the_same_behind_other_headers() {
    let headers = [&b"X-Link: http://a.example/ zzzzzz\r\n\r\n"[..], &b"X-Link: http://a.example/ httpzz\r\n\r\n"[..]];
    assert_eq!(headers[0].len(), headers[1].len());
    let mut payload = markup(1500, 11);
    payload.extend_from_slice(b" see http://a.example/ again ");
    push_markup(&mut payload, 6000, 12);
    let texts: Vec<Vec<u8>> = headers.iter().map(|h| [*h, &payload[..]].concat()).collect();
    let base = headers[0].len();
    let cut = Cut { at: base + 4096, base, predicted: false };
    let parses: Vec<Parse> = texts.iter().map(|t| zlib9(t).1).collect();
    // The payload takes "http://a.example/" from the headers (it holds no earlier copy).
    assert!(parses[0].matches.iter().any(|m| m.pos as usize > cut.at && (m.pos as usize) - (m.dist as usize) < base), "a tail match reaches back into the headers");
    let ids: Vec<Vec<u8>> = parses.iter().zip(&texts).map(|(p, t)| tail_identity(p, t, cut).unwrap()).collect();
    assert_eq!(ids[0], ids[1], "the writer's matches after the cut are the same");
    let tail = |p: &Parse, t: &[u8], cut: Cut| encode_read_back_at(p, t, Some(cut), false).unwrap().0.tail.unwrap();
    assert_eq!(tail(&parses[0], &texts[0], cut), tail(&parses[1], &texts[1], cut));
    let ranked = Cut { base: 0, ..cut };
    assert_ne!(tail(&parses[0], &texts[0], ranked), tail(&parses[1], &texts[1], ranked), "ranks over the headers differ");
    // Either copy's stored form reads back and replays to its own member.
    for (p, t) in parses.iter().zip(&texts) {
        let (stored, back) = encode_read_back_at(p, t, Some(cut), false).unwrap();
        assert_eq!(&back, p);
        assert_eq!(decode(&stored.prefix, stored.tail.as_deref(), t).unwrap(), *p);
    }
}

/// A parse whose tail is stored already proves its prefix alone: the same prefix bytes the
/// whole encoding writes, read back with the tail's matches taken as they are.
#[test]
fn a_prefix_proven_alone_is_the_prefix_of_the_whole() {
    let mut text = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    let base = text.len();
    push_markup(&mut text, 8000, 5);
    let (_, p) = zlib9(&text);
    let cut = Cut { at: base + 4096, base, predicted: false };
    let (whole, _) = encode_read_back_at(&p, &text, Some(cut), false).unwrap();
    let (prefix, back) = encode_prefix_read_back(&p, &text, cut).unwrap().unwrap();
    assert_eq!((prefix.prefix, prefix.tail), (whole.prefix, None));
    assert_eq!(back, p);
    // Without a tail (cut past every match) there is nothing to name.
    assert!(encode_prefix_read_back(&p, &text, Cut::at(text.len())).unwrap().is_none());
    assert!(tail_identity(&p, &text, Cut::at(text.len())).is_none());
    // Another parse's identity differs with its matches.
    let (_, q) = zlib9(&[&text[..text.len() - 1], b"!"].concat());
    let other = tail_identity(&q, &text, cut);
    assert!(other.is_some() && other != tail_identity(&p, &text, cut) || q.matches == p.matches);
}

/// A tail match whose source ends just before the payload (in the headers) is maximal or not
/// by the header byte past its source: that decides its stored length, so it is part of the
/// identity. Two copies whose headers differ only in that byte store other tails, and their
/// identities differ too.
#[test]
fn a_tail_identity_holds_what_header_bytes_its_form_rests_on() {
    let headers = [&b"K: abcdefgh1 \r\n\r\n"[..], &b"K: abcdefgh2 \r\n\r\n"[..]];
    let base = headers[0].len();
    // After 6 KiB of matches of its own, the payload copies "abcdefgh" from the headers,
    // followed by '1': as long as the source allows behind the first header, not behind the
    // second.
    let mut payload = b"xyz".to_vec();
    payload.extend(std::iter::repeat_n(b"xyz".as_slice(), 2000).flatten());
    let at = base + payload.len();
    payload.extend_from_slice(b"abcdefgh1-");
    let texts: Vec<Vec<u8>> = headers.iter().map(|h| [*h, &payload[..]].concat()).collect();
    // Matches of 3 over the xyz runs, then the one of 8 from the headers.
    let mut matches: Vec<Match> = (base + 3..at).step_by(3).map(|pos| Match { pos: pos as u32, len: 3, dist: 3 }).collect();
    assert_eq!(matches.last().unwrap().pos as usize + 3, at, "the xyz runs end where the copy from the headers begins");
    matches.push(Match { pos: at as u32, len: 8, dist: (at - 3) as u16 });
    let p = Parse { blocks: vec![Block { kind: BlockKind::Fixed, last: true, end: texts[0].len() as u32 }], matches, end_pad: 0 };
    let cut = Cut { at: base + 2048, base, predicted: false };
    for t in &texts {
        assert_eq!(t[at..at + 8], t[3..11], "the match copies what it says");
    }
    let tails: Vec<Vec<u8>> = texts.iter().map(|t| encode_read_back_at(&p, t, Some(cut), false).unwrap().0.tail.unwrap()).collect();
    assert_ne!(tails[0], tails[1], "the header byte past the source decides the stored form");
    assert_ne!(tail_identity(&p, &texts[0], cut), tail_identity(&p, &texts[1], cut));
}

/// `header_bytes` (what `stats --bytes` counts as block headers) is the bytes the writer
/// spent on each dynamic block's kept header: its bit count's varint and its bits.
#[test]
fn header_bytes_are_the_kept_dynamic_headers() {
    let text: Vec<u8> = (0..300_000u32).map(|i| b"<p class=\"x\">a b</p>\n"[(i as usize * 5 + (i as usize >> 8)) % 21] ^ (i % 241 == 0) as u8).collect();
    // (compress_vec writes only into the room the vector has.)
    let mut d = Vec::with_capacity(text.len());
    Compress::new(Compression::new(6), false).compress_vec(&text, &mut d, FlushCompress::Finish).unwrap();
    let p = super::super::record(&d, &text).unwrap();
    let mut want = 0;
    for b in &p.blocks {
        if let BlockKind::Dynamic { header, bits } = &b.kind {
            let mut v = Vec::new();
            put_varint(&mut v, *bits as u64);
            want += v.len() + header.len();
        }
    }
    assert!(want > 20, "the text makes dynamic blocks: {:?}", p.blocks.len());
    let stored = encode(&p, &text, Some(4096), false);
    assert_eq!(header_bytes(&stored.prefix, text.len()).unwrap(), want);
    // A prefix cut inside its block list is damage, not a count.
    assert!(header_bytes(&stored.prefix[..3], text.len()).is_err());
}
