//! Similarity sketches: which stored page a new one resembles when its URL was never
//! captured before (a page moved to another URL, a translation, a sibling page).
//!
//! A page's text (its first `WINDOW` bytes) is cut into content-defined pieces (a gear hash,
//! about one cut in 128 bytes, so an insertion moves no cut but its own; the hash at a cut,
//! which the 64 bytes before it decide, is the piece's), and each of `SLOTS` slots keeps the
//! least of those hashes under its own mixing: a MinHash. Two pages
//! agree in a slot with about the probability that a piece of one is a piece of the other, so
//! a page that shares a slot with a stored one is worth a try: gc compresses it against that
//! page and keeps the delta only if it is much smaller (`super::make`).
//!
//! The values live in the index's hints (`capture`, `Index::similar`), so they must not
//! change between versions: the gear table, the seeds and the hashes below are part of the
//! format (docs/FORMAT.md). Measured on the gunzipped crawl corpus: about 380 more pages
//! stored against a relative (translations, and pages edited in the crawl that moved them),
//! the store 0.5 MB smaller net of what its notes take in the index; a sketch costs an
//! import about 1 % of its time.

/// Slots of a sketch.
pub(in crate::store) const SLOTS: usize = 4;
/// Bytes of a page that are sketched: its start says what it is.
const WINDOW: usize = 16 << 10;
/// Smaller pages are not worth a delta's extra read.
const MIN_LEN: usize = 1024;
/// Pieces shorter than this say little (whitespace, a closing tag) and are passed over.
const MIN_PIECE: usize = 16;
/// A sketch needs at least this many pieces.
const MIN_PIECES: usize = 4;

/// A page's sketch: per slot, the top 32 bits of the least mixed piece hash.
pub(in crate::store) type Sketch = [u32; SLOTS];

/// The sketch of a payload's first chunk, if it is text long enough to have one: binary
/// bytes (images, compressed bodies) have none.
pub(in crate::store) fn sketch(bytes: &[u8]) -> Option<Sketch> {
    let text = &bytes[..bytes.len().min(WINDOW)];
    if text.len() < MIN_LEN || !looks_like_text(&text[..text.len().min(4096)]) {
        return None;
    }
    let mut mins = [u64::MAX; SLOTS];
    let (mut h, mut start, mut pieces) = (0u64, 0usize, 0usize);
    for (i, &b) in text.iter().enumerate() {
        h = (h << 1).wrapping_add(GEAR[b as usize]);
        // A cut: the gear hash itself, which the last 64 bytes alone decide, is the piece's
        // hash (the text's only pass, and no second hash over every byte).
        if h >> 57 == 0 {
            if i + 1 - start >= MIN_PIECE {
                for (m, seed) in mins.iter_mut().zip(SEEDS) {
                    *m = (*m).min(mix(h ^ seed));
                }
                pieces += 1;
            }
            start = i + 1;
        }
    }
    (pieces >= MIN_PIECES).then(|| mins.map(|m| (m >> 32) as u32))
}

/// The index key of slot `slot`'s value `v` (`Index::similar`): the slot, then the value
/// big-endian.
pub(in crate::store) fn slot_key(slot: usize, v: u32) -> [u8; 5] {
    let b = v.to_be_bytes();
    [slot as u8, b[0], b[1], b[2], b[3]]
}

/// Control bytes other than tab, line feed, form feed and carriage return: at most one in 64.
fn looks_like_text(head: &[u8]) -> bool {
    head.iter().filter(|&&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | 0x0c | b'\r')).count() * 64 <= head.len()
}

/// splitmix64's finalizer.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const SEEDS: [u64; SLOTS] = [mix(1), mix(2), mix(3), mix(4)];

/// The gear hash's table: splitmix64 from 0x5eed.
const GEAR: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = mix(0x5eed_u64.wrapping_add((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    fn page(seed: u64, paragraphs: usize) -> Vec<u8> {
        let words = ["archive", "record", "payload", "digest", "crawl", "replay", "index", "member", "block", "header", "window", "store"];
        let mut out = b"<!DOCTYPE html><html><head><title>Docs</title></head><body>\n".to_vec();
        let mut x = seed;
        for p in 0..paragraphs {
            out.extend(format!("<p id=\"p{p}\">").into_bytes());
            for _ in 0..40 {
                x = mix(x);
                out.extend(words[(x % words.len() as u64) as usize].as_bytes());
                out.push(b' ');
            }
            out.extend(b"</p>\n");
        }
        out
    }

    #[test]
    fn a_page_and_its_edit_share_slots_and_strangers_do_not() {
        let a = page(1, 60);
        let mut edited = a.clone();
        let at = edited.len() / 2;
        edited.splice(at..at, b"<p class=\"news\">A paragraph inserted in the middle of the page.</p>\n".iter().copied());
        let (sa, se, so) = (sketch(&a).unwrap(), sketch(&edited).unwrap(), sketch(&page(2, 60)).unwrap());
        assert!(sa.iter().zip(&se).filter(|(x, y)| x == y).count() >= 3, "{sa:?} {se:?}");
        assert_eq!(sa.iter().zip(&so).filter(|(x, y)| x == y).count(), 0, "{sa:?} {so:?}");
    }

    #[test]
    fn binary_and_short_bytes_have_none() {
        let png: Vec<u8> = (0..8192u64).map(|i| (mix(i) >> 3) as u8).collect();
        assert_eq!(sketch(&png), None);
        assert_eq!(sketch(&page(1, 60)[..500]), None);
    }

    /// The values are in stores' indexes: they must never change.
    #[test]
    fn the_values_are_fixed() {
        assert_eq!(sketch(&page(7, 30)), Some(PINNED));
    }

    const PINNED: Sketch = [39_226_464, 4_540_813, 16_774_242, 89_365_030];
}
