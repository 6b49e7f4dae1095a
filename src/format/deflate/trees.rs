//! zlib's dynamic block headers, derived rather than stored.
//!
//! A dynamic block's header (its code lengths, run-length coded) is the largest part of a
//! small member's parse. zlib builds it deterministically from the block's symbol counts
//! (trees.c: `build_tree`, `gen_bitlen`, `scan_tree`, `send_tree`), so for members zlib
//! wrote, the header need not be stored: ingest derives it the same way and, only where the
//! result equals the recorded bits, stores a flag instead. A writer that builds its trees
//! otherwise keeps its header bits; nothing here can make a member rebuild wrong.
//!
//! This is our own code for zlib's rules (the rules, not the code, carry over).

const L_CODES: usize = 286;
const D_CODES: usize = 30;
const BL_CODES: usize = 19;
const HEAP_SIZE: usize = 2 * L_CODES + 1;
const BL_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

/// zlib's heap of tree nodes (trees.c `pqdownheap`): least frequent first, ties to the
/// shallower subtree, so a node's order is that of `freq << 8 | depth` (depth < 256). Each
/// entry carries its key above the node number (`key << 16 | node`), so a comparison reads
/// the heap alone; only the key decides, as zlib's `smaller` does. Fixed arrays, so building
/// a block's trees allocates nothing.
struct Heap {
    /// heap[len + 1] always holds SENTINEL, so `down` compares both children without a test.
    heap: [u64; HEAP_SIZE + 2],
    len: usize,
}

/// The entry that never wins.
const SENTINEL: u64 = u64::MAX;

#[inline]
fn entry(key: u64, node: usize) -> u64 {
    key << 16 | node as u64
}

#[inline]
fn node_of(e: u64) -> usize {
    (e & 0xffff) as usize
}

impl Heap {
    #[inline]
    fn down(&mut self, mut k: usize) {
        let v = self.heap[k];
        let kv = v >> 16;
        let mut j = k << 1;
        while j <= self.len {
            j += (self.heap[j + 1] >> 16 <= self.heap[j] >> 16) as usize;
            let hj = self.heap[j];
            if kv <= hj >> 16 {
                break;
            }
            self.heap[k] = hj;
            k = j;
            j <<= 1;
        }
        self.heap[k] = v;
    }
}

/// Code lengths of a Huffman code over `freqs` as zlib's `build_tree` makes them (lengths
/// limited to `max_length` its way), and the largest symbol in use (`max_code`).
fn build_tree(freqs: &[u32], max_length: u16) -> (Vec<u16>, usize) {
    let elems = freqs.len();
    let mut h = Heap { heap: [SENTINEL; HEAP_SIZE + 2], len: 0 };
    let mut dad = [0u16; HEAP_SIZE];
    let mut heap_max = HEAP_SIZE;
    let mut max_code: i64 = -1;
    // Depths start at 0: a leaf's key is its count.
    for (n, &f) in freqs.iter().enumerate() {
        if f != 0 {
            h.len += 1;
            h.heap[h.len] = entry((f as u64) << 8, n);
            max_code = n as i64;
        }
    }
    // At least two codes, as zlib forces them (a code of one symbol would be incomplete).
    while h.len < 2 {
        let node = if max_code < 2 {
            max_code += 1;
            max_code as usize
        } else {
            0
        };
        h.len += 1;
        h.heap[h.len] = entry(1 << 8, node);
    }
    let max_code = max_code as usize;
    for n in (1..=h.len / 2).rev() {
        h.down(n);
    }
    let mut node = elems;
    loop {
        let n = h.heap[1];
        h.heap[1] = h.heap[h.len];
        h.heap[h.len] = SENTINEL;
        h.len -= 1;
        h.down(1);
        let m = h.heap[1];
        heap_max -= 1;
        h.heap[heap_max] = n;
        heap_max -= 1;
        h.heap[heap_max] = m;
        let (kn, km) = (n >> 16, m >> 16);
        let freq = (kn >> 8) + (km >> 8);
        // zlib keeps depths in a byte (they never come near 255 for 32-bit counts).
        let depth = ((kn & 0xff).max(km & 0xff) + 1) & 0xff;
        dad[node_of(n)] = node as u16;
        dad[node_of(m)] = node as u16;
        h.heap[1] = entry(freq << 8 | depth, node);
        node += 1;
        h.down(1);
        if h.len < 2 {
            break;
        }
    }
    heap_max -= 1;
    h.heap[heap_max] = h.heap[1];

    // gen_bitlen: lengths from the root down, then zlib's way of fixing overlong codes.
    let heap = &h.heap;
    let mut len = [0u16; HEAP_SIZE];
    let mut bl_count = [0u16; 16];
    let mut overflow = 0i32;
    for &e in &heap[heap_max + 1..HEAP_SIZE] {
        let n = node_of(e);
        let mut bits = len[dad[n] as usize] + 1;
        if bits > max_length {
            bits = max_length;
            overflow += 1;
        }
        len[n] = bits;
        if n <= max_code {
            bl_count[bits as usize] += 1;
        }
    }
    if overflow > 0 {
        loop {
            let mut bits = max_length as usize - 1;
            while bl_count[bits] == 0 {
                bits -= 1;
            }
            bl_count[bits] -= 1;
            bl_count[bits + 1] += 2;
            bl_count[max_length as usize] -= 1;
            overflow -= 2;
            if overflow <= 0 {
                break;
            }
        }
        let mut k = HEAP_SIZE;
        for bits in (1..=max_length).rev() {
            let mut n = bl_count[bits as usize];
            while n != 0 {
                k -= 1;
                let m = node_of(heap[k]);
                if m > max_code {
                    continue;
                }
                len[m] = bits;
                n -= 1;
            }
        }
    }
    // Symbols never in the heap (count 0, not forced) keep length 0.
    (len[..elems].to_vec(), max_code)
}

/// Walks `lens[..=max_code]` as zlib's `scan_tree`/`send_tree` do, handing each emitted
/// code-length symbol (0-15, or 16/17/18 with its repeat count) to `f`.
fn runs(lens: &[u16], max_code: usize, mut f: impl FnMut(usize, u32)) {
    let at = |n: usize| if n <= max_code { lens[n] as i32 } else { 0xffff };
    let mut prevlen: i32 = -1;
    let mut nextlen = at(0);
    let mut count = 0u32;
    let (mut max_count, mut min_count) = if nextlen == 0 { (138, 3) } else { (7, 4) };
    for n in 0..=max_code {
        let curlen = nextlen;
        nextlen = at(n + 1);
        count += 1;
        if count < max_count && curlen == nextlen {
            continue;
        } else if count < min_count {
            for _ in 0..count {
                f(curlen as usize, 0);
            }
        } else if curlen != 0 {
            if curlen != prevlen {
                f(curlen as usize, 0);
                count -= 1;
            }
            f(16, count);
        } else if count <= 10 {
            f(17, count);
        } else {
            f(18, count);
        }
        count = 0;
        prevlen = curlen;
        (max_count, min_count) = if nextlen == 0 {
            (138, 3)
        } else if curlen == nextlen {
            (6, 3)
        } else {
            (7, 4)
        };
    }
}

/// The header bits (after BTYPE) zlib writes for a dynamic block whose literal/length and
/// distance symbols occur `lit` and `dist` times (end-of-block included), LSB first.
pub fn zlib_header(lit: &[u32; L_CODES], dist: &[u32; D_CODES]) -> (Vec<u8>, u32) {
    let (ll, lmax) = build_tree(lit, 15);
    let (dl, dmax) = build_tree(dist, 15);
    let mut bl_freq = [0u32; BL_CODES];
    for (lens, max) in [(&ll, lmax), (&dl, dmax)] {
        runs(lens, max, |sym, _| bl_freq[sym] += 1);
    }
    let (bl, _) = build_tree(&bl_freq, 7);
    let mut max_blindex = BL_CODES - 1;
    while max_blindex >= 3 && bl[BL_ORDER[max_blindex]] == 0 {
        max_blindex -= 1;
    }
    let bl8: Vec<u8> = bl.iter().map(|&l| l as u8).collect();
    let codes = super::encoder::<BL_CODES>(&bl8);
    let mut out = Vec::with_capacity(128);
    let mut w = super::BitWriter { out: &mut out, buf: 0, n: 0 };
    let mut bits = 0u32;
    let mut put = |w: &mut super::BitWriter, v: u32, n: u32| {
        w.put(v, n);
        bits += n;
    };
    put(&mut w, (lmax + 1 - 257) as u32, 5);
    put(&mut w, dmax as u32, 5);
    put(&mut w, (max_blindex + 1 - 4) as u32, 4);
    for &i in &BL_ORDER[..=max_blindex] {
        put(&mut w, bl[i] as u32, 3);
    }
    for (lens, max) in [(&ll, lmax), (&dl, dmax)] {
        runs(lens, max, |sym, count| {
            let (c, l) = codes[sym];
            put(&mut w, c as u32, l as u32);
            match sym {
                16 => put(&mut w, count - 3, 2),
                17 => put(&mut w, count - 3, 3),
                18 => put(&mut w, count - 11, 7),
                _ => {}
            }
        });
    }
    w.pad_to_byte(0);
    (out, bits)
}
