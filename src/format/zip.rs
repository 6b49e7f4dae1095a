//! ZIP archives (WACZ above all): where each entry's bytes lie in the file, read from the
//! central directory as every ZIP reader does.
//!
//! A `.wacz` is a ZIP whose `archive/*.warc.gz` entries are stored (method 0): the WARC's
//! bytes as they are, between a local header and the next. This module finds those ranges;
//! it never decides what is stored. Ingest stores the bytes between entries as they are and
//! each entry's bytes as a file of its own would be stored, so a crawl's WARC inside a WACZ
//! deduplicates with the same WARC stored beside it.
//!
//! Only a whole file is read this way: py-wacz (CPython's `zipfile`) rewrites each local
//! header after its data, and client-zip (browsertrix-crawler, ArchiveWeb.page) writes zero
//! sizes in local headers and a data descriptor after each entry, so only the central
//! directory says where entries end. ZIP64 (the end record, its locator, and the extra
//! field in central headers) is read wherever it is. A file that is not such a ZIP, or whose
//! directory disagrees with its local headers (entries overlapping, out of the file, names
//! that differ, a lying or truncated tail), is an error here: ingest then stores it as any
//! other file, byte for byte.

/// The local header's signature, which every ZIP with an entry begins with.
const LOCAL: u32 = 0x0403_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const END: u32 = 0x0605_4b50;
const END64: u32 = 0x0606_4b50;
const LOCATOR64: u32 = 0x0706_4b50;

const LOCAL_LEN: usize = 30;
const CENTRAL_LEN: usize = 46;
const END_LEN: usize = 22;
const LOCATOR64_LEN: usize = 20;
const END64_LEN: usize = 56;

/// How much of a file's end holds its end record: the record and the longest comment, and
/// the ZIP64 locator before it.
pub const TAIL: usize = END_LEN + 0xffff + LOCATOR64_LEN;
/// The largest central directory read: 64 MiB holds over half a million entries of 100-byte
/// names; a larger one is not a WACZ, and its file is stored as any other.
pub const MAX_CENTRAL: u64 = 64 << 20;

/// One entry, as its central header and local header place it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    /// 0 stored, 8 deflated (others as the writer chose).
    pub method: u16,
    /// General purpose flags (bit 0 encrypted, bit 3 sizes in a data descriptor).
    pub flags: u16,
    /// CRC-32 of the entry's uncompressed bytes, as the central directory gives it.
    pub crc: u32,
    /// Bytes of the entry in the file (compressed, if it is), and uncompressed.
    pub comp_size: u64,
    pub size: u64,
    /// Where its local header starts, and its data.
    pub header_at: u64,
    pub data_at: u64,
}

impl Entry {
    pub fn data_end(&self) -> u64 {
        self.data_at + self.comp_size
    }

    /// Whether its bytes in the file are the entry's own (stored, not encrypted).
    pub fn is_stored(&self) -> bool {
        self.method == 0 && self.flags & 1 == 0 && self.comp_size == self.size
    }
}

/// A ZIP's entries in file order, and where its central directory starts (from there to
/// the end: the directory, the ZIP64 end record and locator, the end record and comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub entries: Vec<Entry>,
    pub central_at: u64,
    pub size: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    #[error("not a ZIP archive: {0}")]
    NotZip(&'static str),
    #[error("a ZIP archive this reader does not take: {0}")]
    Unsupported(&'static str),
    #[error("damaged ZIP archive: {0}")]
    Damaged(&'static str),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

type Result<T> = std::result::Result<T, ZipError>;

/// Whether `head` (a file's first bytes) begins as a ZIP with an entry does.
pub fn looks_zip(head: &[u8]) -> bool {
    head.len() >= 4 && u32_at(head, 0) == LOCAL
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// The entries of the ZIP of `size` bytes that `read(offset, len)` reads (exactly `len`
/// bytes, or fewer only at the end of the file). Reads the tail, the central directory and
/// each local header's fixed part: a few reads per entry, whatever the entries hold.
pub fn layout(size: u64, read: &mut dyn FnMut(u64, usize) -> std::io::Result<Vec<u8>>) -> Result<Layout> {
    let mut read_exact = |at: u64, len: usize| -> Result<Vec<u8>> {
        let b = read(at, len)?;
        if b.len() != len {
            return Err(ZipError::Damaged("a record runs past the end of the file"));
        }
        Ok(b)
    };
    if size < (LOCAL_LEN + END_LEN) as u64 {
        return Err(ZipError::NotZip("too short"));
    }
    // The end record: the last one whose comment ends the file exactly. Most ZIPs have no
    // comment: their last bytes are looked at first, the longest comment's only if need be.
    let find_end = |tail: &[u8]| (0..=tail.len() - END_LEN).rev().find(|&i| u32_at(tail, i) == END && i + END_LEN + u16_at(tail, i + 20) as usize == tail.len());
    let mut found = None;
    for want in [END_LEN + LOCATOR64_LEN, TAIL] {
        let tail_len = (want as u64).min(size) as usize;
        let tail = read_exact(size - tail_len as u64, tail_len)?;
        if let Some(end) = find_end(&tail) {
            found = Some((tail, end));
            break;
        }
    }
    let (tail, end) = found.ok_or(ZipError::NotZip("no end of central directory record"))?;
    let tail_at = size - tail.len() as u64;
    let end_at = tail_at + end as u64;
    let e = &tail[end..];
    if u16_at(e, 4) != 0 || u16_at(e, 6) != 0 {
        return Err(ZipError::Unsupported("split over several disks"));
    }
    let (mut count, mut cd_size, mut cd_at) = (u16_at(e, 10) as u64, u32_at(e, 12) as u64, u32_at(e, 16) as u64);
    // ZIP64: the locator right before the end record names the ZIP64 end record. Writers put
    // one there when a count, size or offset does not fit (client-zip, CPython), or always.
    let mut dir_end = end_at;
    if end >= LOCATOR64_LEN && u32_at(&tail, end - LOCATOR64_LEN) == LOCATOR64 {
        let loc = &tail[end - LOCATOR64_LEN..end];
        let at64 = u64_at(loc, 8);
        if u32_at(loc, 4) != 0 || u32_at(loc, 16) > 1 {
            return Err(ZipError::Unsupported("split over several disks"));
        }
        if at64.checked_add(END64_LEN as u64).is_none_or(|e| e > end_at - LOCATOR64_LEN as u64) {
            return Err(ZipError::Damaged("the ZIP64 end record lies outside the file"));
        }
        let r = read_exact(at64, END64_LEN)?;
        if u32_at(&r, 0) != END64 {
            return Err(ZipError::Damaged("no ZIP64 end record where its locator says"));
        }
        if u32_at(&r, 16) != 0 || u32_at(&r, 20) != 0 {
            return Err(ZipError::Unsupported("split over several disks"));
        }
        (count, cd_size, cd_at) = (u64_at(&r, 32), u64_at(&r, 40), u64_at(&r, 48));
        dir_end = at64;
    } else if count == 0xffff || cd_size == 0xffff_ffff || cd_at == 0xffff_ffff {
        return Err(ZipError::Damaged("ZIP64 values without a ZIP64 end record"));
    }
    if cd_size > MAX_CENTRAL {
        return Err(ZipError::Unsupported("a central directory over 64 MiB"));
    }
    if cd_at.checked_add(cd_size).is_none_or(|e| e > dir_end) {
        return Err(ZipError::Damaged("the central directory lies outside the file"));
    }
    if count > cd_size / CENTRAL_LEN as u64 {
        return Err(ZipError::Damaged("more entries than the central directory holds"));
    }
    let cd = read_exact(cd_at, cd_size as usize)?;
    let mut entries = central_entries(&cd, count as usize)?;
    entries.sort_by_key(|e| e.header_at);
    let mut prev_end = 0u64;
    for e in entries.iter_mut() {
        if e.header_at < prev_end {
            return Err(ZipError::Damaged("entries overlap"));
        }
        if e.header_at.checked_add(LOCAL_LEN as u64).is_none_or(|h| h > cd_at) {
            return Err(ZipError::Damaged("a local header lies past the central directory"));
        }
        let h = read_exact(e.header_at, LOCAL_LEN)?;
        if u32_at(&h, 0) != LOCAL {
            return Err(ZipError::Damaged("no local header where the central directory says"));
        }
        let (name_len, extra_len) = (u16_at(&h, 26) as usize, u16_at(&h, 28) as u64);
        let name_at = e.header_at + LOCAL_LEN as u64;
        if name_len != e.name.len() || read_exact(name_at, name_len)? != e.name {
            return Err(ZipError::Damaged("a local header names another entry than the central directory"));
        }
        e.data_at = name_at + name_len as u64 + extra_len;
        if e.data_at.checked_add(e.comp_size).is_none_or(|end| end > cd_at) {
            return Err(ZipError::Damaged("an entry runs into the central directory"));
        }
        prev_end = e.data_end();
    }
    Ok(Layout { entries, central_at: cd_at, size })
}

/// The central directory's `count` headers (data offsets not known yet).
fn central_entries(cd: &[u8], count: usize) -> Result<Vec<Entry>> {
    let mut out = Vec::with_capacity(count);
    let mut i = 0usize;
    for _ in 0..count {
        if i + CENTRAL_LEN > cd.len() || u32_at(cd, i) != CENTRAL {
            return Err(ZipError::Damaged("a central directory header is missing"));
        }
        let h = &cd[i..];
        let (flags, method, crc) = (u16_at(h, 8), u16_at(h, 10), u32_at(h, 16));
        let (mut comp_size, mut size) = (u32_at(h, 20) as u64, u32_at(h, 24) as u64);
        let (name_len, extra_len, comment_len) = (u16_at(h, 28) as usize, u16_at(h, 30) as usize, u16_at(h, 32) as usize);
        let disk = u16_at(h, 34);
        let mut header_at = u32_at(h, 42) as u64;
        let end = i + CENTRAL_LEN + name_len + extra_len + comment_len;
        if end > cd.len() {
            return Err(ZipError::Damaged("a central directory header runs past the directory"));
        }
        let name = h[CENTRAL_LEN..CENTRAL_LEN + name_len].to_vec();
        let extra = &h[CENTRAL_LEN + name_len..CENTRAL_LEN + name_len + extra_len];
        // The ZIP64 extra field holds, in this order, each value that did not fit.
        let wants = [size == 0xffff_ffff, comp_size == 0xffff_ffff, header_at == 0xffff_ffff];
        if wants.iter().any(|&w| w) {
            let z = zip64_extra(extra).ok_or(ZipError::Damaged("ZIP64 values without a ZIP64 extra field"))?;
            let mut vals = z.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
            let mut take = || vals.next().ok_or(ZipError::Damaged("a ZIP64 extra field too short"));
            if wants[0] {
                size = take()?;
            }
            if wants[1] {
                comp_size = take()?;
            }
            if wants[2] {
                header_at = take()?;
            }
        }
        if disk != 0 && disk != 0xffff {
            return Err(ZipError::Unsupported("split over several disks"));
        }
        out.push(Entry { name, method, flags, crc, comp_size, size, header_at, data_at: 0 });
        i = end;
    }
    Ok(out)
}

/// The data of the ZIP64 extended information field (id 1) in `extra`, if it is there.
fn zip64_extra(mut extra: &[u8]) -> Option<&[u8]> {
    while extra.len() >= 4 {
        let (id, len) = (u16_at(extra, 0), u16_at(extra, 2) as usize);
        let data = extra.get(4..4 + len)?;
        if id == 1 {
            return Some(data);
        }
        extra = &extra[4 + len..];
    }
    None
}

#[cfg(test)]
mod tests;
