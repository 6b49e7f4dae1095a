//! LEB128 varints (7 bits a byte, low first), the one encoding of every stored form under
//! `format` (a deflate parse's, packed header blocks').

/// Appends `v`.
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at `bytes[*i..]`, `*i` moved past it; None if it runs past the end or past
/// 64 bits.
pub(crate) fn get(bytes: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*i)?;
        *i += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}
