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

/// Code lengths of a Huffman code over `freqs` as zlib's `build_tree` makes them (lengths
/// limited to `max_length` its way), and the largest symbol in use (`max_code`).
fn build_tree(freqs: &[u32], max_length: u16) -> (Vec<u16>, usize) {
    let elems = freqs.len();
    let mut freq = vec![0u32; HEAP_SIZE];
    freq[..elems].copy_from_slice(freqs);
    let mut len = vec![0u16; HEAP_SIZE];
    let mut dad = vec![0usize; HEAP_SIZE];
    let mut depth = vec![0u8; HEAP_SIZE];
    let mut heap = vec![0usize; HEAP_SIZE + 1];
    let mut heap_len = 0usize;
    let mut heap_max = HEAP_SIZE;
    let mut max_code: i64 = -1;
    for n in 0..elems {
        if freq[n] != 0 {
            heap_len += 1;
            heap[heap_len] = n;
            max_code = n as i64;
        }
    }
    // At least two codes, as zlib forces them (a code of one symbol would be incomplete).
    while heap_len < 2 {
        let node = if max_code < 2 {
            max_code += 1;
            max_code as usize
        } else {
            0
        };
        heap_len += 1;
        heap[heap_len] = node;
        freq[node] = 1;
        depth[node] = 0;
    }
    let max_code = max_code as usize;
    let smaller = |freq: &[u32], depth: &[u8], n: usize, m: usize| freq[n] < freq[m] || (freq[n] == freq[m] && depth[n] <= depth[m]);
    let down = |heap: &mut [usize], heap_len: usize, freq: &[u32], depth: &[u8], mut k: usize| {
        let v = heap[k];
        let mut j = k << 1;
        while j <= heap_len {
            if j < heap_len && smaller(freq, depth, heap[j + 1], heap[j]) {
                j += 1;
            }
            if smaller(freq, depth, v, heap[j]) {
                break;
            }
            heap[k] = heap[j];
            k = j;
            j <<= 1;
        }
        heap[k] = v;
    };
    for n in (1..=heap_len / 2).rev() {
        down(&mut heap, heap_len, &freq, &depth, n);
    }
    let mut node = elems;
    loop {
        let n = heap[1];
        heap[1] = heap[heap_len];
        heap_len -= 1;
        down(&mut heap, heap_len, &freq, &depth, 1);
        let m = heap[1];
        heap_max -= 1;
        heap[heap_max] = n;
        heap_max -= 1;
        heap[heap_max] = m;
        freq[node] = freq[n] + freq[m];
        depth[node] = depth[n].max(depth[m]) + 1;
        dad[n] = node;
        dad[m] = node;
        heap[1] = node;
        node += 1;
        down(&mut heap, heap_len, &freq, &depth, 1);
        if heap_len < 2 {
            break;
        }
    }
    heap_max -= 1;
    heap[heap_max] = heap[1];

    // gen_bitlen: lengths from the root down, then zlib's way of fixing overlong codes.
    let mut bl_count = [0u16; 16];
    len[heap[heap_max]] = 0;
    let mut overflow = 0i32;
    let mut h = heap_max + 1;
    while h < HEAP_SIZE {
        let n = heap[h];
        let mut bits = len[dad[n]] + 1;
        if bits > max_length {
            bits = max_length;
            overflow += 1;
        }
        len[n] = bits;
        h += 1;
        if n > max_code {
            continue;
        }
        bl_count[bits as usize] += 1;
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
        let mut h = HEAP_SIZE;
        for bits in (1..=max_length).rev() {
            let mut n = bl_count[bits as usize];
            while n != 0 {
                h -= 1;
                let m = heap[h];
                if m > max_code {
                    continue;
                }
                len[m] = bits;
                n -= 1;
            }
        }
    }
    // Symbols never in the heap (count 0, not forced) keep length 0.
    len.truncate(elems);
    (len, max_code)
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
    let codes = super::encoder(&bl8, BL_CODES);
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
