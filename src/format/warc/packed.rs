//! Header bytes packed for compression (store format 11): record ids and digests as the
//! bytes they spell, and a digest of a block that follows in the same bytes as a mark.
//!
//! WARC headers are mostly repetition, which zstd takes well, and identifiers, which it
//! does not: a record id spells 16 random bytes in 36 characters, a SHA-1 digest 20 in 32
//! characters of base32, and zstd's literal coder, shared with the rest of the text, spends
//! well over 5 bits on each. A request record's block digest is no information at all: its
//! block (the HTTP request) follows in the same header bytes. Measured on the crawl
//! corpus's header blocks (53.6 MB, 64 KiB blocks, zstd level 9 with a dictionary): 5.89 MB
//! as they are, 4.91 MB with ids and digests as bytes, 4.09 MB with requests' block digests
//! derived as well.
//!
//! `pack` never fails: bytes it recognises nothing in come out escaped. `unpack` gives back
//! exactly the bytes `pack` was given (the writer checks it before it stores a packed
//! block), and refuses damaged input with an error, never a panic or more output than the
//! caller's bound.
//!
//! ```text
//! token:
//!   byte b >= 8                  the byte b
//!   0x00 b                       the byte b (< 8), escaped
//!   0x01 e [bytes]               a digest spelled in encoding e (below), its bytes
//!   0x02 [16]                    a record id: 36 characters of lowercase hex, 8-4-4-4-12
//!   0x03 e varint n              a digest in encoding e of the n bytes that follow the
//!                                first CR LF CR LF after it (a record's block)
//! encodings e: 0 base32 of 20 bytes (32 characters; SHA-1), 1 lowercase hex of 20 bytes
//!   (SHA-1), 2 base32 of 32 bytes (52 characters, no padding; SHA-256), 3 lowercase hex of
//!   32 bytes (SHA-256)
//! ```

use data_encoding::{BASE32_NOPAD, HEXLOWER};

use crate::format::varint;
use sha1::Digest as _;

const ESCAPE: u8 = 0;
const DIGEST: u8 = 1;
const UUID: u8 = 2;
const DERIVED: u8 = 3;
/// Bytes below this are tokens' first bytes, escaped where they stand for themselves.
const SPECIAL: u8 = 8;
/// The labels a digest follows (`sha1:`, `sha256:`), compared without case.
const SHA1: &[u8] = b"sha1:";
const SHA256: &[u8] = b"sha256:";
const UUID_LABEL: &[u8] = b"urn:uuid:";
const UUID_LEN: usize = 36;
/// A derived digest's record header and the CR LF CR LF that ends it lie within this many
/// bytes of the digest (a WARC header is a few hundred bytes): the searches stay short.
const NEAR: usize = 16 << 10;

/// A damaged packed form.
#[derive(Debug, thiserror::Error)]
#[error("packed header bytes are damaged: {0}")]
pub struct Damaged(&'static str);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Encoding {
    Base32Sha1,
    HexSha1,
    Base32Sha256,
    HexSha256,
}

impl Encoding {
    fn from_u8(v: u8) -> Option<Encoding> {
        [Encoding::Base32Sha1, Encoding::HexSha1, Encoding::Base32Sha256, Encoding::HexSha256].get(v as usize).copied()
    }

    fn bytes(self) -> usize {
        match self {
            Encoding::Base32Sha1 | Encoding::HexSha1 => 20,
            Encoding::Base32Sha256 | Encoding::HexSha256 => 32,
        }
    }

    fn chars(self) -> usize {
        match self {
            Encoding::Base32Sha1 => 32,
            Encoding::HexSha1 => 40,
            Encoding::Base32Sha256 => 52,
            Encoding::HexSha256 => 64,
        }
    }

    /// `bytes` spelled in this encoding, into `out` (no allocation: this is a read's path).
    fn spell_into(self, bytes: &[u8], out: &mut Vec<u8>) {
        let mut buf = [0u8; 64];
        let text = &mut buf[..self.chars()];
        match self {
            Encoding::Base32Sha1 | Encoding::Base32Sha256 => BASE32_NOPAD.encode_mut(bytes, text),
            Encoding::HexSha1 | Encoding::HexSha256 => HEXLOWER.encode_mut(bytes, text),
        }
        out.extend_from_slice(text);
    }

    fn spell(self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.chars());
        self.spell_into(bytes, &mut out);
        out
    }

    /// The bytes `text` spells in this encoding, if it is this encoding's canonical
    /// spelling of them (so that spelling them again gives `text`).
    fn read(self, text: &[u8]) -> Option<Vec<u8>> {
        let text = text.get(..self.chars())?;
        let bytes = match self {
            Encoding::Base32Sha1 | Encoding::Base32Sha256 => BASE32_NOPAD.decode(text).ok()?,
            Encoding::HexSha1 | Encoding::HexSha256 => HEXLOWER.decode(text).ok()?,
        };
        (bytes.len() == self.bytes() && self.spell(&bytes) == text).then_some(bytes)
    }

    fn hash(self, block: &[u8]) -> Vec<u8> {
        match self {
            Encoding::Base32Sha1 | Encoding::HexSha1 => sha1::Sha1::digest(block).to_vec(),
            Encoding::Base32Sha256 | Encoding::HexSha256 => sha2::Sha256::digest(block).to_vec(),
        }
    }
}

/// `raw` packed. Costs one pass over it and a hash of each block whose digest it derives.
pub fn pack(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    // `raw[..copied]` is in `out`; `i` is where the search for the next token goes on.
    let (mut copied, mut i) = (0, 0);
    // Derived blocks lie one after another, never overlapping (`unpack` checks it, so that
    // damaged bytes cannot make it hash more than the chunk).
    let mut derived_end = 0;
    // Header bytes seldom hold a byte below 8: then only colons need looking at, found by
    // memchr (a header line has one or more; only a few end a label).
    let plain = !raw.iter().any(|&b| b < SPECIAL);
    while i < raw.len() {
        let next = match plain {
            true => memchr::memchr(b':', &raw[i..]),
            false => raw[i..].iter().position(|&b| b < SPECIAL || b == b':'),
        };
        let Some(at) = next.map(|p| i + p) else { break };
        i = at + 1;
        if raw[at] < SPECIAL {
            out.extend_from_slice(&raw[copied..at]);
            out.extend_from_slice(&[ESCAPE, raw[at]]);
            copied = i;
            continue;
        }
        // Every label ends in `d:`, `1:` or `6:` (`uuid:`, `sha1:`, `sha256:`).
        if at == 0 || !matches!(raw[at - 1], b'd' | b'D' | b'1' | b'6') {
            continue;
        }
        let before = &raw[..i];
        if ends_with_ignore_case(before, UUID_LABEL) {
            if let Some(id) = uuid_at(&raw[i..]) {
                out.extend_from_slice(&raw[copied..i]);
                out.push(UUID);
                out.extend_from_slice(&id);
                i += UUID_LEN;
                copied = i;
            }
        } else if ends_with_ignore_case(before, SHA1) || ends_with_ignore_case(before, SHA256) {
            let sha1 = ends_with_ignore_case(before, SHA1);
            let tries = if sha1 { [Encoding::Base32Sha1, Encoding::HexSha1] } else { [Encoding::Base32Sha256, Encoding::HexSha256] };
            let Some((enc, bytes)) = tries.into_iter().find_map(|e| Some((e, e.read(&raw[i..])?)).filter(|_| !alnum_at(raw, i + e.chars()))) else { continue };
            out.extend_from_slice(&raw[copied..i]);
            let end = i + enc.chars();
            match derived_block(raw, end).filter(|&(start, n)| start >= derived_end && enc.hash(&raw[start..start + n]) == bytes) {
                Some((start, n)) => {
                    derived_end = start + n;
                    out.extend_from_slice(&[DERIVED, enc as u8]);
                    varint::put(&mut out, n as u64);
                }
                None => {
                    out.extend_from_slice(&[DIGEST, enc as u8]);
                    out.extend_from_slice(&bytes);
                }
            }
            i = end;
            copied = i;
        }
    }
    out.extend_from_slice(&raw[copied..]);
    out
}

/// The bytes `packed` stands for, which must be `raw_len` long.
pub fn unpack(packed: &[u8], raw_len: usize) -> Result<Vec<u8>, Damaged> {
    let mut out = Vec::with_capacity(raw_len);
    // Derived digests, filled in once the bytes after them are there: (where, encoding, n).
    let mut derived: Vec<(usize, Encoding, usize)> = Vec::new();
    let mut i = 0;
    let room = |out: &Vec<u8>, n: usize| if out.len() + n > raw_len { Err(Damaged("longer than its chunk")) } else { Ok(()) };
    while i < packed.len() {
        // Plain bytes up to the next token, at once.
        let run = packed[i..].iter().position(|&b| b < SPECIAL).unwrap_or(packed.len() - i);
        room(&out, run)?;
        out.extend_from_slice(&packed[i..i + run]);
        i += run;
        let Some(&token) = packed.get(i) else { break };
        i += 1;
        match token {
            ESCAPE => {
                let &b = packed.get(i).filter(|&&b| b < SPECIAL).ok_or(Damaged("an escape of a byte that needs none"))?;
                room(&out, 1)?;
                out.push(b);
                i += 1;
            }
            UUID => {
                let id = packed.get(i..i + 16).ok_or(Damaged("a record id cut short"))?;
                room(&out, UUID_LEN)?;
                spell_uuid(id, &mut out);
                i += 16;
            }
            DIGEST | DERIVED => {
                let enc = packed.get(i).and_then(|&e| Encoding::from_u8(e)).ok_or(Damaged("an unknown digest encoding"))?;
                i += 1;
                room(&out, enc.chars())?;
                if token == DIGEST {
                    let bytes = packed.get(i..i + enc.bytes()).ok_or(Damaged("a digest cut short"))?;
                    enc.spell_into(bytes, &mut out);
                    i += enc.bytes();
                } else {
                    let n = varint::get(packed, &mut i).filter(|&n| n <= raw_len as u64).ok_or(Damaged("a derived digest's length is damaged"))?;
                    derived.push((out.len(), enc, n as usize));
                    // A placeholder that is neither CR nor LF, so that the search for the
                    // block's start below cannot stop in it.
                    out.resize(out.len() + enc.chars(), b'0');
                }
            }
            _ => return Err(Damaged("an unknown token")),
        }
    }
    if out.len() != raw_len {
        return Err(Damaged("shorter than its chunk"));
    }
    // Where each derived digest's block lies, in order: one after another.
    let mut blocks = Vec::with_capacity(derived.len());
    let mut derived_end = 0;
    for &(at, enc, n) in &derived {
        let start = block_start(&out, at + enc.chars()).ok_or(Damaged("a derived digest with no block after it"))?;
        if start < derived_end || start + n > out.len() {
            return Err(Damaged("a derived digest's block overlaps another or runs past the chunk"));
        }
        derived_end = start + n;
        blocks.push(start);
    }
    // Last first: a block may hold a later derived digest, never an earlier one.
    for (&(at, enc, n), &start) in derived.iter().zip(&blocks).rev() {
        let spelled = enc.spell(&enc.hash(&out[start..start + n]));
        out[at..at + enc.chars()].copy_from_slice(&spelled);
    }
    Ok(out)
}

/// Where the block a digest ending at `end` may stand for lies: the bytes after the first
/// CR LF CR LF after it, as many as the record header's Content-Length says (the header being
/// the lines from the last `WARC/` line before `end`); None unless they all lie in `raw`,
/// followed by the record's end.
fn derived_block(raw: &[u8], end: usize) -> Option<(usize, usize)> {
    let start = block_start(raw, end)?;
    // The record header's first line: the last that begins with `WARC/`, line by line back.
    let near = end.saturating_sub(NEAR);
    let mut to = end;
    let header_start = loop {
        match raw[near..to].iter().rposition(|&b| b == b'\n') {
            Some(p) if raw[near + p + 1..].starts_with(b"WARC/") => break near + p + 1,
            Some(p) => to = near + p,
            None if near == 0 && raw.starts_with(b"WARC/") => break 0,
            None => return None,
        }
    };
    const LENGTH: &[u8] = b"content-length:";
    let line = raw[header_start..start].split(|&b| b == b'\n').find(|l| l.len() > LENGTH.len() && l[..LENGTH.len()].eq_ignore_ascii_case(LENGTH))?;
    let digits = line[LENGTH.len()..].iter().skip_while(|&&b| b == b' ' || b == b'\t').take_while(|b| b.is_ascii_digit()).take(12).fold(None, |n: Option<u64>, &d| Some(n.unwrap_or(0) * 10 + (d - b'0') as u64))?;
    let n = usize::try_from(digits).ok()?;
    // A block in these bytes is a whole record's: the record's end (CR LF CR LF) follows it.
    // A response's block is elsewhere (its payload), and what follows its length here is
    // the next record's header: no hash is spent on it.
    let end = start.checked_add(n)?;
    raw.get(end..end + 4).is_some_and(|t| t == b"\r\n\r\n").then_some((start, n))
}

/// Where the bytes after the first CR LF CR LF within `NEAR` bytes from `from` start.
fn block_start(text: &[u8], from: usize) -> Option<usize> {
    let near = &text[from..text.len().min(from + NEAR)];
    find(near, b"\r\n\r\n").map(|p| from + p + 4)
}

/// The 16 bytes a canonical lowercase UUID at the start of `text` spells.
fn uuid_at(text: &[u8]) -> Option<[u8; 16]> {
    let text = text.get(..UUID_LEN)?;
    let mut hex = [0u8; 32];
    let mut k = 0;
    for (j, &c) in text.iter().enumerate() {
        if matches!(j, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
        } else {
            if !matches!(c, b'0'..=b'9' | b'a'..=b'f') {
                return None;
            }
            hex[k] = c;
            k += 1;
        }
    }
    let mut id = [0u8; 16];
    HEXLOWER.decode_mut(&hex, &mut id).ok()?;
    Some(id)
}

fn spell_uuid(id: &[u8], out: &mut Vec<u8>) {
    let mut hex = [0u8; 32];
    HEXLOWER.encode_mut(id, &mut hex);
    for (k, (from, to)) in [(0, 8), (8, 12), (12, 16), (16, 20), (20, 32)].into_iter().enumerate() {
        if k > 0 {
            out.push(b'-');
        }
        out.extend_from_slice(&hex[from..to]);
    }
}

fn alnum_at(raw: &[u8], i: usize) -> bool {
    raw.get(i).is_some_and(|b| b.is_ascii_alphanumeric())
}

fn ends_with_ignore_case(text: &[u8], suffix: &[u8]) -> bool {
    text.len() >= suffix.len() && text[text.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests;
