//! The longest form of a section of matches: an optimal parser's (zopfli's, 7-Zip's),
//! each value measured against what the text offers at that point within
//! `chain::LONGEST_STEPS` links, where the ranked form (`put_matches`) is made for zlib's.
//! Byte layout: docs/FORMAT.md, "Matches in the longest form".

use super::chain::{Chain, LONGEST_STEPS, WINDOW};
use super::{put_columns, put_varint, Columns};
use crate::format::deflate::{extension, Match, Parse, ParseError, Result};

/// Opens a section of matches in the longest form: a varint 0 written in two bytes, which
/// `put_varint` never writes, so a reader tells the two forms apart by their first bytes.
pub(super) const LONGEST_MARK: [u8; 2] = [0x80, 0x00];

/// Appends matches `ms` (the first counted from plain offset `from`) in the longest form,
/// the form for an optimal parser's matches (zopfli's, 7-Zip's), whose lengths are often
/// shorter than their sources allow and whose sources lie deep in their chains. Three
/// columns again, each measured against what the text offers at that point, which a reader
/// sees too (`chain::LONGEST_STEPS` links down each chain): the literal run before a match
/// counts only the positions that have a candidate (a position with none cannot start a
/// match, so a reader skips it); a source is the k-th candidate whose match reaches the
/// length (2k), or its distance (2 (distance - 1) + 1) when the walk does not reach it; a
/// length is how much shorter it is than the longest candidate's match (length - 3 with a
/// distance). On the bench's zopfli crawl the tails take 1.45 MB at zstd 3 instead of 3.13
/// (docs/BENCHMARKS.md). Returns false, having written nothing, if a match starts where no
/// candidate is found: the caller then writes the ranked form.
pub(super) fn put_longest(out: &mut Vec<u8>, ms: &[Match], mut from: u32, plain: &[u8], chain: &mut Chain) -> bool {
    let (mut gaps, mut refs, mut lens) = (Vec::with_capacity(ms.len()), Vec::with_capacity(ms.len()), Vec::with_capacity(ms.len()));
    for m in ms {
        let (pos, len, dist) = (m.pos as usize, m.len as usize, m.dist as usize);
        let mut run = 0u64;
        for i in from as usize..pos {
            chain.insert_to(plain, i);
            run += chain.matchable(plain, i, LONGEST_STEPS) as u64;
        }
        chain.insert_to(plain, pos);
        if !chain.matchable(plain, pos, LONGEST_STEPS) {
            return false;
        }
        put_varint(&mut gaps, run);
        let longest = chain.longest(plain, pos, LONGEST_STEPS, (plain.len() - pos).min(258));
        match chain.reaching_before(plain, pos, LONGEST_STEPS, len, pos - dist) {
            Some(k) => {
                put_varint(&mut refs, 2 * k);
                put_varint(&mut lens, (longest - len) as u64);
            }
            None => {
                put_varint(&mut refs, 2 * (dist as u64 - 1) + 1);
                put_varint(&mut lens, len as u64 - 3);
            }
        }
        from = m.pos + m.len as u32;
    }
    out.extend_from_slice(&LONGEST_MARK);
    put_columns(out, ms.len(), &gaps, &refs, &lens);
    true
}

/// Reads what `put_longest` wrote (`b` after the mark), on `chain`; returns the bytes it took.
pub(super) fn get_longest(b: &[u8], from: u64, plain: &[u8], chain: &mut Chain, out: &mut Vec<Match>) -> Result<usize> {
    let Columns { n, mut gaps, mut refs, mut lens } = Columns::read(b, plain.len())?;
    out.reserve(n);
    let mut pos = from as usize;
    for _ in 0..n {
        // The match starts at the (run + 1)-th position from here that has a candidate.
        let mut left = gaps.bounded(plain.len() as u64)?;
        loop {
            if pos + 3 > plain.len() {
                return Err(ParseError::Damaged("match out of range"));
            }
            chain.insert_to(plain, pos);
            if chain.matchable(plain, pos, LONGEST_STEPS) {
                if left == 0 {
                    break;
                }
                left -= 1;
            }
            pos += 1;
        }
        let r = refs.bounded(2 * WINDOW as u64)?;
        let d = lens.bounded(255)? as usize;
        let cap = (plain.len() - pos).min(258);
        let (dist, len) = if r % 2 == 1 {
            ((r / 2) as usize + 1, d + 3)
        } else {
            let len = chain.longest(plain, pos, LONGEST_STEPS, cap).checked_sub(d).filter(|&l| l >= 3).ok_or(ParseError::Damaged("match length"))?;
            let q = chain.nth_reaching(plain, pos, LONGEST_STEPS, len, r / 2).ok_or(ParseError::Damaged("source beyond the chain"))?;
            (pos - q, len)
        };
        if dist > pos || dist > WINDOW || !(3..=258).contains(&len) || len > cap {
            return Err(ParseError::Damaged("match out of range"));
        }
        // A stated distance's length must be there to copy (a reader's own candidates'
        // are by construction).
        if r % 2 == 1 && extension(plain, pos, dist, len) != len {
            return Err(ParseError::Damaged("match length"));
        }
        out.push(Match { pos: pos as u32, len: len as u16, dist: dist as u16 });
        pos += len;
    }
    Columns::end(b, &gaps, &refs, &lens)
}

/// Matches `is_optimal` looks at: the first this many. An optimal parser shortens about a
/// fifth of its matches throughout (zopfli, 7-Zip), zlib none; looking at every match (a
/// random read of the text for each) took 1.4 % of an import's CPU.
const OPTIMAL_SAMPLE: usize = 4096;

/// Whether `p` looks like an optimal parser's (its matches then take the longest form): at
/// least one in 64 of its first OPTIMAL_SAMPLE matches shorter than its source allows
/// (zlib's and GNU gzip's never are).
pub fn is_optimal(p: &Parse, plain: &[u8]) -> bool {
    let sample = &p.matches[..p.matches.len().min(OPTIMAL_SAMPLE)];
    let shortened = sample
        .iter()
        .filter(|m| {
            let (pos, len, dist) = (m.pos as usize, m.len as usize, m.dist as usize);
            pos + len < plain.len() && len < 258 && plain[pos + len] == plain[pos + len - dist]
        })
        .count();
    !sample.is_empty() && shortened * 64 >= sample.len()
}
