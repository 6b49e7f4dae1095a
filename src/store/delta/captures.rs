//! Ingest's side of deltas: each record's URL and first payload chunk, and the hints they
//! leave in the index (`capture`: a URL's latest capture, and the latest chunk with each
//! sketch slot's value; `delta_base`: a new chunk's previous capture or, for a URL never
//! captured before, the chunk its sketch resembles most: the base gc tries when it settles
//! the chunk).

use std::collections::HashMap;

use crate::digest::ChunkKey;
use crate::index::{url_key, Batch, UrlKey};
use crate::store::delta::sketch::{slot_key, Sketch, SLOTS};
use crate::store::{Result, Store};

/// Slots a stored chunk must share with a new one to be tried as its base: one in four
/// shared is most often a page of the same site's template, which a delta does not pay for.
const MIN_VOTES: usize = 2;

/// One capture an ingest stored: its URL, the first chunk of its payload, whether that
/// chunk was new to the store (only a new chunk is given a base to try), and the chunk's
/// similarity sketch (a new chunk's: `sketch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) struct Capture {
    pub url: UrlKey,
    pub head: ChunkKey,
    pub new: bool,
    pub sketch: Option<Sketch>,
}

/// The URL of the record whose header block `header` is, if it is a `response` or
/// `resource` record (the ones whose payload is the page a later capture revisits): the value
/// of its `WARC-Target-URI`, `<...>` brackets removed. `header` may begin with bytes of
/// earlier records (short payloads are kept with the headers): the last WARC record start in
/// it is taken.
pub(in crate::store) fn target_of(header: &[u8]) -> Option<&[u8]> {
    let start = last_record_start(header)?;
    let mut uri = None;
    let mut wanted = false;
    for line in header[start..].split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"WARC-Type") {
            wanted = value.eq_ignore_ascii_case(b"response") || value.eq_ignore_ascii_case(b"resource");
        } else if name.eq_ignore_ascii_case(b"WARC-Target-URI") {
            let v = crate::format::warc::revisit::bare_uri(value);
            uri = (!v.is_empty()).then_some(v);
        }
    }
    uri.filter(|_| wanted)
}

/// Where the last `WARC/` version line of `header` starts.
fn last_record_start(header: &[u8]) -> Option<usize> {
    const MARK: &[u8] = b"WARC/";
    (0..header.len().saturating_sub(MARK.len() - 1)).rev().find(|&i| header[i..].starts_with(MARK) && (i == 0 || header[i - 1] == b'\n'))
}

/// The URL key of the record whose header block is `header`, if it is one whose payload may
/// have relatives (`target_of`).
pub(in crate::store) fn url_of(header: &[u8]) -> Option<UrlKey> {
    target_of(header).map(url_key)
}

impl Store {
    /// Adds to `b` (a file's commit) the hints its captures leave: each URL's latest capture,
    /// and for each new chunk whose URL was captured before with other bytes, that capture's
    /// chunk as its base to try; for a new chunk whose URL was not, the chunk that shares the
    /// most sketch slots with it (`similar_to`), and its own slots. Nothing on a store
    /// without hints.
    pub(in crate::store) fn note_captures(&self, b: &mut Batch, captures: &[Capture]) -> Result<()> {
        if !self.index.has_hints() || captures.is_empty() {
            return Ok(());
        }
        let stored = self.index.captures(&captures.iter().map(|c| c.url).collect::<Vec<_>>())?;
        // The same URL twice in one file: the later capture's relative is the earlier.
        let mut latest: HashMap<UrlKey, ChunkKey> = HashMap::new();
        // Slots this file noted, not in the index until it commits.
        let mut slots: HashMap<[u8; 5], UrlKey> = HashMap::new();
        for (c, stored) in captures.iter().zip(stored) {
            let before = latest.get(&c.url).copied().or(stored);
            if let Some(base) = before.filter(|&base| c.new && base != c.head) {
                b.put_delta_base_hint(&self.index, &c.head, &base);
            } else if let Some(sketch) = c.sketch.filter(|_| c.new && before.is_none()) {
                let keys: [[u8; 5]; SLOTS] = std::array::from_fn(|k| slot_key(k, sketch[k]));
                match self.similar_to(&keys, &slots, &latest)?.filter(|&base| base != c.head) {
                    Some(base) => b.put_delta_base_hint(&self.index, &c.head, &base),
                    // Only a chunk that resembles none is noted as one to resemble: one with
                    // a hint may become a delta, and is no base until gc has settled it.
                    None => {
                        for key in keys {
                            b.put_similar(&self.index, &key, &c.url);
                            slots.insert(key, c.url);
                        }
                    }
                }
            }
            if before != Some(c.head) {
                b.put_capture(&self.index, &c.url, &c.head);
            }
            latest.insert(c.url, c.head);
        }
        Ok(())
    }

    /// The latest capture of the URL noted under most of a sketch's slot `keys` (this
    /// file's notes first, then the index's; the first slot's on a tie), if at least
    /// `MIN_VOTES` slots name it.
    fn similar_to(&self, keys: &[[u8; 5]; SLOTS], in_file: &HashMap<[u8; 5], UrlKey>, latest: &HashMap<UrlKey, ChunkKey>) -> Result<Option<ChunkKey>> {
        let indexed = self.index.similar(keys)?;
        let mut votes: Vec<(UrlKey, usize)> = Vec::with_capacity(SLOTS);
        for (key, indexed) in keys.iter().zip(indexed) {
            let Some(found) = in_file.get(key).copied().or(indexed) else { continue };
            match votes.iter_mut().find(|(u, _)| *u == found) {
                Some((_, n)) => *n += 1,
                None => votes.push((found, 1)),
            }
        }
        // max_by_key keeps the last of equals: reversed, the first slot's wins.
        let Some((url, _)) = votes.into_iter().rev().max_by_key(|&(_, n)| n).filter(|&(_, n)| n >= MIN_VOTES) else { return Ok(None) };
        match latest.get(&url) {
            Some(&head) => Ok(Some(head)),
            None => Ok(self.index.capture(&url)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_of_the_last_response_or_resource_record() {
        let h = b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: http://example.org/a\r\nContent-Length: 10\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(target_of(h), Some(&b"http://example.org/a"[..]));
        let bracketed = b"WARC/1.0\r\nwarc-type: resource\r\nWARC-Target-URI: <urn:x:y>\r\n\r\n";
        assert_eq!(target_of(bracketed), Some(&b"urn:x:y"[..]));
        let request = b"WARC/1.0\r\nWARC-Type: request\r\nWARC-Target-URI: http://example.org/a\r\n\r\n";
        assert_eq!(target_of(request), None);
        // A short record kept with the next one's header: the later record counts.
        let two = b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: http://a/\r\n\r\nshort\r\n\r\nWARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: http://b/\r\n\r\n";
        assert_eq!(target_of(two), Some(&b"http://b/"[..]));
        assert_eq!(target_of(b"no record here"), None);
        assert_eq!(target_of(b""), None);
        assert_eq!(url_of(h), Some(url_key(b"http://example.org/a")));
    }
}
