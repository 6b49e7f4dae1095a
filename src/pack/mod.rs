//! Pack files: the chunk store's bytes on disk.
//!
//! A pack is an append-only file of self-describing blobs followed, once sealed, by a footer
//! that lists them, so the index can be rebuilt from the packs alone and a scanner can
//! resynchronise after damage. The open pack lives in `packs-tmp/`; sealing writes the footer,
//! syncs, and renames it into `packs/`, after which it never changes (rsync-friendly).
//!
//! Blob: magic `WFB1`, codec, kind, settled level, store format, digest (32), seq, raw_len, stored_len,
//! crc32 of the stored bytes, crc32 of the header so far (all little-endian), stored bytes.
//! Footer: magic `WFPF`, count, one 54-byte entry per blob, crc32 of the entries, the
//! footer's total length (u64) and the end magic `WFPKEND1`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::digest::{ChunkKey, Digest};

pub const BLOB_MAGIC: &[u8; 4] = b"WFB1";
pub const FOOTER_MAGIC: &[u8; 4] = b"WFPF";
pub const END_MAGIC: &[u8; 8] = b"WFPKEND1";
pub const BLOB_HEADER_LEN: usize = 60;
/// Where the blob header's fields are (the layout above): the codec and kind bytes, the
/// raw and stored lengths (u32, little-endian).
pub const BLOB_CODEC_AT: usize = 4;
pub const BLOB_KIND_AT: usize = 5;
pub const BLOB_RAW_LEN_AT: usize = 44;
pub const BLOB_STORED_LEN_AT: usize = 48;
/// The header byte naming the zstd level gc settled the blob at (`store::settle`); 0 for a
/// blob as ingest wrote it. Readers need not know it: it says only whether gc is done with
/// the blob's pack.
const SETTLED_BYTE: usize = 6;
/// The header byte naming the store format version the blob was written for (0 in blobs
/// written before 2026-11-27, when it was a pad byte). Readers need not know it either: it is
/// there so that `repair` can give a store whose settings file is lost its own version back.
const FORMAT_BYTE: usize = 7;
pub const FOOTER_ENTRY_LEN: usize = 54;
const FOOTER_TAIL_LEN: usize = 4 + 8 + 8;
/// The largest footer read: 4.9 million blobs (a 32 MiB pack of empty blobs holds 0.5 million).
const MAX_FOOTER: u64 = 256 << 20;
/// A footer's bytes besides its entries (magic, count; checksum, length, end magic).
pub const FOOTER_FIXED_LEN: usize = 8 + FOOTER_TAIL_LEN;

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("pack {pack:016x}: {source}")]
    Io { pack: u64, source: io::Error },
    #[error("pack {pack:016x} offset {offset}: {what}")]
    Corrupt { pack: u64, offset: u64, what: String },
    #[error("pack {0:016x} is missing")]
    Missing(u64),
}

type Result<T> = std::result::Result<T, PackError>;

/// What a chunk holds; recorded so `stats` and an index rebuild know payloads from headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkKind {
    /// Bytes that did not parse as records (or raw gzip members): content-defined chunks.
    Raw = 0,
    /// A block of WARC/HTTP header bytes of one file, sliced by the recipe.
    Literal = 1,
    /// A later piece of a payload cut by FastCDC.
    Payload = 2,
    /// The first (often only) chunk of a payload.
    PayloadHead = 3,
    /// The shareable tail of a gzip member's deflate parse (`format::deflate`).
    Parse = 4,
    /// One piece of a file's recipe (`recipe::Piece`): the index keeps only its key.
    Recipe = 5,
    /// One record of the metadata log: the changes of one index batch (`store::journal`).
    Meta = 6,
    /// A zstd dictionary that `Codec::ZstdDict` chunks name (format 5): referenced by no
    /// recipe, live for good (refcount 1), like a log record.
    Dict = 7,
}

impl ChunkKind {
    pub fn from_u8(v: u8) -> ChunkKind {
        match v {
            1 => ChunkKind::Literal,
            2 => ChunkKind::Payload,
            3 => ChunkKind::PayloadHead,
            4 => ChunkKind::Parse,
            5 => ChunkKind::Recipe,
            6 => ChunkKind::Meta,
            7 => ChunkKind::Dict,
            _ => ChunkKind::Raw,
        }
    }
}

/// One blob as described by its header (or a footer entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobInfo {
    pub offset: u64,
    pub key: ChunkKey,
    pub codec: u8,
    pub kind: u8,
    pub raw_len: u32,
    pub stored_len: u32,
}

impl BlobInfo {
    pub fn total_len(&self) -> u64 {
        BLOB_HEADER_LEN as u64 + self.stored_len as u64
    }
}

pub fn pack_name(id: u64) -> String {
    format!("{id:016x}.pack")
}

pub fn parse_pack_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".pack")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn encode_header(info: &BlobInfo, crc: u32, settled: u8, format: u8) -> [u8; BLOB_HEADER_LEN] {
    let mut h = [0u8; BLOB_HEADER_LEN];
    h[0..4].copy_from_slice(BLOB_MAGIC);
    h[BLOB_CODEC_AT] = info.codec;
    h[BLOB_KIND_AT] = info.kind;
    h[SETTLED_BYTE] = settled;
    h[FORMAT_BYTE] = format;
    h[8..40].copy_from_slice(&info.key.digest);
    h[40..44].copy_from_slice(&info.key.seq.to_le_bytes());
    h[BLOB_RAW_LEN_AT..BLOB_RAW_LEN_AT + 4].copy_from_slice(&info.raw_len.to_le_bytes());
    h[BLOB_STORED_LEN_AT..BLOB_STORED_LEN_AT + 4].copy_from_slice(&info.stored_len.to_le_bytes());
    h[52..56].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32fast::hash(&h[..56]);
    h[56..60].copy_from_slice(&hcrc.to_le_bytes());
    h
}

/// Parses a blob header; None if it is not a well-formed one.
fn decode_header(h: &[u8], offset: u64) -> Option<(BlobInfo, u32)> {
    if h.len() < BLOB_HEADER_LEN || &h[0..4] != BLOB_MAGIC {
        return None;
    }
    let u32at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
    if crc32fast::hash(&h[..56]) != u32at(56) {
        return None;
    }
    let mut digest: Digest = [0; 32];
    digest.copy_from_slice(&h[8..40]);
    let info = BlobInfo {
        offset,
        key: ChunkKey { digest, seq: u32at(40) },
        codec: h[BLOB_CODEC_AT],
        kind: h[BLOB_KIND_AT],
        raw_len: u32at(BLOB_RAW_LEN_AT),
        stored_len: u32at(BLOB_STORED_LEN_AT),
    };
    Some((info, u32at(52)))
}

/// The level a well-formed blob header says gc settled its blob at (0: as ingest wrote it);
/// None if `h` is not a blob header.
pub fn settled_level(h: &[u8]) -> Option<u8> {
    decode_header(h, 0).map(|_| h[SETTLED_BYTE])
}

/// The store format version a well-formed blob header says its blob was written for (0:
/// written before blobs said); None if `h` is not a blob header.
pub fn written_for(h: &[u8]) -> Option<u8> {
    decode_header(h, 0).map(|_| h[FORMAT_BYTE])
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    crate::disk::sync_dir(dir)
}

/// The pack currently being appended to.
pub struct OpenPack {
    pub id: u64,
    file: File,
    path: PathBuf,
    len: u64,
    synced_len: u64,
    /// Bytes whose write-out to disk has been started (`append`).
    written_back: u64,
    blobs: Vec<BlobInfo>,
    /// The store format version its blobs are written for (`FORMAT_BYTE`).
    format: u8,
}

/// An open pack asks the kernel to start writing its bytes out every this many bytes, so
/// that the sync at a commit finds little left to write: the ingest's CPUs are otherwise
/// idle while it waits (the corpus's import spent 0.18 s in syncs before).
const WRITE_BACK_EVERY: u64 = 4 << 20;

impl OpenPack {
    /// A new pack `id` in `tmp_dir`, whose blobs say they were written for store format
    /// version `format`.
    pub fn create(tmp_dir: &Path, id: u64, format: u32) -> io::Result<OpenPack> {
        let format = u8::try_from(format).map_err(|_| io::Error::other(format!("store format {format} does not fit a blob header")))?;
        let path = tmp_dir.join(pack_name(id));
        let file = crate::disk::create_new(&path)?;
        sync_dir(tmp_dir)?;
        Ok(OpenPack { id, file, path, len: 0, synced_len: 0, written_back: 0, blobs: Vec::new(), format })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Appends one blob and returns its offset. Not durable until `sync`.
    pub fn append(&mut self, key: ChunkKey, kind: ChunkKind, codec: Codec, raw_len: u32, stored: &[u8]) -> io::Result<BlobInfo> {
        self.append_settled(key, kind, codec, raw_len, stored, 0)
    }

    /// `append` for gc: the header records that the blob was settled at zstd level `settled`.
    pub fn append_settled(&mut self, key: ChunkKey, kind: ChunkKind, codec: Codec, raw_len: u32, stored: &[u8], settled: u8) -> io::Result<BlobInfo> {
        let info = BlobInfo {
            offset: self.len,
            key,
            codec: codec as u8,
            kind: kind as u8,
            raw_len,
            stored_len: stored.len() as u32,
        };
        let header = encode_header(&info, crc32fast::hash(stored), settled, self.format);
        // One positioned write per blob keeps the file's tail either whole or torn at the
        // end, which recovery truncates.
        let mut buf = Vec::with_capacity(BLOB_HEADER_LEN + stored.len());
        buf.extend_from_slice(&header);
        buf.extend_from_slice(stored);
        crate::disk::write_at(&self.file, &buf, self.len)?;
        crate::failpoint::crash_at("pack_appended");
        self.len += buf.len() as u64;
        self.blobs.push(info.clone());
        if self.len - self.written_back >= WRITE_BACK_EVERY {
            // Advice only: what makes the bytes durable is the sync of the commit or seal.
            // SAFETY: a plain syscall on a descriptor this pack owns.
            unsafe {
                libc::sync_file_range(self.file.as_raw_fd(), self.written_back as i64, (self.len - self.written_back) as i64, libc::SYNC_FILE_RANGE_WRITE);
            }
            self.written_back = self.len;
        }
        Ok(info)
    }

    /// After a failed `append`: cuts off what it may have written past the last whole blob
    /// (best effort: the next append overwrites it anyway, and recovery would cut it off).
    pub fn discard_tail(&mut self) {
        let _ = crate::disk::set_len(&self.file, self.len);
    }

    /// Makes every appended blob durable; the index may point at them afterwards.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.synced_len != self.len {
            crate::disk::sync_data(&self.file)?;
            self.synced_len = self.len;
        }
        Ok(())
    }

    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Writes the footer, syncs, and moves the pack into `packs/`. Returns the sealed path.
    pub fn seal(mut self, packs_dir: &Path) -> io::Result<PathBuf> {
        let footer = encode_footer(&self.blobs);
        crate::disk::write_at(&self.file, &footer, self.len)?;
        self.len += footer.len() as u64;
        crate::disk::set_len(&self.file, self.len)?;
        crate::disk::sync_all(&self.file)?;
        crate::failpoint::crash_at("pack_footer_synced");
        let dest = packs_dir.join(pack_name(self.id));
        crate::disk::rename(&self.path, &dest)?;
        crate::failpoint::crash_at("pack_renamed");
        sync_dir(packs_dir)?;
        if let Some(tmp) = self.path.parent() {
            sync_dir(tmp)?;
        }
        Ok(dest)
    }
}

fn encode_footer(blobs: &[BlobInfo]) -> Vec<u8> {
    let mut entries = Vec::with_capacity(blobs.len() * FOOTER_ENTRY_LEN);
    for b in blobs {
        entries.extend_from_slice(&b.offset.to_le_bytes());
        entries.extend_from_slice(&b.key.digest);
        entries.extend_from_slice(&b.key.seq.to_le_bytes());
        entries.extend_from_slice(&b.raw_len.to_le_bytes());
        entries.extend_from_slice(&b.stored_len.to_le_bytes());
        entries.push(b.codec);
        entries.push(b.kind);
    }
    let mut f = Vec::with_capacity(8 + entries.len() + FOOTER_TAIL_LEN);
    f.extend_from_slice(FOOTER_MAGIC);
    f.extend_from_slice(&(blobs.len() as u32).to_le_bytes());
    f.extend_from_slice(&entries);
    f.extend_from_slice(&crc32fast::hash(&entries).to_le_bytes());
    let total = (f.len() + 8 + 8) as u64;
    f.extend_from_slice(&total.to_le_bytes());
    f.extend_from_slice(END_MAGIC);
    f
}

/// Reads the footer of a sealed pack.
pub fn read_footer(file: &File, pack: u64) -> Result<Vec<BlobInfo>> {
    let size = file.metadata().map_err(|source| PackError::Io { pack, source })?.len();
    read_footer_with(size, pack, |buf, off| file.read_exact_at(buf, off))
}

/// Reads the footer of a sealed pack of `size` bytes through `read_at` (a local file, or a
/// cache of an object-store pack).
pub fn read_footer_with(size: u64, pack: u64, read_at: impl Fn(&mut [u8], u64) -> io::Result<()>) -> Result<Vec<BlobInfo>> {
    let io_err = |source| PackError::Io { pack, source };
    let corrupt = |what: &str| PackError::Corrupt { pack, offset: size, what: what.to_string() };
    if size < 8 + FOOTER_TAIL_LEN as u64 {
        return Err(corrupt("too short for a footer"));
    }
    let mut tail = [0u8; 16];
    read_at(&mut tail, size - 16).map_err(io_err)?;
    if &tail[8..] != END_MAGIC {
        return Err(corrupt("no footer end magic"));
    }
    let flen = u64::from_le_bytes(tail[..8].try_into().unwrap());
    // Bounded before it sizes the buffer: a footer lists at most a pack's blobs, and no pack
    // holds more than MAX_FOOTER of entries (a pack object of any size may be damaged).
    if flen > size || flen > MAX_FOOTER || flen < (8 + FOOTER_TAIL_LEN) as u64 {
        return Err(corrupt("bad footer length"));
    }
    let mut f = vec![0u8; flen as usize];
    read_at(&mut f, size - flen).map_err(io_err)?;
    if &f[..4] != FOOTER_MAGIC {
        return Err(corrupt("no footer magic"));
    }
    let count = u32::from_le_bytes(f[4..8].try_into().unwrap()) as usize;
    let entries = &f[8..f.len() - FOOTER_TAIL_LEN];
    if entries.len() != count * FOOTER_ENTRY_LEN {
        return Err(corrupt("footer entry count disagrees with its length"));
    }
    let crc = u32::from_le_bytes(f[f.len() - FOOTER_TAIL_LEN..f.len() - 16].try_into().unwrap());
    if crc32fast::hash(entries) != crc {
        return Err(corrupt("footer checksum mismatch"));
    }
    let mut out = Vec::with_capacity(count);
    for e in entries.chunks_exact(FOOTER_ENTRY_LEN) {
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&e[8..40]);
        out.push(BlobInfo {
            offset: u64::from_le_bytes(e[0..8].try_into().unwrap()),
            key: ChunkKey { digest, seq: u32::from_le_bytes(e[40..44].try_into().unwrap()) },
            raw_len: u32::from_le_bytes(e[44..48].try_into().unwrap()),
            stored_len: u32::from_le_bytes(e[48..52].try_into().unwrap()),
            codec: e[52],
            kind: e[53],
        });
    }
    Ok(out)
}

/// Walks blobs from the start of a pack, stopping at the first one that does not check out
/// (a torn tail, or the footer). Returns the blobs and the offset where valid data ends.
pub fn scan(file: &File) -> io::Result<(Vec<BlobInfo>, u64)> {
    let size = file.metadata()?.len();
    let mut off = 0u64;
    let mut out = Vec::new();
    let mut header = [0u8; BLOB_HEADER_LEN];
    while off + BLOB_HEADER_LEN as u64 <= size {
        file.read_exact_at(&mut header, off)?;
        let Some((info, crc)) = decode_header(&header, off) else { break };
        let end = off + info.total_len();
        if end > size {
            break;
        }
        let mut stored = vec![0u8; info.stored_len as usize];
        file.read_exact_at(&mut stored, off + BLOB_HEADER_LEN as u64)?;
        if crc32fast::hash(&stored) != crc {
            break;
        }
        out.push(info);
        off = end;
    }
    Ok((out, off))
}

/// Turns a leftover open pack (from a crash) into a sealed one holding its whole blobs.
/// Returns how many blobs it kept, or None if it held none and was removed.
pub fn recover_open_pack(path: &Path, packs_dir: &Path, id: u64) -> io::Result<Option<usize>> {
    match reopen_open_pack(path, id)? {
        Some(open) => seal_recovered(open, packs_dir).map(Some),
        None => Ok(None),
    }
}

/// A leftover open pack (from a crash) cut to its whole blobs, ready to seal; None if it held
/// none (it is removed then).
pub fn reopen_open_pack(path: &Path, id: u64) -> io::Result<Option<OpenPack>> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let (blobs, end) = scan(&file)?;
    if blobs.is_empty() {
        drop(file);
        crate::disk::remove_file(path)?;
        return Ok(None);
    }
    crate::disk::set_len(&file, end)?;
    Ok(Some(OpenPack {
        id,
        file,
        path: path.to_path_buf(),
        len: end,
        synced_len: 0,
        written_back: end,
        blobs,
        // Only sealed, never appended to: no blob is written with it.
        format: 0,
    }))
}

/// Seals a pack `reopen_open_pack` gave; returns how many blobs it holds.
pub fn seal_recovered(mut open: OpenPack, packs_dir: &Path) -> io::Result<usize> {
    open.sync()?;
    let n = open.blobs.len();
    open.seal(packs_dir)?;
    Ok(n)
}

/// Writes bytes to a new file durably (write, fsync, rename, fsync dir).
pub fn write_file_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let f = crate::disk::create(&tmp)?;
        crate::disk::write_at(&f, data, 0)?;
        crate::disk::sync_all(&f)?;
    }
    crate::disk::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

mod codec;
mod elsewhere;
mod reader;

pub use elsewhere::{Elsewhere, Nowhere, OpenFiles, UploadQueue};
pub use codec::{base_of, decode_chunk, decode_stored, frame_of, packed_frame, decode_stored_into, delta_compress, dict_of, may_be_base, prepare_dictionary, Against, Codec, Dictionary, DELTA_REF_LEN, DICT_REF_LEN, MAX_RAW};
pub use reader::{ChunkLocator, PackReader, MAX_STORED};

#[cfg(test)]
mod tests;
