//! Opening a store's directory: its lock, its settings file, its index (refused, never made
//! anew, when missing), the packs a crash left open, and the scratch a killed process left.
//! What is opened (`Opening`) becomes a `Store` once the opens of the nodes wing have joined
//! its bucket, if it has one (`crate::nodes`); a store another process owns is opened to
//! read here (`Store::open_read_only`), joining nothing.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::*;
use crate::bucket::client::RemotePacks;
use crate::digest;

/// A store's directory opened, not yet a `Store`: its lock, its settings, its index, the
/// packs a crash left open sealed, and the reader of its packs (through its bucket's, if it
/// has one). An open joins the bucket with it (which may rebuild `index`), then makes it a
/// `Store` (`into_store`).
pub(crate) struct Opening {
    pub(crate) root: PathBuf,
    pub(crate) config: Config,
    pub(crate) mode: Mode,
    /// None only while `rebuild_index` replaces it.
    pub(super) index: Option<Index>,
    /// Whether this open made the store (and its empty index).
    pub(crate) created: bool,
    /// The bucket's client and this node's cache of its packs, on a store with a back end.
    pub(crate) bucket: Option<Arc<RemotePacks>>,
    pub(crate) packs: PackReader,
    /// The largest id of a pack on this disk.
    pub(crate) max_id: u64,
    /// Packs whose log records are still to be rolled forward (`recover_packs`).
    recovered: Vec<u64>,
    digest: DigestFn,
    lock: File,
}

impl Store {
    /// Opens the directory of the store at `root`, made with `opts.config` if it is missing
    /// or empty and `opts.create`: its lock taken, its settings read, its index opened, the
    /// packs a crash left open sealed, and its bucket connected if it has one.
    pub(crate) fn open_dir(root: &Path, opts: &OpenOptionsStore, digest: DigestFn) -> Result<Opening> {
        let cfg_path = layout::config(root);
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
        remove_dead_runs(&layout::cache(root).join("runs"));
        let index_dir = layout::index(root);
        let (config, created) = if fresh && !cfg_path.exists() {
            // Creation: the directories and an empty index first, the config last. A
            // directory with a config is a store, whose index must exist from then on; one
            // without is an unfinished creation, started again here.
            for d in layout::DIRS {
                crate::disk::create_dir_all(&root.join(d)).map_err(io_at(root))?;
            }
            if index_dir.exists() {
                fs::remove_dir_all(&index_dir).map_err(io_at(&index_dir))?;
            }
            let cfg = opts.config.clone();
            let index = Index::create(&index_dir, cfg.version, super::deltas(cfg.version))?;
            let json = serde_json::to_vec_pretty(&cfg).expect("config serialises");
            pack::write_file_atomic(&cfg_path, &json).map_err(io_at(&cfg_path))?;
            (cfg, Some(index))
        } else {
            (read_config(&cfg_path)?, None)
        };
        for d in layout::DIRS {
            fs::create_dir_all(root.join(d)).map_err(io_at(root))?;
        }
        let created_here = created.is_some();
        let index = match created {
            Some(index) => index,
            None => open_index(root, &index_dir, false, config.version)?,
        };
        let (max_id, recovered) = recover_packs(root)?;
        let bucket = backend::remote_packs(root, &config)?;
        let packs = backend::pack_reader(root, &config, bucket.as_ref());
        let mode = Mode::at_open(&config, opts.follower);
        Ok(Opening { root: root.to_path_buf(), config, mode, index: Some(index), created: created_here, bucket, packs, max_id, recovered, digest, lock })
    }

    /// Opens a store that another process owns (a mounted store) for reading: `stats`,
    /// `ls` and `cat` see it as of now. Nothing can be written through it.
    pub fn open_read_only(root: &Path) -> Result<Store> {
        let cfg_path = layout::config(root);
        if !cfg_path.exists() {
            return Err(if root.exists() { StoreError::NotAStore(root.to_path_buf()) } else { StoreError::NoStore(root.to_path_buf()) });
        }
        let config = read_config(&cfg_path)?;
        let index = open_index(root, &layout::index(root), true, config.version)?;
        let lock = File::open(layout::lock(root)).map_err(io_at(root))?;
        let bucket = backend::remote_packs_read_only(root, &config)?;
        let packs = backend::pack_reader(root, &config, bucket.as_ref());
        let index = Arc::new(index);
        packs.set_locator(super::chunk_locator(&index));
        let dicts = ingest::dict::Dicts::new(false, ingest::chunks::ZSTD_LEVEL);
        let mode = Mode::at_open(&config, false);
        Ok(Store::assemble(root.to_path_buf(), config, index, packs, bucket, dicts, 0, digest::sha256, mode, Arc::new(Alone), lock))
    }
}

impl Opening {
    fn index(&self) -> &Index {
        self.index.as_ref().expect("an opening's index")
    }

    /// The signature of the bucket listing the index last reflected (`SIGNATURE`).
    pub(crate) fn noted_listing(&self) -> Result<Option<u64>> {
        Ok(self.index().meta_u64_opt(backend::SIGNATURE)?)
    }

    /// Notes that the index reflects the bucket listing of signature `sig` (0: none).
    pub(crate) fn note_listing(&self, sig: u64) -> Result<()> {
        backend::note_listing(self.index(), sig)
    }

    /// The store, with `peers` (the part the nodes wing chose for its mode) and new packs
    /// numbered from `next_pack`, once the log records a crash kept from the index are
    /// applied. `finish` is the open's last step.
    pub(crate) fn into_store(self, next_pack: u64, peers: Arc<dyn Peers>) -> Result<Store> {
        let config = &self.config;
        // A node that writes nothing trains no dictionary.
        let dictionaries = !self.mode.follows() && config.version >= DICT_FORMAT_VERSION && config.compression == Compression::Zstd;
        let level = ingest::chunks::zstd_level(pack::ChunkKind::Raw, Share::of(config).settles());
        let dicts = ingest::dict::Dicts::new(dictionaries, level);
        let index = Arc::new(self.index.expect("an opening's index"));
        self.packs.set_locator(super::chunk_locator(&index));
        let store = Store::assemble(self.root, self.config, index, self.packs, self.bucket, dicts, next_pack, self.digest, self.mode, peers, self.lock);
        store.roll_forward(&self.recovered)?;
        recovered(&store.root)?;
        Ok(store)
    }
}

impl Store {
    /// An open's last step, once the store is whole and its bucket joined: the root made on
    /// a new store, and the zstd dictionary ingest used resumed.
    pub(crate) fn finish_open(&self) -> Result<()> {
        self.ensure_root()?;
        self.resume_dictionary()
    }
}

/// Removes the sort runs (`extsort`) of processes that were killed while sorting: their
/// names start with `run-PID-`. A live process's runs (a read-only `warcfs index` of a
/// mounted store) are kept.
pub(super) fn remove_dead_runs(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix("run-")).and_then(|n| n.split('-').next()).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// `STORE/recovering`: the ids (hex, one a line) of the packs an open is sealing out of
/// `packs-tmp/`, written before the first is sealed and removed once their metadata log
/// records are in the index (`recovered`). A metadata log record that reached its pack but
/// not the index is found at the next open only among the packs that open recovers; without
/// this list, an open cut short after sealing (killed, a full disk while sealing the next
/// pack) would leave the record out of the index for good, and gc would then collect the
/// file it committed.
const RECOVERING: &str = "recovering";

/// Seals what is whole of every pack a crash left open (the index may point into them);
/// returns the largest pack id there is and the ids of the packs whose log records are
/// still to be rolled forward: those sealed now and those an open cut short sealed
/// (`RECOVERING`). Call `recovered` once their records are applied.
pub(super) fn recover_packs(root: &Path) -> Result<(u64, Vec<u64>)> {
    let packs_dir = crate::store::layout::packs(root);
    let tmp_dir = crate::store::layout::packs_tmp(root);
    let mut max_id = 0u64;
    for entry in fs::read_dir(&packs_dir).map_err(io_at(&packs_dir))? {
        let entry = entry.map_err(io_at(&packs_dir))?;
        if let Some(id) = entry.file_name().to_str().and_then(pack::parse_pack_name) {
            max_id = max_id.max(id);
        }
    }
    // Left by an open cut short: packs it sealed (an empty one it removed is skipped).
    let list = root.join(RECOVERING);
    let mut recovered: Vec<u64> = match fs::read_to_string(&list) {
        // (Each sealed whole: on an object store it may have gone up, and from there into the
        // cache, since; the pack reader finds it wherever it is.)
        Ok(text) => text.lines().filter_map(|l| u64::from_str_radix(l.trim(), 16).ok()).collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(StoreError::Io { path: list, err: e }),
    };
    let mut open = Vec::new();
    for entry in fs::read_dir(&tmp_dir).map_err(io_at(&tmp_dir))? {
        let entry = entry.map_err(io_at(&tmp_dir))?;
        let path = entry.path();
        match entry.file_name().to_str().and_then(pack::parse_pack_name) {
            Some(id) => {
                max_id = max_id.max(id);
                // Cut to its whole blobs; one without any holds no record, and is removed
                // before the list could name a pack that is nowhere.
                match pack::reopen_open_pack(&path, id).map_err(io_at(&path))? {
                    Some(p) => open.push(p),
                    None => log::info!("removed empty open pack {id:016x}"),
                }
            }
            None => {
                let _ = crate::disk::remove_file(&path);
            }
        }
    }
    if !open.is_empty() {
        let ids: String = recovered.iter().chain(open.iter().map(|p| &p.id)).map(|id| format!("{id:016x}\n")).collect();
        pack::write_file_atomic(&list, ids.as_bytes()).map_err(io_at(&list))?;
    }
    for p in open {
        let id = p.id;
        let n = pack::seal_recovered(p, &packs_dir).map_err(io_at(&tmp_dir))?;
        log::info!("recovered open pack {id:016x} with {n} blobs");
        recovered.push(id);
    }
    crate::failpoint::crash_at("packs_recovered");
    recovered.sort_unstable();
    recovered.dedup();
    Ok((max_id, recovered))
}

/// The log records of the packs `recover_packs` returned are in the index: forgets them.
pub(crate) fn recovered(root: &Path) -> Result<()> {
    let list = root.join(RECOVERING);
    match crate::disk::remove_file(&list) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::Io { path: list, err: e }),
        _ => Ok(()),
    }
}

/// Whether `path`, found in a directory without a config, is what a store creation cut
/// short leaves: its lock, the config's temporary file, an index, or empty pack and staging
/// directories. A pack file means data: such a directory is refused, not re-created.
pub(super) fn creation_leftover(path: &Path) -> bool {
    let empty = |p: &Path| fs::read_dir(p).map(|mut d| d.next().is_none()).unwrap_or(false);
    match path.file_name().and_then(|n| n.to_str()) {
        Some("lock" | "warcfs.tmp") => true,
        // Ours only if it holds nothing but RocksDB's files (someone's own `index/` folder
        // is not ours to delete).
        Some("index") => fs::read_dir(path).is_ok_and(|d| {
            d.flatten().all(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                matches!(n.as_str(), "CURRENT" | "IDENTITY" | "LOCK" | "LOG")
                    || ["MANIFEST-", "OPTIONS-", "LOG.old."].iter().any(|p| n.starts_with(p))
                    || [".log", ".sst", ".dbtmp"].iter().any(|x| n.ends_with(x))
            })
        }),
        Some("packs" | "packs-tmp" | "staging") => empty(path),
        _ => false,
    }
}

/// Opens an existing store's index, refusing one that is missing, unreadable or made for
/// another format version: never an empty index in its place.
pub(crate) fn open_index(root: &Path, index_dir: &Path, read_only: bool, version: u32) -> Result<Index> {
    if !index_dir.join("CURRENT").exists() {
        return Err(StoreError::IndexMissing(root.to_path_buf()));
    }
    let opened = if read_only { Index::open_read_only(index_dir) } else { Index::open(index_dir) };
    let index = opened.map_err(|err| StoreError::IndexUnreadable { path: root.to_path_buf(), err })?;
    // A format-3 index records the version it was made for; one that does not, or names
    // another, is not this store's.
    match index.format_version().map_err(|err| StoreError::IndexUnreadable { path: root.to_path_buf(), err })? {
        Some(v) if v == version as u64 => Ok(index),
        Some(v) => Err(StoreError::Format { path: root.to_path_buf(), found: format!("an index of {FORMAT_NAME} version {v}") }),
        None => Err(StoreError::Format { path: root.to_path_buf(), found: "an index that names no format version".into() }),
    }
}

pub(crate) fn read_config(path: &Path) -> Result<Config> {
    let bytes = fs::read(path).map_err(io_at(path))?;
    let store = path.parent().unwrap_or(path).to_path_buf();
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| StoreError::Format { path: store.clone(), found: format!("unreadable {CONFIG_FILE}: {e}") })?;
    let name = v.get("format").and_then(|f| f.as_str()).unwrap_or("none").to_string();
    let version = v.get("version").and_then(|f| f.as_u64()).unwrap_or(0);
    if name != FORMAT_NAME || !VERSIONS.contains(&(version as u32)) || version > u32::MAX as u64 {
        return Err(StoreError::Format { path: store, found: format!("{name} version {version}") });
    }
    let cfg: Config = serde_json::from_value(v).map_err(|e| StoreError::Format { path: store.clone(), found: format!("bad {CONFIG_FILE}: {e}") })?;
    if let Some(why) = super::mode::misfit(&cfg) {
        return Err(StoreError::Format { path: store, found: format!("{name} version {version} {why}") });
    }
    Ok(cfg)
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_at(path))
}

/// How long a lock found held is asked for again before the store is reported busy, and in
/// how many tries.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(200);
const LOCK_TRIES: u32 = 10;

/// Takes the store's exclusive lock, or names the process that holds it.
pub(super) fn take_lock(root: &Path) -> Result<File> {
    let path = crate::store::layout::lock(root);
    let mut f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io_at(&path))?;
    // A process that forks (to run any program) holds every open file of its own for a moment,
    // this lock's among them, until the child execs: a store closed and opened again by such
    // a process (or by another while it forks) may find its lock held for those microseconds.
    // Asked again a few times over `LOCK_PATIENCE`, a lock held for good is still reported.
    let mut tries = 0;
    let rc = loop {
        // SAFETY: flock on a descriptor we own.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) || tries == LOCK_TRIES {
            break rc;
        }
        tries += 1;
        std::thread::sleep(LOCK_PATIENCE / LOCK_TRIES);
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            let pid = pid.trim().to_string();
            return Err(StoreError::Busy { path: root.to_path_buf(), pid: if pid.is_empty() { "unknown".into() } else { pid } });
        }
        return Err(StoreError::Io { path, err });
    }
    f.set_len(0).map_err(io_at(&path))?;
    f.seek(io::SeekFrom::Start(0)).map_err(io_at(&path))?;
    writeln!(f, "{}", std::process::id()).map_err(io_at(&path))?;
    Ok(f)
}
