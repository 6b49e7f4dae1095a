//! `warcfs export`: copies of stored WARCs with their repeated payloads written the other way.
//!
//! `--revisits`: every response whose payload an earlier exported response holds, byte for
//! byte, is a revisit record naming that original (`format::warc::revisit`), for institutions
//! that exchange deduplicated WARCs. Originals are the first captures in the order the files
//! are exported, so files are exported oldest first (OpenWayback resolves a revisit only
//! against an earlier capture). Two payloads are one only if their bytes are (SHA-256 of the
//! payload as stored, transfer encoding and all): the revisit's own HTTP header with the
//! original's payload is then the response it replaces, exactly.
//!
//! `--resolved`: the other way round: every revisit record whose original is among the
//! exported files is written as the response it stands for (its own identity and HTTP header,
//! the original's payload), so each file stands alone, as pywb needs no revisit logic to
//! replay it (warchaeology#172's "un-deduplication"). The original is found as resolvers do:
//! by `WARC-Refers-To`, then by the payload digest string with `WARC-Refers-To-Target-URI` and
//! `-Date`, then the latest earlier capture of the same URL with that digest, then any capture
//! with it. A revisit whose original is not there stays as it is, and is counted.
//!
//! Everything else is copied as it is stored: gzip members byte for byte, a record written
//! anew a gzip member of its own. Memory: a few hundred bytes per distinct payload
//! (`--revisits`) or per response (`--resolved`) exported.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::Path;

use sha2::Digest as _;

use crate::format::warc::revisit::{bare_uri, resolved_record, revisit_record, Header};
use crate::recipe::RecipeHead;
use crate::store::read::records::{content_length, RecordHead};
use crate::store::{Result, Store, StoreError};

/// The largest record whose block is looked at (a larger one is copied as it is).
const MAX_RECORD: u64 = 256 << 20;

/// What one exported file holds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ExportedFile {
    /// Its path under the destination.
    pub name: String,
    pub records: u64,
    /// Responses written as revisits (`--revisits`).
    pub revisits: u64,
    /// Revisits written as the responses they stand for, and those whose original is not
    /// among the exported files, left as they are (`--resolved`).
    pub resolved: u64,
    pub unresolved: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The exported files whose records its revisits name, or whose payloads its resolved
    /// records hold (itself left out).
    pub requires: BTreeSet<String>,
}

/// Where a record lies in an exported file: enough to read its block again.
#[derive(Clone, Copy)]
struct RecordAt {
    file: usize,
    offset: u64,
    length: u64,
    hlen: usize,
    clen: u64,
}

impl RecordAt {
    fn of(file: usize, r: &RecordHead) -> RecordAt {
        RecordAt { file, offset: r.offset, length: r.length, hlen: r.warc_header.len(), clen: content_length(&r.warc_header).unwrap_or(0) }
    }
}

/// A record written anew in place of a stored one: header and block, without the record
/// separator, and the exported file it names (if another).
struct Replacement {
    record: Vec<u8>,
    names: usize,
}

/// The exported files: each one's path below its root and recipe.
type Files = Vec<(String, RecipeHead)>;

/// The stored WARCs under each of `roots` (in that order; under one, sorted by path), each
/// with its path below its root.
fn warcs_under(s: &Store, roots: &[String]) -> Result<Files> {
    let mut files = Vec::new();
    let mut names = BTreeSet::new();
    for root in roots {
        let mut under = Vec::new();
        s.each_file_under(root, &mut |name, inode| {
            if !crate::store::is_warc_name(name.as_bytes()) {
                return Ok(());
            }
            if inode.staged {
                return Err(StoreError::Staged(name.to_string()));
            }
            under.extend(inode.recipe.clone().map(|h| (name.to_string(), h)));
            Ok(())
        })?;
        under.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, head) in under {
            if !names.insert(name.clone()) {
                return Err(StoreError::Exists(format!("{name} (under two of the paths exported)")));
            }
            files.push((name, head));
        }
    }
    Ok(files)
}

/// Where an HTTP block's header ends (after its blank line).
fn http_end(block: &[u8]) -> Option<usize> {
    block.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// A response a revisit may stand for: its target URI (bare), its date, where it is.
type Capture = (Vec<u8>, Vec<u8>, RecordAt);

/// The responses of the exported files that revisits may stand for, found as resolvers find
/// them (`--resolved`).
#[derive(Default)]
struct Originals {
    by_id: HashMap<Vec<u8>, RecordAt>,
    /// By payload digest string.
    by_digest: HashMap<Vec<u8>, Vec<Capture>>,
}

impl Originals {
    fn note(&mut self, h: &Header, at: RecordAt) {
        if !(h.is("response") || h.is("resource")) {
            return;
        }
        if let Some(id) = h.get("WARC-Record-ID") {
            self.by_id.insert(id.to_vec(), at);
        }
        if let (Some(d), Some(uri), Some(date)) = (h.get("WARC-Payload-Digest"), h.get("WARC-Target-URI"), h.get("WARC-Date")) {
            self.by_digest.entry(d.to_vec()).or_default().push((bare_uri(uri).to_vec(), date.to_vec(), at));
        }
    }

    /// The original of the revisit `rev`, if it is among them.
    fn find(&self, rev: &Header) -> Option<RecordAt> {
        if let Some(at) = rev.get("WARC-Refers-To").and_then(|id| self.by_id.get(id)) {
            return Some(*at);
        }
        let cands = self.by_digest.get(rev.get("WARC-Payload-Digest")?)?;
        if let (Some(uri), Some(date)) = (rev.get("WARC-Refers-To-Target-URI"), rev.get("WARC-Refers-To-Date")) {
            if let Some((_, _, at)) = cands.iter().find(|(u, d, _)| u == bare_uri(uri) && d == date) {
                return Some(*at);
            }
        }
        let uri = bare_uri(rev.get("WARC-Target-URI").unwrap_or_default());
        let date = rev.get("WARC-Date").unwrap_or_default();
        let same_url = cands.iter().filter(|(u, _, _)| u == uri);
        if let Some((_, _, at)) = same_url.clone().filter(|(_, d, _)| d.as_slice() <= date).max_by(|a, b| a.1.cmp(&b.1)).or_else(|| same_url.min_by(|a, b| a.1.cmp(&b.1))) {
            return Some(*at);
        }
        cands.first().map(|(_, _, at)| *at)
    }
}

impl Store {
    /// `export --revisits`: the stored WARCs under `roots` into `dest`, at their paths below
    /// their root, responses whose payload an earlier one holds (at least `min_payload`
    /// bytes of it) written as revisits. Gives each file's figures.
    pub fn export_revisits(&self, roots: &[String], dest: &Path, min_payload: u64) -> Result<Vec<ExportedFile>> {
        let files = warcs_under(self, roots)?;
        // By the payload's SHA-256: the original's WARC header and file.
        let mut originals: HashMap<[u8; 32], (Header, usize)> = HashMap::new();
        let mut out = Vec::new();
        for (i, (name, head)) in files.iter().enumerate() {
            let mut f = ExportedFile { name: name.clone(), bytes_in: head.size, ..ExportedFile::default() };
            self.export_file(&files, i, dest, &mut f, &mut |f, r| {
                let Some(header) = Header::parse(&r.warc_header).filter(|h| h.is("response")) else { return Ok(None) };
                let Some(block) = self.record_block(&files[i].1, RecordAt::of(i, r), name.ends_with(".gz"))? else { return Ok(None) };
                let Some(http_end) = http_end(&block) else { return Ok(None) };
                let payload = &block[http_end..];
                if (payload.len() as u64) < min_payload.max(1) {
                    return Ok(None);
                }
                let key: [u8; 32] = sha2::Sha256::digest(payload).into();
                if let Some((orig, file)) = originals.get(&key) {
                    let Some(record) = revisit_record(&header, &block[..http_end], orig) else { return Ok(None) };
                    f.revisits += 1;
                    return Ok(Some(Replacement { record, names: *file }));
                }
                if header.get("WARC-Payload-Digest").is_some() {
                    originals.insert(key, (header, i));
                }
                Ok(None)
            })?;
            out.push(f);
        }
        Ok(out)
    }

    /// `export --resolved`: the stored WARCs under `roots` into `dest`, each revisit whose
    /// original is among them written as the response it stands for.
    pub fn export_resolved(&self, roots: &[String], dest: &Path) -> Result<Vec<ExportedFile>> {
        let files = warcs_under(self, roots)?;
        let mut originals = Originals::default();
        for (i, (_, head)) in files.iter().enumerate() {
            self.each_warc_record(head, &mut |r| {
                if let Some(h) = Header::parse(&r.warc_header) {
                    originals.note(&h, RecordAt::of(i, &r));
                }
                Ok(())
            })?;
        }
        let mut out = Vec::new();
        for (i, (name, head)) in files.iter().enumerate() {
            let mut f = ExportedFile { name: name.clone(), bytes_in: head.size, ..ExportedFile::default() };
            self.export_file(&files, i, dest, &mut f, &mut |f, r| {
                let Some(rev) = Header::parse(&r.warc_header).filter(|h| h.is("revisit")) else { return Ok(None) };
                let found = originals.find(&rev).filter(|at| !(at.file == i && at.offset == r.offset));
                let Some(at) = found else {
                    f.unresolved += 1;
                    return Ok(None);
                };
                let (own, orig) = (self.record_block(head, RecordAt::of(i, r), name.ends_with(".gz"))?, self.record_block(&files[at.file].1, at, files[at.file].0.ends_with(".gz"))?);
                let (Some(own), Some(orig)) = (own, orig) else {
                    f.unresolved += 1;
                    return Ok(None);
                };
                let Some(orig_http) = http_end(&orig) else {
                    f.unresolved += 1;
                    return Ok(None);
                };
                // The revisit's own HTTP header, unless it has none or it is a 304 (a
                // server-not-modified revisit describes no body): then the original's.
                let own_http = http_end(&own).map(|e| &own[..e]).filter(|h| !h.starts_with(b"HTTP/1.1 304") && !h.starts_with(b"HTTP/1.0 304"));
                let block = [own_http.unwrap_or(&orig[..orig_http]), &orig[orig_http..]].concat();
                f.resolved += 1;
                Ok(Some(Replacement { record: resolved_record(&rev, &block), names: at.file }))
            })?;
            out.push(f);
        }
        Ok(out)
    }

    /// Writes file `i` of `files` under `dest`: each record as stored, or what `replace`
    /// gives for it (a gzip member of its own in a gzip file), the bytes between records as
    /// they are. Fills in `f`'s counts of records and bytes and the files it names.
    fn export_file(&self, files: &Files, i: usize, dest: &Path, f: &mut ExportedFile, replace: &mut dyn FnMut(&mut ExportedFile, &RecordHead) -> Result<Option<Replacement>>) -> Result<()> {
        let (name, head) = &files[i];
        let path = dest.join(name);
        let io = |err: std::io::Error| StoreError::Io { path: path.clone(), err };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).map_err(io)?);
        let gz = name.ends_with(".gz");
        let mut pos = 0u64;
        self.each_warc_record(head, &mut |r| {
            if r.offset < pos {
                return Ok(());
            }
            f.records += 1;
            self.copy_range(head, pos, r.offset, &mut w)?;
            match replace(f, &r)? {
                Some(Replacement { mut record, names }) => {
                    record.extend_from_slice(b"\r\n\r\n");
                    let bytes = if gz {
                        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                        e.write_all(&record).and_then(|()| e.finish())
                    } else {
                        // (The separator is in the bytes after a plain record, copied as they are.)
                        record.truncate(record.len() - 4);
                        Ok(record)
                    };
                    bytes.and_then(|b| w.write_all(&b)).map_err(|err| StoreError::Io { path: path.clone(), err })?;
                    if names != i {
                        f.requires.insert(files[names].0.clone());
                    }
                }
                None => self.copy_range(head, r.offset, r.offset + r.length, &mut w)?,
            }
            pos = r.offset + r.length;
            Ok(())
        })?;
        self.copy_range(head, pos, head.size, &mut w)?;
        w.flush().map_err(io)?;
        f.bytes_out = w.get_ref().metadata().map_err(io)?.len();
        Ok(())
    }

    /// Writes bytes [a, b) of the file to `w`.
    fn copy_range(&self, head: &RecipeHead, mut a: u64, b: u64, w: &mut dyn Write) -> Result<()> {
        let mut buf = vec![0u8; (b.saturating_sub(a)).min(4 << 20) as usize];
        while a < b {
            let want = buf.len().min((b - a) as usize);
            let n = self.read_at(head, a, &mut buf[..want])?;
            if n == 0 {
                break;
            }
            w.write_all(&buf[..n]).map_err(|err| StoreError::Io { path: "(export)".into(), err })?;
            a += n as u64;
        }
        Ok(())
    }

    /// The block of the record `at` of a file (`gz`: its member inflated), exactly as long
    /// as it says; None if it is not (cut short, a member that does not inflate, or larger
    /// than `MAX_RECORD`).
    fn record_block(&self, head: &RecipeHead, at: RecordAt, gz: bool) -> Result<Option<Vec<u8>>> {
        if at.length > MAX_RECORD || at.clen > MAX_RECORD {
            return Ok(None);
        }
        let block = if gz {
            let mut member = vec![0u8; at.length as usize];
            let n = self.read_at(head, at.offset, &mut member)?;
            let mut text = Vec::new();
            if flate2::read::GzDecoder::new(&member[..n]).take(MAX_RECORD * 2).read_to_end(&mut text).is_err() {
                return Ok(None);
            }
            text.get(at.hlen..at.hlen.saturating_add(at.clen as usize)).map(<[u8]>::to_vec).unwrap_or_default()
        } else {
            let mut block = vec![0u8; at.clen as usize];
            let n = self.read_at(head, at.offset + at.hlen as u64, &mut block)?;
            block.truncate(n);
            block
        };
        Ok((block.len() as u64 == at.clen).then_some(block))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::tests::{meta, open, read_all};
    use crate::store::{Verify, ROOT_INO};

    fn record(kind: &str, id: u32, url: &str, date: &str, fields: &str, block: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "WARC/1.0\r\nWARC-Type: {kind}\r\nWARC-Record-ID: <urn:uuid:{id:08}>\r\nWARC-Target-URI: {url}\r\nWARC-Date: {date}\r\n{fields}Content-Type: application/http; msgtype=response\r\nContent-Length: {}\r\n\r\n",
            block.len()
        )
        .into_bytes();
        r.extend_from_slice(block);
        r.extend_from_slice(b"\r\n\r\n");
        r
    }

    /// An HTTP header saying `len` bytes of body follow.
    fn head(status: &str, len: usize) -> Vec<u8> {
        format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\n\r\n").into_bytes()
    }

    fn digest(p: &[u8]) -> String {
        use sha1::Digest as _;
        format!("WARC-Payload-Digest: {}\r\n", crate::format::cdx::sha1_string(&sha1::Sha1::digest(p).into()))
    }

    /// Revisits as other writers leave them (pywb's recorder: no `WARC-Refers-To`; another
    /// URL named by `WARC-Refers-To-Target-URI`; a server-not-modified one with a 304 header)
    /// are resolved by digest and URL, to the right one of several originals with that
    /// digest; one whose original is not there, and one that names only itself, stay as they
    /// are.
    #[test]
    fn revisits_without_record_ids_resolve_by_digest_and_url() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(&dir.path().join("store"), Verify::Bytes, crate::digest::sha256);
        let (a, b) = (b"payload of page A".to_vec(), b"payload of page A, later".to_vec());
        let whole = |status: &str, p: &[u8]| [head(status, p.len()), p.to_vec()].concat();
        let mut f = Vec::new();
        f.extend(record("response", 1, "http://x/a", "2026-01-01T00:00:00Z", &digest(&a), &whole("200 OK", &a)));
        f.extend(record("response", 2, "http://x/a", "2026-02-01T00:00:00Z", &digest(&b), &whole("200 OK", &b)));
        f.extend(record("response", 3, "http://x/other", "2026-01-15T00:00:00Z", &digest(&a), &whole("200 OK", &a)));
        // Same URL, nothing but the digest: the latest earlier capture of the URL with it.
        f.extend(record("revisit", 4, "http://x/a", "2026-03-01T00:00:00Z", &digest(&a), &head("200 OK", a.len())));
        // Another URL, named with its date (pywb's recorder).
        let to_other = format!("{}WARC-Refers-To-Target-URI: http://x/other\r\nWARC-Refers-To-Date: 2026-01-15T00:00:00Z\r\n", digest(&a));
        f.extend(record("revisit", 5, "http://x/c", "2026-03-02T00:00:00Z", &to_other, &head("200 OK", a.len())));
        // Server-not-modified: a 304 header describes no body: the original's header is used.
        f.extend(record("revisit", 6, "http://x/a", "2026-03-03T00:00:00Z", &digest(&b), &head("304 Not Modified", 0)));
        // An original that is not there, and a revisit that names only itself.
        f.extend(record("revisit", 7, "http://x/gone", "2026-03-04T00:00:00Z", &digest(b"nowhere"), &head("200 OK", 7)));
        f.extend(record("revisit", 8, "http://x/self", "2026-03-05T00:00:00Z", "WARC-Refers-To: <urn:uuid:00000008>\r\n", &head("200 OK", 1)));
        s.put_file(ROOT_INO, b"in.warc", &f, meta()).unwrap();
        assert_eq!(read_all(&s, "in.warc"), f);
        let out = dir.path().join("out");
        let files = s.export_resolved(&["/in.warc".to_string()], &out).unwrap();
        assert_eq!((files[0].records, files[0].resolved, files[0].unresolved), (8, 3, 2), "{files:?}");
        let text = std::fs::read(out.join("in.warc")).unwrap();
        let find = |id: u32| -> &[u8] {
            let needle = format!("WARC-Record-ID: <urn:uuid:{id:08}>");
            let at = text.windows(needle.len()).position(|w| w == needle.as_bytes()).unwrap();
            let start = text[..at].windows(10).rposition(|w| w == b"WARC/1.0\r\n").unwrap();
            let end = text[start + 1..].windows(10).position(|w| w == b"WARC/1.0\r\n").map_or(text.len(), |e| start + 1 + e);
            &text[start..end]
        };
        let show = |r: &[u8]| String::from_utf8_lossy(r).into_owned();
        let resolved_as = |r: &[u8], block: &[u8]| r.starts_with(b"WARC/1.0\r\nWARC-Type: response\r\n") && r.ends_with(&[block, b"\r\n\r\n"].concat()) && !r.windows(14).any(|w| w == b"WARC-Refers-To");
        assert!(resolved_as(find(4), &whole("200 OK", &a)), "{}", show(find(4)));
        assert!(resolved_as(find(5), &whole("200 OK", &a)), "{}", show(find(5)));
        assert!(resolved_as(find(6), &whole("200 OK", &b)), "{}", show(find(6)));
        assert!(find(7).starts_with(b"WARC/1.0\r\nWARC-Type: revisit") && find(8).starts_with(b"WARC/1.0\r\nWARC-Type: revisit"));
        // Records that are not revisits are copied as they are.
        assert!(text.starts_with(&f[..f.windows(10).skip(1).position(|w| w == b"WARC/1.0\r\n").unwrap() + 1]));
    }
}
