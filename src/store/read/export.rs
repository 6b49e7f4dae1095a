//! `warcfs export --revisits`: copies of stored WARCs in which every response whose payload an
//! earlier exported response holds, byte for byte, is a revisit record naming that original
//! (`format::warc::revisit`), for institutions that exchange deduplicated WARCs. Everything
//! else is copied as it is stored: gzip members byte for byte, a revisit a gzip member of its
//! own. Originals are the first captures in the order the files are exported, so files are
//! exported oldest first (OpenWayback resolves a revisit only against an earlier capture).
//!
//! Two payloads are one only if their bytes are (SHA-256 of the payload as stored, the
//! transfer encoding and all): the revisit's own HTTP header with the original's payload is
//! then the response it replaces, exactly. Memory: one SHA-256 and the original's WARC
//! header per distinct payload exported (a few hundred bytes each).

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::Path;

use sha2::Digest as _;

use crate::format::warc::revisit::{revisit_record, Header};
use crate::recipe::RecipeHead;
use crate::store::read::records::{content_length, RecordHead};
use crate::store::{Result, Store, StoreError};

/// The largest record whose payload is looked at (a larger one is copied as it is).
const MAX_RECORD: u64 = 256 << 20;

/// What one exported file holds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ExportedFile {
    /// Its path under the destination.
    pub name: String,
    pub records: u64,
    pub revisits: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The exported files whose records its revisits name (itself left out): what a receiver
    /// must index in the same collection.
    pub requires: BTreeSet<String>,
}

struct Original {
    header: Header,
    file: String,
}

/// The stored WARCs under `root` (a directory or one file), each with its path below it,
/// sorted by that path.
fn warcs_under(s: &Store, root: &str) -> Result<Vec<(String, RecipeHead)>> {
    let mut out = Vec::new();
    s.each_file_under(root, &mut |name, inode| {
        if !(name.ends_with(".warc") || name.ends_with(".warc.gz")) {
            return Ok(());
        }
        if inode.staged {
            return Err(StoreError::Staged(name.to_string()));
        }
        out.extend(inode.recipe.clone().map(|h| (name.to_string(), h)));
        Ok(())
    })?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

impl Store {
    /// Exports the stored WARCs under each of `roots` (in that order; under one, sorted by
    /// path) into `dest`, at their paths below their root, responses whose payload an earlier
    /// one holds (at least `min_payload` bytes of it) written as revisits. Gives each file's
    /// figures.
    pub fn export_revisits(&self, roots: &[String], dest: &Path, min_payload: u64) -> Result<Vec<ExportedFile>> {
        let mut files = Vec::new();
        let mut names = BTreeSet::new();
        for root in roots {
            for (name, head) in warcs_under(self, root)? {
                if !names.insert(name.clone()) {
                    return Err(StoreError::Exists(format!("{name} (under two of the paths exported)")));
                }
                files.push((name, head));
            }
        }
        let mut originals: HashMap<[u8; 32], Original> = HashMap::new();
        let mut out = Vec::new();
        for (name, head) in &files {
            out.push(self.export_file(name, head, dest, min_payload, &mut originals)?);
        }
        Ok(out)
    }

    fn export_file(&self, name: &str, head: &RecipeHead, dest: &Path, min_payload: u64, originals: &mut HashMap<[u8; 32], Original>) -> Result<ExportedFile> {
        let path = dest.join(name);
        let io = |err: std::io::Error| StoreError::Io { path: path.clone(), err };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).map_err(io)?);
        let gz = name.ends_with(".gz");
        let mut f = ExportedFile { name: name.to_string(), bytes_in: head.size, ..ExportedFile::default() };
        let mut pos = 0u64;
        let mut failed: Option<std::io::Error> = None;
        self.each_warc_record(head, &mut |r| {
            if r.offset < pos {
                return Ok(());
            }
            f.records += 1;
            let copy = |w: &mut dyn Write, a: u64, b: u64| self.copy_range(head, a, b, w);
            copy(&mut w, pos, r.offset)?;
            match self.revisit_for(head, &r, gz, name, min_payload, originals)? {
                Some((bytes, orig_file)) => {
                    if let Err(e) = w.write_all(&bytes) {
                        failed.get_or_insert(e);
                    }
                    f.revisits += 1;
                    if orig_file != name {
                        f.requires.insert(orig_file);
                    }
                }
                None => copy(&mut w, r.offset, r.offset + r.length)?,
            }
            pos = r.offset + r.length;
            Ok(())
        })?;
        if let Some(e) = failed {
            return Err(io(e));
        }
        self.copy_range(head, pos, head.size, &mut w)?;
        w.flush().map_err(io)?;
        f.bytes_out = w.get_ref().metadata().map_err(io)?.len();
        Ok(f)
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

    /// The revisit record (a gzip member of its own in a gzip file) that replaces record `r`
    /// of `file`, and the file of its original; None if `r` stays as it is (not a response
    /// with an HTTP payload, a payload first met here, or one too small), and then, if its
    /// payload is first met here, it is the original of those to come.
    fn revisit_for(&self, head: &RecipeHead, r: &RecordHead, gz: bool, file: &str, min_payload: u64, originals: &mut HashMap<[u8; 32], Original>) -> Result<Option<(Vec<u8>, String)>> {
        let Some(header) = Header::parse(&r.warc_header).filter(|h| h.is("response")) else { return Ok(None) };
        let clen = content_length(&r.warc_header).unwrap_or(0);
        if r.length > MAX_RECORD || clen > MAX_RECORD {
            return Ok(None);
        }
        let block = if gz {
            let mut member = vec![0u8; r.length as usize];
            let n = self.read_at(head, r.offset, &mut member)?;
            let mut text = Vec::new();
            if flate2::read::GzDecoder::new(&member[..n]).take(MAX_RECORD * 2).read_to_end(&mut text).is_err() {
                return Ok(None);
            }
            let hlen = r.warc_header.len();
            text.get(hlen..hlen.saturating_add(clen as usize)).map(<[u8]>::to_vec).unwrap_or_default()
        } else {
            let mut block = vec![0u8; clen as usize];
            let n = self.read_at(head, r.offset + r.warc_header.len() as u64, &mut block)?;
            block.truncate(n);
            block
        };
        if block.len() as u64 != clen {
            return Ok(None);
        }
        let Some(http_end) = block.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4) else { return Ok(None) };
        let payload = &block[http_end..];
        if (payload.len() as u64) < min_payload.max(1) {
            return Ok(None);
        }
        let key: [u8; 32] = sha2::Sha256::digest(payload).into();
        if let Some(orig) = originals.get(&key) {
            let Some(mut rec) = revisit_record(&header, &block[..http_end], &orig.header) else { return Ok(None) };
            rec.extend_from_slice(b"\r\n\r\n");
            let bytes = if gz {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(&rec).and_then(|()| e.finish()).map_err(|err| StoreError::Io { path: "(export)".into(), err })?
            } else {
                rec.truncate(rec.len() - 4);
                rec
            };
            return Ok(Some((bytes, orig.file.clone())));
        }
        if header.get("WARC-Payload-Digest").is_some() {
            originals.insert(key, Original { header, file: file.to_string() });
        }
        Ok(None)
    }
}
