//! Records of a stored file found from its recipe alone: where each WARC record starts, how
//! long it is, and its header bytes. Only the literal (header) chunks are read, never a
//! payload, so indexing a store costs a fraction of reading it.

use std::collections::HashMap;

use super::{Result, Store};
use crate::digest::ChunkKey;
use crate::pack::ChunkKind;
use crate::recipe::{Extent, Piece, RecipeHead, Segment};

/// One WARC record of a stored file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHead {
    /// Where the record starts in the file: its gzip member for `.warc.gz`, else the record.
    pub offset: u64,
    /// Its length: the whole gzip member, or the record with its trailing separator.
    pub length: u64,
    /// The WARC header block, version line through the blank line.
    pub warc_header: Vec<u8>,
    /// The HTTP header block at the start of the record's block, if there is one.
    pub http_header: Option<Vec<u8>>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn content_length(header: &[u8]) -> Option<u64> {
    header.split(|&b| b == b'\n').find_map(|line| {
        let (name, value) = std::str::from_utf8(line).ok()?.split_once(':')?;
        name.trim().eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok()).flatten()
    })
}

/// Splits header bytes at a record start into the WARC header and the HTTP header.
fn split_heads(bytes: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>, u64)> {
    let end = find(bytes, b"\r\n\r\n")? + 4;
    let warc = &bytes[..end];
    let clen = content_length(warc)?;
    let block = &bytes[end..];
    let http = if block.starts_with(b"HTTP/") || is_request_line(block) {
        let limit = block.len().min(clen as usize);
        find(&block[..limit], b"\r\n\r\n").map(|e| block[..e + 4].to_vec())
    } else {
        None
    };
    Some((warc.to_vec(), http, end as u64 + clen))
}

fn is_request_line(b: &[u8]) -> bool {
    let line = &b[..b.iter().position(|&c| c == b'\n').unwrap_or(b.len()).min(b.len())];
    line.windows(6).any(|w| w == b" HTTP/") && line.first().is_some_and(|c| c.is_ascii_uppercase())
}

impl Store {
    fn literal_kinds(&self, piece: &Piece, cache: &mut HashMap<ChunkKey, bool>) -> Result<Vec<bool>> {
        piece
            .keys
            .iter()
            .map(|k| {
                if let Some(&v) = cache.get(k) {
                    return Ok(v);
                }
                let lit = self.index.chunk(k)?.is_some_and(|e| ChunkKind::from_u8(e.kind) == ChunkKind::Literal);
                cache.insert(*k, lit);
                Ok(lit)
            })
            .collect()
    }

    fn literal_bytes(&self, piece: &Piece, e: &Extent) -> Result<Vec<u8>> {
        let key = piece.keys[e.chunk as usize];
        let entry = self.index.chunk(&key)?.ok_or_else(|| super::StoreError::MissingChunk(key.to_string()))?;
        let chunk = self.chunk_bytes(&key, &entry)?;
        Ok(chunk.get(e.offset as usize..(e.offset + e.len) as usize).unwrap_or(&[]).to_vec())
    }

    /// Every WARC record of a stored file, found by walking its recipe's header chunks.
    pub fn records(&self, head: &RecipeHead) -> Result<Vec<RecordHead>> {
        let mut out = Vec::new();
        let mut kinds = HashMap::new();
        for pno in 0..head.pieces() {
            let piece = self.piece(head.id, pno)?;
            let lit = self.literal_kinds(&piece, &mut kinds)?;
            let mut pos = head.piece_starts[pno as usize];
            for seg in &piece.segments {
                match seg {
                    Segment::Member { plain, comp_len, .. } => {
                        // The member's leading header slices hold its record's headers.
                        let mut bytes = Vec::new();
                        for e in plain.iter().take_while(|e| lit[e.chunk as usize]) {
                            bytes.extend_from_slice(&self.literal_bytes(&piece, e)?);
                        }
                        if bytes.starts_with(b"WARC/") {
                            if let Some((warc_header, http_header, _)) = split_heads(&bytes) {
                                out.push(RecordHead { offset: pos, length: *comp_len, warc_header, http_header });
                            }
                        }
                    }
                    Segment::Data { extents } => {
                        let mut epos = pos;
                        for e in extents {
                            if lit[e.chunk as usize] {
                                let bytes = self.literal_bytes(&piece, e)?;
                                let mut from = 0usize;
                                // A header slice holds the end of one record and the start of
                                // the next: its separator, then a version line.
                                while let Some(i) = find(&bytes[from..], b"WARC/1.").or_else(|| find(&bytes[from..], b"WARC/0.")) {
                                    let at = from + i;
                                    if at == 0 || bytes[at - 1] == b'\n' {
                                        if let Some((warc_header, http_header, len)) = split_heads(&bytes[at..]) {
                                            out.push(RecordHead { offset: epos + at as u64, length: len + 4, warc_header, http_header });
                                        }
                                    }
                                    from = at + 5;
                                }
                            }
                            epos += e.len as u64;
                        }
                    }
                }
                pos += seg.len();
            }
        }
        Ok(out)
    }
}
