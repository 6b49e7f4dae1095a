//! zlib's hash chains, as the predicted form's loop walks them: the same 15-bit hash and
//! the same lists of earlier positions, each walk cut where zlib's would be, kept so that a
//! rebuild pays for no clearing and as little waiting on memory as a walk allows.
//!
//! A walk is most of a rebuild's time (8 links a search on the first crawl, each a
//! load that waits for the last). Tried and measured slower (`examples/predict_bench`):
//! `prev` as 16-bit distances (half the bytes: 96 against 99 MB/s of text), each slot holding
//! two links (100 against 110), and a ring of each hash's last 16 positions read at once
//! (98 against 112): what they save a walk, their inserts cost every position.

use super::{Result, MAX_DIST, WSIZE};
use crate::format::deflate::{extension, ParseError};

const HASH_BITS: u32 = 15;
/// How far down its chain a fixed match's source may be counted (`Src::Rank`); one further
/// down is stored as its distance.
const RANK_LIMIT: usize = 256;

/// The chains' tables, reused by each thread from one section to the next (a rebuild must
/// not pay to allocate and clear 32 Ki entries for every small member). Each section numbers
/// its positions on from where the previous one's numbers ended (`next`), so a slot an
/// earlier section filled holds a number at most the new section's `base`: no position, and
/// nothing to clear. `prev` slots are read only for positions the same section inserted.
pub(super) struct Tables {
    pub(super) head: Vec<u32>,
    prev: Vec<u32>,
    pub(super) next: u32,
}

thread_local! {
    pub(super) static TABLES: std::cell::RefCell<Tables> = const { std::cell::RefCell::new(Tables { head: Vec::new(), prev: Vec::new(), next: 0 }) };
}

const HSIZE: usize = 1 << HASH_BITS;
const HMASK: usize = HSIZE - 1;
const PMASK: usize = WSIZE - 1;

/// zlib's hash of a position's three bytes (`UPDATE_HASH` at memLevel 8).
#[inline(always)]
fn zlib_hash(w: &[u8]) -> usize {
    (((w[0] as usize) << 10) ^ ((w[1] as usize) << 5) ^ w[2] as usize) & HMASK
}

/// zlib's hash chains over the text from `origin` on. Position `p` is numbered `base + (p -
/// origin)`, so a section's chains (and so its stored form) follow from the text after
/// `origin` alone, wherever that text sits in its member. A number at most `base` is no
/// position, so `origin` itself is never a source: zlib's NIL is its position 0 too.
pub(super) struct Chains<'a> {
    text: &'a [u8],
    origin: usize,
    base: u32,
    /// Positions below this are in the chains; zlib inserts every position with two bytes
    /// after it, in order, so they are inserted ahead of the loop, `AHEAD` at a time.
    filled: usize,
    head: &'a mut [u32; HSIZE],
    prev: &'a mut [u32; WSIZE],
}

/// How far past the loop's position the chains are filled. A search walks back at most
/// `MAX_DIST`, and a position filled ahead takes the `prev` slot of the one `WSIZE` before
/// it: filling less than `WSIZE - MAX_DIST` ahead overwrites no slot a walk can read. Filled
/// in runs, the inserts keep no search waiting on their loads: crawl-1's parses decode at 128
/// MB/s of text against 122 inserting each step's position as the loop reaches it
/// (`examples/predict_bench`, medians of six alternating runs). Taking a search's links
/// first and testing their text after was slower (114).
const AHEAD: usize = 256;
const _: () = assert!(AHEAD < WSIZE - MAX_DIST);

impl<'a> Chains<'a> {
    pub(super) fn new(text: &'a [u8], origin: usize, t: &'a mut Tables) -> Result<Chains<'a>> {
        // Numbers up to `base + span` (a member's text is far below 2^31 bytes).
        let span = u32::try_from(text.len() - origin).ok().filter(|&s| s < 1 << 31).ok_or(ParseError::Unsupported("section too long"))?;
        if t.head.is_empty() {
            t.head = vec![0; HSIZE];
            t.prev = vec![0; WSIZE];
        }
        if t.next.checked_add(span).is_none_or(|e| e == u32::MAX) {
            t.head.fill(0);
            t.next = 0;
        }
        let base = t.next;
        t.next = base + span + 1;
        let head = (&mut t.head[..]).try_into().expect("HSIZE slots");
        let prev = (&mut t.prev[..]).try_into().expect("WSIZE slots");
        Ok(Chains { text, origin, base, filled: origin, head, prev })
    }

    #[inline(always)]
    fn number(&self, pos: usize) -> u32 {
        self.base + (pos - self.origin) as u32
    }

    /// The position a chain's number stands for, if any.
    #[inline(always)]
    fn position(&self, v: u32) -> Option<usize> {
        (v > self.base).then(|| self.at(v))
    }

    /// The position of a number that stands for one.
    #[inline(always)]
    fn at(&self, v: u32) -> usize {
        (v - self.base) as usize + self.origin
    }

    /// The least number a search from `pos` may walk to: numbers below it are no position,
    /// or lie `MAX_DIST` or more back.
    #[inline(always)]
    fn window_floor(&self, pos: usize) -> u32 {
        self.number(pos).saturating_sub(MAX_DIST as u32 - 1).max(self.base + 1)
    }

    /// The chain's head as zlib finds it at `pos` (which has two bytes after it): the
    /// nearest earlier position of the same hash, if any.
    #[inline(always)]
    pub(super) fn head_at(&mut self, pos: usize) -> Option<usize> {
        if pos >= self.filled {
            self.fill_to(pos + 1 + AHEAD);
        }
        self.position(self.prev[self.number(pos) as usize & PMASK])
    }

    /// Has every position below `to` (and below the text's last two) in the chains.
    #[inline]
    pub(super) fn fill_to(&mut self, to: usize) {
        let to = to.min(self.text.len().saturating_sub(2));
        let from = self.filled;
        if from >= to {
            return;
        }
        self.filled = to;
        let t = &self.text[from..to + 2];
        for (v, w) in (self.number(from)..).zip(t.windows(3)) {
            let h = zlib_hash(w);
            self.prev[v as usize & PMASK] = std::mem::replace(&mut self.head[h], v);
        }
    }

    /// zlib's `longest_match` from `cur`, walking at most `steps` links: the first longest
    /// match longer than `best` (and its start), or `best` and `start` as given.
    #[inline]
    pub(super) fn longest(&self, pos: usize, cur: usize, steps: usize, nice: usize, mut best: usize, mut start: usize) -> (usize, usize) {
        let t = self.text;
        let cap = 258.min(t.len() - pos);
        if best >= cap {
            return (cap, start);
        }
        let nice = nice.min(cap);
        let scan = &t[pos..pos + cap];
        let pair = |s: &[u8], i: usize| u16::from_le_bytes([s[i], s[i + 1]]);
        // zlib's test: a candidate can beat `best` (at least 2, below `cap`) only if it
        // agrees at `best - 1` and `best`, and (hash collisions aside) at its first two bytes.
        let first = pair(scan, 0);
        let mut last = pair(scan, best - 1);
        let mut left = steps;
        // The walk goes by the chains' numbers, so that each link costs one load: a number
        // below `lim` is no position or lies beyond the window.
        let lim = self.window_floor(pos);
        let mut cv = self.number(cur);
        loop {
            let cur = self.at(cv);
            let c = &t[cur..cur + cap];
            if pair(c, best - 1) == last && pair(c, 0) == first {
                let l = extension(t, pos, pos - cur, cap);
                if l > best {
                    best = l;
                    start = cur;
                    if l >= nice {
                        break;
                    }
                    last = pair(scan, best - 1);
                }
            }
            left -= 1;
            let next = self.prev[cv as usize & PMASK];
            if left == 0 || next < lim {
                break;
            }
            cv = next;
        }
        (best, start)
    }

    /// The positions down the chain from `head` (as `head_at(pos)` gives it) whose text
    /// reaches `len` bytes (at most what the text holds after `pos`), within `RANK_LIMIT`
    /// links and the window.
    fn reaching(&self, pos: usize, head: usize, len: usize) -> impl Iterator<Item = usize> + '_ {
        let lim = self.window_floor(pos);
        let mut cur = Some(self.number(head)).filter(|&v| v >= lim);
        let mut links = 0;
        std::iter::from_fn(move || {
            while let Some(cv) = cur {
                links += 1;
                let next = self.prev[cv as usize & PMASK];
                cur = (links < RANK_LIMIT && next >= lim).then_some(next);
                let c = self.at(cv);
                let t = self.text;
                // Its last byte first: most candidates fail there (len is at least 3).
                if t[c + len - 1] == t[pos + len - 1] && extension(t, pos, pos - c, len) == len {
                    return Some(c);
                }
            }
            None
        })
    }

    pub(super) fn rank_of(&self, pos: usize, head: usize, len: usize, target: usize) -> Option<u16> {
        self.reaching(pos, head, len).position(|q| q == target).and_then(|k| k.try_into().ok())
    }

    pub(super) fn nth_reaching(&self, pos: usize, head: usize, len: usize, k: u16) -> Option<usize> {
        self.reaching(pos, head, len).nth(k as usize)
    }
}
