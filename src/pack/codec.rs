//! How a blob's stored bytes become the chunk's bytes: as they are, one zstd frame, a frame
//! compressed with a zstd dictionary (format 5), or a frame compressed against the bytes of
//! another chunk, its base (a delta, format 9). A blob of the last two names what it was
//! compressed with in its first stored bytes; the reader finds that chunk (`reader`) and
//! hands it here as `Against`. In a store of format 11 or 12 a header block's frame holds
//! the block packed (`packed_frame`, `format::warc::packed`).

use std::io;

use crate::digest::{ChunkKey, Digest};
use super::ChunkKind;

/// How a blob's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Codec {
    None = 0,
    Zstd = 1,
    /// zstd with a dictionary (format 5): the stored bytes are the dictionary's digest
    /// (`DICT_REF_LEN` bytes; the dictionary is a chunk of kind `Dict`) and the frame.
    ZstdDict = 2,
    /// zstd against a base chunk (format 9): the stored bytes are the base's key
    /// (`DELTA_REF_LEN` bytes: digest, then seq big-endian) and a frame compressed with the
    /// base's raw bytes as its (raw content) dictionary. A base is never itself a delta.
    ZstdDelta = 3,
}

/// Bytes of a `Codec::ZstdDict` blob that name its dictionary: the dictionary chunk's digest.
pub const DICT_REF_LEN: usize = 32;
/// Bytes of a `Codec::ZstdDelta` blob that name its base: the base chunk's key.
pub const DELTA_REF_LEN: usize = 36;
/// zstd reads a dictionary that begins with these bytes as a trained dictionary, not as raw
/// content: a chunk that begins with them is never a base.
pub const ZSTD_DICT_MAGIC: [u8; 4] = [0x37, 0xa4, 0x30, 0xec];

impl Codec {
    pub fn from_u8(v: u8) -> Option<Codec> {
        match v {
            0 => Some(Codec::None),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::ZstdDict),
            3 => Some(Codec::ZstdDelta),
            _ => None,
        }
    }
}

/// The dictionary a `Codec::ZstdDict` blob's stored bytes name.
pub fn dict_of(stored: &[u8]) -> Option<Digest> {
    stored.get(..DICT_REF_LEN).map(|d| d.try_into().expect("32 bytes"))
}

/// The base a `Codec::ZstdDelta` blob's stored bytes name.
pub fn base_of(stored: &[u8]) -> Option<ChunkKey> {
    stored.get(..DELTA_REF_LEN).and_then(ChunkKey::from_bytes)
}

/// Whether `raw` may be a delta's base (`ZSTD_DICT_MAGIC`; an empty chunk gives nothing).
pub fn may_be_base(raw: &[u8]) -> bool {
    !raw.is_empty() && !raw.starts_with(&ZSTD_DICT_MAGIC)
}

/// `data` compressed against `base` at `level`, as a `Codec::ZstdDelta` blob stores it (the
/// base's key, then the frame); None if zstd fails or `base` may not be one.
pub fn delta_compress(cctx: &mut zstd::zstd_safe::CCtx<'_>, base_key: &ChunkKey, base: &[u8], data: &[u8], level: i32) -> Option<Vec<u8>> {
    if !may_be_base(base) {
        return None;
    }
    let mut out = Vec::with_capacity(DELTA_REF_LEN + zstd::zstd_safe::compress_bound(data.len()));
    out.extend_from_slice(&base_key.to_bytes());
    let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    cctx.compress_using_dict(&mut frame, data, base, level).ok()?;
    out.extend_from_slice(&frame);
    Some(out)
}

/// A zstd dictionary ready to decode with.
pub type Dictionary = zstd::zstd_safe::DDict<'static>;

/// Prepares dictionary bytes for decoding; None if zstd cannot (damaged bytes).
pub fn prepare_dictionary(bytes: &[u8]) -> Option<Dictionary> {
    zstd::zstd_safe::DDict::try_create(bytes)
}

/// What a blob's frame is decoded with: nothing, the dictionary a `ZstdDict` blob names, or
/// the raw bytes of the base a `ZstdDelta` blob names.
#[derive(Clone, Copy)]
pub enum Against<'a> {
    Nothing,
    Dict(&'a Dictionary),
    Base(&'a [u8]),
}

/// No chunk holds more than this (the largest are 4 MiB payload pieces and recipe pieces):
/// a blob that says otherwise is damaged, and must not size an allocation.
pub const MAX_RAW: u32 = 256 << 20;

/// Whether a blob's zstd frame holds its chunk's bytes packed (`format::warc::packed`): a
/// header block's (kind `Literal`, codec `Zstd` or `ZstdDict`) in a store whose header
/// blocks are packed (format 11 and later, decided at open: `PackReader::packing_headers`).
/// A header block stored as it is (codec `None`) is never packed.
pub fn packed_frame(packed_headers: bool, kind: u8, codec: u8) -> bool {
    packed_headers && kind == ChunkKind::Literal as u8 && matches!(Codec::from_u8(codec), Some(Codec::Zstd | Codec::ZstdDict))
}

/// What a writer compresses for chunk bytes `raw` of `kind`: the bytes themselves, or a
/// header block's packed (`packed_frame`); None if packing would not give `raw` back (never
/// seen: the caller stores the block as it is, uncompressed, so a reader never unpacks it).
pub fn frame_of(packed_headers: bool, kind: ChunkKind, raw: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    if !packed_headers || kind != ChunkKind::Literal {
        return Some(std::borrow::Cow::Borrowed(raw));
    }
    let packed = crate::format::warc::packed::pack(raw);
    match crate::format::warc::packed::unpack(&packed, raw.len()) {
        Ok(back) if back == raw => Some(std::borrow::Cow::Owned(packed)),
        _ => {
            log::warn!("a header block of {} bytes does not pack and unpack to itself: stored as it is", raw.len());
            None
        }
    }
}

/// Decodes a blob of `kind` into its chunk's bytes, unpacking a packed frame
/// (`packed_frame`).
pub fn decode_chunk(packed_headers: bool, kind: u8, codec: u8, stored: &[u8], raw_len: u32, against: Against<'_>) -> io::Result<Vec<u8>> {
    if !packed_frame(packed_headers, kind, codec) {
        return decode_stored(codec, stored, raw_len, against);
    }
    if raw_len > MAX_RAW {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("says it holds {raw_len} bytes, beyond any chunk")));
    }
    // Packing escapes bytes below 8 with one more: a frame is at most twice the chunk.
    let frame = decode_frame(codec, stored, 2 * raw_len as usize, against)?;
    crate::format::warc::packed::unpack(&frame, raw_len as usize).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Decodes stored bytes into the chunk's bytes (a frame as it is: `decode_chunk` unpacks).
pub fn decode_stored(codec: u8, stored: &[u8], raw_len: u32, against: Against<'_>) -> io::Result<Vec<u8>> {
    if raw_len > MAX_RAW {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("says it holds {raw_len} bytes, beyond any chunk")));
    }
    let out = decode_frame(codec, stored, raw_len as usize, against)?;
    if out.len() != raw_len as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "decoded length mismatch"));
    }
    Ok(out)
}

/// The bytes a blob's stored bytes decode to, at most `cap` of them (more is an error).
fn decode_frame(codec: u8, stored: &[u8], cap: usize, against: Against<'_>) -> io::Result<Vec<u8>> {
    Ok(match Codec::from_u8(codec) {
        Some(Codec::None) => stored.to_vec(),
        Some(Codec::Zstd) => with_dctx(|d| d.decompress(stored, cap))?,
        Some(c @ (Codec::ZstdDict | Codec::ZstdDelta)) => {
            // Into spare capacity: no zeroing of what the frame overwrites anyway.
            let mut out = Vec::with_capacity(cap);
            decode_against(c, stored, &mut out, against)?;
            out
        }
        None => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown codec {codec}"))),
    })
}

/// Decodes stored bytes into `out`, which must be exactly their decoded length.
pub fn decode_stored_into(codec: u8, stored: &[u8], out: &mut [u8], against: Against<'_>) -> io::Result<()> {
    let n = match Codec::from_u8(codec) {
        Some(Codec::None) if stored.len() == out.len() => {
            out.copy_from_slice(stored);
            out.len()
        }
        Some(Codec::None) => stored.len(),
        Some(Codec::Zstd) => with_dctx(|d| d.decompress_to_buffer(stored, out))?,
        Some(c @ (Codec::ZstdDict | Codec::ZstdDelta)) => decode_against(c, stored, out, against)?,
        None => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown codec {codec}"))),
    };
    if n != out.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "decoded length mismatch"));
    }
    Ok(())
}

/// Runs `f` with this thread's zstd decompression context: one costs more to create than a
/// small chunk costs to decode.
fn with_dctx<T>(f: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> io::Result<T>) -> io::Result<T> {
    thread_local! {
        static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
    }
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        f(slot.as_mut().expect("just created"))
    })
}

/// Decodes a `ZstdDict` or `ZstdDelta` blob's frame into `out` with what it names; returns
/// the bytes written.
fn decode_against<C: zstd::zstd_safe::WriteBuf + ?Sized>(codec: Codec, stored: &[u8], out: &mut C, against: Against<'_>) -> io::Result<usize> {
    let zstd_err = |code| io::Error::other(zstd::zstd_safe::get_error_name(code));
    match (codec, against) {
        (Codec::ZstdDict, Against::Dict(dict)) => {
            let frame = stored.get(DICT_REF_LEN..).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "shorter than its dictionary's name"))?;
            with_dict_dctx(|d| d.decompress_using_ddict(out, frame, dict).map_err(zstd_err))
        }
        (Codec::ZstdDelta, Against::Base(base)) => {
            let frame = stored.get(DELTA_REF_LEN..).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "shorter than its base's name"))?;
            if !may_be_base(base) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "its base cannot be one"));
            }
            with_dict_dctx(|d| d.decompress_using_dict(out, frame, base).map_err(zstd_err))
        }
        (Codec::ZstdDict, _) => Err(io::Error::new(io::ErrorKind::InvalidData, "its zstd dictionary is not at hand")),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "its base is not at hand")),
    }
}

/// This thread's zstd context for frames decoded with a dictionary or a base (kept apart
/// from `with_dctx`'s, whose frames must never meet one). `decompress_using_dict` loads its
/// dictionary afresh for each frame, so no base outlives its call here.
fn with_dict_dctx<T>(f: impl FnOnce(&mut zstd::zstd_safe::DCtx<'static>) -> io::Result<T>) -> io::Result<T> {
    thread_local! {
        static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { std::cell::RefCell::new(None) };
    }
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        f(d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(n: u32) -> Vec<u8> {
        let mut p = Vec::new();
        for i in 0u64..400 {
            let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
            p.extend_from_slice(format!("<li><a href=\"/doc/{x:x}.html\">Section {} of the handbook</a></li>\n", x % 100_003).as_bytes());
            if i == 200 {
                p.extend_from_slice(format!("<p>Changed in version {n}</p>\n").as_bytes());
            }
        }
        p
    }

    #[test]
    fn a_delta_decodes_against_its_base_only() {
        let (base, data) = (page(1), page(2));
        let key = ChunkKey { digest: [5; 32], seq: 7 };
        let mut cctx = zstd::zstd_safe::CCtx::create();
        let stored = delta_compress(&mut cctx, &key, &base, &data, 9).unwrap();
        assert_eq!(base_of(&stored), Some(key));
        let alone = zstd::bulk::compress(&data, 9).unwrap();
        assert!(stored.len() * 10 < alone.len(), "a near copy costs a fraction: {} against {}", stored.len(), alone.len());
        let back = decode_stored(Codec::ZstdDelta as u8, &stored, data.len() as u32, Against::Base(&base)).unwrap();
        assert_eq!(back, data);
        let mut out = vec![0u8; data.len()];
        decode_stored_into(Codec::ZstdDelta as u8, &stored, &mut out, Against::Base(&base)).unwrap();
        assert_eq!(out, data);
        assert!(decode_stored(Codec::ZstdDelta as u8, &stored, data.len() as u32, Against::Nothing).is_err());
        // Another base gives an error or other bytes, never these silently: readers check the
        // length, and fsck and gc the digest.
        let other = page(3).into_iter().rev().collect::<Vec<u8>>();
        assert!(decode_stored(Codec::ZstdDelta as u8, &stored, data.len() as u32, Against::Base(&other)).map_or(true, |b| b != data));
    }

    #[test]
    fn a_chunk_that_reads_as_a_zstd_dictionary_is_no_base() {
        let mut base = ZSTD_DICT_MAGIC.to_vec();
        base.extend_from_slice(&page(1));
        let mut cctx = zstd::zstd_safe::CCtx::create();
        assert!(delta_compress(&mut cctx, &ChunkKey { digest: [1; 32], seq: 0 }, &base, &page(2), 9).is_none());
        assert!(delta_compress(&mut cctx, &ChunkKey { digest: [1; 32], seq: 0 }, b"", &page(2), 9).is_none());
    }
}
