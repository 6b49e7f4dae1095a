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
//! (`--revisits`); `--resolved` finds originals in tables sorted on disk
//! (`read::originals`).

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;

use sha2::Digest as _;

use crate::format::warc::revisit::{revisit_record, Header};
use crate::recipe::RecipeHead;
use crate::store::read::originals::{Loc, Originals};
use crate::store::read::records::RecordHead;
use crate::store::{Result, Store, StoreError};

/// The largest response whose payload is looked at (a larger one is copied as it is).
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
    /// among the exported files (or whose resolved record would be larger than
    /// `MAX_RESOLVED`), left as they are (`--resolved`).
    pub resolved: u64,
    pub unresolved: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The exported files whose records its revisits name, or whose payloads its resolved
    /// records hold (itself left out).
    pub requires: BTreeSet<String>,
}

/// A record written anew in place of a stored one: header and block, without the record
/// separator, and the exported file it names (if another).
struct Replacement {
    record: Vec<u8>,
    names: usize,
}

/// An exported file: its path below its root, inode and recipe.
struct File {
    name: String,
    ino: u64,
    head: RecipeHead,
}

/// The stored WARCs under each of `roots` (in that order; under one, sorted by path), each
/// with its path below its root.
fn warcs_under(s: &Store, roots: &[String]) -> Result<Vec<File>> {
    let mut files = Vec::new();
    let mut names = BTreeSet::new();
    for root in roots {
        let mut under = Vec::new();
        s.each_file_under(root, &mut |name, ino, inode| {
            if !crate::store::is_warc_name(name.as_bytes()) {
                return Ok(());
            }
            if inode.staged {
                return Err(StoreError::Staged(name.to_string()));
            }
            under.extend(inode.recipe.clone().map(|head| File { name: name.to_string(), ino, head }));
            Ok(())
        })?;
        under.sort_by(|a, b| a.name.cmp(&b.name));
        for f in under {
            if !names.insert(f.name.clone()) {
                return Err(StoreError::Exists(format!("{} (under two of the paths exported)", f.name)));
            }
            files.push(f);
        }
    }
    Ok(files)
}

/// A gzip member of its own holding `record` and its separator, as `export` writes one.
fn member(record: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(record)?;
    e.write_all(b"\r\n\r\n")?;
    e.finish()
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
        for (i, file) in files.iter().enumerate() {
            let mut f = ExportedFile { name: file.name.clone(), bytes_in: file.head.size, ..ExportedFile::default() };
            self.export_file(&files, i, dest, &mut f, &mut |f, r| {
                let Some(header) = Header::parse(&r.warc_header).filter(|h| h.is("response")) else { return Ok(None) };
                let Some(at) = Loc::of(file.ino, file.head.id, r).filter(|at| at.clen <= MAX_RECORD && at.payload_len() >= min_payload.max(1)) else { return Ok(None) };
                let Some(text) = self.record_text(&file.head, &at)? else { return Ok(None) };
                let (http, payload) = text[at.hlen as usize..].split_at(at.http as usize);
                let key: [u8; 32] = sha2::Sha256::digest(payload).into();
                if let Some((orig, file)) = originals.get(&key) {
                    let Some(record) = revisit_record(&header, http, orig) else { return Ok(None) };
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
    /// original is among them written as the response it stands for: the records
    /// `/.warcfs/resolved/` shows (`read::resolved`), a gzip file's compressed.
    pub fn export_resolved(&self, roots: &[String], dest: &Path) -> Result<Vec<ExportedFile>> {
        let files = warcs_under(self, roots)?;
        let heads: Vec<(u64, RecipeHead)> = files.iter().map(|f| (f.ino, f.head.clone())).collect();
        let originals = Originals::build(self, &heads, &crate::store::layout::cache(self.root()))?;
        let by_recipe: HashMap<u64, usize> = files.iter().enumerate().map(|(i, f)| (f.head.id, i)).collect();
        let mut out = Vec::new();
        for (i, file) in files.iter().enumerate() {
            let mut f = ExportedFile { name: file.name.clone(), bytes_in: file.head.size, ..ExportedFile::default() };
            let view = self.resolve_file(file.ino, &file.head, &originals, &mut |_| {
                f.records += 1;
                Ok(())
            })?;
            (f.resolved, f.unresolved) = (view.resolved, view.unresolved);
            let path = dest.join(&file.name);
            let io = |err: std::io::Error| StoreError::Io { path: path.clone(), err };
            let mut w = create(&path)?;
            view.write_to(self, &mut w, &mut |r| {
                // (A record that cannot be made is copied as it is stored, and counted.)
                let text = match self.resolved_text(&file.head, r) {
                    Ok(t) => t,
                    Err(e) => {
                        log::warn!("{}: {e}; the revisit is copied as it is", file.name);
                        (f.resolved, f.unresolved) = (f.resolved - 1, f.unresolved + 1);
                        let mut stored = Vec::new();
                        self.copy_range(&file.head, r.rev.offset, r.rev.offset + r.rev.length, &mut stored)?;
                        return Ok(stored);
                    }
                };
                if let Some(&j) = by_recipe.get(&r.orig.recipe).filter(|&&j| j != i) {
                    f.requires.insert(files[j].name.clone());
                }
                if r.rev.member {
                    member(&text).map_err(io)
                } else {
                    Ok(text)
                }
            })?;
            w.flush().map_err(io)?;
            f.bytes_out = w.get_ref().metadata().map_err(io)?.len();
            out.push(f);
        }
        Ok(out)
    }

    /// Writes file `i` of `files` under `dest`: each record as stored, or what `replace`
    /// gives for it (a gzip member of its own in a gzip file), the bytes between records as
    /// they are. Fills in `f`'s counts of records and bytes and the files it names.
    fn export_file(&self, files: &[File], i: usize, dest: &Path, f: &mut ExportedFile, replace: &mut dyn FnMut(&mut ExportedFile, &RecordHead) -> Result<Option<Replacement>>) -> Result<()> {
        let File { name, head, .. } = &files[i];
        let path = dest.join(name);
        let io = |err: std::io::Error| StoreError::Io { path: path.clone(), err };
        let mut w = create(&path)?;
        let gz = name.ends_with(".gz");
        let mut pos = 0u64;
        self.each_warc_record(head, &mut |r| {
            if r.offset < pos {
                return Ok(());
            }
            f.records += 1;
            self.copy_range(head, pos, r.offset, &mut w)?;
            match replace(f, &r)? {
                Some(Replacement { record, names }) => {
                    // (A plain record's separator is in the bytes after it, copied as they are.)
                    let bytes = if gz { member(&record).map_err(io)? } else { record };
                    w.write_all(&bytes).map_err(io)?;
                    if names != i {
                        f.requires.insert(files[names].name.clone());
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
    pub(in crate::store) fn copy_range(&self, head: &RecipeHead, mut a: u64, b: u64, w: &mut dyn Write) -> Result<()> {
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
}

/// A new file at `path` (its directories made), buffered.
fn create(path: &Path) -> Result<std::io::BufWriter<std::fs::File>> {
    let io = |err: std::io::Error| StoreError::Io { path: path.to_path_buf(), err };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    Ok(std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).map_err(io)?))
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
