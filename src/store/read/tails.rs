//! Parse tails decoded once. A tail in the predicted form is a loop over its text, most of
//! a compact member's rebuild, and the matches it gives follow from its bytes and the text
//! from its origin (its payload's start) to the member's end alone: a correction may name a
//! source before the origin, in the headers, but by its distance, which no other byte
//! changes. Every member holding that text (the same payload captured again, in the next
//! crawl or a WACZ of it) gets the same matches, so a rebuild keeps them, by what they follow
//! from: the tail's chunk and the chunk extents that text is read from, both content
//! addresses. (The same text read from other extents is only a miss. A tail in the ranked
//! form decodes four to five times as fast, and a match of implied length copying from
//! before the payload takes its length from the headers there: it is decoded each time.)

use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::digest::{ChunkKey, Digest};
use crate::format::deflate::{self, Match, Parse, ParseError};
use crate::recipe::{Extent, Piece};
use crate::store::Store;
use crate::LockExt;

/// The bytes a kept tail is counted as, besides its matches (the entry and its key).
const ENTRY_BYTES: usize = 96;
/// Extents of at most this many bytes are named by their bytes, not their chunk.
const SMALL_EXTENT: usize = 64;

impl Store {
    /// The parse of a member whose text is `text` (read from `plain`'s extents), with its
    /// stored prefix `parse` and its tail, if any, as `(chunk, bytes)`; and the key of the
    /// kept matches it took, if it took any (`reuse`), for `forget_tail` should the member
    /// not rebuild from them.
    pub(super) fn decode_member_parse(&self, piece: &Piece, plain: &[Extent], parse: &[u8], tail: Option<(ChunkKey, &[u8])>, text: &[u8], reuse: bool) -> (Result<Parse, ParseError>, Option<Digest>) {
        let prefix = match deflate::read_prefix(parse, text.len()) {
            Ok(prefix) => prefix,
            Err(e) => return (Err(e), None),
        };
        let Some((key, tail)) = tail else { return (prefix.decode(None, text), None) };
        let origin = match prefix.predicted_origin(tail) {
            Ok(Some(origin)) => origin,
            Ok(None) => return (prefix.decode(Some(tail), text), None),
            Err(e) => return (Err(e), None),
        };
        let Some(id) = text_key(&key, piece, plain, text, origin) else { return (prefix.decode(Some(tail), text), None) };
        let kept = if reuse { self.cache.tails.locked().get(&id) } else { None };
        if let Some(rel) = kept {
            return (prefix.decode_given_tail(&rel, origin, text), Some(id));
        }
        let cut = prefix.cut();
        let p = match prefix.decode(Some(tail), text) {
            Ok(p) => p,
            Err(e) => return (Err(e), None),
        };
        let at = origin as u32;
        let from = p.matches.partition_point(|m| (m.pos as usize) < cut);
        let rel: Vec<Match> = p.matches[from..].iter().map(|m| Match { pos: m.pos - at, ..*m }).collect();
        if !rel.is_empty() {
            let size = rel.len() * size_of::<Match>() + ENTRY_BYTES;
            self.cache.tails.locked().put(id, Arc::new(rel), size);
        }
        (Ok(p), None)
    }

    /// Drops kept matches a member did not rebuild from.
    pub(super) fn forget_tail(&self, id: &Digest) {
        self.cache.tails.locked().remove(id);
    }
}

/// What a predicted tail's matches follow from: its chunk, and the member's text from
/// `origin` to its end, named extent by extent: by the chunk's content address and the slice
/// taken or, for an extent of a few bytes, by those bytes (a record's closing CRLFs come from
/// a block of the file's own headers, which differs from file to file). Each extent goes in
/// with its kind and length first, so no two lists of extents read alike. None if `origin`
/// lies past the extents (a damaged parse: the decode says so).
fn text_key(tail: &ChunkKey, piece: &Piece, plain: &[Extent], text: &[u8], origin: usize) -> Option<Digest> {
    let mut h = Sha256::new();
    h.update(tail.digest);
    h.update(tail.seq.to_le_bytes());
    let mut at = 0usize;
    let mut begun = false;
    for e in plain {
        let end = at + e.len as usize;
        if end > origin {
            let skip = origin.saturating_sub(at);
            let len = (end - at - skip) as u32;
            if len as usize <= SMALL_EXTENT {
                h.update([0]);
                h.update(len.to_le_bytes());
                h.update(text.get(at + skip..end)?);
            } else {
                let key = piece.keys.get(e.chunk as usize)?;
                h.update([1]);
                h.update(len.to_le_bytes());
                h.update(key.digest);
                h.update(key.seq.to_le_bytes());
                h.update((e.offset + skip as u32).to_le_bytes());
            }
            begun = true;
        }
        at = end;
    }
    begun.then(|| h.finalize().into())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::digest::Digest;
    use crate::store::tests::{gzip_member, meta, response_record};
    use crate::store::*;
    use crate::LockExt;

    fn compact_store(dir: &std::path::Path) -> Store {
        let config = Config { version: Parses::Compact.version(), ..Config::default() };
        Store::open_with(dir, &OpenOptionsStore { create: true, config, follower: false }, crate::digest::sha256).unwrap()
    }

    /// 40,000 bytes of real text (its matches dense enough for the predicted form).
    fn body(seed: usize) -> Vec<u8> {
        use std::io::Read;
        let t = std::fs::read(crate::test_support::real_corpus().join("webrecorder-pywb/iana.warc.gz")).unwrap();
        let mut plain = Vec::new();
        flate2::read::MultiGzDecoder::new(&t[..]).read_to_end(&mut plain).unwrap();
        plain[seed * 50_000..seed * 50_000 + 40_000].to_vec()
    }

    fn crawl(pages: &[Vec<u8>], first_id: u32, site: &str) -> Vec<u8> {
        let member = |(i, p): (usize, &Vec<u8>)| gzip_member(&response_record(&format!("http://{site}/{i}"), first_id + i as u32, p), 9);
        pages.iter().enumerate().flat_map(member).collect()
    }

    fn read(s: &Store, name: &str) -> Vec<u8> {
        let head = s.inode(s.resolve(name).unwrap()).unwrap().unwrap().recipe.unwrap();
        let mut out = Vec::new();
        s.copy_to(&head, &mut out).unwrap();
        out
    }

    /// A payload captured again takes its tail's matches as decoded for the first capture;
    /// two payloads whose tails are the same bytes each get their own.
    #[test]
    fn a_tail_is_decoded_once_for_each_text_it_is_read_over() {
        let dir = tempfile::tempdir().unwrap();
        let s = compact_store(dir.path());
        // Text that shares no string with the records' headers (every byte XORed with 0xa0:
        // the same matches within it, none into the headers) and stays under 32 KiB a
        // member (zlib's window never slides): headers of another length then leave zlib's
        // parse of the payload as it was, and so its tail.
        let pages: Vec<Vec<u8>> = (1..4).map(|i| body(i)[..24_000].iter().map(|b| b ^ 0xa0).collect()).collect();
        // The same pages in records with other ids, dates and URLs: other headers (of
        // another length: the payload starts elsewhere in b's members), other prefixes.
        let (a, b) = (crawl(&pages, 10, "example.org"), crawl(&pages, 20, "example.org/~~~~~~~~~~~~"));
        // Two texts of one structure: every byte of one text XORed with a constant, which
        // moves every zlib hash by a constant too, so both get the same matches and the
        // same corrections: the same tail bytes over other text. (Their matches being the
        // same, it is the count of reuses that shows the text is part of what names them.)
        let x = |c: u8| body(1).iter().map(|b| b ^ c).collect::<Vec<u8>>();
        let c = crawl(&[x(0x80), x(0x81)], 30, "example.org");
        for (name, data) in [("a.warc.gz", &a), ("b.warc.gz", &b), ("c.warc.gz", &c)] {
            s.put_file(ROOT_INO, name.as_bytes(), data, meta()).unwrap();
        }
        let u = s.byte_use().unwrap();
        assert_eq!(u.counts.parse_tails, 3 + 1, "a's and b's tails shared, and one tail for c's two texts");
        drop(s);

        let s = Store::open(dir.path(), false).unwrap();
        assert!(read(&s, "/a.warc.gz") == a);
        assert_eq!(s.read_counters().tail_hits, 0);
        assert!(read(&s, "/b.warc.gz") == b);
        assert_eq!(s.read_counters().tail_hits, 3, "b's members take a's tails");
        assert!(read(&s, "/c.warc.gz") == c);
        assert_eq!(s.read_counters().tail_hits, 3, "each text decoded for itself");
        // (`copy_to` keeps no rebuilt member: the second read rebuilds both again.)
        assert!(read(&s, "/c.warc.gz") == c);
        assert_eq!(s.read_counters().tail_hits, 3 + 2);

        // Kept matches a member does not rebuild from (here every kept tail loses its last
        // match) are dropped, and the tails decoded again: the file reads back all the same.
        {
            let mut kept = s.cache.tails.locked();
            let ids: Vec<Digest> = kept.map.iter().map(|(k, _)| *k).collect();
            for id in ids {
                let mut ms = kept.get(&id).unwrap().as_ref().clone();
                ms.pop();
                kept.put(id, Arc::new(ms), 0);
            }
        }
        assert!(read(&s, "/b.warc.gz") == b);
        assert_eq!(s.read_counters().tail_hits, 3 + 2, "no rebuild took the damaged matches");
        assert!(read(&s, "/a.warc.gz") == a);
        assert_eq!(s.read_counters().tail_hits, 3 + 2 + 3, "the tails decoded again are kept");
    }
}
