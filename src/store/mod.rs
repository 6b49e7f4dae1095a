//! The store: one directory holding the index, the packs and the store's settings, and the
//! operations on it (ingest, read, namespace changes, stats, fsck, gc).
//!
//! Layout of STORE/:
//! - `warcfs.json`  format name and version, verify mode, compression (written at init);
//! - `lock`         flock'ed by the one process that owns the store; holds its pid;
//! - `index/`       RocksDB (see `index`);
//! - `packs/`       sealed, immutable pack files;
//! - `packs-tmp/`   the open pack (recovered and sealed at the next open after a crash).
//!
//! Write order: chunk bytes are appended to the open pack and `fdatasync`ed before the one
//! synced RocksDB batch that commits a recipe with its refcount changes. A crash leaves the
//! old state or the new one, plus pack bytes nothing references, which `gc` reclaims.
//!
//! What the store is (`Mode`, `Share`) is decided once, at open. The public opens
//! (`Store::open` and the rest) are the nodes wing's (`crate::nodes`): it opens the
//! directory here (`Store::open_dir`), joins its bucket if it has one, and gives the store
//! its part among the bucket's nodes (`Peers`), which the store calls without asking.

mod backend;
mod config;
mod delta;
mod foreign;
mod fsops;
mod ingest;
mod journal;
pub mod layout;
mod maint;
mod mode;
mod namespace;
mod open;
mod peers;
mod read;
mod space;

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::LockExt;
use crate::digest::DigestFn;
use crate::index::{Index, IndexError};
use crate::pack::{self, OpenPack, PackError, PackReader};

pub use read::ahead::{rebuild_threads, ReadAhead, START_AFTER as STREAMING_RUN};
pub use read::entries::{is_wacz_name, is_warc_name, EntryTree, WaczWarc, MAX_INFLATED, VIEW_PREFIX as WACZ_VIEW_PREFIX};
pub use read::records::warc_holding;
pub use read::export::ExportedFile;
pub use read::originals::Originals;
pub use read::resolved::{MadeRecords, ResolvedFile, MAX_RESOLVED, RESOLVED_DIR};
pub use config::{Compression, Config, Parses, Verify, Writers};
pub use fsops::{FileUsage, Prepared};
pub use ingest::{Presplit, Source};
pub use ingest::source::Spares;
pub use ingest::direct::ImportFile;
/// How much of a file ingest reads first (and an importer splits ahead, see `Presplit`).
pub const FIRST_WINDOW: usize = ingest::WINDOWS.bytes;
/// The name at the root of a mount under which it shows its own read-only views of the
/// store (`/.warcfs/index.cdxj`, `resolved/`, `wacz/`): no stored file or directory takes it.
pub const RESERVED: &str = ".warcfs";
pub use maint::fsck::{FsckReport, MAX_PROBLEMS};
pub use maint::gc::{GcOptions, GcReport, ScanLimits};
pub use maint::train::Training;
pub use maint::stats::{ByteCategories, ByteCounts, ByteUse, Stats};
pub(crate) use backend::{node_base, remote_err};
pub(crate) use foreign::Keep;
pub(crate) use journal::{MetaRecord, CHECKPOINT_RECORDS};
use open::{recover_packs, take_lock};
pub(crate) use open::{open_index, read_config, set_mode, Opening};
pub use namespace::{components, DirEntry, FileMeta, Ingest, Inode, InodeKind, PutReport, Timestamp, ROOT_INO};
pub use peers::{Followed, CLOSE_UPLOAD_WAIT};
pub(crate) use peers::{Alone, GcGuard, Peers};
pub use read::cache::{ReadCache, ReadCounters};
pub use read::records::{RecordHead, StagedFiles};
pub use maint::repair::{rebuild_index, RepairReport};
pub use maint::snapshot::SnapshotReport;
pub use space::{Space, DEFAULT_MIN_FREE};
pub use mode::{Mode, Share, SETTLE_REMOTE_BUDGET};

pub const FORMAT_NAME: &str = "warcfs-store";
/// The newest version: 12, version 10 (parses in the predicted form) whose header blocks
/// are packed (as 11). New stores one node writes are made at 11 (`init --parses fast`, the
/// default) or 12 (`--parses compact`: `config::Parses`).
/// 11: version 9 whose header blocks' zstd frames hold them packed (`format::warc::packed`:
/// record ids and digests as bytes, a request's block digest derived); a warcfs that does
/// not know 11 refuses such a store instead of failing on its first header block.
/// 10: version 9 whose gzip members' parses may be in the predicted form (zlib's own
/// search, cut short, and its corrections: `format::deflate`), cut where a match ends.
/// 9: version 7 whose payload chunks gc may store as deltas against a relative
/// (`pack::Codec::ZstdDelta`, `delta`), with the index's hint column families. Stores of
/// version 7 are read and written as they are (no deltas, no hints).
/// 8: version 6 whose parses may be in the longest form (as 7); a store several nodes write
/// is not settled by gc, so it holds no deltas and stays at 8.
/// 7: version 5 whose gzip members' parses may be in the longest form (an optimal parser's,
/// such as zopfli's: `format::deflate`). Stores of versions 5 and 6 are read and written as
/// they are (their parses in the ranked form only).
/// 5: versions 3 and 4 (a back end or none) with chunks compressed with zstd dictionaries
/// (`pack::Codec::ZstdDict`, `dict`).
/// 4: version 3 with the sealed packs in an object store (`Config::backend`).
/// 3: the packs hold everything (recipe pieces as blobs, every index batch as a metadata log
/// record: `journal`), so the index can be rebuilt from them (`repair index`).
/// 2: gzip members are rebuilt from their recorded deflate parse (`format::deflate`), with
/// a CRC-32 of the original bytes; version 1 stored zlib levels. Older stores are refused.
/// Stores of versions 3 and 4 are read and written as they are (without dictionaries), so
/// the warcfs that made them still reads them; one that does not know version 5 refuses a
/// new store instead of failing on its first dictionary chunk.
pub const FORMAT_VERSION: u32 = 12;
/// The versions read besides `FORMAT_VERSION`: 3 (local packs only) and 4 (an object store).
pub const LOCAL_V3: u32 = 3;
pub const REMOTE_FORMAT_VERSION: u32 = 4;
/// From this version on, chunks may be compressed with a dictionary.
pub const DICT_FORMAT_VERSION: u32 = 5;
/// Version 6 stores (5 several nodes write), read and written as they are.
pub const SHARED_V6: u32 = 6;
/// Version 7 stores (parses in the longest form, no deltas), read and written as they are.
pub const LONGEST_V7: u32 = 7;
/// Version 9 stores (deltas, no predicted parses), read and written as they are.
pub const DELTAS_V9: u32 = 9;
/// Version 10 stores (predicted parses, header blocks as they are), read and written as they are.
pub const PREDICTED_V10: u32 = 10;
/// Version 11: 9 with packed header blocks (`init --parses fast`).
pub const PACKED_V11: u32 = 11;
/// A bucket-backed store that several nodes write at once (`init --backend URL --writers
/// several`): version 7 with per-node namespaces and metadata logs (`nodes`). A warcfs
/// that knows only one writer per bucket refuses it.
pub const SHARED_FORMAT_VERSION: u32 = 8;
/// Every version this warcfs reads and writes.
pub const VERSIONS: [u32; 10] = [LOCAL_V3, REMOTE_FORMAT_VERSION, DICT_FORMAT_VERSION, SHARED_V6, LONGEST_V7, SHARED_FORMAT_VERSION, DELTAS_V9, PREDICTED_V10, PACKED_V11, FORMAT_VERSION];

/// Whether a store of `version` may hold parses in the longest form (7 and later).
pub fn longest_parses(version: u32) -> bool {
    version >= LONGEST_V7
}

/// Whether a store of `version` may hold deltas, and keeps the hints that find their bases
/// (9 and 10; not 8, which several nodes write and gc does not settle).
pub fn deltas(version: u32) -> bool {
    version >= DELTAS_V9
}

/// Whether a store of `version` may hold parses in the predicted form (10 and 12).
pub fn predicted_parses(version: u32) -> bool {
    version == PREDICTED_V10 || version == FORMAT_VERSION
}

/// Whether the zstd frames of a store of `version`'s header blocks hold them packed (11
/// and 12; `pack::Shape`).
pub fn packed_headers(version: u32) -> bool {
    version >= PACKED_V11
}
pub(crate) use layout::CONFIG_FILE;

/// How the pack reader finds a chunk a blob names (a dictionary, a delta base): through the index.
fn chunk_locator(index: &Arc<Index>) -> pack::ChunkLocator {
    let index = Arc::downgrade(index);
    Box::new(move |key| {
        let index = index.upgrade().ok_or_else(|| io::Error::other("the store is closed"))?;
        let e = index.chunk(key).map_err(io::Error::other)?;
        Ok(e.map(|e| (e.pack, e.offset, e.stored_len)))
    })
}

/// Sealed packs grow to about this size by default.
pub const PACK_TARGET: u64 = 32 << 20;
/// The smallest `--pack-size` (tests use it to make thousands of packs).
pub const MIN_PACK_SIZE: u64 = 16 << 10;
/// Decoded chunks kept for readers: header blocks, which the records of a stretch of a file
/// all slice, and chunks read in part. A chunk read whole goes straight into the reader's
/// buffer and is not kept (the kernel keeps the file's pages). Memory the cache recycles
/// costs no page faults, memory it grows into does.
const CHUNK_CACHE: usize = 64 << 20;
/// Rebuilt gzip members kept for readers.
const MEMBER_CACHE: usize = 128 << 20;
/// Decoded parse tails kept for the next copy of their payload (`read::tails`): 8 bytes a
/// match, the tails of one 150 MB crawl of text some 36 MiB, so a crawl's tails are still
/// there when the next crawl of the same site is read.
const TAIL_CACHE: usize = 64 << 20;

/// What can go wrong in the store.
///
/// The rule: a variant is a failure that a caller tells apart (by errno in the mount,
/// `fuse::errno`; by exit code; by trying again) or whose message tells the archivist what to
/// do next. It carries the names of what failed (path, chunk, pack, node) as fields, and
/// says once, in its message, what happened and what to do; no variant carries a sentence
/// written elsewhere. Which command and which file were at work is context, added at the
/// CLI (`anyhow::Context`). Errors of the layers below pass through whole (`Index`, `Pack`,
/// `Io` with its path). `Bug` is for what cannot happen, never a catch-all.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: io::Error },
    #[error("{0}: not a warcfs store (no {CONFIG_FILE}, and the directory is not empty)")]
    NotAStore(PathBuf),
    #[error("{path}: unsupported store format ({found}); this warcfs reads {FORMAT_NAME} versions {LOCAL_V3}, {REMOTE_FORMAT_VERSION} (packs in an object store), {DICT_FORMAT_VERSION} and {LONGEST_V7} (dictionaries), {DELTAS_V9} (deltas), {PREDICTED_V10} (predicted parses), {PACKED_V11} and {FORMAT_VERSION} (packed header blocks), and {SHARED_V6} and {SHARED_FORMAT_VERSION} (several writers) (to move files over, read them with the warcfs that wrote the store and import them into a new one)")]
    Format { path: PathBuf, found: String },
    #[error("{path}: store is in use by process {pid}")]
    Busy { path: PathBuf, pid: String },
    #[error("{0}: the store's index (index/) is missing. The packs are untouched; warcfs will not open the store as an empty one (gc would then take every pack for garbage). Rebuild the index from the packs with `warcfs repair index {0}`")]
    IndexMissing(PathBuf),
    #[error("{path}: the store's index (index/) cannot be opened: {err}. The packs are untouched and nothing was changed; rebuild the index from the packs with `warcfs repair index {path}` (it keeps the unreadable one aside)")]
    IndexUnreadable { path: PathBuf, err: IndexError },
    #[error("refcount of chunk {chunk} would drop below zero ({refs}): the index is inconsistent, nothing was changed; run `warcfs fsck`")]
    RefcountUnderflow { chunk: String, refs: i64 },
    #[error("{0}: the file changed while it was being imported; nothing was stored for it (import it again once it is complete)")]
    SourceChanged(String),
    #[error("{0}: the store's index opens; `repair index` rebuilds only a missing or unreadable one (move index/ aside to rebuild it anyway)")]
    IndexOpens(PathBuf),
    #[error("chunk {0}: two files stored at once hold different chunks under one digest; nothing was committed for the second (store it again)")]
    ConcurrentCollision(String),
    #[error("{0}: being written through a mount of this store: its latest bytes are not stored yet. Read it through the mount, or run this again once the mount has stored it (`warcfs stats` counts staged files)")]
    Staged(String),
    #[error("gc stopped: {0}")]
    GcRefused(String),
    #[error("an earlier metadata write failed; close and reopen the store (the next open applies what reached the disk)")]
    LogPoisoned,
    #[error("metadata log: {at}: {what}")]
    BadLogRecord { at: String, what: String },
    #[error("one change of {bytes} bytes of index records (a file of about {ops} chunks) is more than a log record may hold ({} MiB, {} MiB compressed); nothing was changed", pack::MAX_RAW >> 20, pack::MAX_STORED >> 20)]
    ChangeTooLarge { bytes: usize, ops: usize },
    #[error("{0}: another node took the bucket's lock over while this one could not reach it; nothing more is written here (start this node again once the other has stopped)")]
    Fenced(PathBuf),
    #[error("{path}: rebuilding this node's index from the bucket found {count} problems (the first: {first}); nothing will be written until `warcfs fsck` is clean")]
    RebuiltWithProblems { path: PathBuf, count: usize, first: String },
    #[error("/{name} at the store's root is node {theirs:04x}'s, not this node's ({ours:04x}): each node needs a name of its own")]
    NodeNameTaken { name: String, theirs: u16, ours: u16 },
    #[error("{0}: the store's root is not in the bucket yet (the node that created the store has not uploaded it); try again in a moment")]
    RootNotUploaded(PathBuf),
    #[error("{path}: the packs hold {chunks} chunks but no metadata log record, so no file could be named: they are not the packs of a whole format-{FORMAT_VERSION} store (an older warcfs, or packs missing); no index was built")]
    NoLogRecords { path: PathBuf, chunks: u64 },
    #[error("{0}: no such store")]
    NoStore(PathBuf),
    #[error("{url}: {err}")]
    Remote { url: String, err: io::Error },
    #[error("{0}: this node follows a bucket that another node writes (it is mounted read-only); write through the writing node, or mount this one read-write once that one has stopped")]
    Follower(String),
    #[error("{what}: on a store several nodes write, this node ({node}) writes only under /{node}/; this is {owner} (write it there, or here under /{node}/)")]
    NotOwned { what: String, node: String, owner: String },
    #[error("{0}: no such file or directory in the store")]
    NotFound(String),
    #[error("{0}: not a directory")]
    NotADirectory(String),
    #[error("{0}: is a directory")]
    IsADirectory(String),
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    #[error("{0}: already exists")]
    Exists(String),
    #[error("/{0}: the name is reserved: a mount shows its own read-only view of the store there")]
    Reserved(String),
    #[error("{0}: invalid path")]
    InvalidPath(String),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error("recipe {rid} piece {piece}: {what}")]
    Recipe { rid: u64, piece: u32, what: String },
    /// A gzip member whose rebuild does not give its original bytes: never served.
    #[error("gzip member at offset {offset} ({len} bytes) does not rebuild: {what}")]
    Member { offset: u64, len: u64, what: String },
    #[error("chunk {0} is referenced but not in the index")]
    MissingChunk(String),
    #[error("not stored: the file before it could not be stored ({0})")]
    EarlierFailed(String),
    #[error("internal error (a bug in warcfs; please report it): {0}")]
    Bug(String),
    #[error("resolving a revisit: {0}")]
    Resolve(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Runs `f`; a panic in it (a bug met by some input or some stored chunk) becomes a
/// `StoreError::Bug` for this one operation, instead of ending a thread that others wait on
/// or hold locks for. The panic hook has logged its place.
pub(crate) fn bug_as_error<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
        Err(StoreError::Bug(format!("{what} panicked: {}", msg.as_deref().unwrap_or("(no message)"))))
    })
}

/// An I/O error on `path`, as the store reports it.
pub(crate) fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |err| StoreError::Io { path: path.to_path_buf(), err }
}

/// Chunks appended to the open pack but not yet committed, and the open pack itself.
struct Writer {
    open: Option<OpenPack>,
    /// Chunks the ingest in progress appended; handed to its `Ingested` when it ends.
    pending: ingest::chunks::Pending,
    collisions: u64,
    /// The dictionary chunks are compressed with, and the samples for the next.
    dicts: ingest::dict::Dicts,
}

/// Namespace and refcount changes are read-modify-write of index records: they hold this
/// lock, not the writer's, so they never wait for an ingest in progress.
pub(crate) struct Ns {
    /// Next inode / recipe id to hand out; 0 until first read from the index.
    next_ino: u64,
    next_recipe: u64,
}

pub struct Store {
    root: PathBuf,
    config: Config,
    /// The bucket's client and this node's cache of its packs, on a store with a back end
    /// (the pack reader reads through the same one).
    bucket: Option<Arc<crate::bucket::client::RemotePacks>>,
    /// Shared with the pack reader, which finds dictionary chunks through it.
    index: Arc<Index>,
    packs: PackReader,
    cache: ReadCache,
    writer: Mutex<Writer>,
    /// The metadata log's open pack (see `journal`); taken after `ns` and `writer`.
    journal: Mutex<journal::Journal>,
    /// The next pack id, for the data writer's packs and the journal's alike.
    next_pack: std::sync::atomic::AtomicU64,
    ns: Mutex<Ns>,
    digest: DigestFn,
    /// What fsck and gc hold in memory at once.
    limits: ScanLimits,
    /// The free space data must leave on the store's disk.
    space: Space,
    /// A mount's background ingests, as it counts them.
    ingests: IngestCounters,
    /// Parse tails this process stored, for the copies of their payloads (`tails`).
    tails: ingest::tails::KnownTails,
    /// What this store is (`Mode`), decided at open.
    mode: Mode,
    /// The other nodes of its bucket, as the nodes wing chose their part by `mode` at open
    /// (`Alone` on a store without a bucket).
    peers: Arc<dyn Peers>,
    _lock: File,
}

/// What a mount's background ingests are doing: kept by the mount, answered over its
/// control socket, shown by `stats`.
#[derive(Default)]
pub struct IngestCounters {
    /// Files closed and waiting for their ingest.
    pub queued: std::sync::atomic::AtomicU64,
    /// Files whose ingest failed (a full disk, say), waiting to be tried again.
    pub retrying: std::sync::atomic::AtomicU64,
    /// Ingest attempts that failed since the mount.
    pub failed: std::sync::atomic::AtomicU64,
}

/// `IngestCounters` as of one moment.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ingests {
    pub queued: u64,
    pub retrying: u64,
    pub failed_attempts: u64,
}

impl IngestCounters {
    pub fn now(&self) -> Ingests {
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        Ingests { queued: get(&self.queued), retrying: get(&self.retrying), failed_attempts: get(&self.failed) }
    }
}

/// Options for opening (and, if needed, creating) a store.
#[derive(Clone, Debug)]
pub struct OpenOptionsStore {
    /// Create the store with `config` if the directory is missing or empty.
    pub create: bool,
    pub config: Config,
    /// On a bucket-backed store: follow the bucket's writer, write nothing (`nodes`).
    pub follower: bool,
}

impl Default for OpenOptionsStore {
    fn default() -> Self {
        OpenOptionsStore { create: true, config: Config::default(), follower: false }
    }
}

impl Store {
    /// How many members this process's ingests stored with a parse tail named from an
    /// earlier copy of their payload, and how many such namings the store refused (`tails`).
    pub fn named_tails(&self) -> (u64, u64) {
        self.tails.counts()
    }

    /// Has the kernel start reading the index into the page cache, up to `budget` bytes, and
    /// reads a small chunk table into RocksDB's block cache before it returns (`Index::warm`).
    pub fn warm_index(&self, budget: u64) {
        self.index.warm(budget);
    }

    /// What the mount's background ingests are doing (the mount keeps these counts).
    pub fn ingests(&self) -> &IngestCounters {
        &self.ingests
    }

    /// The free space data must leave on the store's disk (`space`).
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The one place a `Store` is put together, from what an open found.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        root: PathBuf,
        config: Config,
        index: Arc<Index>,
        packs: PackReader,
        bucket: Option<Arc<crate::bucket::client::RemotePacks>>,
        dicts: ingest::dict::Dicts,
        next_pack: u64,
        digest: DigestFn,
        mode: Mode,
        peers: Arc<dyn Peers>,
        lock: File,
    ) -> Store {
        Store {
            space: Space::new(root.clone(), space::DEFAULT_MIN_FREE),
            root,
            config,
            bucket,
            index,
            packs,
            cache: ReadCache::new(CHUNK_CACHE, MEMBER_CACHE, TAIL_CACHE),
            writer: Mutex::new(Writer { open: None, pending: ingest::chunks::Pending::default(), collisions: 0, dicts }),
            journal: Mutex::new(journal::Journal { open: None, next_seq: 0, poisoned: false }),
            next_pack: next_pack.into(),
            ns: Mutex::new(Ns { next_ino: 0, next_recipe: 0 }),
            digest,
            limits: ScanLimits::default(),
            ingests: IngestCounters::default(),
            tails: ingest::tails::KnownTails::default(),
            mode,
            peers,
            _lock: lock,
        }
    }

    /// Changes whenever the store's index changes.
    pub fn generation(&self) -> u64 {
        self.index.generation()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The zstd level gc settles this store's packs at (its format decides: 15 for parses in
    /// the predicted form, else 9).
    pub fn settle_level(&self) -> u8 {
        maint::settle::level(self.config.version)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What this store is, decided at open.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether this store follows a bucket that another node writes (`open_follower`).
    pub fn is_follower(&self) -> bool {
        self.mode.follows()
    }

    /// What of the store this node writes (`Share`), from its settings.
    pub(crate) fn share(&self) -> Share {
        Share::of(&self.config)
    }

    /// This node's number: the top 16 bits of the ids of the packs it writes (0 on a local
    /// store), and on a store several nodes write of its inodes and recipes too.
    pub(crate) fn node(&self) -> u16 {
        self.config.node.unwrap_or(0)
    }

    /// Seals the open pack (if any) and writes the index's memtables out. Called on close,
    /// so a cleanly closed store has no open pack and no write-ahead log to replay.
    pub fn flush(&self) -> Result<()> {
        {
            let mut w = self.writer.locked();
            self.seal_open(&mut w)?;
        }
        self.seal_journal(&mut self.journal.locked())?;
        self.index.flush_tables()?;
        Ok(())
    }

    /// Seals the open data pack, then the log's, if they hold anything, so that the uploads
    /// send them now, in that order (a record never reaches the bucket before the chunks it
    /// names); returns whether it did. Nothing on a store without uploads. Never waits for
    /// the writer lock (an ingest holds it for a whole file, and this holds the namespace
    /// lock meanwhile): if it is taken, nothing is sealed this time.
    pub(crate) fn seal_for_upload(&self) -> Result<bool> {
        if !self.packs.uploads() {
            return Ok(false);
        }
        // Namespace lock first (the lock order): a log pack is sealed only with every record
        // in it applied.
        let _ns = self.ns.locked();
        let Ok(mut w) = self.writer.try_lock() else { return Ok(false) };
        if w.open.as_ref().is_some_and(|o| !o.is_empty()) {
            self.seal_open(&mut w)?;
        }
        let mut j = self.journal.locked();
        if j.open.as_ref().is_some_and(|o| !o.is_empty()) {
            self.seal_journal(&mut j)?;
        }
        Ok(true)
    }

    /// Seals the data writer's open pack.
    fn seal_open(&self, w: &mut Writer) -> Result<()> {
        if let Some(open) = w.open.take() {
            self.seal_pack(open)?;
        }
        Ok(())
    }

    /// Seals an open pack into `packs/` (and queues its upload, on an object store), or
    /// removes it if it holds nothing.
    fn seal_pack(&self, open: OpenPack) -> Result<()> {
        let id = open.id;
        if open.is_empty() {
            let path = crate::store::layout::packs_tmp(&self.root).join(pack::pack_name(id));
            drop(open);
            crate::disk::remove_file(&path).map_err(io_at(&path))?;
        } else {
            let dir = crate::store::layout::packs(&self.root);
            open.seal(&dir).map_err(io_at(&dir))?;
            self.packs.forget(id);
            self.packs.sealed(id);
            return Ok(());
        }
        self.packs.forget(id);
        Ok(())
    }

    fn alloc_pack_id(&self) -> u64 {
        self.next_pack.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    /// The blobs of sealed pack `id`, from its footer.
    pub(crate) fn pack_blobs(&self, id: u64) -> Result<Vec<pack::BlobInfo>> {
        Ok(self.packs.footer(id)?)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Ok(mut w) = self.writer.lock() {
            if let Err(e) = self.seal_open(&mut w) {
                log::warn!("sealing the open pack: {e}");
            }
        }
        if let Ok(mut j) = self.journal.lock() {
            if let Err(e) = self.seal_journal(&mut j) {
                log::warn!("sealing the journal's open pack: {e}");
            }
        }
        // On a bucket-backed store: the packs go up (bounded), then the lock is given back.
        if let Err(e) = self.close_remote(CLOSE_UPLOAD_WAIT) {
            log::warn!("{e}");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod kind_tests;
#[cfg(test)]
mod packed_tests;
