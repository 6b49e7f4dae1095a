//! Unit tests of the predicted form: zlib's members at every level it predicts, sections as
//! ingest cuts them, damaged corrections.

use super::*;
use crate::format::deflate::tests::{text, zlib_with};
use crate::format::deflate::record;

/// Real text: the pywb sample's first 200,000 bytes of WARC.
fn real_text() -> Vec<u8> {
    use std::io::Read;
    let t = std::fs::read(crate::test_support::real_corpus().join("webrecorder-pywb/iana.warc.gz")).unwrap();
    let mut plain = Vec::new();
    flate2::read::MultiGzDecoder::new(&t[..]).read_to_end(&mut plain).unwrap();
    plain.truncate(200_000);
    plain
}

/// Encodes [from, to) of `plain`'s parse `ms` and reads it back.
fn section(plain: &[u8], origin: usize, from: usize, to: usize, blocks: &[Block], ms: &[Match]) -> Option<(Vec<u8>, Vec<Match>)> {
    let mut out = Vec::new();
    put_section(&mut out, plain, origin, from, to, blocks, ms)?;
    let mut back = Vec::new();
    let used = get_section(&out[PREDICTED_MARK.len()..], plain, from, to, blocks, &mut back).unwrap();
    assert_eq!(used + PREDICTED_MARK.len(), out.len());
    Some((out, back))
}

#[test]
fn zlibs_members_at_every_lazy_level_are_predicted_and_read_back_exactly() {
    for (plain, real) in [(real_text(), true), (text(150_000, 7), false)] {
        for level in 4..=9 {
            let d = zlib_with(&plain, level, 0, 8);
            let p = record(&d, &plain).unwrap();
            // Made-up text of seven words repeated may take more corrections than a third of
            // its matches (then the ranked form); real text never.
            let Some((bytes, back)) = section(&plain, 0, 0, plain.len(), &p.blocks, &p.matches) else {
                assert!(!real, "level {level} not predicted");
                continue;
            };
            assert_eq!(back, p.matches, "level {level}");
            // A third of the ranked form or less.
            let ranked = crate::format::deflate::encode(&p, &plain, None, false).prefix.len();
            assert!(bytes.len() * 3 < ranked, "level {level}: {} bytes, ranked {ranked}", bytes.len());
        }
    }
}

#[test]
fn a_prefix_and_a_tail_are_predicted_apart() {
    let plain = real_text();
    let d = zlib_with(&plain, 9, 0, 8);
    let p = record(&d, &plain).unwrap();
    // Cut where a match ends, as ingest cuts; the tail's chains start at `base`.
    let k = p.matches.partition_point(|m| (m.pos as usize + m.len as usize) < 50_000) + 1;
    let cut = p.matches[k - 1].pos as usize + p.matches[k - 1].len as usize;
    let base = 40_000;
    let (_, pre) = section(&plain, 0, 0, cut, &[], &p.matches[..k]).expect("prefix predicted");
    let (tail_bytes, tail) = section(&plain, base, cut, plain.len(), &[], &p.matches[k..]).expect("tail predicted");
    assert_eq!([pre, tail].concat(), p.matches);
    // The tail's bytes follow from its text and where it starts: the same text further on
    // in another member reads back the same.
    let mut moved = b"other headers, longer than before\r\n".to_vec();
    let shift = moved.len();
    moved.extend_from_slice(&plain);
    let mut back = Vec::new();
    let r = get_section(&tail_bytes[PREDICTED_MARK.len()..], &moved, cut + shift, moved.len(), &[], &mut back);
    assert!(r.is_ok(), "{r:?}");
    let expect: Vec<Match> = p.matches[k..].iter().map(|m| Match { pos: m.pos + shift as u32, ..*m }).collect();
    assert_eq!(back, expect);
}

#[test]
fn other_writers_are_not_predicted() {
    let plain = real_text();
    // zlib's fast levels (deflate_fast) and strategies other than the default.
    for (level, strategy) in [(1, 0), (3, 0), (6, 1), (6, 3)] {
        let d = zlib_with(&plain, level, strategy, 8);
        let p = record(&d, &plain).unwrap();
        if p.matches.is_empty() {
            continue;
        }
        if let Some((_, back)) = section(&plain, 0, 0, plain.len(), &p.blocks, &p.matches) {
            // Predicted after all (within the budget): then exactly.
            assert_eq!(back, p.matches, "level {level} strategy {strategy}");
        }
    }
}

#[test]
fn damaged_corrections_are_errors_never_panics() {
    let plain = real_text();
    let d = zlib_with(&plain, 9, 0, 8);
    let p = record(&d, &plain).unwrap();
    let (bytes, _) = section(&plain, 0, 0, plain.len(), &[], &p.matches).unwrap();
    let body = &bytes[PREDICTED_MARK.len()..];
    let mut x = 1u32;
    for i in 0..body.len().min(4000) {
        for flip in [1u8, 0x80, 0xff] {
            let mut b = body.to_vec();
            b[i] ^= flip;
            let mut back = Vec::new();
            // Either an error or some matches (a replay's CRC-32 catches those); no panic.
            let _ = get_section(&b, &plain, 0, plain.len(), &[], &mut back);
        }
        x = x.wrapping_mul(1103515245).wrapping_add(12345);
        let _ = get_section(&body[..(x as usize) % body.len()], &plain, 0, plain.len(), &[], &mut Vec::new());
    }
}

#[test]
fn the_chains_numbering_starts_over_before_it_overflows() {
    let plain = real_text();
    let d = zlib_with(&plain, 9, 0, 8);
    let p = record(&d, &plain).unwrap();
    let (bytes, _) = section(&plain, 0, 0, plain.len(), &p.blocks, &p.matches).unwrap();
    // A section of other text, then this one, numbered on (numbers only ever go up): so
    // that this one's last number is the last there is; so that this one would pass it (the
    // tables are cleared and the numbering starts again); and low. Each time it reads back
    // as zlib wrote it, no link the other section left taken for its own.
    let other = plain[50_000..150_000].to_vec();
    let po = record(&zlib_with(&other, 9, 0, 8), &other).unwrap();
    let n = plain.len() as u32;
    for (start, then) in [(u32::MAX - 3_000_000, u32::MAX - 1 - n), (u32::MAX - 3_000_000, u32::MAX - n / 2), (5, 0)] {
        // (Numbers set back as a fresh thread's: its tables hold nothing yet.)
        TABLES.with(|t| {
            let mut t = t.borrow_mut();
            t.head.fill(0);
            t.next = start;
        });
        section(&other, 0, 0, other.len(), &po.blocks, &po.matches).expect("other text predicted");
        TABLES.with(|t| {
            let mut t = t.borrow_mut();
            t.next = t.next.max(then);
        });
        let mut back = Vec::new();
        get_section(&bytes[PREDICTED_MARK.len()..], &plain, 0, plain.len(), &p.blocks, &mut back).unwrap();
        assert_eq!(back, p.matches, "numbered from {start}, then {then}");
    }
}
