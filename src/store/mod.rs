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

mod backend;
mod config;
mod delta;
mod fsops;
mod ingest;
mod journal;
pub mod layout;
mod mode;
mod maint;
mod namespace;
mod nodes;
mod open;
mod read;
mod space;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::LockExt;
use crate::digest::{self, DigestFn};
use crate::index::{Index, IndexError};
use crate::pack::{self, OpenPack, PackError, PackReader};

pub use read::ahead::{ReadAhead, START_AFTER as STREAMING_RUN};
pub use config::{Compression, Config, Verify, Writers};
pub use fsops::{FileUsage, Prepared};
pub use ingest::{Presplit, Source};
pub use ingest::source::Spares;
pub use ingest::direct::ImportFile;
/// How much of a file ingest reads first (and an importer splits ahead, see `Presplit`).
pub const FIRST_WINDOW: usize = ingest::WINDOWS.bytes;
pub use maint::fsck::{FsckReport, MAX_PROBLEMS};
pub use nodes::follow::{Followed, FOLLOW_INTERVAL, PUBLISH_INTERVAL};
pub use journal::CHECKPOINT_RECORDS;
pub use maint::gc::{GcOptions, GcReport, ScanLimits};
pub use maint::stats::{ByteCategories, ByteCounts, ByteUse, Stats};
pub use maint::settle::REMOTE_BUDGET as SETTLE_REMOTE_BUDGET;
use crate::bucket::hostname;
use backend::{remote_packs, remote_packs_read_only};
pub use nodes::join::CLOSE_UPLOAD_WAIT;
pub use nodes::join::{init_remote, Joined};
use open::{creation_leftover, open_index, recover_packs, remove_dead_runs, set_mode, take_lock};
pub(crate) use open::read_config;
pub use namespace::{components, DirEntry, FileMeta, Ingest, Inode, InodeKind, PutReport, Timestamp, ROOT_INO};
pub use read::cache::{ReadCache, ReadCounters};
pub use read::records::{RecordHead, StagedFiles};
pub use maint::repair::{repair_index, RepairReport};
pub use nodes::shared::default_dir;
pub use maint::snapshot::SnapshotReport;
pub use space::{Space, DEFAULT_MIN_FREE};
pub use mode::Mode;

pub const FORMAT_NAME: &str = "warcfs-store";
/// The version new stores are made at: 9, version 7 whose payload chunks gc may store as
/// deltas against a relative (`pack::Codec::ZstdDelta`, `delta`), with the index's hint
/// column families. Stores of version 7 are read and written as they are (no deltas, no
/// hints), so the warcfs that made them still reads them; one that does not know 9 refuses
/// it instead of failing on its first delta.
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
pub const FORMAT_VERSION: u32 = 9;
/// The versions read besides `FORMAT_VERSION`: 3 (local packs only) and 4 (an object store).
pub const LOCAL_V3: u32 = 3;
pub const REMOTE_FORMAT_VERSION: u32 = 4;
/// From this version on, chunks may be compressed with a dictionary.
pub const DICT_FORMAT_VERSION: u32 = 5;
/// Version 6 stores (5 several nodes write), read and written as they are.
pub const SHARED_V6: u32 = 6;
/// Version 7 stores (parses in the longest form, no deltas), read and written as they are.
pub const LONGEST_V7: u32 = 7;
/// A bucket-backed store that several nodes write at once (`init --backend URL --writers
/// several`): version 7 with per-node namespaces and metadata logs (`shared`). A warcfs
/// that knows only one writer per bucket refuses it.
pub const SHARED_FORMAT_VERSION: u32 = 8;
/// Every version this warcfs reads and writes.
pub const VERSIONS: [u32; 7] = [LOCAL_V3, REMOTE_FORMAT_VERSION, DICT_FORMAT_VERSION, SHARED_V6, LONGEST_V7, SHARED_FORMAT_VERSION, FORMAT_VERSION];

/// Whether a store of `version` is one several nodes write (6 or 8).
pub fn several_writers(version: u32) -> bool {
    version == SHARED_V6 || version == SHARED_FORMAT_VERSION
}

/// Whether a store of `version` may hold parses in the longest form (7, 8 and 9).
pub fn longest_parses(version: u32) -> bool {
    version >= LONGEST_V7
}

/// Whether a store of `version` may hold deltas, and keeps the hints that find their bases
/// (9; not 8, which several nodes write and gc does not settle).
pub fn deltas(version: u32) -> bool {
    version >= FORMAT_VERSION
}
pub(crate) use layout::CONFIG_FILE;

/// How the pack reader finds a chunk a blob names (a dictionary, a delta base): through the index.
fn chunk_locator(index: &std::sync::Arc<Index>) -> pack::ChunkLocator {
    let index = std::sync::Arc::downgrade(index);
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
    #[error("{path}: unsupported store format ({found}); this warcfs reads {FORMAT_NAME} versions {LOCAL_V3}, {REMOTE_FORMAT_VERSION} (packs in an object store), {DICT_FORMAT_VERSION} and {LONGEST_V7} (dictionaries), {FORMAT_VERSION} (deltas), and {SHARED_V6} and {SHARED_FORMAT_VERSION} (several writers) (to move files over, read them with the warcfs that wrote the store and import them into a new one)")]
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

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
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
    bucket: Option<std::sync::Arc<crate::bucket::client::RemotePacks>>,
    /// Shared with the pack reader, which finds dictionary chunks through it.
    index: std::sync::Arc<Index>,
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
    follow: Mutex<nodes::follow::FollowState>,
    /// When this writer last published to the bucket (`nodes::follow::publish`).
    published: Mutex<std::time::Instant>,
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
    /// On a bucket-backed store: follow the bucket's writer, write nothing (`follow`).
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

    /// Creates a new store at `root`; fails if one is already there.
    pub fn init(root: &Path, config: Config) -> Result<Store> {
        if crate::store::layout::config(root).exists() {
            return Err(StoreError::Io {
                path: root.to_path_buf(),
                err: io::Error::new(io::ErrorKind::AlreadyExists, "a store already exists here"),
            });
        }
        Store::open_with(root, &OpenOptionsStore { create: true, config, follower: false }, digest::sha256)
    }

    /// Opens an existing store, or creates it with the defaults if `create`.
    pub fn open(root: &Path, create: bool) -> Result<Store> {
        Store::open_with(root, &OpenOptionsStore { create, config: Config::default(), follower: false }, digest::sha256)
    }

    /// Opens a bucket-backed store as a follower of the node that writes to the bucket: no
    /// bucket lock, nothing written but what `follow` takes in (see `follow`). A local
    /// store opens as `open` does, read-only to its caller all the same.
    pub fn open_follower(root: &Path) -> Result<Store> {
        Store::open_with(root, &OpenOptionsStore { create: false, config: Config::default(), follower: true }, digest::sha256)
    }

    pub(crate) fn open_with(root: &Path, opts: &OpenOptionsStore, digest: DigestFn) -> Result<Store> {
        let cfg_path = crate::store::layout::config(root);
        if !root.exists() {
            if !opts.create {
                return Err(StoreError::NoStore(root.to_path_buf()));
            }
            crate::disk::create_dir_all(root).map_err(io_at(root))?;
            crate::disk::sync_parent(root).map_err(io_at(root))?;
        }
        if !root.is_dir() {
            return Err(StoreError::NotAStore(root.to_path_buf()));
        }
        let fresh = !cfg_path.exists();
        if fresh {
            // Only what a creation cut short can leave may be here; anything else is
            // someone else's directory (or a store that lost its config: refused too).
            let mut foreign = false;
            for e in fs::read_dir(root).map_err(io_at(root))? {
                let e = e.map_err(io_at(root))?;
                foreign |= !creation_leftover(&e.path());
            }
            if foreign || !opts.create {
                return Err(if foreign { StoreError::NotAStore(root.to_path_buf()) } else { StoreError::NoStore(root.to_path_buf()) });
            }
            // The store holds whole archives: keep it private to its owner.
            set_mode(root, 0o700)?;
        }
        let lock = take_lock(root)?;
        remove_dead_runs(&crate::store::layout::cache(root).join("runs"));
        let index_dir = crate::store::layout::index(root);
        let (config, created) = if fresh && !cfg_path.exists() {
            // Creation: the directories and an empty index first, the config last. A
            // directory with a config is a store, whose index must exist from then on; one
            // without is an unfinished creation, started again here.
            for d in crate::store::layout::DIRS {
                crate::disk::create_dir_all(&root.join(d)).map_err(io_at(root))?;
            }
            if index_dir.exists() {
                fs::remove_dir_all(&index_dir).map_err(io_at(&index_dir))?;
            }
            let cfg = opts.config.clone();
            let index = Index::create(&index_dir, cfg.version, deltas(cfg.version))?;
            let json = serde_json::to_vec_pretty(&cfg).expect("config serialises");
            pack::write_file_atomic(&cfg_path, &json).map_err(io_at(&cfg_path))?;
            (cfg, Some(index))
        } else {
            (read_config(&cfg_path)?, None)
        };
        for d in crate::store::layout::DIRS {
            fs::create_dir_all(root.join(d)).map_err(io_at(root))?;
        }
        let created_here = created.is_some();
        let mut index = match created {
            Some(index) => index,
            None => open_index(root, &index_dir, false, config.version)?,
        };
        let (max_id, recovered) = recover_packs(root)?;
        // The packs a follower's index reflects (its first `follow` takes in the others).
        let mut seen: Vec<(u64, u64)> = Vec::new();
        // A shared writer's index is to take in packs published since it last closed.
        let mut catch_up = false;
        let mode = Mode::at_open(&config, opts.follower);
        let bucket = remote_packs(root, &config)?;
        let mut packs = backend::pack_reader(root, bucket.as_ref());
        let max_id = match (mode, bucket.clone()) {
            (_, None) => max_id,
            (Mode::Follower { .. }, Some(r)) => {
                let nodes::join::Synced { index: idx, listed: list, .. } = nodes::join::sync_index(root, &config, index, &r, created_here, None)?;
                // A follower's index keeps no refcounts (`follow` leaves chunk changes out): it
                // must never pass as up to date when this node next opens to write, where gc
                // would take its zero counts at their word. 0 is no signature of any listing.
                let mut b = crate::index::Batch::new();
                b.put_meta_u64_unlogged(&idx, backend::SIGNATURE, 0);
                idx.write(b)?;
                index = idx;
                seen = list;
                max_id
            }
            (_, Some(r)) => {
                let shared = mode == Mode::SharedWriter;
                let owner = crate::bucket::lock_owner(config.node.unwrap_or(0), shared);
                let mut what = format!("{} pid {} {}", hostname(), std::process::id(), root.display());
                if shared {
                    // A lease says "pending" for as long as its node writes: records not yet
                    // published may rely on chunks a gc elsewhere would take, so a node killed
                    // at any moment keeps gc off until it starts again (or its lease is deleted
                    // by hand). A clean stop with nothing left to upload deletes it.
                    what = format!("{}: writing ({what})", crate::bucket::lock::PENDING);
                }
                crate::bucket::lock::take_lock(&r.remote, &owner, &what).map_err(|err| {
                    // Another node writes: readers (`cat`, `ls`, `stats`) open read-only.
                    if err.kind() == io::ErrorKind::WouldBlock {
                        StoreError::Busy { path: r.remote.url().into(), pid: err.to_string() }
                    } else {
                        StoreError::Remote { url: r.remote.url().to_string(), err }
                    }
                })?;
                // Another node wrote since this one last did: its index is rebuilt from the
                // bucket before anything is written (see `backend::SIGNATURE`).
                let nodes::join::Synced { index: idx, listed: list, taken_in } = nodes::join::sync_index(root, &config, index, &r, created_here, Some(&owner))?;
                index = idx;
                if shared {
                    // The packs its index reflects: its first `follow` takes in the others.
                    catch_up = taken_in.len() != list.len();
                    seen = taken_in.into_iter().map(|id| (id, 0)).collect();
                    // Until this node closes cleanly (`note_bucket`), its index reflects no
                    // listing: a node killed now rebuilds at its next open.
                    let mut b = crate::index::Batch::new();
                    b.put_meta_u64_unlogged(&index, backend::SIGNATURE, 0);
                    index.write(b)?;
                }
                // This node's packs: ids below the next node's range.
                let node_base = backend::node_base(&config);
                let remote_max = list.iter().map(|p| p.0).filter(|id| id >> 48 == node_base >> 48).max().unwrap_or(0);
                packs.start_uploads(owner).map_err(io_at(root))?;
                max_id.max(remote_max).max(node_base)
            }
        };
        let follower = mode.follows();
        let level = if mode.shared() { ingest::chunks::UNSETTLED_ZSTD_LEVEL } else { ingest::chunks::ZSTD_LEVEL };
        let dicts = ingest::dict::Dicts::new(!follower && config.version >= DICT_FORMAT_VERSION && config.compression == Compression::Zstd, level);
        let index = std::sync::Arc::new(index);
        packs.set_locator(chunk_locator(&index));
        let store = Store::assemble(root, config, index, packs, bucket, dicts, max_id + 1, digest, mode, nodes::follow::FollowState::seeded(seen.iter().map(|p| p.0)), lock);
        store.roll_forward(&recovered)?;
        open::recovered(root)?;
        // A shared store's writer takes in what the other nodes published since it last
        // closed (if its open did not rebuild the index from the bucket).
        if catch_up {
            // Not fatal: the store is whole as it is; what is not taken in yet is by the next
            // follow (a mount's, or gc's, which needs it all), and this close notes no listing.
            if let Err(e) = store.follow() {
                log::warn!("{}: taking in the other nodes' changes: {e}", root.display());
            }
        }
        if store.mode == Mode::SharedWriter && !created_here && store.inode(namespace::ROOT_INO)?.is_none() {
            // On a shared store only the node that made it makes the root (one key, one
            // writer): its first records are not in the bucket yet.
            return Err(StoreError::RootNotUploaded(root.to_path_buf()));
        }
        store.ensure_root()?;
        store.ensure_node_dir()?;
        if !follower {
            store.resume_dictionary()?;
        }
        Ok(store)
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
        root: &Path,
        config: Config,
        index: std::sync::Arc<Index>,
        packs: PackReader,
        bucket: Option<std::sync::Arc<crate::bucket::client::RemotePacks>>,
        dicts: ingest::dict::Dicts,
        next_pack: u64,
        digest: DigestFn,
        mode: Mode,
        follow: nodes::follow::FollowState,
        lock: File,
    ) -> Store {
        Store {
            root: root.to_path_buf(),
            config,
            bucket,
            index,
            packs,
            cache: ReadCache::new(CHUNK_CACHE, MEMBER_CACHE),
            writer: Mutex::new(Writer { open: None, pending: ingest::chunks::Pending::default(), collisions: 0, dicts }),
            journal: Mutex::new(journal::Journal { open: None, next_seq: 0, poisoned: false }),
            next_pack: next_pack.into(),
            ns: Mutex::new(Ns { next_ino: 0, next_recipe: 0 }),
            digest,
            limits: ScanLimits::default(),
            space: Space::new(root.to_path_buf(), space::DEFAULT_MIN_FREE),
            ingests: IngestCounters::default(),
            tails: ingest::tails::KnownTails::default(),
            mode,
            follow: Mutex::new(follow),
            published: Mutex::new(std::time::Instant::now()),
            _lock: lock,
        }
    }

    /// Opens a store that another process owns (a mounted store) for reading: `stats`,
    /// `ls` and `cat` see it as of now. Nothing can be written through it.
    pub fn open_read_only(root: &Path) -> Result<Store> {
        let cfg_path = crate::store::layout::config(root);
        if !cfg_path.exists() {
            return Err(if root.exists() { StoreError::NotAStore(root.to_path_buf()) } else { StoreError::NoStore(root.to_path_buf()) });
        }
        let config = read_config(&cfg_path)?;
        let index = open_index(root, &crate::store::layout::index(root), true, config.version)?;
        let lock = File::open(crate::store::layout::lock(root)).map_err(io_at(root))?;
        let bucket = remote_packs_read_only(root, &config)?;
        let packs = backend::pack_reader(root, bucket.as_ref());
        let index = std::sync::Arc::new(index);
        packs.set_locator(chunk_locator(&index));
        let dicts = ingest::dict::Dicts::new(false, ingest::chunks::ZSTD_LEVEL);
        let mode = Mode::at_open(&config, false);
        Ok(Store::assemble(root, config, index, packs, bucket, dicts, 0, digest::sha256, mode, nodes::follow::FollowState::default(), lock))
    }

    /// Opens the store to read: exclusively if it is free, read-only if another process
    /// (a mount) owns it.
    pub fn open_for_reading(root: &Path) -> Result<Store> {
        match Store::open(root, false) {
            Err(StoreError::Busy { .. }) => Store::open_read_only(root),
            r => r,
        }
    }

    /// Changes whenever the store's index changes.
    pub fn generation(&self) -> u64 {
        self.index.generation()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn config(&self) -> &Config {
        &self.config
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
    fn pack_blobs(&self, id: u64) -> Result<Vec<pack::BlobInfo>> {
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
        if let Err(e) = self.close_remote(nodes::join::CLOSE_UPLOAD_WAIT) {
            log::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod kind_tests;
