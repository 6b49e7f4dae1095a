//! The records a revisit may stand for: every `response` and `resource` record of a set of
//! stored WARCs, in two tables sorted on disk (bounded memory whatever the store holds), and
//! the search resolvers make in them (`Originals::find`): by `WARC-Refers-To`, then by the
//! payload digest string with `WARC-Refers-To-Target-URI` and `-Date`, then the latest
//! earlier capture of the same URL with that digest (the earliest if none is earlier), then
//! any capture with it. `warcfs export --resolved` builds one over the files it exports; the
//! mount's `/.warcfs/resolved/` one over every stored WARC, built again when the store has
//! changed.
//!
//! Keys are the first 16 bytes of the SHA-256 of the record id, the digest string, the URI
//! (without WARC/1.0's angle brackets): two strings share a key with a chance no store meets.
//! Only response and resource records are in the tables: a revisit never resolves to a
//! revisit, so no chain and no loop is followed.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use sha2::Digest as _;

use crate::extsort::Sorter;
use crate::format::warc::revisit::{bare_uri, Header};
use crate::recipe::RecipeHead;
use crate::store::read::records::{content_length, BlockAt, RecordHead};
use crate::store::{Result, Store, StoreError};

/// Where an original lies, and what a resolved record needs of it without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    /// The stored file (inode) and the recipe the table was built from.
    pub ino: u64,
    pub recipe: u64,
    /// The record (a gzip member's start and length, or the record without its separator).
    pub offset: u64,
    pub length: u64,
    /// Its WARC header's length and its block's (Content-Length).
    pub hlen: u32,
    pub clen: u64,
    /// The length of the HTTP header its block begins with.
    pub http: u32,
    /// Whether the record is a gzip member of its own.
    pub member: bool,
}

const LOC: usize = 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1;
const KEY: usize = 16;
/// A row of the id table: id key, where.
const ID_ROW: usize = KEY + LOC;
/// A row of the digest table: digest key, URI key, date (`date_number`), where.
const DIGEST_ROW: usize = KEY + KEY + 8 + LOC;
/// Bytes sorted in memory at once while a table is built.
const RUN_BYTES: usize = 8 << 20;

impl Loc {
    fn put(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.ino.to_be_bytes());
        out[8..16].copy_from_slice(&self.recipe.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..32].copy_from_slice(&self.length.to_be_bytes());
        out[32..36].copy_from_slice(&self.hlen.to_be_bytes());
        out[36..44].copy_from_slice(&self.clen.to_be_bytes());
        out[44..48].copy_from_slice(&self.http.to_be_bytes());
        out[48] = self.member as u8;
    }

    fn get(b: &[u8]) -> Loc {
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Loc { ino: u64_at(0), recipe: u64_at(8), offset: u64_at(16), length: u64_at(24), hlen: u32_at(32), clen: u64_at(36), http: u32_at(44), member: b[48] != 0 }
    }

    /// Where record `r` of the file `ino` (recipe `recipe`) is, if its block is in the file
    /// as text (a plain record or a member stored as its text) and whole: a record cut
    /// short by the end of its file is none. `http` is its HTTP header's length, if its
    /// block is an HTTP message (begins `HTTP/`) whose header the stored headers hold
    /// whole; else 0 (a resource's block is all payload).
    pub(in crate::store) fn of(ino: u64, recipe: u64, r: &RecordHead) -> Option<Loc> {
        let member = match r.block {
            BlockAt::Plain => false,
            BlockAt::Member(..) => true,
            BlockAt::RawMember => return None,
        };
        let clen = content_length(&r.warc_header)?;
        let hlen = u32::try_from(r.warc_header.len()).ok()?;
        if !member && r.length != hlen as u64 + clen {
            return None;
        }
        let block = r.http_header.as_deref().unwrap_or_default();
        let http = if block.starts_with(b"HTTP/") { http_end(block)? } else { 0 };
        (http as u64 <= clen).then_some(Loc { ino, recipe, offset: r.offset, length: r.length, hlen, clen, http: u32::try_from(http).ok()?, member })
    }

    /// Its payload's length: the block after the HTTP header.
    pub fn payload_len(&self) -> u64 {
        self.clen - self.http as u64
    }
}

/// Where an HTTP block's header ends (after its blank line).
pub(in crate::store) use crate::format::warc::header_end as http_end;

fn key(s: &[u8]) -> [u8; KEY] {
    sha2::Sha256::digest(s)[..KEY].try_into().expect("16 bytes")
}

/// A WARC-Date as a number that sorts as the dates do: its digits, the first 14 (to the
/// second; finer ones are left out, two captures within a second are one date here).
fn date_number(date: &[u8]) -> u64 {
    let digits = date.iter().filter(|b| b.is_ascii_digit()).take(14);
    let (n, count) = digits.fold((0u64, 0), |(n, c), d| (n * 10 + (d - b'0') as u64, c + 1));
    n * 10u64.pow(14 - count)
}

/// Rows of `N` bytes sorted by their first bytes, in an unlinked file.
struct Table<const N: usize> {
    file: File,
    rows: u64,
}

impl<const N: usize> Table<N> {
    fn write(sorter: Sorter<[u8; N]>, dir: &Path) -> std::io::Result<Table<N>> {
        // Unlinked once open: it goes with its last handle (a crash in between leaves an
        // empty file that nothing reads).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path = dir.join(format!("table-{}-{}", std::process::id(), NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        std::fs::remove_file(&path)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &file);
        let mut rows = 0u64;
        for row in sorter.finish()? {
            w.write_all(&row?)?;
            rows += 1;
        }
        w.flush()?;
        drop(w);
        Ok(Table { file, rows })
    }

    fn row(&self, i: u64) -> std::io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.file.read_exact_at(&mut b, i * N as u64)?;
        Ok(b)
    }

    /// The first row whose first bytes are not less than `prefix` (`rows` if none).
    fn lower_bound(&self, prefix: &[u8]) -> std::io::Result<u64> {
        let (mut lo, mut hi) = (0, self.rows);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.row(mid)?[..prefix.len()] < *prefix {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The row at `i` if it begins with `prefix`.
    fn matching(&self, i: u64, prefix: &[u8]) -> std::io::Result<Option<[u8; N]>> {
        if i >= self.rows {
            return Ok(None);
        }
        let row = self.row(i)?;
        Ok(row.starts_with(prefix).then_some(row))
    }
}

/// The response and resource records of some stored WARCs, by record id and by payload
/// digest.
pub struct Originals {
    by_id: Table<ID_ROW>,
    by_digest: Table<DIGEST_ROW>,
}

impl Originals {
    /// The tables of the records of `files` (each a stored file's inode and recipe), sorted
    /// in `dir` (a directory of scratch files under the store).
    pub fn build(store: &Store, files: &[(u64, RecipeHead)], dir: &Path) -> Result<Originals> {
        let io = |err: std::io::Error| StoreError::Io { path: dir.to_path_buf(), err };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut ids: Sorter<[u8; ID_ROW]> = Sorter::new(dir, RUN_BYTES).map_err(io)?;
        let mut digests: Sorter<[u8; DIGEST_ROW]> = Sorter::new(dir, RUN_BYTES).map_err(io)?;
        for (ino, head) in files {
            store.each_warc_record(head, &mut |r| {
                let Some(h) = Header::parse(&r.warc_header).filter(|h| h.is("response") || h.is("resource")) else { return Ok(()) };
                let Some(loc) = Loc::of(*ino, head.id, &r) else { return Ok(()) };
                if let Some(id) = h.get("WARC-Record-ID") {
                    let mut row = [0u8; ID_ROW];
                    row[..KEY].copy_from_slice(&key(id));
                    loc.put(&mut row[KEY..]);
                    ids.push(row).map_err(io)?;
                }
                if let (Some(d), Some(uri), Some(date)) = (h.get("WARC-Payload-Digest"), h.get("WARC-Target-URI"), h.get("WARC-Date")) {
                    let mut row = [0u8; DIGEST_ROW];
                    row[..KEY].copy_from_slice(&key(d));
                    row[KEY..2 * KEY].copy_from_slice(&key(bare_uri(uri)));
                    row[2 * KEY..2 * KEY + 8].copy_from_slice(&date_number(date).to_be_bytes());
                    loc.put(&mut row[2 * KEY + 8..]);
                    digests.push(row).map_err(io)?;
                }
                Ok(())
            })?;
        }
        Ok(Originals { by_id: Table::write(ids, dir).map_err(io)?, by_digest: Table::write(digests, dir).map_err(io)? })
    }

    /// How many records the tables hold (by id, by digest).
    pub fn len(&self) -> (u64, u64) {
        (self.by_id.rows, self.by_digest.rows)
    }

    /// The original of the revisit `rev`, if it is in the tables.
    pub fn find(&self, rev: &Header) -> Result<Option<Loc>> {
        self.find_rows(rev).map_err(|err| StoreError::Io { path: "(the originals' tables)".into(), err })
    }

    fn find_rows(&self, rev: &Header) -> std::io::Result<Option<Loc>> {
        if let Some(id) = rev.get("WARC-Refers-To") {
            let k = key(id);
            if let Some(row) = self.by_id.matching(self.by_id.lower_bound(&k)?, &k)? {
                return Ok(Some(Loc::get(&row[KEY..])));
            }
        }
        let Some(digest) = rev.get("WARC-Payload-Digest") else { return Ok(None) };
        let loc = |row: [u8; DIGEST_ROW]| Loc::get(&row[2 * KEY + 8..]);
        let mut prefix = key(digest).to_vec();
        if let (Some(uri), Some(date)) = (rev.get("WARC-Refers-To-Target-URI"), rev.get("WARC-Refers-To-Date")) {
            let exact = [&prefix[..], &key(bare_uri(uri)), &date_number(date).to_be_bytes()].concat();
            if let Some(row) = self.by_digest.matching(self.by_digest.lower_bound(&exact)?, &exact)? {
                return Ok(Some(loc(row)));
            }
        }
        let any = self.by_digest.lower_bound(&prefix)?;
        // The same URL: the latest capture not after the revisit's date, else the earliest.
        prefix.extend_from_slice(&key(bare_uri(rev.get("WARC-Target-URI").unwrap_or_default())));
        let date = date_number(rev.get("WARC-Date").unwrap_or_default());
        let after = self.by_digest.lower_bound(&[&prefix[..], &(date.saturating_add(1)).to_be_bytes()].concat())?;
        if let Some(row) = after.checked_sub(1).map(|i| self.by_digest.matching(i, &prefix)).transpose()?.flatten() {
            return Ok(Some(loc(row)));
        }
        if let Some(row) = self.by_digest.matching(self.by_digest.lower_bound(&prefix)?, &prefix)? {
            return Ok(Some(loc(row)));
        }
        Ok(self.by_digest.matching(any, &prefix[..KEY])?.map(loc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_sort_as_numbers_to_the_second() {
        assert_eq!(date_number(b"2026-12-05T08:00:01Z"), 20261205080001);
        assert_eq!(date_number(b"2026-12-05T08:00:01.123456Z"), 20261205080001);
        assert_eq!(date_number(b"2026-12-05"), 20261205000000);
        assert!(date_number(b"2026-01-31T23:59:59Z") < date_number(b"2026-02-01T00:00:00Z"));
    }

    #[test]
    fn a_location_reads_back_as_written() {
        let l = Loc { ino: 7, recipe: 1 << 40, offset: 123, length: 456, hlen: 300, clen: 9_000_000_000, http: 77, member: true };
        let mut b = [0u8; LOC];
        l.put(&mut b);
        assert_eq!(Loc::get(&b), l);
    }
}
