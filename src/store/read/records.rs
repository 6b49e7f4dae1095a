//! Records of a stored file found from its recipe alone: where each WARC record starts, how
//! long it is, and its header bytes. Only the literal (header) chunks are read, never a
//! payload, so indexing a store costs a fraction of reading it.

use std::collections::HashMap;

use sha1::Digest as _;

use crate::store::{Inode, InodeKind, Result, Store};
use crate::format::cdx;
use crate::digest::ChunkKey;
use crate::pack::ChunkKind;
use crate::recipe::{Extent, Piece, RecipeHead, Segment};

/// A plain file's record block is read this much at a time for its index line (its HTTP
/// header must lie within the first this many bytes, as it does in any real WARC).
pub(in crate::store) const BLOCK_HEAD: usize = 4 << 20;

/// One WARC record of a stored file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHead {
    /// Where the record starts in the file: its gzip member for `.warc.gz`, else the record.
    pub offset: u64,
    /// Its length: the whole gzip member, or the record without its trailing separator (as
    /// warcio and cdxj-indexer count it).
    pub length: u64,
    /// The WARC header block, version line through the blank line.
    pub warc_header: Vec<u8>,
    /// The HTTP header block at the start of the record's block, if there is one.
    pub http_header: Option<Vec<u8>>,
    /// Where its block is stored.
    pub(in crate::store) block: BlockAt,
    /// A gzip member stored as its text: that text's length (this record and whatever
    /// else the member holds); else 0.
    pub(in crate::store) member_text: u64,
    /// What its index line's offset is less than `offset`: where the WARC holding it starts
    /// in the file (a WACZ's entry), else 0; wrapping: a record of a resolved view lies
    /// after where it is stored.
    pub(in crate::store) shift: u64,
}

/// Where a record's block is stored, for the index line of a record whose headers do not
/// hold all the line needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) enum BlockAt {
    /// In the file as it is (a plain WARC).
    Plain,
    /// In a gzip member stored as its text: (piece, segment) of the recipe.
    Member(u32, u32),
    /// In a gzip member kept as its compressed bytes (`raw_members`).
    RawMember,
}

impl RecordHead {
    /// Its offset in the WARC that holds it, as an index line gives it.
    pub fn line_offset(&self) -> u64 {
        self.offset.wrapping_sub(self.shift)
    }

    /// Whether the header chunks hold all an index needs: a payload digest, and for HTTP
    /// records the HTTP header. Otherwise (DNS and metadata records, odd HTTP blocks the
    /// parser kept as payload) an index reads the record's block.
    pub fn indexable_from_headers(&self) -> bool {
        let field = |name: &[u8]| {
            self.warc_header.split(|&b| b == b'\n').find_map(|l| {
                (l.len() > name.len() && l[..name.len()].eq_ignore_ascii_case(name)).then(|| l[name.len()..].trim_ascii().to_vec())
            })
        };
        let http_type = matches!(field(b"WARC-Type:").as_deref(), Some(b"response") | Some(b"revisit"));
        let empty = content_length(&self.warc_header) == Some(0);
        self.has_payload_digest() && (!http_type || empty || self.http_header.is_some())
    }

    fn has_payload_digest(&self) -> bool {
        self.warc_header
            .split(|&b| b == b'\n')
            .any(|l| l.len() > 20 && l[..20].eq_ignore_ascii_case(b"WARC-Payload-Digest:"))
    }
}

pub(in crate::store) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub(in crate::store) fn content_length(header: &[u8]) -> Option<u64> {
    header.split(|&b| b == b'\n').find_map(|line| {
        let (name, value) = std::str::from_utf8(line).ok()?.split_once(':')?;
        name.trim().eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok()).flatten()
    })
}

/// Splits header bytes at a record start into the WARC header and the HTTP header.
pub(in crate::store) fn split_heads(bytes: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>, u64)> {
    let end = find(bytes, b"\r\n\r\n")? + 4;
    let warc = &bytes[..end];
    let clen = content_length(warc)?;
    // Everything of the block the header chunks hold: the HTTP header, when there is one,
    // is all there (the segmenter keeps it with the WARC header); the CDXJ writer finds its
    // end exactly as warcio does.
    // Content-Length is what the file claims, bounded by nothing: it sizes nothing here.
    let block = &bytes[end..bytes.len().min(end.saturating_add(usize::try_from(clen).unwrap_or(usize::MAX)))];
    let http = (!block.is_empty()).then(|| block.to_vec());
    Some((warc.to_vec(), http, (end as u64).saturating_add(clen)))
}


impl Store {
    fn chunk_kinds(&self, piece: &Piece, cache: &mut HashMap<ChunkKey, ChunkKind>) -> Result<Vec<ChunkKind>> {
        piece
            .keys
            .iter()
            .map(|k| {
                if let Some(&v) = cache.get(k) {
                    return Ok(v);
                }
                // A chunk the index does not know is damage, not "no headers here": the
                // index would leave its records out and exit 0.
                let e = self.index.chunk(k)?.ok_or_else(|| crate::store::StoreError::MissingChunk(k.to_string()))?;
                let kind = ChunkKind::from_u8(e.kind);
                cache.insert(*k, kind);
                Ok(kind)
            })
            .collect()
    }

    fn literal_bytes(&self, piece: &Piece, e: &Extent) -> Result<Vec<u8>> {
        let key = piece.keys[e.chunk as usize];
        let entry = self.index.chunk(&key)?.ok_or_else(|| crate::store::StoreError::MissingChunk(key.to_string()))?;
        let chunk = self.chunk_bytes(&key, &entry)?;
        Ok(crate::store::read::extent_bytes(&chunk, e, &key)?.to_vec())
    }

    /// Every WARC record of a stored file, found by walking its recipe's header chunks.
    pub fn records(&self, head: &RecipeHead) -> Result<Vec<RecordHead>> {
        let mut out = Vec::new();
        self.each_warc_record(head, &mut |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// `records`, handed to `f` one at a time: a file of millions of records (a crawl of
    /// many GB) is indexed without holding its headers at once (the mount's daemon builds
    /// `/.warcfs/index.cdxj` this way).
    pub fn each_warc_record(&self, head: &RecipeHead, f: &mut dyn FnMut(RecordHead) -> Result<()>) -> Result<()> {
        let mut kinds = HashMap::new();
        // Bytes not yet looked into (file offsets start..end) outside members and header
        // blocks: in a gzip file, a run of them (across segments and pieces) holds members
        // kept as they are. (Its chunks may be payload chunks of equal bytes: `kinds_share`.)
        let mut raw: Option<(u64, u64)> = None;
        let (mut seen_member, mut gzip) = (false, None);
        for pno in 0..head.pieces() {
            let piece = self.piece(head, pno)?;
            let kind = self.chunk_kinds(&piece, &mut kinds)?;
            let lit = |e: &Extent| kind[e.chunk as usize] == ChunkKind::Literal;
            let mut pos = head.piece_starts[pno as usize];
            for (sno, seg) in piece.segments.iter().enumerate() {
                match seg {
                    Segment::Member { plain, comp_len, .. } => {
                        seen_member = true;
                        self.raw_records(head, raw.take(), seen_member, &mut gzip, f)?;
                        // The member's leading header slices hold its record's headers.
                        let mut bytes = Vec::new();
                        for e in plain.iter().take_while(|e| lit(e)) {
                            bytes.extend_from_slice(&self.literal_bytes(&piece, e)?);
                        }
                        if bytes.starts_with(b"WARC/") {
                            if let Some((warc_header, http_header, _)) = split_heads(&bytes) {
                                let member_text = plain.iter().map(|e| e.len as u64).sum();
                                f(RecordHead { offset: pos, length: *comp_len, warc_header, http_header, block: BlockAt::Member(pno, sno as u32), shift: 0, member_text })?;
                            }
                        }
                    }
                    Segment::Data { extents } => {
                        let mut epos = pos;
                        for e in extents {
                            if !lit(e) {
                                raw = match raw {
                                    Some((a, b)) if b == epos => Some((a, epos + e.len as u64)),
                                    _ => {
                                        self.raw_records(head, raw, seen_member, &mut gzip, f)?;
                                        Some((epos, epos + e.len as u64))
                                    }
                                };
                                epos += e.len as u64;
                                continue;
                            }
                            self.raw_records(head, raw.take(), seen_member, &mut gzip, f)?;
                            let bytes = self.literal_bytes(&piece, e)?;
                            let mut from = 0usize;
                            // A header slice holds the end of one record and the start of
                            // the next: its separator, then a version line.
                            while let Some(i) = find(&bytes[from..], b"WARC/1.").or_else(|| find(&bytes[from..], b"WARC/0.")) {
                                let at = from + i;
                                if at == 0 || bytes[at - 1] == b'\n' {
                                    if let Some((warc_header, http_header, len)) = split_heads(&bytes[at..]) {
                                        // A record that claims more than the file holds
                                        // ends with the file, as warcio reads it.
                                        let offset = epos + at as u64;
                                        let length = len.min(head.size.saturating_sub(offset));
                                        f(RecordHead { offset, length, warc_header, http_header, block: BlockAt::Plain, shift: 0, member_text: 0 })?;
                                    }
                                }
                                from = at + 5;
                            }
                            epos += e.len as u64;
                        }
                    }
                }
                pos += seg.len();
            }
        }
        self.raw_records(head, raw, seen_member, &mut gzip, f)?;
        Ok(())
    }

    /// The records of a run of raw bytes (`raw_members`), if there is one and the file is a
    /// gzip file: in a plain WARC such bytes are payloads, or bytes that did not parse as
    /// records.
    fn raw_records(&self, head: &RecipeHead, run: Option<(u64, u64)>, seen_member: bool, gzip: &mut Option<bool>, f: &mut dyn FnMut(RecordHead) -> Result<()>) -> Result<()> {
        match run {
            Some(run) if self.is_gzip_file(head, seen_member, gzip)? => self.raw_run_records(head, run, f),
            _ => Ok(()),
        }
    }

    /// The CDXJ line of record `r` of the file `head`, named `name`. Header chunks suffice,
    /// unless the record names no payload digest (DNS and metadata records, mostly small):
    /// then the digest is computed from its block.
    pub(in crate::store) fn cdxj_of(&self, head: &RecipeHead, r: &RecordHead, name: &str) -> Result<Option<String>> {
        if r.indexable_from_headers() {
            return Ok(cdx::cdxj_line(&r.warc_header, r.http_header.as_deref(), r.line_offset(), r.length, name));
        }
        self.record_line(head, r, name)
    }

    /// The CDXJ line of a record whose header chunks do not hold what its line needs (no
    /// payload digest: DNS and metadata records, mostly small). Reads its block: a gzip
    /// member's text at once (a member kept as a member holds at most `MAX_MEMBER_TEXT`), a
    /// plain file's record `BLOCK_HEAD` at a time, whatever length it states.
    fn record_line(&self, head: &RecipeHead, r: &RecordHead, name: &str) -> Result<Option<String>> {
        let hlen = r.warc_header.len();
        let stated = content_length(&r.warc_header).unwrap_or(0);
        if r.block == BlockAt::RawMember {
            return self.raw_record_line(head, r, name);
        }
        if let BlockAt::Member(pno, sno) = r.block {
            let piece = self.piece(head, pno)?;
            let Segment::Member { plain, .. } = &piece.segments[sno as usize] else { return Ok(None) };
            let mut text = Vec::new();
            for e in plain {
                let key = piece.keys[e.chunk as usize];
                let entry = self.index.chunk(&key)?.ok_or_else(|| crate::store::StoreError::MissingChunk(key.to_string()))?;
                let chunk = self.chunk_bytes(&key, &entry)?;
                text.extend_from_slice(crate::store::read::extent_bytes(&chunk, e, &key)?);
            }
            let clen = usize::try_from(stated).unwrap_or(usize::MAX);
            let block = text.get(hlen..hlen.saturating_add(clen).min(text.len())).unwrap_or(&[]);
            return Ok(cdx::cdxj_line_from_block(&r.warc_header, block, r.line_offset(), r.length, name));
        }
        // The block as the record states it, but never past the end of the file: a stated
        // Content-Length bounds nothing until it is checked against what is there.
        let start = r.offset.saturating_add(hlen as u64);
        let clen = stated.min(head.size.saturating_sub(start));
        let mut block_head = vec![0u8; clen.min(BLOCK_HEAD as u64) as usize];
        let n = self.read_at(head, start, &mut block_head)?;
        block_head.truncate(n);
        line_from_block_head(r, &block_head, name, |from, h| {
            h.update(&block_head[from.min(block_head.len())..]);
            let (mut at, end) = (start + (from as u64).max(block_head.len() as u64), start + clen);
            let mut buf = vec![0u8; BLOCK_HEAD.min((end.saturating_sub(at)) as usize)];
            while at < end {
                let want = buf.len().min((end - at) as usize);
                match self.read_at(head, at, &mut buf[..want])? {
                    0 => break,
                    n => {
                        h.update(&buf[..n]);
                        at += n as u64;
                    }
                }
            }
            Ok(())
        })
    }

    /// The CDXJ lines (unsorted) of every WARC under `root`, a directory or one file, a
    /// line at a time (so that an index of any size need not be held whole); file names
    /// relative to `root`, as cdxj-indexer prints them for a directory it indexes. `staged`
    /// says what to do with files still being written through a mount.
    pub fn cdxj_each(&self, root: &str, staged: StagedFiles, f: &mut dyn FnMut(String) -> std::io::Result<()>) -> Result<()> {
        let ino = self.resolve(root)?;
        let inode = self.inode(ino)?.ok_or_else(|| crate::store::StoreError::NotFound(root.to_string()))?;
        // Each file is indexed as the walk meets it: a store of millions of files is not
        // listed whole first (the mount's daemon builds `/.warcfs/index.cdxj` this way).
        // The store path of what is indexed, for the WARCs inside WACZs: their lines name
        // them where `/.warcfs/wacz/` shows them, from the mount's root.
        let base = crate::store::components(root)?.join("/");
        let single = inode.kind != InodeKind::Dir;
        let mut index_file = |name: &str, _ino: u64, inode: &Inode| -> Result<()> {
            let wacz = crate::store::is_wacz_name(name.as_bytes());
            let indexed = wacz || crate::store::is_warc_name(name.as_bytes());
            if indexed && inode.staged {
                // Its recipe is older than its bytes: an index of it would be wrong.
                return match staged {
                    StagedFiles::Refuse => Err(crate::store::StoreError::Staged(name.to_string())),
                    StagedFiles::Skip => Ok(()),
                };
            }
            let Some(head) = inode.recipe.as_ref().filter(|_| indexed) else { return Ok(()) };
            // A WACZ: the records of its stored WARC entries, each at its offset in its entry.
            let warcs = if wacz {
                let path = match (single, base.is_empty()) {
                    (true, _) => base.clone(),
                    (false, true) => name.to_string(),
                    (false, false) => format!("{base}/{name}"),
                };
                match self.wacz_warcs(&path, head)? {
                    Some(w) => Some(w),
                    None => return Ok(()),
                }
            } else {
                None
            };
            self.each_warc_record(head, &mut |mut r| {
                let name = match &warcs {
                    None => name,
                    Some(w) => {
                        let Some(inner) = warc_holding(w, &r) else { return Ok(()) };
                        r.shift = inner.start;
                        inner.view_path.as_str()
                    }
                };
                if let Some(line) = self.cdxj_of(head, &r, name)? {
                    f(line).map_err(|err| crate::store::StoreError::Io { path: "<index>".into(), err })?;
                }
                Ok(())
            })
        };
        self.each_file_under(root, &mut index_file)
    }

    /// Hands `f` each file under `root` (a directory, walked to its depth, or one file) with
    /// its path below `root` (a file alone: its name), as the walk meets it: a store of
    /// millions of files is not listed whole first.
    pub fn each_file_under(&self, root: &str, f: &mut dyn FnMut(&str, u64, &Inode) -> Result<()>) -> Result<()> {
        let ino = self.resolve(root)?;
        let inode = self.inode(ino)?.ok_or_else(|| crate::store::StoreError::NotFound(root.to_string()))?;
        if inode.kind != InodeKind::Dir {
            let name = crate::store::components(root)?.last().map(|c| c.to_string()).unwrap_or_default();
            return f(&name, ino, &inode);
        }
        let mut stack = vec![(ino, String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            for e in self.read_dir(dir)? {
                let name = format!("{prefix}{}", String::from_utf8_lossy(&e.name));
                match e.inode.kind {
                    InodeKind::Dir => stack.push((e.ino, format!("{name}/"))),
                    InodeKind::File => f(&name, e.ino, &e.inode)?,
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// The WARC entry of a WACZ (`warcs`, in file order) that holds record `r` whole, if any.
pub fn warc_holding<'a>(warcs: &'a [crate::store::WaczWarc], r: &RecordHead) -> Option<&'a crate::store::WaczWarc> {
    let i = warcs.partition_point(|w| w.start <= r.offset);
    i.checked_sub(1).map(|i| &warcs[i]).filter(|w| r.offset.saturating_add(r.length) <= w.end)
}

/// The CDXJ line of record `r` from the first bytes of its block. `hash_from(n, h)` adds the
/// block from byte `n` on to `h`, for the digest of a record that names none; its error is
/// the line's (an index must not print a line without the digest it could not compute).
pub(in crate::store) fn line_from_block_head(r: &RecordHead, block_head: &[u8], name: &str, mut hash_from: impl FnMut(usize, &mut sha1::Sha1) -> Result<()>) -> Result<Option<String>> {
    let mut failed = None;
    let mut digest_from = |from: usize| {
        let mut h = sha1::Sha1::new();
        if let Err(e) = hash_from(from, &mut h) {
            failed = Some(e);
            return None;
        }
        Some(cdx::sha1_string(&h.finalize().into()))
    };
    let line = cdx::cdxj_line_from_block_head(&r.warc_header, block_head, &mut digest_from, r.line_offset(), r.length, name);
    match failed {
        Some(e) => Err(e),
        None => Ok(line),
    }
}

/// What an index does with a file still being written through a mount (its recipe is
/// older than its bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedFiles {
    /// Fail, naming it: a command must not give a partial answer with exit 0.
    Refuse,
    /// Leave it out until it is stored: the mount's own live `/.warcfs/index.cdxj`.
    Skip,
}
