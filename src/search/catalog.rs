//! The search's RocksDB (`STORE/search/db`): captures and what ties them to texts. Keys, each
//! a one-byte table tag, then (integers big-endian, paths NUL-ended):
//!
//! | tag | key | value |
//! |---|---|---|
//! | `N` | | the counters (`Counters`) |
//! | `F` | path | the recipe id indexed (u64) |
//! | `C` | tid, path, offset | a capture (`CaptureRow`, postcard) |
//! | `G` | path, offset | its tid: a file's captures, to remove them |
//! | `T` | tid | captures (u64), the text's `Sha` |
//! | `S` | the text's `Sha` | its tid |
//! | `P` | payload `Sha` | the tid of its text |
//! | `D` | payload digest string | the tid of a response's text: where revisits find it |
//! | `A`, `W`, `M` | | revisits waiting for their original's text (`waiting`) |
//! | `V`, `R`, `Q`, `H` | | a text's fragments, a fragment's texts, its count, its id (`build`) |
//!
//! Text and fragment ids are numbered from 1 as they are met (`Counters`): small, so the keys
//! and lists that hold them cost little. A `P` or `D` row whose text is gone (no `T` row) is stale:
//! read as absent (an `S` row goes with its `T` row). The captures of a WACZ's WARCs are at those WARCs' paths in
//! `/.warcfs/wacz/` and their offsets there (`places_of`); its `F` row names the WACZ.

use std::path::{Path, PathBuf};

use rocksdb::{Direction, IteratorMode, WriteBatch, DB};

use super::{Result, SearchError};
use crate::index::id_of;

/// A text's, fragment's or payload's identity in the catalog: the first 16 bytes of its
/// SHA-256. At 128 bits, two of 10^11 (a store of tens of billions of captures) share one by
/// chance with a probability of about 10^-17, at half the bytes of the whole hash (a hash
/// does not compress: these are most of the rows that hold them).
pub(crate) type Sha = [u8; 16];

pub(crate) fn sha_of(full: &[u8; 32]) -> Sha {
    full[..16].try_into().expect("16 bytes")
}

/// The catalog's counters (its `N` row, four u64): the next text id and the next fragment
/// id (from 1), the texts and fragments held, and those gone since the last sweep, whose
/// rows that cannot be found from their ids are left stale (`H`, `P`, `D`; `build` sweeps
/// them once they are an eighth of those held).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub next_tid: u64,
    pub next_fid: u64,
    pub held: u64,
    pub gone: u64,
}

impl Counters {
    /// A text or fragment held before is gone.
    pub(crate) fn lose_one(&mut self) {
        self.held = self.held.saturating_sub(1);
        self.gone += 1;
    }

    pub(crate) fn put(&self, batch: &mut WriteBatch) {
        let v: Vec<u8> = [self.next_tid, self.next_fid, self.held, self.gone].iter().flat_map(|n| n.to_be_bytes()).collect();
        batch.put(b"N", v);
    }
}

/// A list of ids as a `V` row holds it: each one's difference from the one before (zigzag,
/// the first from 0) as a varint: a text's new fragments are numbered in a row, one byte each.
pub(crate) fn ids_bytes(ids: &[u64], out: &mut Vec<u8>) {
    let mut last = 0u64;
    for &id in ids {
        let d = id.wrapping_sub(last) as i64;
        crate::format::varint::put(out, ((d << 1) ^ (d >> 63)) as u64);
        last = id;
    }
}

pub(crate) fn ids_of(b: &[u8]) -> Vec<u64> {
    let (mut out, mut last, mut i) = (Vec::new(), 0u64, 0usize);
    while i < b.len() {
        let Some(z) = crate::format::varint::get(b, &mut i) else { break };
        last = last.wrapping_add(((z >> 1) as i64 ^ -((z & 1) as i64)) as u64);
        out.push(last);
    }
    out
}

/// One capture, as a search result gives it (with its text id and where it is).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CaptureRow {
    pub url: String,
    /// 14 digits, as CDXJ gives it.
    pub timestamp: String,
    pub status: String,
    pub mime: String,
    pub digest: String,
    /// The record's length in its file (a gzip member's, or the record's).
    pub length: u64,
    pub revisit: bool,
}

/// Row changes of an update's moves, its deletes applied before its puts: a chain of
/// renames (`mv b c; mv a b`) deletes and puts rows of one path, and the puts must win.
#[derive(Default)]
pub(crate) struct RowMoves {
    pub(crate) dels: Vec<Vec<u8>>,
    pub(crate) puts: Vec<(Vec<u8>, Vec<u8>)>,
}

impl RowMoves {
    pub(crate) fn apply(self, batch: &mut WriteBatch) {
        for k in self.dels {
            batch.delete(k);
        }
        for (k, v) in self.puts {
            batch.put(k, v);
        }
    }
}

/// What `Catalog::scan` hands each row (key, value) to: false stops the scan.
pub(crate) type RowFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;

/// The catalog: the RocksDB and its path (for messages).
pub struct Catalog {
    pub(crate) db: DB,
    path: PathBuf,
}

pub(crate) fn key(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = vec![tag];
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

/// A path as keys hold it: its bytes, then NUL.
pub(crate) fn path_part(path: &str) -> Vec<u8> {
    let mut p = path.as_bytes().to_vec();
    p.push(0);
    p
}

/// The path parts (as keys hold them) that the captures of the file at `path` begin with: its
/// own (NUL-ended), and for a WACZ the prefix of its WARCs' paths in `/.warcfs/wacz/` (up
/// to the `/` after its name, so no other file's).
pub(crate) fn places_of(path: &str) -> Vec<Vec<u8>> {
    let mut places = vec![path_part(path)];
    if crate::store::is_wacz_name(path.as_bytes()) {
        places.push(format!("/{}{}/", crate::store::WACZ_VIEW_PREFIX, path.trim_start_matches('/')).into_bytes());
    }
    places
}

impl Catalog {
    /// Opens (or makes) the catalog at `path`; read-only: one a writer has open too.
    pub fn open(path: &Path, read_only: bool) -> Result<Catalog> {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(!read_only);
        opts.set_max_open_files(64);
        // Capture rows repeat URLs and file paths, in no order zstd can use within RocksDB's
        // 4 KiB blocks: larger blocks let it (the catalog is read a row at a time, cached).
        opts.set_compression_type(rocksdb::DBCompressionType::Zstd);
        let mut t = rocksdb::BlockBasedOptions::default();
        t.set_block_size(64 << 10);
        opts.set_block_based_table_factory(&t);
        let db = if read_only { DB::open_for_read_only(&opts, path, false) } else { DB::open(&opts, path) };
        Ok(Catalog { db: db.map_err(|err| SearchError::Db { path: path.to_path_buf(), err })?, path: path.to_path_buf() })
    }

    /// Bytes of the catalog's tables (not counting what is still in memory).
    pub(crate) fn table_bytes(&self) -> u64 {
        self.db.property_int_value("rocksdb.total-sst-files-size").ok().flatten().unwrap_or(0)
    }

    /// Compacts every table into one sorted run at the last level.
    pub(crate) fn compact(&self) {
        let mut o = rocksdb::CompactOptions::default();
        o.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        self.db.compact_range_opt(None::<&[u8]>, None::<&[u8]>, &o);
    }

    pub(crate) fn err(&self, err: rocksdb::Error) -> SearchError {
        SearchError::Db { path: self.path.clone(), err }
    }

    pub(crate) fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get(k).map_err(|e| self.err(e))
    }

    pub(crate) fn write(&self, b: WriteBatch) -> Result<()> {
        let mut o = rocksdb::WriteOptions::default();
        o.set_sync(true);
        self.db.write_opt(b, &o).map_err(|e| self.err(e))
    }

    /// Every row whose key begins with `prefix`, in key order, as (key, value).
    pub(crate) fn scan(&self, prefix: &[u8], f: &mut RowFn) -> Result<()> {
        for item in self.db.iterator(IteratorMode::From(prefix, Direction::Forward)) {
            let (k, v) = item.map_err(|e| self.err(e))?;
            if !k.starts_with(prefix) || !f(&k, &v)? {
                break;
            }
        }
        Ok(())
    }

    /// The text `tid`'s row: its captures and identity.
    pub(crate) fn text(&self, tid: u64) -> Result<Option<(u64, Sha)>> {
        Ok(self.get(&key(b'T', &[&tid.to_be_bytes()]))?.and_then(|v| Some((id_of(&v)?, v.get(8..24)?.try_into().ok()?))))
    }

    /// The tid a `P`, `D` or `S` row names, if its text is still there.
    pub(crate) fn live_tid(&self, k: &[u8]) -> Result<Option<u64>> {
        let Some(tid) = self.get(k)?.as_deref().and_then(id_of) else { return Ok(None) };
        Ok(self.text(tid)?.map(|_| tid))
    }

    /// The counters (a new catalog's: ids from 1).
    pub(crate) fn counters(&self) -> Result<Counters> {
        let v = self.get(b"N")?.unwrap_or_default();
        let n = |i: usize| v.get(i * 8..).and_then(id_of);
        Ok(Counters { next_tid: n(0).unwrap_or(1), next_fid: n(1).unwrap_or(1), held: n(2).unwrap_or(0), gone: n(3).unwrap_or(0) })
    }

    /// The captures of text `tid`, with their file and offset.
    pub fn captures(&self, tid: u64, f: &mut dyn FnMut(&str, u64, CaptureRow) -> Result<bool>) -> Result<()> {
        self.captures_under(&key(b'C', &[&tid.to_be_bytes()]), &mut |_, p, o, r| f(p, o, r))
    }

    /// Every capture, by text id (for measurements).
    pub fn each_capture(&self, f: &mut dyn FnMut(u64, &str, u64, CaptureRow) -> Result<bool>) -> Result<()> {
        self.captures_under(b"C", f)
    }

    fn captures_under(&self, prefix: &[u8], f: &mut dyn FnMut(u64, &str, u64, CaptureRow) -> Result<bool>) -> Result<()> {
        self.scan(prefix, &mut |k, v| {
            let Some(tid) = k.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes) else { return Ok(true) };
            let rest = &k[9..];
            let Some(nul) = rest.iter().position(|&b| b == 0) else { return Ok(true) };
            let (path, off) = (String::from_utf8_lossy(&rest[..nul]), rest.get(nul + 1..nul + 9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes).unwrap_or(0));
            match postcard::from_bytes::<CaptureRow>(v) {
                Ok(row) => f(tid, &path, off, row),
                Err(_) => Ok(true),
            }
        })
    }

    /// How many rows of each table there are, and their bytes (keys and values).
    pub fn census(&self) -> Result<Vec<(char, u64, u64)>> {
        let mut out: Vec<(char, u64, u64)> = Vec::new();
        self.scan(b"", &mut |k, v| {
            let tag = k[0] as char;
            match out.iter_mut().find(|(t, _, _)| *t == tag) {
                Some(e) => {
                    e.1 += 1;
                    e.2 += (k.len() + v.len()) as u64;
                }
                None => out.push((tag, 1, (k.len() + v.len()) as u64)),
            }
            Ok(true)
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `V` row's ids read back as written, and a text's new fragments, numbered in a row,
    /// cost a byte each.
    #[test]
    fn lists_of_ids_read_back_and_runs_cost_a_byte_each() {
        for ids in [vec![], vec![1], vec![7, 8, 9, 10, 3, 1_000_000, 2, u64::MAX, 0, 5]] {
            let mut b = Vec::new();
            ids_bytes(&ids, &mut b);
            assert_eq!(ids_of(&b), ids);
        }
        let run: Vec<u64> = (5_000..5_100).collect();
        let mut b = Vec::new();
        ids_bytes(&run, &mut b);
        assert_eq!(b.len(), 2 + 99, "{} bytes", b.len());
        // (A list cut short reads as far as it is whole.)
        assert_eq!(ids_of(&b[..3]), vec![5_000, 5_001]);
    }
}
