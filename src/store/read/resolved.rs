//! A stored WARC resolved: each revisit record whose original `Originals` finds written as
//! the response it stands for (`format::warc::revisit::resolved_record`: the revisit's own
//! identity and HTTP header, or the original's for a server-not-modified revisit, then the
//! original's payload), every other byte of the file as it is stored. Nothing is stored for
//! it: a `ResolvedFile` is the file's layout, ranges of the stored file and resolved records,
//! each record's length known from the headers alone (a gzip file's resolved record is a
//! member of stored deflate blocks), and a resolved record is made when it is read.
//! `/.warcfs/resolved/` shows these; `warcfs export --resolved` writes them.

use std::io::Read;
use std::sync::{Arc, Mutex};

use crate::format::gzip::{stored_member, stored_member_len};
use crate::format::warc::revisit::{resolved_head, resolved_record, Header};
use crate::recipe::RecipeHead;
use crate::store::read::originals::{http_end, Loc, Originals};
use crate::store::read::records::RecordHead;
use crate::store::read::cache::SizedLru;
use crate::LockExt;
use crate::store::{Result, Store, StoreError};

/// The largest resolved record made (its block): a larger one stays a revisit (reported).
pub const MAX_RESOLVED: u64 = 64 << 20;
/// The largest revisit record read to resolve it (its header and HTTP header).
const MAX_REVISIT: u64 = 1 << 20;

/// One resolved record of a file: the revisit, its original, what it becomes.
#[derive(Clone, Debug)]
pub struct Resolution {
    /// The revisit, where it is in the file (its `http`: its own HTTP header's length, 0
    /// if the original's is used).
    pub rev: Loc,
    pub orig: Loc,
    /// The resolved record's length (header and block, without the record separator), and
    /// what it takes in the file (a gzip file: its member, separator inside).
    pub record_len: u64,
    pub len: u64,
}

#[derive(Clone, Debug)]
enum Part {
    /// Bytes [from, from + len) of the stored file.
    Copy { from: u64, len: u64 },
    Record(Box<Resolution>),
}

/// A stored WARC as its resolved view shows it.
#[derive(Debug)]
pub struct ResolvedFile {
    /// This layout's own id (a file's layout made again, with other originals, is another).
    pub id: u64,
    pub head: RecipeHead,
    pub size: u64,
    /// Each part and where it starts in the view.
    parts: Vec<(u64, Part)>,
    /// Revisits resolved, and left as they are (no original found, or too large).
    pub resolved: u64,
    pub unresolved: u64,
}

/// What `Store::resolve_file` hands its caller for each record: the record as stored, its
/// offset in the resolved file, and, if it is resolved, its resolved header and length
/// there.
pub struct Resolved<'a> {
    pub record: &'a RecordHead,
    pub offset: u64,
    pub resolution: Option<(&'a [u8], &'a Resolution)>,
}

/// Resolved records made for readers, by layout and part, shared by every reader and
/// bounded in bytes: a reader going through a record a page at a time makes it once, and
/// readers of many files hold no more than the budget between them.
pub struct MadeRecords {
    held: Mutex<SizedLru<PartKey, Vec<u8>>>,
}

/// A layout's id and a part of it.
type PartKey = (u64, usize);

impl MadeRecords {
    pub fn new(budget: u64) -> MadeRecords {
        MadeRecords { held: Mutex::new(SizedLru::new(budget.try_into().unwrap_or(usize::MAX))) }
    }

    fn get(&self, key: PartKey) -> Option<Arc<Vec<u8>>> {
        self.held.locked().get(&key)
    }

    fn put(&self, key: PartKey, bytes: Arc<Vec<u8>>) {
        // (The record just made stays, whatever its size: its reader reads on in it.)
        let size = bytes.len();
        self.held.locked().put_kept(key, bytes, size);
    }
}

/// Layout ids (`ResolvedFile::id`), for `MadeRecords`' keys.
static NEXT_LAYOUT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl ResolvedFile {
    /// The resolved records, in file order.
    pub fn resolutions(&self) -> impl Iterator<Item = &Resolution> {
        self.parts.iter().filter_map(|(_, p)| if let Part::Record(r) = p { Some(&**r) } else { None })
    }

    /// Up to `buf.len()` bytes at `offset` (fewer only at the end); the resolved records
    /// read are made once while `made` holds them.
    pub fn read_at(&self, store: &Store, offset: u64, buf: &mut [u8], made: &MadeRecords) -> Result<usize> {
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            if at >= self.size {
                break;
            }
            let i = self.parts.partition_point(|(start, _)| *start <= at) - 1;
            let (start, part) = &self.parts[i];
            let within = at - start;
            let n = match part {
                Part::Copy { from, len } => {
                    let want = ((len - within) as usize).min(buf.len() - done);
                    let n = store.read_at(&self.head, from + within, &mut buf[done..done + want])?;
                    if n == 0 {
                        return Err(StoreError::Resolve(format!("the stored file ends at {} before its resolved view does", from + within)));
                    }
                    n
                }
                Part::Record(r) => {
                    let bytes = match made.get((self.id, i)) {
                        Some(b) => b,
                        None => {
                            let b = Arc::new(store.resolved_bytes(&self.head, r)?);
                            made.put((self.id, i), b.clone());
                            b
                        }
                    };
                    let n = ((r.len - within) as usize).min(buf.len() - done);
                    buf[done..done + n].copy_from_slice(&bytes[within as usize..within as usize + n]);
                    n
                }
            };
            done += n;
        }
        Ok(done)
    }
}

impl Store {
    /// The resolved layout of the stored WARC `head` (of inode `ino`), its revisits looked
    /// up in `originals`; `each` is handed every record on the way (for an index of the
    /// view).
    pub fn resolve_file(&self, ino: u64, head: &RecipeHead, originals: &Originals, each: &mut dyn FnMut(Resolved) -> Result<()>) -> Result<ResolvedFile> {
        let mut f = ResolvedFile { id: NEXT_LAYOUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed), head: head.clone(), size: 0, parts: Vec::new(), resolved: 0, unresolved: 0 };
        let mut pos = 0u64;
        self.each_warc_record(head, &mut |r| {
            if r.offset < pos {
                return Ok(());
            }
            f.copy(pos, r.offset);
            let rev = Header::parse(&r.warc_header).filter(|h| h.is("revisit"));
            let resolution = match &rev {
                Some(rev) => self.resolution(ino, head, &r, rev, originals)?,
                None => None,
            };
            let offset = f.size;
            match resolution {
                Some((header, res)) => {
                    f.resolved += 1;
                    each(Resolved { record: &r, offset, resolution: Some((&header, &res)) })?;
                    f.size += res.len;
                    f.parts.push((offset, Part::Record(Box::new(res))));
                }
                None => {
                    f.unresolved += rev.is_some() as u64;
                    each(Resolved { record: &r, offset, resolution: None })?;
                    f.copy(r.offset, r.offset + r.length);
                }
            }
            pos = r.offset + r.length;
            Ok(())
        })?;
        f.copy(pos, head.size);
        Ok(f)
    }

    /// The resolution of the revisit `r` (header `rev`) of the file `head` (inode `ino`),
    /// with the resolved record's header: None if its original is not in `originals` (or
    /// is the revisit itself), or the record would be larger than `MAX_RESOLVED`.
    fn resolution(&self, ino: u64, head: &RecipeHead, r: &RecordHead, rev: &Header, originals: &Originals) -> Result<Option<(Vec<u8>, Resolution)>> {
        let Some(orig) = originals.find(rev)?.filter(|o| !(o.recipe == head.id && o.offset == r.offset)) else { return Ok(None) };
        // The revisit's own HTTP header, unless it has none or it is a 304 (it describes no
        // body): then the original's.
        let own_http = r.http_header.as_deref().filter(|h| h.starts_with(b"HTTP/") && !is_304(h)).and_then(http_end).unwrap_or(0);
        // The revisit's own place: whole, and alone in its member (a member holding more is
        // left as it is: its other records would be lost).
        let Some(mut own) = Loc::of(ino, head.id, r) else { return Ok(None) };
        if own.member && r.member_text != own.hlen as u64 + own.clen + 4 {
            return Ok(None);
        }
        own.http = own_http as u32;
        let block_len = if own_http > 0 { own_http as u64 } else { orig.http as u64 } + orig.payload_len();
        if block_len > MAX_RESOLVED || own.hlen as u64 + own.clen > MAX_REVISIT {
            return Ok(None);
        }
        let header = resolved_head(rev, block_len);
        let record_len = header.len() as u64 + block_len;
        let len = if own.member { stored_member_len(record_len + 4) } else { record_len };
        Ok(Some((header, Resolution { rev: own, orig, record_len, len })))
    }

    /// The resolved record `r` of the file `head` as the view shows it (a gzip file's: its
    /// member).
    pub fn resolved_bytes(&self, head: &RecipeHead, r: &Resolution) -> Result<Vec<u8>> {
        let mut record = self.resolved_text(head, r)?;
        if !r.rev.member {
            return Ok(record);
        }
        record.extend_from_slice(b"\r\n\r\n");
        Ok(stored_member(&record))
    }

    /// The resolved record `r` of the file `head`: header and block, without separator.
    pub fn resolved_text(&self, head: &RecipeHead, r: &Resolution) -> Result<Vec<u8>> {
        let bad = |what: String| StoreError::Resolve(format!("the revisit at {} (its original at {} of inode {}): {what}", r.rev.offset, r.orig.offset, r.orig.ino));
        let own = self.record_text(head, &r.rev)?.ok_or_else(|| bad("the revisit does not read as its headers say".into()))?;
        let rev = Header::parse(&own).ok_or_else(|| bad("the revisit's header does not parse".into()))?;
        let orig_head = self.original_head(&r.orig)?.ok_or_else(|| bad("the file holding the original has changed since the view was made".into()))?;
        let orig = self.record_text(&orig_head, &r.orig)?.ok_or_else(|| bad("the original does not read as its headers say".into()))?;
        let orig_block = &orig[r.orig.hlen as usize..];
        if http_end(orig_block) != Some(r.orig.http as usize) {
            return Err(bad("the original's HTTP header is not where its headers say".into()));
        }
        let http = if r.rev.http > 0 { &own[r.rev.hlen as usize..(r.rev.hlen + r.rev.http) as usize] } else { &orig_block[..r.orig.http as usize] };
        let block = [http, &orig_block[r.orig.http as usize..]].concat();
        let record = resolved_record(&rev, &block);
        if record.len() as u64 != r.record_len {
            return Err(bad(format!("made {} bytes where its headers gave {}", record.len(), r.record_len)));
        }
        Ok(record)
    }

    /// The recipe of the file holding the original `o`, if it is still the one it was found
    /// in.
    fn original_head(&self, o: &Loc) -> Result<Option<RecipeHead>> {
        Ok(self.inode(o.ino)?.and_then(|i| i.recipe).filter(|h| h.id == o.recipe))
    }

    /// The header and block of the record at `at` of the file `head` (a gzip member's text
    /// inflated): None if it is not as long as it says (cut short, a member that does not
    /// inflate). Bounded by the callers: at most `MAX_RESOLVED` and `MAX_REVISIT`.
    pub(in crate::store) fn record_text(&self, head: &RecipeHead, at: &Loc) -> Result<Option<Vec<u8>>> {
        self.record_start(head, at, at.hlen as u64 + at.clen)
    }

    /// The block of record `r` of the file `head` (a gzip member's text inflated, one kept
    /// as it is too), if it is at most `max` bytes and reads whole.
    pub fn block_of(&self, head: &RecipeHead, r: &RecordHead, max: u64) -> Result<Option<Vec<u8>>> {
        let Some(clen) = crate::store::read::records::content_length(&r.warc_header).filter(|&c| c <= max) else { return Ok(None) };
        let member = r.block != crate::store::read::records::BlockAt::Plain;
        let at = Loc { ino: 0, recipe: head.id, offset: r.offset, length: r.length, hlen: r.warc_header.len() as u32, clen, http: 0, member };
        Ok(self.record_text(head, &at)?.map(|mut t| t.split_off(at.hlen as usize)))
    }

    /// The first `want` bytes of the text of the record at `at` (`record_text`).
    fn record_start(&self, head: &RecipeHead, at: &Loc, want: u64) -> Result<Option<Vec<u8>>> {
        let text = if at.member {
            let mut member = vec![0u8; at.length.min(2 * want + (1 << 20)) as usize];
            let n = self.read_at(head, at.offset, &mut member)?;
            let mut text = Vec::with_capacity(want as usize);
            if flate2::read::GzDecoder::new(&member[..n]).take(want).read_to_end(&mut text).is_err() {
                return Ok(None);
            }
            text
        } else {
            let mut text = vec![0u8; want as usize];
            let n = self.read_at(head, at.offset, &mut text)?;
            text.truncate(n);
            text
        };
        Ok((text.len() as u64 == want).then_some(text))
    }
}

/// Where `/.warcfs/resolved/` is from a mount's root: its index lines name files there.
pub const RESOLVED_DIR: &str = ".warcfs/resolved";

impl Store {
    /// The CDXJ lines (unsorted) of the resolved view of every stored WARC, each naming its
    /// file at `RESOLVED_DIR/PATH`, a line at a time; files still being written through a
    /// mount are left out (they are not in the view until stored).
    pub fn resolved_cdxj_each(&self, originals: &Originals, f: &mut dyn FnMut(String) -> std::io::Result<()>) -> Result<()> {
        let io = |err: std::io::Error| StoreError::Io { path: "<index>".into(), err };
        self.each_file_under("/", &mut |name, ino, inode| {
            let Some(head) = inode.recipe.as_ref().filter(|_| crate::store::is_warc_name(name.as_bytes()) && !inode.staged) else { return Ok(()) };
            let path = format!("{RESOLVED_DIR}/{name}");
            self.resolve_file(ino, head, originals, &mut |x| {
                let line = match x.resolution {
                    None => {
                        let mut r = x.record.clone();
                        r.shift = r.offset.wrapping_sub(x.offset);
                        self.cdxj_of(head, &r, &path)?
                    }
                    Some((header, res)) => {
                        let http = match res.rev.http {
                            0 => self.original_http(&res.orig)?,
                            n => x.record.http_header.as_ref().map(|h| h[..n as usize].to_vec()),
                        };
                        crate::format::cdx::cdxj_line(header, http.as_deref(), x.offset, res.len, &path)
                    }
                };
                if let Some(l) = line {
                    f(l).map_err(io)?;
                }
                Ok(())
            })?;
            Ok(())
        })
    }

    /// The HTTP header of the original `o`, if its file is still the one it was found in.
    fn original_http(&self, o: &Loc) -> Result<Option<Vec<u8>>> {
        let Some(head) = self.original_head(o)? else { return Ok(None) };
        Ok(self.record_start(&head, o, o.hlen as u64 + o.http as u64)?.map(|t| t[o.hlen as usize..].to_vec()))
    }
}

impl ResolvedFile {
    /// Writes the view to `w`, each resolved record as `record` makes it.
    pub fn write_to(&self, store: &Store, w: &mut dyn std::io::Write, record: &mut dyn FnMut(&Resolution) -> Result<Vec<u8>>) -> Result<()> {
        for (_, p) in &self.parts {
            match p {
                Part::Copy { from, len } => store.copy_range(&self.head, *from, from + len, w)?,
                Part::Record(r) => w.write_all(&record(r)?).map_err(|err| StoreError::Io { path: "(the resolved view)".into(), err })?,
            }
        }
        Ok(())
    }

    /// Adds the bytes [a, b) of the stored file to the view, after what it holds.
    fn copy(&mut self, a: u64, b: u64) {
        if b <= a {
            return;
        }
        if let Some((_, Part::Copy { from, len })) = self.parts.last_mut() {
            if *from + *len == a {
                *len += b - a;
                self.size += b - a;
                return;
            }
        }
        self.parts.push((self.size, Part::Copy { from: a, len: b - a }));
        self.size += b - a;
    }
}

/// Whether an HTTP header is a 304's.
fn is_304(h: &[u8]) -> bool {
    h.starts_with(b"HTTP/1.1 304") || h.starts_with(b"HTTP/1.0 304")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records made for readers are kept within the budget, the least recently read going
    /// first.
    #[test]
    fn made_records_stay_within_their_budget() {
        let m = MadeRecords::new(100);
        for i in 0..3 {
            m.put((1, i), Arc::new(vec![0u8; 40]));
        }
        assert!(m.get((1, 0)).is_none(), "the oldest went");
        assert!(m.get((1, 1)).is_some() && m.get((1, 2)).is_some());
        m.put((2, 0), Arc::new(vec![0u8; 40]));
        assert!(m.get((1, 1)).is_none() && m.get((1, 2)).is_some() && m.get((2, 0)).is_some(), "(1, 2) read since");
        assert!(m.held.lock().unwrap().bytes <= 100);
        // One larger than the budget stays until the next.
        m.put((3, 0), Arc::new(vec![0u8; 500]));
        assert!(m.get((3, 0)).is_some() && m.get((2, 0)).is_none());
        m.put((3, 1), Arc::new(vec![0u8; 10]));
        assert!(m.get((3, 0)).is_none() && m.get((3, 1)).is_some());
    }
}
