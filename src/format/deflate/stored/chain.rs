//! The text's 3-byte chains: earlier occurrences of each position's first three bytes, most
//! recent first, which turn a match's distance into a small number when a parse is stored
//! (`locate`) and back when it is read (`resolve`).

use super::super::extension;
use super::{ParseError, Result};

/// Earlier occurrences of each position's first three bytes, most recent first: the chain
/// that turns a match's distance into a small rank. Defined by the text alone (the hash only
/// makes the walk short), so a stored rank means the same to any reader.
pub(super) struct Chain {
    /// Most recent position of each hash.
    head: Vec<u32>,
    /// `prev` slots in use, less one (a power of two, at most WINDOW).
    pmask: usize,
    /// For each position in the window, the previous one of its hash. A slot is reused
    /// 32 KiB later, which a walk never reaches: it stops at the window's edge.
    prev: Vec<u32>,
    hash_shift: u32,
    /// Positions below this are in the chain.
    inserted: usize,
}

const NONE: u32 = u32::MAX;
pub(super) const WINDOW: usize = 32768;
/// Chain links a stored rank may take a reader; a match further down its chain is stored
/// with its distance instead. Readers walk no further either, so a damaged parse cannot make
/// a rebuild walk whole windows per match.
pub(super) const RANK_STEPS: usize = 128;
/// Chain links a rank written now may take for a match of implied length (zlib's, GNU
/// gzip's): a source further down is stored as its distance, which a reader takes without a
/// walk.
pub(super) const STORED_REF_STEPS: usize = 16;
/// Chain links a match in the longest form (`stored::put_longest`) may take a reader: its
/// sources and the longest match it is measured against are looked for this far down. An
/// optimal parser's sources lie deeper than zlib's (zopfli's: 80 links on average within
/// this bound, on the bench's crawl); the bound keeps a damaged parse from costing more.
pub(super) const LONGEST_STEPS: usize = 1024;

thread_local! {
    /// The last chain's tables, kept for the next member this thread encodes or decodes: a
    /// rebuild should not pay for allocating and clearing them every time.
    static TABLES: std::cell::Cell<(Vec<u32>, Vec<u32>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

impl Drop for Chain {
    fn drop(&mut self) {
        let tables = (std::mem::take(&mut self.head), std::mem::take(&mut self.prev));
        TABLES.with(|t| t.set(tables));
    }
}

impl Chain {
    /// The hash table's size (as bits) for a text of `len` bytes: sized to the text, so
    /// small members do not pay for clearing large ones. It decides which positions share a
    /// chain, and so how far down a source lies.
    pub(super) fn table_bits(len: usize) -> u32 {
        len.clamp(256, 1 << 15).next_power_of_two().trailing_zeros()
    }

    pub(super) fn new(len: usize) -> Chain {
        let hbits = Chain::table_bits(len);
        let slots = len.clamp(1, WINDOW).next_power_of_two();
        let (mut head, mut prev) = TABLES.with(|t| t.take());
        head.clear();
        head.resize(1 << hbits, NONE);
        // `prev` needs no clearing: a slot is read only for a position inserted (and so
        // written) by this chain.
        if prev.len() < slots {
            prev.resize(slots, NONE);
        }
        Chain { head, pmask: slots - 1, prev, hash_shift: 32 - hbits, inserted: 0 }
    }

    #[inline]
    fn hash_of(&self, v: u32) -> usize {
        (v.wrapping_mul(2654435761) >> self.hash_shift) as usize
    }

    #[inline]
    fn hash(&self, b: &[u8]) -> usize {
        self.hash_of((b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32)
    }

    /// Adds every position before `pos` that starts three bytes of `plain`.
    #[inline]
    pub(super) fn insert_to(&mut self, plain: &[u8], pos: usize) {
        let end = pos.min(plain.len().saturating_sub(2));
        // A walk from `pos` on stops at the window's edge: what lies before it need not go in
        // (text whose matches were all stored as distances is skipped so).
        let from = self.inserted.max(pos.saturating_sub(WINDOW));
        if from < end {
            let pm = self.pmask;
            let shift = self.hash_shift;
            // Slices whose lengths the masks below fit, so the loop carries no bounds checks
            // (head's length is a power of two, and a hash is below it anyway).
            let head = &mut self.head[..];
            let hmask = head.len() - 1;
            let prev = &mut self.prev[..=pm];
            // Each position's three bytes read at once (no value carried from one position to
            // the next): four bytes while they are there, the last position alone.
            let quads = end.min(plain.len().saturating_sub(3));
            for (i, w) in plain[from..quads.max(from) + 3].windows(4).enumerate() {
                let i = from + i;
                let v = u32::from_be_bytes([w[0], w[1], w[2], w[3]]) >> 8;
                let h = (v.wrapping_mul(2654435761) >> shift) as usize & hmask;
                prev[i & pm] = head[h];
                head[h] = i as u32;
            }
            for i in quads.max(from)..end {
                let v = (plain[i] as u32) << 16 | (plain[i + 1] as u32) << 8 | plain[i + 2] as u32;
                let h = (v.wrapping_mul(2654435761) >> shift) as usize & hmask;
                prev[i & pm] = head[h];
                head[h] = i as u32;
            }
        }
        self.inserted = self.inserted.max(pos);
    }

    /// Walks the candidates for `pos`, most recent first, handing each true occurrence of
    /// its first three bytes to `f` until it returns false; at most `steps` chain links.
    #[inline]
    fn walk(&self, plain: &[u8], pos: usize, steps: usize, mut f: impl FnMut(usize) -> bool) {
        let pm = self.pmask;
        let key = &plain[pos..pos + 3];
        let q0 = self.head[self.hash(key)];
        if q0 == NONE {
            return;
        }
        let mut q = q0 as usize;
        for _ in 0..steps {
            // Positions are below `pos`; NONE (u32::MAX) is never, so it ends the walk too.
            if pos.wrapping_sub(q) > WINDOW {
                return;
            }
            if plain[q..q + 3] == *key && !f(q) {
                return;
            }
            let next = self.prev[q & pm] as usize;
            if next >= q {
                return;
            }
            q = next;
        }
    }

    /// Whether `pos` has a candidate within `steps` links (a position before the text's last
    /// three bytes has none).
    pub(super) fn matchable(&self, plain: &[u8], pos: usize, steps: usize) -> bool {
        let mut any = false;
        if pos + 3 <= plain.len() {
            self.walk(plain, pos, steps, |_| {
                any = true;
                false
            });
        }
        any
    }

    /// The longest match of `pos` (at most `cap`) among its candidates within `steps` links.
    /// A candidate is measured only if it matches the byte that would make it longer than
    /// the longest so far (as zlib's search does), and the walk ends at a match of `cap`.
    pub(super) fn longest(&self, plain: &[u8], pos: usize, steps: usize, cap: usize) -> usize {
        let mut best = 0;
        self.walk(plain, pos, steps, |q| {
            if best == 0 || plain[q + best] == plain[pos + best] {
                best = best.max(extension(plain, pos, pos - q, cap));
            }
            best < cap
        });
        best
    }

    /// The `k`-th (0 = the most recent) of the candidates of `pos` within `steps` links whose
    /// match reaches `len`.
    pub(super) fn nth_reaching(&self, plain: &[u8], pos: usize, steps: usize, len: usize, k: u64) -> Option<usize> {
        let (mut left, mut found) = (k, None);
        self.walk(plain, pos, steps, |q| {
            if plain[q + len - 1] == plain[pos + len - 1] && plain[q..q + len] == plain[pos..pos + len] {
                if left == 0 {
                    found = Some(q);
                    return false;
                }
                left -= 1;
            }
            true
        });
        found
    }

    /// How many candidates of `pos` more recent than `target` match it for `len` bytes or
    /// more; None if `target` is not among its candidates within `steps` links.
    pub(super) fn reaching_before(&self, plain: &[u8], pos: usize, steps: usize, len: usize, target: usize) -> Option<u64> {
        let (mut k, mut found) = (0u64, None);
        self.walk(plain, pos, steps, |q| {
            if q == target {
                found = Some(k);
                return false;
            }
            k += (plain[q + len - 1] == plain[pos + len - 1] && plain[q..q + len] == plain[pos..pos + len]) as u64;
            q > target
        });
        found
    }

    /// How the occurrence at `target` is found from `pos` (see `Counted`): as the k-th
    /// candidate that counts, or failing that by its rank among all candidates; None if
    /// the walk does not reach it in `steps`.
    pub(super) fn locate(&self, plain: &[u8], pos: usize, target: usize, len: Option<usize>, steps: usize) -> Option<Ref> {
        let mut counted = Counted::new(plain, pos, len);
        let (mut rank, mut k, mut found) = (0u64, 0u64, None);
        self.walk(plain, pos, steps, |q| {
            let counts = counted.counts(plain, pos, q);
            if q == target {
                found = Some(if counts { Ref::Counted(k) } else { Ref::Rank(rank) });
                return false;
            }
            k += counts as u64;
            rank += 1;
            q > target
        });
        found
    }

    /// The candidate of `pos` that is the k-th that counts as `counted` says, with the
    /// length of its match when counting records found it (so it is not measured twice).
    pub(super) fn at_counted(&self, plain: &[u8], pos: usize, k: u64, mut counted: Counted) -> Option<(usize, Option<usize>)> {
        let (mut left, mut found) = (k, None);
        self.walk(plain, pos, RANK_STEPS, |q| {
            if counted.counts(plain, pos, q) {
                if left == 0 {
                    found = Some(q);
                    return false;
                }
                left -= 1;
            }
            true
        });
        let len = match counted {
            Counted::Records { best, .. } => Some(best),
            _ => None,
        };
        found.map(|q| (q, len))
    }

}

/// Where a stored match copies from.
pub(super) enum Ref {
    /// The k-th candidate that counts.
    Counted(u64),
    /// The k-th candidate.
    Rank(u64),
}

/// Which candidates a `Ref::Counted` counts, most recent first. For a match whose length is
/// implied: the *records*, candidates whose match is longer than every more recent one's
/// (zlib's search keeps the first of the longest, so its choice is always one and k is
/// small). For a match of stated length (optimal parsers such as zopfli shorten matches):
/// the candidates whose match reaches that length (they take the nearest).
pub(super) enum Counted {
    Records { best: usize, cap: usize },
    Reaching(usize),
    /// Every candidate (a `Ref::Rank`).
    All,
}

impl Counted {
    pub(super) fn new(plain: &[u8], pos: usize, len: Option<usize>) -> Counted {
        match len {
            Some(len) => Counted::Reaching(len),
            None => Counted::Records { best: 2, cap: (plain.len() - pos).min(258) },
        }
    }

    /// Whether candidate `q` of `pos` counts (a record raises the bar for the next).
    #[inline(always)]
    pub(super) fn counts(&mut self, plain: &[u8], pos: usize, q: usize) -> bool {
        match self {
            Counted::All => true,
            Counted::Reaching(len) => plain[q..q + *len] == plain[pos..pos + *len],
            Counted::Records { best, cap } => {
                if *best >= *cap || plain[q + *best] != plain[pos + *best] {
                    return false;
                }
                let e = extension(plain, pos, pos - q, *cap);
                let record = e > *best;
                if record {
                    *best = e;
                }
                record
            }
        }
    }
}

/// The source of the match at `pos` whose ref is `r` and length column `lc`, on a chain
/// holding every position before `pos`: its distance, and the match's length when the walk
/// measured it. The one resolution that reading and the proof at ingest share.
#[inline(always)]
pub(super) fn resolve(chain: &Chain, plain: &[u8], pos: usize, r: u64, lc: usize) -> Result<(usize, Option<usize>)> {
    let stated = (lc != 0).then_some(lc + 2);
    match r % 3 {
        0 => chain.at_counted(plain, pos, r / 3, Counted::new(plain, pos, stated)).map(|(q, m)| (pos - q, m)).ok_or(ParseError::Damaged("record beyond the chain")),
        1 => chain.at_counted(plain, pos, r / 3, Counted::All).map(|(q, _)| (pos - q, None)).ok_or(ParseError::Damaged("rank beyond the chain")),
        _ => Ok(((r / 3) as usize + 1, None)),
    }
}
