//! The index: RocksDB behind a small typed API, so the rest of warcfs never sees RocksDB.
//!
//! Column families:
//! - `meta`    counters (next inode, recipe and pack ids, collisions);
//! - `chunk`   digest ‖ seq → where the chunk lives, its sizes and its reference count;
//! - `inode`   inode number → attributes, and for files the head of the recipe;
//! - `dirent`  parent inode ‖ name → child inode;
//! - `recipe`  recipe id ‖ piece number → one piece of a file recipe;
//! - `capture`, `delta_base` (format 9): hints for payloads compressed against their
//!   relatives (`HINT_CFS`), never logged.
//!
//! Every logical change (a file committed, removed or renamed; a gc pass) is one `Batch`,
//! written with `sync = true`: RocksDB's write batch is atomic across column families.

use std::path::Path;

use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::digest::{ChunkKey, Digest};

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("index: undecodable {0} record")]
    Bad(&'static str),
    #[error("index: undecodable {what} record: {err}")]
    Decode { what: &'static str, err: postcard::Error },
    #[error("index: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, IndexError>;

/// The meta record holding the store format version the index was created for.
const FORMAT_VERSION_KEY: &str = "format_version";

const CFS: [&str; 5] = ["meta", "chunk", "inode", "dirent", "recipe"];
/// Column families of hints (format 9), advisory only: a hint lost (a rebuilt index) or
/// stale (naming a chunk gone since) costs a delta not made, never a byte. Not logged, not in
/// checkpoints; a store of an older version has none (an older warcfs could not open its
/// index with them).
/// - `capture`: a URL's key (`url_key`, 16 bytes) → the first payload chunk of its latest
///   capture; and a similarity sketch's slot value (5 bytes: `store::delta::sketch`) → the
///   key of the latest URL whose capture had that value;
/// - `delta_base`: a payload chunk new in the store → that of the capture of its URL
///   before it: the base gc tries when it settles the chunk (`store::delta`).
const HINT_CFS: [&str; 2] = ["capture", "delta_base"];
/// The chunk table's block cache: RocksDB's default size, stated.
const CHUNK_CACHE_BYTES: usize = 8 << 20;

/// Where a chunk is stored and how many recipe references keep it alive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkEntry {
    pub pack: u64,
    pub offset: u64,
    pub stored_len: u32,
    pub raw_len: u32,
    pub codec: u8,
    pub kind: u8,
    pub refs: u64,
}

fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).expect("in-memory serialisation cannot fail")
}

fn dec<T: DeserializeOwned>(what: &'static str, b: &[u8]) -> Result<T> {
    postcard::from_bytes(b).map_err(|err| IndexError::Decode { what, err })
}

pub fn dirent_key(parent: u64, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name);
    k
}

/// A chunk table key; one of another length is damage (every walk of the table says so).
fn chunk_key(k: &[u8]) -> Result<ChunkKey> {
    ChunkKey::from_bytes(k).ok_or(IndexError::Bad("chunk key"))
}

/// The id (inode or recipe) a namespace key starts with (an inode's, a directory entry's,
/// a recipe piece's), as does an entry's value: the inode it names.
pub fn id_of(k: &[u8]) -> Option<u64> {
    k.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
}

pub fn recipe_key(rid: u64, piece: u32) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&rid.to_be_bytes());
    k[8..].copy_from_slice(&piece.to_be_bytes());
    k
}

pub struct Index {
    db: DB,
    /// Whether the hint column families (`HINT_CFS`) are there.
    hints: bool,
    /// Bumped by every write: lets caches of derived data (the mount's index file) know
    /// when they are stale.
    generation: std::sync::atomic::AtomicU64,
}

/// A set of changes that commit together or not at all. Every change is also kept as a
/// `LogOp`, so that the store can write the batch into its packs (the metadata log) before
/// the index: the packs then hold everything the index does.
#[derive(Default)]
pub struct Batch {
    wb: WriteBatch,
    log: Vec<LogOp>,
}

/// One change of a batch, by column family number (the position in `CFS`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogOp {
    Put(u8, Vec<u8>, Vec<u8>),
    Delete(u8, Vec<u8>),
    /// Keys from the first up to (not including) the second.
    DeleteRange(u8, Vec<u8>, Vec<u8>),
}

impl LogOp {
    pub fn cf(&self) -> u8 {
        match self {
            LogOp::Put(n, ..) | LogOp::Delete(n, ..) | LogOp::DeleteRange(n, ..) => *n,
        }
    }

    /// Bytes of keys and values it carries.
    pub fn bytes(&self) -> usize {
        match self {
            LogOp::Put(_, k, v) | LogOp::DeleteRange(_, k, v) => k.len() + v.len(),
            LogOp::Delete(_, k) => k.len(),
        }
    }
}

/// Column family numbers in `LogOp`s: positions in `CFS`, written into the metadata log
/// (FORMAT.md), so they never change.
pub const CF_META: u8 = 0;
pub const CF_CHUNK: u8 = 1;
pub const CF_INODE: u8 = 2;
pub const CF_DIRENT: u8 = 3;
pub const CF_RECIPE: u8 = 4;

/// A URL as the `capture` hints key it: the first 16 bytes of the SHA-256 of its
/// `WARC-Target-URI` value.
pub type UrlKey = [u8; 16];

pub fn url_key(uri: &[u8]) -> UrlKey {
    use sha2::Digest as _;
    sha2::Sha256::digest(uri)[..16].try_into().expect("16 bytes")
}

/// Whether the index at `path` has the hint column families (an index that cannot be
/// listed has none: opening it says why).
fn has_hints(opts: &Options, path: &Path) -> bool {
    DB::list_cf(opts, path).is_ok_and(|names| HINT_CFS.iter().all(|h| names.iter().any(|n| n == h)))
}

/// Removes the write-ahead logs that hold nothing. RocksDB 7.8 starts a new log at every
/// open and keeps an empty one from an earlier open until a memtable is flushed (fixed in
/// 8.3, facebook/rocksdb#11409), so a store opened again and again without writes (`stats`
/// from a monitoring job, a mount that only serves reads) would gather one file per open.
/// An empty log has no record to recover, and with `track_and_verify_wals_in_manifest` off
/// (the default, kept here) RocksDB does not look for the logs it knew. Runs before RocksDB
/// takes its own lock: the caller of `open` and `create` holds the store's lock (only the
/// store's owner opens the index for writing), so no other process is writing any of them.
fn remove_empty_logs(path: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(path) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let is_log = name.to_str().and_then(|n| n.strip_suffix(".log")).is_some_and(|stem| !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()));
        if !is_log {
            continue;
        }
        let md = entry.metadata()?;
        if md.is_file() && md.len() == 0 {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

impl Index {
    /// Opens the index for reading while another process owns the store (a live mount):
    /// a consistent view as of now, including the owner's write-ahead log.
    pub fn open_read_only(path: &Path) -> Result<Index> {
        let opts = Options::default();
        let hints = has_hints(&opts, path);
        let names: Vec<&str> = CFS.iter().chain(if hints { &HINT_CFS[..] } else { &[] }).copied().collect();
        let db = DB::open_cf_for_read_only(&opts, path, names, false)?;
        Ok(Index { db, hints, generation: Default::default() })
    }

    /// Creates a new, empty index at `path` (only `init` does: an index that went missing
    /// must never come back as an empty one, or `gc` would take every pack for garbage).
    /// `hints`: with the hint column families (`HINT_CFS`), for a store whose format has them.
    pub fn create(path: &Path, version: u32, hints: bool) -> Result<Index> {
        let idx = Index::open_with(path, Some(hints))?;
        let mut b = Batch::new();
        b.put_meta_u64(&idx, FORMAT_VERSION_KEY, version as u64);
        idx.write(b)?;
        Ok(idx)
    }

    /// Opens an existing index; fails if there is none. The caller holds the store's lock
    /// (`remove_empty_logs`).
    pub fn open(path: &Path) -> Result<Index> {
        Index::open_with(path, None)
    }

    /// The store format version recorded when the index was created (None for indexes
    /// made before it was recorded).
    pub fn format_version(&self) -> Result<Option<u64>> {
        match self.db.get_cf(self.cf("meta"), FORMAT_VERSION_KEY.as_bytes())? {
            Some(v) => Ok(Some(u64::from_le_bytes(v.as_slice().try_into().map_err(|_| IndexError::Bad("format version"))?))),
            None => Ok(None),
        }
    }

    /// `create`: Some(with the hint column families) to create a new index, None to open
    /// one (with the hint column families it has).
    fn open_with(path: &Path, create: Option<bool>) -> Result<Index> {
        let mut opts = Options::default();
        opts.create_if_missing(create.is_some());
        opts.create_missing_column_families(create.is_some());
        let hints = create.unwrap_or_else(|| has_hints(&opts, path));
        opts.set_max_background_jobs(2);
        // RocksDB's info log: warnings only, in one file. At its default level it wrote
        // 107 KB at every open (its options, per column family) and kept four such files:
        // 0.43 MB of a store of 6.5 MB of WARCs, 0.36 of its 0.5 MB index.
        opts.set_log_level(rocksdb::LogLevel::Warn);
        opts.set_keep_log_file_num(1);
        let chunk_cache = rocksdb::Cache::new_lru_cache(CHUNK_CACHE_BYTES)?;
        let cfs = CFS.iter().map(|name| {
            let mut o = Options::default();
            o.set_compression_type(rocksdb::DBCompressionType::Zstd);
            if *name == "chunk" {
                // Lookups of new data mostly miss: a bloom filter answers them from memory.
                // Filters and index blocks stay with their table readers (about 2 bytes a
                // chunk), not in the 8 MiB block cache: there, the data blocks of random
                // lookups evicted a table's whole filter, which was then read again for the
                // next lookup (37 % of a gc's time at 10^6 chunks).
                let mut t = rocksdb::BlockBasedOptions::default();
                t.set_bloom_filter(10.0, false);
                // Stated, not RocksDB's implicit one, so that `warm` knows what it may fill.
                t.set_block_cache(&chunk_cache);
                o.set_block_based_table_factory(&t);
            }
            if *name == "recipe" {
                // Recipes hold the gzip members' parse prefixes: zstd over 64 KiB blocks keeps
                // them well under half the size they take in RocksDB's default (Snappy, 4 KiB).
                // A read loads one recipe piece (up to ~128 KiB) anyway.
                o.set_compression_type(rocksdb::DBCompressionType::Zstd);
                o.set_compression_options(-14, 9, 0, 0);
                let mut t = rocksdb::BlockBasedOptions::default();
                t.set_block_size(64 << 10);
                o.set_block_based_table_factory(&t);
            }
            ColumnFamilyDescriptor::new(*name, o)
        });
        let hint_cfs = HINT_CFS.iter().filter(|_| hints).map(|name| {
            let mut o = Options::default();
            o.set_compression_type(rocksdb::DBCompressionType::Zstd);
            ColumnFamilyDescriptor::new(*name, o)
        });
        remove_empty_logs(path)?;
        let db = DB::open_cf_descriptors(&opts, path, cfs.chain(hint_cfs))?;
        Ok(Index { db, hints, generation: Default::default() })
    }

    /// The chunk table, for `compact`: gc moves or drops the entries of every pack it
    /// rewrites; until RocksDB merges them in its own time, the index holds each such entry
    /// twice.
    pub const CHUNKS: &'static [&'static str] = &["chunk"];
    /// The inode and recipe tables and the delta hints, for `compact`: gc's reparse replaces
    /// the recipe of every file it rewrites, and settling spends hints (crawl-1's store after
    /// a reparsing gc: 0.11 MB more index until RocksDB merges them in its own time).
    pub const RECIPES: &'static [&'static str] = &["inode", "recipe", "delta_base"];

    /// Compacts the tables `names` (a hint table only on an index that keeps hints).
    pub fn compact(&self, names: &[&str]) {
        for name in names.iter().filter(|n| self.hints || !HINT_CFS.contains(n)) {
            self.db.compact_range_cf(self.cf(name), None::<&[u8]>, None::<&[u8]>);
        }
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(name).expect("column family created at open")
    }

    pub fn write(&self, batch: Batch) -> Result<()> {
        self.write_opt(batch, true)
    }

    /// `write` without waiting for the disk: for a rebuild, which syncs once at its end.
    pub fn write_unsynced(&self, batch: Batch) -> Result<()> {
        self.write_opt(batch, false)
    }

    fn write_opt(&self, batch: Batch, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(batch.wb, &wo)?;
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Writes every column family's memtable out to table files, so that a closed store's
    /// index is all compressed tables rather than a write-ahead log to replay at the next open.
    pub fn flush_tables(&self) -> Result<()> {
        for name in CFS.iter().chain(if self.hints { &HINT_CFS[..] } else { &[] }) {
            self.db.flush_cf(self.cf(name))?;
        }
        Ok(())
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Has the kernel read the index's table files into the page cache, largest first, up
    /// to `budget` bytes: a mount calls it once, so that the first lookups of a replay tool
    /// make one cold read (the pack's) rather than two (RocksDB's block, then the pack's).
    /// A chunk table that fits half of its block cache is read into that cache as well
    /// (`cache_chunk_table`): the page cache may drop the files again, the daemon's own
    /// cache keeps them. Advice only: errors are ignored.
    pub fn warm(&self, budget: u64) {
        self.advise_tables(budget);
        self.cache_chunk_table();
    }

    /// Reads the whole chunk table through RocksDB's block cache if its files take at most
    /// half of that cache (`CHUNK_CACHE_BYTES`): a store of up to some 60,000 chunks. A
    /// lookup of such a store then never waits for an index read, however cold the disk.
    /// Larger tables are left to the page cache and to the lookups themselves. Returns
    /// whether it read the table.
    pub fn cache_chunk_table(&self) -> bool {
        let cf = self.cf("chunk");
        let size = self.db.property_int_value_cf(cf, "rocksdb.total-sst-files-size").ok().flatten();
        if size.is_none_or(|n| n > CHUNK_CACHE_BYTES as u64 / 2) {
            return false;
        }
        let mut it = self.db.raw_iterator_cf(cf);
        it.seek_to_first();
        while it.valid() {
            it.next();
        }
        it.status().is_ok()
    }

    /// Bytes of RocksDB's block cache the chunk table's blocks take now.
    #[cfg(test)]
    fn chunk_cache_usage(&self) -> u64 {
        self.db.property_int_value_cf(self.cf("chunk"), "rocksdb.block-cache-usage").ok().flatten().unwrap_or(0)
    }

    fn advise_tables(&self, budget: u64) {
        let Ok(dir) = std::fs::read_dir(self.db.path()) else { return };
        let mut tables: Vec<(u64, std::path::PathBuf)> = dir
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "sst"))
            .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
            .collect();
        tables.sort_by_key(|t| std::cmp::Reverse(t.0));
        let mut left = budget;
        for (len, path) in tables {
            if len > left {
                continue;
            }
            left -= len;
            if let Ok(f) = std::fs::File::open(&path) {
                // SAFETY: advisory call on a descriptor we hold open.
                unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, len as i64, libc::POSIX_FADV_WILLNEED) };
            }
        }
    }

    /// Copies the index, consistently, to `dest` (hard links where possible).
    pub fn checkpoint(&self, dest: &Path) -> Result<()> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dest)?;
        Ok(())
    }

    // ---- meta ----

    /// A meta record, None if absent.
    pub fn meta_u64_opt(&self, name: &str) -> Result<Option<u64>> {
        Ok(self.db.get_cf(self.cf("meta"), name.as_bytes())?.and_then(|v| v.as_slice().try_into().ok().map(u64::from_le_bytes)))
    }

    /// A meta record's bytes, None if absent.
    pub fn meta_bytes(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.cf("meta"), name.as_bytes())?)
    }

    pub fn meta_u64(&self, name: &str) -> Result<u64> {
        Ok(self
            .db
            .get_cf(self.cf("meta"), name.as_bytes())?
            .and_then(|v| v.as_slice().try_into().ok().map(u64::from_le_bytes))
            .unwrap_or(0))
    }

    // ---- chunks ----

    /// Every stored chunk whose digest is `digest` (normally one; more after collisions).
    pub fn chunks_with_digest(&self, digest: &Digest) -> Result<Vec<(ChunkKey, ChunkEntry)>> {
        let mut out = Vec::new();
        let it = self.db.iterator_cf(self.cf("chunk"), IteratorMode::From(digest, Direction::Forward));
        for item in it {
            let (k, v) = item?;
            if !k.starts_with(digest) {
                break;
            }
            out.push((chunk_key(&k)?, dec("chunk", &v)?));
        }
        Ok(out)
    }

    pub fn chunk(&self, key: &ChunkKey) -> Result<Option<ChunkEntry>> {
        match self.db.get_pinned_cf(self.cf("chunk"), key.to_bytes())? {
            Some(v) => Ok(Some(dec("chunk", &v)?)),
            None => Ok(None),
        }
    }

    /// Many chunk lookups in one call: RocksDB sorts them and reads each block once.
    pub fn chunks(&self, keys: &[ChunkKey]) -> Result<Vec<Option<ChunkEntry>>> {
        let raw: Vec<[u8; 36]> = keys.iter().map(|k| k.to_bytes()).collect();
        self.db
            .batched_multi_get_cf(self.cf("chunk"), &raw, false)
            .into_iter()
            .map(|r| match r? {
                Some(v) => Ok(Some(dec("chunk", &v)?)),
                None => Ok(None),
            })
            .collect()
    }

    pub fn for_each_chunk(&self, mut f: impl FnMut(ChunkKey, ChunkEntry) -> Result<()>) -> Result<()> {
        for item in self.chunk_iter() {
            let (k, e) = item?;
            f(k, e)?;
        }
        Ok(())
    }

    /// Every chunk, in key order (the byte order of `ChunkKey::to_bytes`): what fsck and gc
    /// merge with their sorted reference streams.
    pub fn chunk_iter(&self) -> impl Iterator<Item = Result<(ChunkKey, ChunkEntry)>> + '_ {
        self.db.iterator_cf(self.cf("chunk"), IteratorMode::Start).map(|item| {
            let (k, v) = item?;
            Ok((chunk_key(&k)?, dec("chunk", &v)?))
        })
    }

    /// Every inode, in number order.
    pub fn inode_iter<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<(u64, T)>> + '_ {
        self.inodes_from(0)
    }

    /// Every inode from number `from` on, in number order.
    pub fn inodes_from<T: DeserializeOwned>(&self, from: u64) -> impl Iterator<Item = Result<(u64, T)>> + '_ {
        let from = from.to_be_bytes();
        self.db.iterator_cf(self.cf("inode"), IteratorMode::From(&from, Direction::Forward)).map(|item| {
            let (k, v) = item?;
            let ino = u64::from_be_bytes(k.as_ref().try_into().map_err(|_| IndexError::Bad("inode key"))?);
            Ok((ino, dec("inode", &v)?))
        })
    }

    // ---- inodes, directory entries, recipes ----

    pub fn inode<T: DeserializeOwned>(&self, ino: u64) -> Result<Option<T>> {
        match self.db.get_pinned_cf(self.cf("inode"), ino.to_be_bytes())? {
            Some(v) => Ok(Some(dec("inode", &v)?)),
            None => Ok(None),
        }
    }

    pub fn for_each_inode<T: DeserializeOwned>(&self, mut f: impl FnMut(u64, T) -> Result<()>) -> Result<()> {
        for item in self.db.iterator_cf(self.cf("inode"), IteratorMode::Start) {
            let (k, v) = item?;
            let ino = u64::from_be_bytes(k.as_ref().try_into().unwrap_or([0; 8]));
            f(ino, dec("inode", &v)?)?;
        }
        Ok(())
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(self
            .db
            .get_pinned_cf(self.cf("dirent"), dirent_key(parent, name))?
            .and_then(|v| v.as_ref().try_into().ok().map(u64::from_be_bytes)))
    }

    /// The entries of a directory, in name order, starting after `after` if given.
    pub fn dir_entries(&self, parent: u64) -> Result<Vec<(Vec<u8>, u64)>> {
        let prefix = parent.to_be_bytes();
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf("dirent"), IteratorMode::From(&prefix, Direction::Forward)) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            let ino = u64::from_be_bytes(v.as_ref().try_into().unwrap_or([0; 8]));
            out.push((k[8..].to_vec(), ino));
        }
        Ok(out)
    }

    /// The key of the chunk holding piece `piece` of recipe `rid`.
    pub fn recipe_piece(&self, rid: u64, piece: u32) -> Result<Option<ChunkKey>> {
        match self.db.get_pinned_cf(self.cf("recipe"), recipe_key(rid, piece))? {
            Some(v) => Ok(Some(ChunkKey::from_bytes(&v).ok_or(IndexError::Bad("recipe"))?)),
            None => Ok(None),
        }
    }

    /// Every record of the namespace column families (meta, inode, dirent, recipe) as a put,
    /// in key order, until `f` returns false: a checkpoint of the metadata log. The log's
    /// own bookkeeping in `meta` is left out.
    pub fn for_each_namespace_record(&self, mut f: impl FnMut(LogOp) -> Result<bool>) -> Result<()> {
        for (n, name) in CFS.iter().enumerate() {
            if n as u8 == CF_CHUNK {
                continue;
            }
            for item in self.db.iterator_cf(self.cf(name), IteratorMode::Start) {
                let (k, v) = item?;
                // Where this index is in the logs: its own, never a namespace record.
                if n as u8 == CF_META && k.starts_with(b"log_") {
                    continue;
                }
                if !f(LogOp::Put(n as u8, k.to_vec(), v.to_vec()))? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Whether this index keeps hints (`HINT_CFS`: format 9 and later).
    pub fn has_hints(&self) -> bool {
        self.hints
    }

    /// The first payload chunk of the latest capture of the URL keyed `url` (`url_key`).
    pub fn capture(&self, url: &UrlKey) -> Result<Option<ChunkKey>> {
        self.hint("capture", url)
    }

    /// `capture` of each of `urls`, in one batched lookup (a file's records, at its commit).
    pub fn captures(&self, urls: &[UrlKey]) -> Result<Vec<Option<ChunkKey>>> {
        if !self.hints {
            return Ok(vec![None; urls.len()]);
        }
        let mut sorted: Vec<&UrlKey> = urls.iter().collect();
        sorted.sort_unstable();
        let found = self.db.batched_multi_get_cf(self.cf("capture"), &sorted, true);
        let mut by_url: std::collections::HashMap<&UrlKey, ChunkKey> = std::collections::HashMap::new();
        for (url, r) in sorted.iter().zip(found) {
            if let Some(k) = r?.and_then(|v| ChunkKey::from_bytes(&v)) {
                by_url.insert(url, k);
            }
        }
        Ok(urls.iter().map(|u| by_url.get(u).copied()).collect())
    }

    /// The URL last noted under each of `keys` (`store::delta::sketch::slot_key`: 5 bytes,
    /// so never a URL's key, in the same column family), in one batched lookup.
    pub fn similar(&self, keys: &[[u8; 5]]) -> Result<Vec<Option<UrlKey>>> {
        if !self.hints {
            return Ok(vec![None; keys.len()]);
        }
        let found = self.db.batched_multi_get_cf(self.cf("capture"), keys, false);
        // An undecodable hint is no hint.
        found.into_iter().map(|r| Ok(r?.and_then(|v| UrlKey::try_from(&v[..]).ok()))).collect()
    }

    /// The base gc tries for chunk `key` when it settles it.
    pub fn delta_base_hint(&self, key: &ChunkKey) -> Result<Option<ChunkKey>> {
        self.hint("delta_base", &key.to_bytes())
    }

    fn hint(&self, cf: &str, key: &[u8]) -> Result<Option<ChunkKey>> {
        if !self.hints {
            return Ok(None);
        }
        // An undecodable hint is no hint.
        Ok(self.db.get_pinned_cf(self.cf(cf), key)?.and_then(|v| ChunkKey::from_bytes(&v)))
    }

    /// Every recipe piece: (recipe id, piece number, the key of its chunk).
    pub fn for_each_recipe_piece(&self, mut f: impl FnMut(u64, u32, ChunkKey) -> Result<()>) -> Result<()> {
        for item in self.db.iterator_cf(self.cf("recipe"), IteratorMode::Start) {
            let (k, v) = item?;
            let (Ok(rid), Ok(pno)) = (k[..8.min(k.len())].try_into().map(u64::from_be_bytes), k[8.min(k.len())..].try_into().map(u32::from_be_bytes)) else {
                return Err(IndexError::Bad("recipe key"));
            };
            let key = ChunkKey::from_bytes(&v).ok_or(IndexError::Bad("recipe"))?;
            f(rid, pno, key)?;
        }
        Ok(())
    }

    /// Applies logged changes (a metadata log record), leaving out those to the chunk
    /// column family unless `chunks`: one synced batch.
    pub fn apply(&self, ops: &[LogOp], chunks: bool, extra: Batch) -> Result<()> {
        let b = self.replayed(ops, chunks, extra)?;
        self.write(b)
    }

    /// `apply`, unsynced (a rebuild).
    pub fn apply_unsynced(&self, ops: &[LogOp], chunks: bool) -> Result<()> {
        let b = self.replayed(ops, chunks, Batch::new())?;
        self.write_unsynced(b)
    }

    fn replayed(&self, ops: &[LogOp], chunks: bool, extra: Batch) -> Result<Batch> {
        let mut b = extra;
        for op in ops {
            let cf_of = |n: u8| CFS.get(n as usize).map(|name| self.cf(name)).ok_or(IndexError::Bad("log: column family"));
            match op {
                LogOp::Put(n, ..) | LogOp::Delete(n, ..) | LogOp::DeleteRange(n, ..) if *n == CF_CHUNK && !chunks => {}
                LogOp::Put(n, k, v) => b.wb.put_cf(cf_of(*n)?, k, v),
                LogOp::Delete(n, k) => b.wb.delete_cf(cf_of(*n)?, k),
                LogOp::DeleteRange(n, a, z) => b.wb.delete_range_cf(cf_of(*n)?, a, z),
            }
        }
        Ok(b)
    }
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.wb.is_empty()
    }

    /// The changes made so far, as they go into the metadata log.
    pub fn log(&self) -> &[LogOp] {
        &self.log
    }

    fn put(&mut self, idx: &Index, cf: u8, key: &[u8], value: &[u8]) {
        self.wb.put_cf(idx.cf(CFS[cf as usize]), key, value);
        self.log.push(LogOp::Put(cf, key.to_vec(), value.to_vec()));
    }

    fn delete(&mut self, idx: &Index, cf: u8, key: &[u8]) {
        self.wb.delete_cf(idx.cf(CFS[cf as usize]), key);
        self.log.push(LogOp::Delete(cf, key.to_vec()));
    }

    pub fn put_meta_u64(&mut self, idx: &Index, name: &str, v: u64) {
        self.put(idx, CF_META, name.as_bytes(), &v.to_le_bytes());
    }

    pub fn put_meta_bytes(&mut self, idx: &Index, name: &str, v: &[u8]) {
        self.put(idx, CF_META, name.as_bytes(), v);
    }

    /// A meta record that is not itself logged: the log's own bookkeeping (which record the
    /// index has applied), derived from the packs rather than replayed from them.
    pub fn put_meta_u64_unlogged(&mut self, idx: &Index, name: &str, v: u64) {
        self.wb.put_cf(idx.cf("meta"), name.as_bytes(), v.to_le_bytes());
    }

    /// The same for bytes: a record derived from what gc did, that an index rebuilt without
    /// it does without (gc's settling dictionary, `store::maint::train`).
    pub fn put_meta_bytes_unlogged(&mut self, idx: &Index, name: &str, v: &[u8]) {
        self.wb.put_cf(idx.cf("meta"), name.as_bytes(), v);
    }

    /// Hints (`HINT_CFS`), never logged; nothing on an index without them.
    pub fn put_capture(&mut self, idx: &Index, url: &UrlKey, key: &ChunkKey) {
        if idx.hints {
            self.wb.put_cf(idx.cf("capture"), url, key.to_bytes());
        }
    }

    /// Notes `url` as the latest URL whose capture has a sketch slot's value
    /// (`Index::similar`).
    pub fn put_similar(&mut self, idx: &Index, key: &[u8; 5], url: &UrlKey) {
        if idx.hints {
            self.wb.put_cf(idx.cf("capture"), key, url);
        }
    }

    pub fn put_delta_base_hint(&mut self, idx: &Index, key: &ChunkKey, base: &ChunkKey) {
        if idx.hints {
            self.wb.put_cf(idx.cf("delta_base"), key.to_bytes(), base.to_bytes());
        }
    }

    pub fn delete_delta_base_hint(&mut self, idx: &Index, key: &ChunkKey) {
        if idx.hints {
            self.wb.delete_cf(idx.cf("delta_base"), key.to_bytes());
        }
    }

    pub fn put_chunk(&mut self, idx: &Index, key: &ChunkKey, e: &ChunkEntry) {
        self.put(idx, CF_CHUNK, &key.to_bytes(), &enc(e));
    }

    /// A chunk entry that is not logged (the log record's own entry: its place is known only
    /// once it is written, and a rebuild finds it by scanning).
    pub fn put_chunk_unlogged(&mut self, idx: &Index, key: &ChunkKey, e: &ChunkEntry) {
        self.wb.put_cf(idx.cf("chunk"), key.to_bytes(), enc(e));
    }

    pub fn delete_chunk(&mut self, idx: &Index, key: &ChunkKey) {
        self.delete(idx, CF_CHUNK, &key.to_bytes());
    }

    pub fn put_inode<T: Serialize>(&mut self, idx: &Index, ino: u64, v: &T) {
        self.put(idx, 2, &ino.to_be_bytes(), &enc(v));
    }

    pub fn delete_inode(&mut self, idx: &Index, ino: u64) {
        self.delete(idx, 2, &ino.to_be_bytes());
    }

    pub fn put_dirent(&mut self, idx: &Index, parent: u64, name: &[u8], ino: u64) {
        self.put(idx, 3, &dirent_key(parent, name), &ino.to_be_bytes());
    }

    pub fn delete_dirent(&mut self, idx: &Index, parent: u64, name: &[u8]) {
        self.delete(idx, 3, &dirent_key(parent, name));
    }

    /// Piece `piece` of recipe `rid` is the chunk `key`.
    pub fn put_recipe_piece(&mut self, idx: &Index, rid: u64, piece: u32, key: &ChunkKey) {
        self.put(idx, 4, &recipe_key(rid, piece), &key.to_bytes());
    }

    pub fn delete_recipe(&mut self, idx: &Index, rid: u64, pieces: u32) {
        let (a, z) = (recipe_key(rid, 0), recipe_key(rid, pieces));
        self.wb.delete_range_cf(idx.cf("recipe"), a, z);
        self.log.push(LogOp::DeleteRange(4, a.to_vec(), z.to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_atomic_and_digest_prefix_lookup_finds_collisions() {
        let dir = tempfile::tempdir().unwrap();
        let idx = Index::create(dir.path(), 2, false).unwrap();
        assert_eq!(idx.format_version().unwrap(), Some(2));
        assert!(Index::open(&dir.path().join("missing")).is_err(), "opening never creates");
        let e = |refs| ChunkEntry { pack: 1, offset: 0, stored_len: 3, raw_len: 3, codec: 0, kind: 0, refs };
        let mut b = Batch::new();
        b.put_chunk(&idx, &ChunkKey { digest: [5; 32], seq: 0 }, &e(1));
        b.put_chunk(&idx, &ChunkKey { digest: [5; 32], seq: 1 }, &e(2));
        b.put_chunk(&idx, &ChunkKey { digest: [6; 32], seq: 0 }, &e(3));
        b.put_meta_u64(&idx, "next_ino", 9);
        b.put_dirent(&idx, 1, b"a", 2);
        b.put_dirent(&idx, 1, b"b", 3);
        b.put_dirent(&idx, 2, b"c", 4);
        idx.write(b).unwrap();
        let found = idx.chunks_with_digest(&[5; 32]).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].1.refs, 2);
        assert_eq!(idx.meta_u64("next_ino").unwrap(), 9);
        assert_eq!(idx.dir_entries(1).unwrap(), vec![(b"a".to_vec(), 2), (b"b".to_vec(), 3)]);
        assert_eq!(idx.lookup(2, b"c").unwrap(), Some(4));
    }

    /// A chunk key of the wrong length (a damaged index) is an error for every walk of the
    /// chunk table, not a chunk left out: gc and fsck would otherwise work on part of it
    /// and say nothing.
    #[test]
    fn a_malformed_chunk_key_is_an_error_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let idx = Index::create(dir.path(), 2, false).unwrap();
        let e = ChunkEntry { pack: 1, offset: 0, stored_len: 3, raw_len: 3, codec: 0, kind: 0, refs: 1 };
        let mut b = Batch::new();
        b.put_chunk(&idx, &ChunkKey { digest: [5; 32], seq: 0 }, &e);
        idx.write(b).unwrap();
        let mut bad = [5u8; 33].to_vec();
        bad[32] = 9;
        idx.db.put_cf(idx.cf("chunk"), &bad, enc(&e)).unwrap();
        assert_eq!(idx.chunk_iter().filter(|r| r.is_err()).count(), 1, "the malformed key is reported");
        assert!(idx.chunks_with_digest(&[5; 32]).is_err());
        assert!(idx.for_each_chunk(|_, _| Ok(())).is_err());
    }

    /// A mount reads a small chunk table into the block cache, so that lookups find every
    /// block there (the page cache may have dropped the table's files since).
    #[test]
    fn a_small_chunk_table_is_read_into_the_block_cache() {
        let dir = tempfile::tempdir().unwrap();
        let idx = Index::create(dir.path(), 2, false).unwrap();
        let mut b = Batch::new();
        for i in 0..20_000u32 {
            let mut digest = [0u8; 32];
            digest[..4].copy_from_slice(&i.wrapping_mul(2654435761).to_be_bytes());
            b.put_chunk(&idx, &ChunkKey { digest, seq: 0 }, &ChunkEntry { pack: 1, offset: i as u64, stored_len: 3, raw_len: 3, codec: 0, kind: 0, refs: 1 });
        }
        idx.write(b).unwrap();
        idx.flush_tables().unwrap();
        drop(idx);
        let idx = Index::open(dir.path()).unwrap();
        let before = idx.chunk_cache_usage();
        assert!(idx.cache_chunk_table());
        let after = idx.chunk_cache_usage();
        // 20,000 entries of 33 + 20-odd bytes: about a megabyte of blocks.
        assert!(after > before + (800 << 10), "block cache {before} -> {after} bytes");
    }

    fn logs(dir: &Path) -> Vec<u64> {
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()).filter(|e| e.file_name().to_string_lossy().ends_with(".log")).map(|e| e.metadata().unwrap().len()).collect()
    }

    #[test]
    fn opening_again_and_again_leaves_one_write_ahead_log() {
        let dir = tempfile::tempdir().unwrap();
        drop(Index::create(dir.path(), 2, false).unwrap());
        for _ in 0..4 {
            drop(Index::open(dir.path()).unwrap());
        }
        assert_eq!(logs(dir.path()), vec![0], "RocksDB 7.8 left one empty log per open");
        // A log that holds writes not flushed yet is recovered, never removed.
        let idx = Index::open(dir.path()).unwrap();
        let mut b = Batch::new();
        b.put_meta_u64(&idx, "next_ino", 7);
        idx.write(b).unwrap();
        drop(idx);
        assert!(logs(dir.path()).iter().any(|&n| n > 0), "the write is in a log only");
        assert_eq!(Index::open(dir.path()).unwrap().meta_u64("next_ino").unwrap(), 7);
    }

    #[test]
    fn hints_are_kept_unlogged_where_the_index_has_them() {
        let key = |n: u8| ChunkKey { digest: [n; 32], seq: n as u32 };
        let url = url_key(b"http://example.org/");
        let dir = tempfile::tempdir().unwrap();
        let idx = Index::create(dir.path(), 9, true).unwrap();
        let mut b = Batch::new();
        b.put_capture(&idx, &url, &key(1));
        b.put_delta_base_hint(&idx, &key(2), &key(1));
        assert!(b.log().is_empty(), "hints are never logged");
        idx.write(b).unwrap();
        drop(idx);
        let idx = Index::open(dir.path()).unwrap();
        assert!(idx.has_hints());
        assert_eq!(idx.capture(&url).unwrap(), Some(key(1)));
        assert_eq!(idx.captures(&[url_key(b"x"), url, url]).unwrap(), vec![None, Some(key(1)), Some(key(1))]);
        assert_eq!(idx.delta_base_hint(&key(2)).unwrap(), Some(key(1)));
        let mut b = Batch::new();
        b.delete_delta_base_hint(&idx, &key(2));
        idx.write(b).unwrap();
        assert_eq!(idx.delta_base_hint(&key(2)).unwrap(), None);
        let mut seen = 0;
        idx.for_each_namespace_record(|_| {
            seen += 1;
            Ok(true)
        })
        .unwrap();
        drop(idx);
        assert!(Index::open_read_only(dir.path()).unwrap().has_hints());
        // An index made without them (an older format's) opens as it is, and hints are no-ops.
        let old = tempfile::tempdir().unwrap();
        let idx = Index::create(old.path(), 7, false).unwrap();
        let mut b = Batch::new();
        b.put_capture(&idx, &url, &key(1));
        idx.write(b).unwrap();
        drop(idx);
        let idx = Index::open(old.path()).unwrap();
        assert!(!idx.has_hints());
        assert_eq!(idx.capture(&url).unwrap(), None);
        let mut namespace = 0;
        idx.for_each_namespace_record(|_| {
            namespace += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen, namespace, "hints are in no checkpoint");
    }
}
