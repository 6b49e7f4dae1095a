//! Python's IDNA 2003 codec (`encodings.idna`: nameprep, then punycode), which surt uses for
//! non-ASCII hosts. Kept by hand: the `idna` crate implements UTS 46, whose mappings differ
//! from IDNA 2003's (and whose punycode module alone is not worth its Unicode tables). See the
//! simplifications in the parent module's docs.


pub(super) fn idna_encode(input: &str) -> Option<Vec<u8>> {
    if input.is_empty() {
        return Some(Vec::new());
    }
    if input.is_ascii() {
        let labels: Vec<&str> = input.split('.').collect();
        let (last, init) = labels.split_last().unwrap();
        if init.iter().any(|l| l.is_empty() || l.len() >= 64) || last.len() >= 64 {
            return None;
        }
        return Some(input.as_bytes().to_vec());
    }
    let mut labels: Vec<&str> = input
        .split(['.', '\u{3002}', '\u{ff0e}', '\u{ff61}'])
        .collect();
    let trailing = labels.last() == Some(&"");
    if trailing {
        labels.pop();
    }
    let mut out = Vec::new();
    for l in labels {
        if !out.is_empty() {
            out.push(b'.');
        }
        out.extend_from_slice(&idna_to_ascii(l)?);
    }
    if trailing {
        out.push(b'.');
    }
    Some(out)
}

pub(super) fn idna_to_ascii(label: &str) -> Option<Vec<u8>> {
    let ok = |b: Vec<u8>| (!b.is_empty() && b.len() < 64).then_some(b);
    if label.is_ascii() {
        return ok(label.as_bytes().to_vec());
    }
    let l = nameprep(label)?;
    if l.is_ascii() {
        return ok(l.into_bytes());
    }
    if l.starts_with("xn--") {
        return None;
    }
    let mut b = b"xn--".to_vec();
    b.extend_from_slice(punycode(&l).as_bytes());
    ok(b)
}

pub(super) fn nameprep(label: &str) -> Option<String> {
    let mut s = String::new();
    for c in label.chars() {
        let c = c as u32;
        // B.1: map to nothing
        if matches!(c, 0xad | 0x34f | 0x1806 | 0x180b..=0x180d | 0x200b..=0x200d | 0x2060 | 0xfe00..=0xfe0f | 0xfeff)
        {
            continue;
        }
        let ch = char::from_u32(c)?;
        // NFKC subset: fullwidth ASCII, ligatures
        match c {
            0xff01..=0xff5e => s.push(char::from_u32(c - 0xff01 + 0x21)?.to_ascii_lowercase()),
            0xfb00 => s.push_str("ff"),
            0xfb01 => s.push_str("fi"),
            0xfb02 => s.push_str("fl"),
            0xfb03 => s.push_str("ffi"),
            0xfb04 => s.push_str("ffl"),
            0xfb05 | 0xfb06 => s.push_str("st"),
            0xdf | 0x1e9e => s.push_str("ss"),
            0x3c2 => s.push('\u{3c3}'),
            _ => s.extend(ch.to_lowercase()),
        }
    }
    // prohibited (C.1.2, C.2.2, C.3 - C.9)
    for c in s.chars() {
        let c = c as u32;
        let bad = matches!(c,
            0xa0 | 0x1680 | 0x2000..=0x200b | 0x202f | 0x205f | 0x3000
            | 0x80..=0x9f | 0x6dd | 0x70f | 0x180e | 0x200c | 0x200d | 0x2028 | 0x2029
            | 0x2060..=0x2063 | 0x206a..=0x206f | 0xfeff | 0xfff9..=0xfffd | 0x1d173..=0x1d17a
            | 0xe000..=0xf8ff | 0xf0000..=0xffffd | 0x100000..=0x10fffd
            | 0xfdd0..=0xfdef | 0x2ff0..=0x2ffb | 0x340 | 0x341 | 0x200e | 0x200f | 0x202a..=0x202e
            | 0xe0001 | 0xe0020..=0xe007f)
            || (c & 0xfffe) == 0xfffe;
        if bad {
            return None;
        }
    }
    // bidi (RFC 3454 section 6): a label with RandALCat characters must not contain LCat
    // characters and must start and end with RandALCat.
    let cs: Vec<char> = s.chars().collect();
    if cs.iter().any(|&c| is_rand_al(c))
        && (cs.iter().any(|&c| is_l_cat(c)) || !is_rand_al(cs[0]) || !is_rand_al(cs[cs.len() - 1]))
    {
        return None;
    }
    Some(s)
}

/// RFC 3454 table D.1 (bidi R and AL in Unicode 3.2).
pub(super) fn is_rand_al(c: char) -> bool {
    matches!(c as u32,
        0x5be | 0x5c0 | 0x5c3 | 0x5d0..=0x5ea | 0x5f0..=0x5f4 | 0x61b | 0x61f | 0x621..=0x63a
        | 0x640..=0x64a | 0x66d..=0x66f | 0x671..=0x6d5 | 0x6dd | 0x6e5..=0x6e6 | 0x6fa..=0x6fe
        | 0x700..=0x70d | 0x710 | 0x712..=0x72c | 0x780..=0x7a5 | 0x7b1 | 0x200f | 0xfb1d
        | 0xfb1f..=0xfb28 | 0xfb2a..=0xfb36 | 0xfb38..=0xfb3c | 0xfb3e | 0xfb40..=0xfb41
        | 0xfb43..=0xfb44 | 0xfb46..=0xfbb1 | 0xfbd3..=0xfd3d | 0xfd50..=0xfd8f | 0xfd92..=0xfdc7
        | 0xfdf0..=0xfdfc | 0xfe70..=0xfe74 | 0xfe76..=0xfefc)
}

/// Approximation of RFC 3454 table D.2 (bidi L): alphabetic, not RandAL, not a combining mark.
pub(super) fn is_l_cat(c: char) -> bool {
    c.is_alphabetic()
        && !is_rand_al(c)
        && !matches!(c as u32,
            0x300..=0x36f | 0x483..=0x489 | 0x591..=0x5c7 | 0x610..=0x61a | 0x64b..=0x65f | 0x670
            | 0x6d6..=0x6ed | 0x711 | 0x730..=0x74a | 0x7a6..=0x7b0 | 0xfb1e | 0xfe20..=0xfe2f)
}

/// RFC 3492 punycode encoding (as Python's "punycode" codec).
pub(super) fn punycode(input: &str) -> String {
    const BASE: u32 = 36;
    const TMIN: u32 = 1;
    const TMAX: u32 = 26;
    const SKEW: u32 = 38;
    const DAMP: u32 = 700;
    fn adapt(mut delta: u32, numpoints: u32, first: bool) -> u32 {
        delta = if first { delta / DAMP } else { delta / 2 };
        delta += delta / numpoints;
        let mut k = 0;
        while delta > ((BASE - TMIN) * TMAX) / 2 {
            delta /= BASE - TMIN;
            k += BASE;
        }
        k + (BASE - TMIN + 1) * delta / (delta + SKEW)
    }
    fn digit(d: u32) -> char {
        (if d < 26 {
            b'a' + d as u8
        } else {
            b'0' + (d - 26) as u8
        }) as char
    }
    let cps: Vec<u32> = input.chars().map(|c| c as u32).collect();
    let mut out: String = input.chars().filter(char::is_ascii).collect();
    let b = out.len() as u32;
    let mut h = b;
    if b > 0 {
        out.push('-');
    }
    let (mut n, mut delta, mut bias) = (128u32, 0u32, 72u32);
    while (h as usize) < cps.len() {
        let m = *cps.iter().filter(|&&c| c >= n).min().unwrap();
        delta = delta.wrapping_add((m - n).wrapping_mul(h + 1));
        n = m;
        for &c in &cps {
            if c < n {
                delta = delta.wrapping_add(1);
            }
            if c == n {
                let mut q = delta;
                let mut k = BASE;
                loop {
                    let t = if k <= bias {
                        TMIN
                    } else if k >= bias + TMAX {
                        TMAX
                    } else {
                        k - bias
                    };
                    if q < t {
                        break;
                    }
                    out.push(digit(t + (q - t) % (BASE - t)));
                    q = (q - t) / (BASE - t);
                    k += BASE;
                }
                out.push(digit(q));
                bias = adapt(delta, h + 1, h == b);
                delta = 0;
                h += 1;
            }
        }
        delta += 1;
        n += 1;
    }
    out
}
