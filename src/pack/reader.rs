//! Reading sealed packs: a bounded set of open pack files, so that a read is one `pread`;
//! and the packs that are not on this disk, read from where they are kept (`Elsewhere`: a
//! bucket's cache of pack ranges, or `Nowhere`), and the queue of sealed packs waiting for
//! their upload (`UploadQueue`). A pack found nowhere is an error: `Missing` where it could
//! only be on this disk, the bucket's own error where it could be there.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::elsewhere::{Elsewhere, Nowhere, OpenFiles, UploadQueue};
use super::codec::{decode_chunk, packed_frame};
use super::{base_of, decode_header, decode_stored, decode_stored_into, dict_of, pack_name, parse_pack_name, prepare_dictionary, Against, BlobInfo, ChunkKind, Codec, Dictionary, PackError, Result, BLOB_HEADER_LEN};
use crate::LockExt;
use crate::digest::{ChunkKey, Digest};

/// Where a chunk that a blob names (its zstd dictionary, or its base if it is a delta) lies,
/// as (pack, offset, stored length): the store's index knows, the packs do not.
pub type ChunkLocator = Box<dyn Fn(&ChunkKey) -> io::Result<Option<(u64, u64, u32)>> + Send + Sync>;

/// Bytes of delta bases kept decoded: a base serves every later capture of its page, and a
/// delta is read with its base each time (a base is up to 4 MiB, a payload chunk's largest).
const BASES_KEPT_BYTES: usize = 16 << 20;
/// Dictionaries kept ready to decode with (a store makes one per 4 GiB of new data or so,
/// and preparing one costs more than decoding a chunk with it).
const DICTS_KEPT: usize = 16;
/// The most a thread's blob buffer keeps between reads: a payload chunk's largest (4 MiB)
/// and its header.
const BLOB_KEPT: usize = (4 << 20) + BLOB_HEADER_LEN;

/// Read access to sealed packs (and the open one, through the store), with open file handles
/// kept so that reads are one `pread` each.
pub struct PackReader {
    packs_dir: PathBuf,
    tmp_dir: PathBuf,
    /// The most recently used pack files, open: bounded (see `open_pack_limit`), so a store
    /// of any number of packs works under any descriptor limit. A reader holds its `Arc`
    /// while it reads, so evicting a handle never closes it under a read.
    files: OpenFiles,
    /// Where sealed packs go once uploaded (a bucket), or `Nowhere`.
    elsewhere: Arc<dyn Elsewhere>,
    /// Started by a process that owns a bucket-backed store.
    uploads: Option<Box<dyn UploadQueue>>,
    /// Packs found elsewhere, not in `packs/` or `packs-tmp/`: they are there for good (a
    /// pack only ever moves there), so a read of one does not try two local paths first
    /// every time (three failed opens a blob, on the read path).
    remote_only: Mutex<std::collections::HashSet<u64>>,
    /// Whether packs can be elsewhere at all: a local store's reads (the mount's hot path)
    /// then skip `remote_only`'s lock.
    any_elsewhere: bool,
    /// Finds dictionary and base chunks (set by the store once its index is open).
    locator: std::sync::OnceLock<ChunkLocator>,
    /// Delta bases decoded lately, and their bytes in all (`BASES_KEPT_BYTES`).
    bases: Mutex<(Bases, usize)>,
    dicts: Mutex<lru::LruCache<Digest, Arc<Dictionary>>>,
    /// Dictionaries not in the index yet (the writer's, until its ingest commits or fails):
    /// never evicted, as nothing could find them again.
    pinned: Mutex<std::collections::HashMap<Digest, Arc<Dictionary>>>,
    /// Whether header blocks' frames hold them packed (`codec::packed_frame`): the store's
    /// format, decided when it is opened.
    packed_headers: bool,
}

/// Pack files kept open: 256, or a quarter of the process's descriptor limit if that is
/// less (FUSE, RocksDB and the staged files need the rest).
fn open_pack_limit() -> std::num::NonZeroUsize {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct we pass.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur as usize } else { 1024 };
    std::num::NonZeroUsize::new((soft / 4).clamp(4, 256)).expect("at least 4")
}

/// Delta bases decoded, by key.
type Bases = lru::LruCache<ChunkKey, Arc<Vec<u8>>>;

/// What a blob names, fetched for its second attempt (`decoded`).
enum Named {
    Dict(Arc<Dictionary>),
    Base(ChunkKey, Arc<Vec<u8>>),
}

/// What a blob names that is not at hand.
enum Wanted {
    Dict(Digest),
    Base(ChunkKey),
}

impl PackReader {
    /// A reader of the packs on this disk only.
    pub fn new(packs_dir: PathBuf, tmp_dir: PathBuf) -> PackReader {
        PackReader::reading(packs_dir, tmp_dir, Arc::new(Nowhere), false)
    }

    /// A reader that also finds packs in `elsewhere` (an object store).
    pub fn with_remote(packs_dir: PathBuf, tmp_dir: PathBuf, elsewhere: Arc<dyn Elsewhere>) -> PackReader {
        PackReader::reading(packs_dir, tmp_dir, elsewhere, true)
    }

    fn reading(packs_dir: PathBuf, tmp_dir: PathBuf, elsewhere: Arc<dyn Elsewhere>, any_elsewhere: bool) -> PackReader {
        PackReader {
            packs_dir,
            tmp_dir,
            files: Arc::new(Mutex::new(lru::LruCache::new(open_pack_limit()))),
            elsewhere,
            uploads: None,
            remote_only: Mutex::new(Default::default()),
            any_elsewhere,
            locator: std::sync::OnceLock::new(),
            bases: Mutex::new((lru::LruCache::unbounded(), 0)),
            dicts: Mutex::new(lru::LruCache::new(std::num::NonZeroUsize::new(DICTS_KEPT).expect("nonzero"))),
            pinned: Mutex::new(Default::default()),
            packed_headers: false,
        }
    }

    /// This reader, for a store whose header blocks are packed (format 11 and later).
    pub fn packing_headers(mut self, packed: bool) -> PackReader {
        self.packed_headers = packed;
        self
    }

    /// Tells the reader where chunks are by key (`Codec::ZstdDict` blobs name their
    /// dictionary, `Codec::ZstdDelta` blobs their base). Without it, such blobs cannot be
    /// decoded.
    pub fn set_locator(&self, locate: ChunkLocator) {
        let _ = self.locator.set(locate);
    }

    /// The raw bytes of base chunk `key`, read as what it must be: a chunk that is not
    /// itself a delta (so a delta costs one more read at most, and a damaged blob naming
    /// itself cannot recurse).
    fn base(&self, key: &ChunkKey) -> Result<Arc<Vec<u8>>> {
        if let Some(b) = self.ready_base(key) {
            return Ok(b);
        }
        let (pack, offset, stored_len) = self.locate(key, "delta base")?;
        let bytes = Arc::new(self.decoded(pack, offset, key, stored_len, |info, stored, against| {
            if info.codec == Codec::ZstdDelta as u8 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("chunk {} is a delta, so no base", key.short())));
            }
            decode_chunk(self.packed_headers, info.kind, info.codec, stored, info.raw_len, against)
        })?);
        let mut kept = self.bases.locked();
        if bytes.len() <= BASES_KEPT_BYTES {
            kept.1 += bytes.len();
            if let Some(old) = kept.0.put(*key, bytes.clone()) {
                kept.1 -= old.len();
            }
            while kept.1 > BASES_KEPT_BYTES {
                let Some((_, old)) = kept.0.pop_lru() else { break };
                kept.1 -= old.len();
            }
        }
        Ok(bytes)
    }

    /// A base decoded lately, if any.
    fn ready_base(&self, key: &ChunkKey) -> Option<Arc<Vec<u8>>> {
        self.bases.locked().0.get(key).cloned()
    }

    /// Where chunk `key` (a dictionary or a base, `what`) lies, by the locator.
    fn locate(&self, key: &ChunkKey, what: &str) -> Result<(u64, u64, u32)> {
        let io = |kind, what: String| PackError::Io { pack: 0, source: io::Error::new(kind, what) };
        let locate = self.locator.get().ok_or_else(|| io(io::ErrorKind::Other, format!("{what} {} asked for, but this reader has no index", key.short())))?;
        locate(key)
            .map_err(|source| PackError::Io { pack: 0, source })?
            .ok_or_else(|| io(io::ErrorKind::NotFound, format!("{what} {} is not in the store", key.short())))
    }

    /// The base a delta blob names (None if the blob is not a delta), its bytes checked.
    pub fn base_named(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32) -> Result<Option<ChunkKey>> {
        self.with_blob(pack, offset, key, stored_len, |info, stored| {
            if info.codec != Codec::ZstdDelta as u8 {
                return Ok(None);
            }
            base_of(stored).map(Some).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "shorter than its base's name"))
        })
    }

    /// Forgets every base's bytes (gc dropped chunks: a key dropped may be given to other
    /// bytes, as a collision's next seq).
    pub fn forget_bases(&self) {
        let mut kept = self.bases.locked();
        kept.0.clear();
        kept.1 = 0;
    }

    /// Makes dictionary `digest` known before its chunk is in the index (the writer's, for
    /// reading back chunks of the ingest that stored it), until `unpin_dictionary`. False
    /// if zstd cannot prepare the bytes.
    pub fn pin_dictionary(&self, digest: Digest, bytes: &[u8]) -> bool {
        match prepare_dictionary(bytes) {
            Some(d) => {
                self.pinned.locked().insert(digest, Arc::new(d));
                true
            }
            None => false,
        }
    }

    /// The pinned dictionary's ingest committed (the index finds it now) or failed.
    pub fn unpin_dictionary(&self, digest: &Digest) {
        self.pinned.locked().remove(digest);
    }

    /// A dictionary prepared already, if any.
    fn ready_dictionary(&self, digest: &Digest) -> Option<Arc<Dictionary>> {
        if let Some(d) = self.pinned.locked().get(digest) {
            return Some(d.clone());
        }
        self.dicts.locked().get(digest).cloned()
    }

    /// The dictionary chunk `digest`, prepared for decoding.
    fn dictionary(&self, digest: &Digest) -> Result<Arc<Dictionary>> {
        if let Some(d) = self.ready_dictionary(digest) {
            return Ok(d);
        }
        let key = ChunkKey { digest: *digest, seq: 0 };
        let (pack, offset, stored_len) = self.locate(&key, "zstd dictionary")?;
        // Read as what it must be: a dictionary chunk, itself never compressed with one (a
        // damaged blob naming itself must not recurse).
        let bytes = self.with_blob(pack, offset, &key, stored_len, |info, stored| {
            if info.kind != ChunkKind::Dict as u8 || info.codec == Codec::ZstdDict as u8 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("chunk {} is not a zstd dictionary", key.short())));
            }
            decode_stored(info.codec, stored, info.raw_len, Against::Nothing)
        })?;
        let d = Arc::new(prepare_dictionary(&bytes).ok_or_else(|| PackError::Corrupt { pack, offset, what: format!("zstd dictionary {} cannot be prepared (damaged)", key.short()) })?);
        self.dicts.locked().put(*digest, d.clone());
        Ok(d)
    }

    /// Where packs not on this disk are kept.
    pub fn elsewhere(&self) -> &Arc<dyn Elsewhere> {
        &self.elsewhere
    }

    /// Starts uploading sealed packs (those already in `packs/` first), for a process that
    /// owns the store; `lock` is its lock object in the bucket, refreshed while it runs.
    pub fn start_uploads(&mut self, lock: String) -> io::Result<()> {
        let mut ids: Vec<u64> = Vec::new();
        for e in std::fs::read_dir(&self.packs_dir)? {
            if let Some(id) = e?.file_name().to_str().and_then(parse_pack_name) {
                ids.push(id);
            }
        }
        // Data packs before log packs: a log record must not reach the bucket before the
        // chunks it names (a log pack has a lower id than the data packs sealed after it).
        // (Keyed once per pack: the key reads the pack's footer.)
        ids.sort_by_cached_key(|&id| {
            let only_log = std::fs::File::open(self.path_of(id))
                .ok()
                .and_then(|f| super::read_footer(&f, id).ok())
                .is_some_and(|b| !b.is_empty() && b.iter().all(|b| b.kind == super::ChunkKind::Meta as u8));
            (only_log, id)
        });
        self.uploads = self.elsewhere.clone().start_uploads(self.packs_dir.clone(), self.files.clone(), ids, lock)?;
        Ok(())
    }

    /// Whether this reader uploads (its process owns a bucket-backed store).
    pub fn uploads(&self) -> bool {
        self.uploads.is_some()
    }

    /// Whether another node took the bucket's lock over from this process (see `upload`).
    pub fn fenced(&self) -> bool {
        self.uploads.as_ref().is_some_and(|u| u.fenced())
    }

    /// Hands a pack just sealed into `packs/` to the uploads (none for a local store).
    pub fn sealed(&self, id: u64) {
        if let Some(u) = &self.uploads {
            u.push(id);
        }
    }

    /// Waits until every sealed pack is uploaded, for at most `timeout`; returns the ids of
    /// those still waiting (they stay in `packs/` and go up with the next process).
    pub fn wait_uploaded(&self, timeout: std::time::Duration) -> Vec<u64> {
        self.uploads.as_ref().map(|u| u.wait_idle(timeout)).unwrap_or_default()
    }

    /// Packs waiting for their upload, and the last upload error.
    pub fn upload_state(&self) -> (u64, Option<String>) {
        self.uploads.as_ref().map(|u| u.state()).unwrap_or((0, None))
    }

    /// Stops the uploads (what is left goes up with the next process) and removes the lock.
    pub fn stop_uploads(&self) {
        if let Some(u) = &self.uploads {
            u.stop();
        }
    }

    /// Every sealed pack: (id, size). Local ones (`packs/`) and those kept elsewhere.
    pub fn sealed_packs(&self) -> io::Result<Vec<(u64, u64)>> {
        // Local first: packs only move from here to the bucket, so one moved between the two
        // listings is in the second (the other order could miss it).
        let mut out: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for e in std::fs::read_dir(&self.packs_dir)? {
            let e = e?;
            if let Some(id) = e.file_name().to_str().and_then(parse_pack_name) {
                match e.metadata() {
                    Ok(m) => out.insert(id, m.len()),
                    Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(err),
                };
            }
        }
        for (id, size) in self.elsewhere.list()? {
            out.entry(id).or_insert(size);
        }
        Ok(out.into_iter().collect())
    }

    /// The blobs of sealed pack `id`, from its footer.
    pub fn footer(&self, id: u64) -> Result<Vec<BlobInfo>> {
        match self.local(id)? {
            Some(f) => super::read_footer(&f, id),
            None => {
                let size = self.size_elsewhere(id)?;
                let read = || super::read_footer_with(size, id, |buf, off| self.elsewhere.file_for(id, off, buf.len() as u64)?.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("pack {id} is not kept elsewhere")))?.read_exact_at(buf, off));
                match read() {
                    // A cached block evicted under the read: the bucket's bytes decide.
                    Err(PackError::Corrupt { .. }) if self.elsewhere.forget_range(id, 0, size) => read(),
                    other => other,
                }
            }
        }
    }

    /// Walks a pack's blobs one by one (see `scan`), for a pack whose footer is damaged.
    pub fn scan(&self, id: u64) -> Result<Vec<BlobInfo>> {
        let io_err = |source| PackError::Io { pack: id, source };
        let f = match self.local(id)? {
            Some(f) => f,
            None => {
                let size = self.size_elsewhere(id)?;
                self.elsewhere_file(id, 0, size)?
            }
        };
        super::scan(&f).map(|(b, _)| b).map_err(io_err)
    }

    /// Deletes sealed pack `id` (gc): the local file, and on an object store, puts its object
    /// in the bucket's trash (`Elsewhere::trash`).
    pub fn delete(&self, id: u64) -> Result<()> {
        self.forget(id);
        self.remote_only.locked().remove(&id);
        let io_err = |source| PackError::Io { pack: id, source };
        // Where packs are also kept elsewhere: two-phase, out of every listing now, deleted by
        // a later gc (`purge_trash`). Not while the local file stays.
        match crate::disk::remove_file(&self.path_of(id)) {
            Ok(()) => self.elsewhere.trash(id).map(|_| ()).map_err(io_err),
            // A pack kept elsewhere may have left this disk already.
            Err(e) if e.kind() == io::ErrorKind::NotFound => match self.elsewhere.trash(id).map_err(io_err)? {
                true => Ok(()),
                false => Err(io_err(e)),
            },
            Err(e) => Err(io_err(e)),
        }
    }

    /// Deletes the bucket's packs trashed at least `grace` ago (0 on a local store).
    pub fn purge_trash(&self, grace: std::time::Duration) -> io::Result<u64> {
        self.elsewhere.purge_trash(grace)
    }

    pub fn path_of(&self, pack: u64) -> PathBuf {
        self.packs_dir.join(pack_name(pack))
    }

    /// A local file holding pack `pack` (open in `packs-tmp/`, or sealed in `packs/`), or
    /// None if there is none.
    fn local(&self, pack: u64) -> Result<Option<Arc<File>>> {
        if self.any_elsewhere && self.remote_only.locked().contains(&pack) {
            return Ok(None);
        }
        match self.file(pack) {
            Ok(f) => Ok(Some(f)),
            Err(PackError::Missing(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A file holding `[offset, offset + len)` of pack `pack` where it is kept elsewhere
    /// (for a pack `local` did not find): the node's cache of a bucket's pack.
    fn elsewhere_file(&self, pack: u64, offset: u64, len: u64) -> Result<Arc<File>> {
        let f = self.elsewhere.file_for(pack, offset, len).map_err(|source| PackError::Io { pack, source })?.ok_or(PackError::Missing(pack))?;
        self.remote_only.locked().insert(pack);
        Ok(f)
    }

    /// The size of pack `pack` where it is kept elsewhere.
    fn size_elsewhere(&self, pack: u64) -> Result<u64> {
        self.elsewhere.size(pack).map_err(|source| PackError::Io { pack, source })?.ok_or(PackError::Missing(pack))
    }

    fn file(&self, pack: u64) -> Result<Arc<File>> {
        if let Some(f) = self.files.locked().get(&pack) {
            return Ok(f.clone());
        }
        // A pack that was open when its chunks were committed may still be in packs-tmp/;
        // one sealed between the two attempts is in packs/ again.
        let open = |p: &Path| match File::open(p) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PackError::Io { pack, source: e }),
        };
        let sealed = self.path_of(pack);
        let f = match open(&sealed)? {
            Some(f) => f,
            None => match open(&self.tmp_dir.join(pack_name(pack)))? {
                Some(f) => f,
                None => open(&sealed)?.ok_or(PackError::Missing(pack))?,
            },
        };
        let f = Arc::new(f);
        self.files.locked().put(pack, f.clone());
        Ok(f)
    }

    /// Asks the kernel to start reading these byte ranges of a pack now, so a reader that
    /// needs them soon finds them cached instead of waiting for one small read at a time.
    pub fn will_need(&self, pack: u64, ranges: &[(u64, u64)]) {
        let f = match self.local(pack) {
            Ok(Some(f)) => f,
            Ok(None) => {
                // A pack kept elsewhere: fetched into the cache in the background.
                self.elsewhere.clone().prefetch(pack, ranges);
                return;
            }
            Err(_) => return,
        };
        for &(off, len) in ranges {
            // SAFETY: advisory call on a descriptor we hold open.
            unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&*f), off as i64, len as i64, libc::POSIX_FADV_WILLNEED) };
        }
    }

    /// Forgets a cached handle (after a pack was sealed, rewritten or deleted).
    pub fn forget(&self, pack: u64) {
        self.files.locked().pop(&pack);
    }

    /// Reads one blob, checks that it is the expected chunk and that its bytes are intact,
    /// and returns the decoded chunk bytes.
    pub fn read(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32) -> Result<Vec<u8>> {
        self.decoded(pack, offset, key, stored_len, |info, stored, against| decode_chunk(self.packed_headers, info.kind, info.codec, stored, info.raw_len, against))
    }

    /// Like `read`, decoding into `out`, which must be the chunk's exact length: a reader
    /// that wants a whole chunk once (a sequential one) gets it with no copy and no cache.
    pub fn read_into(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32, out: &mut [u8]) -> Result<()> {
        self.decoded(pack, offset, key, stored_len, |info, stored, against| {
            if info.raw_len as usize != out.len() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("holds {} bytes, not {}", info.raw_len, out.len())));
            }
            if packed_frame(self.packed_headers, info.kind, info.codec) {
                out.copy_from_slice(&decode_chunk(true, info.kind, info.codec, stored, info.raw_len, against)?);
                return Ok(());
            }
            decode_stored_into(info.codec, stored, out, against)
        })
    }

    /// Reads and checks a blob and decodes it with `decode`, handing it what the blob names:
    /// its dictionary or its base. One not at hand is read between two attempts: not while
    /// this thread's blob buffer is lent out.
    fn decoded<T>(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32, mut decode: impl FnMut(&BlobInfo, &[u8], Against<'_>) -> io::Result<T>) -> Result<T> {
        let mut have: Option<Named> = None;
        for _ in 0..2 {
            let mut wanted = None;
            let r = self.with_blob(pack, offset, key, stored_len, |info, stored| match Codec::from_u8(info.codec) {
                Some(Codec::ZstdDict) => {
                    let d = dict_of(stored).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "shorter than its dictionary's name"))?;
                    let ready = match &have {
                        Some(Named::Dict(dict)) => Some(dict.clone()),
                        _ => self.ready_dictionary(&d),
                    };
                    match ready {
                        Some(dict) => decode(info, stored, Against::Dict(&dict)).map(Some),
                        None => {
                            wanted = Some(Wanted::Dict(d));
                            Ok(None)
                        }
                    }
                }
                Some(Codec::ZstdDelta) => {
                    let b = base_of(stored).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "shorter than its base's name"))?;
                    if b == *key {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, "it names itself as its base"));
                    }
                    let ready = match &have {
                        Some(Named::Base(k, bytes)) if *k == b => Some(bytes.clone()),
                        _ => self.ready_base(&b),
                    };
                    match ready {
                        Some(base) => decode(info, stored, Against::Base(&base)).map(Some),
                        None => {
                            wanted = Some(Wanted::Base(b));
                            Ok(None)
                        }
                    }
                }
                _ => decode(info, stored, Against::Nothing).map(Some),
            })?;
            match (r, wanted) {
                (Some(v), _) => return Ok(v),
                // The one it names, handed to the second attempt as it is (not looked up
                // again: a busy cache may have let it go meanwhile).
                (None, Some(Wanted::Dict(d))) => have = Some(Named::Dict(self.dictionary(&d)?)),
                (None, Some(Wanted::Base(b))) => have = Some(Named::Base(b, self.base(&b)?)),
                (None, None) => unreachable!("a blob is decoded or what it names wanted"),
            }
        }
        Err(PackError::Corrupt { pack, offset, what: format!("cannot decode chunk {}: it names another dictionary or base than it did", key.short()) })
    }

    /// Reads and checks a blob, then hands its stored bytes to `decode`.
    fn with_blob<T>(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32, decode: impl FnOnce(&BlobInfo, &[u8]) -> io::Result<T>) -> Result<T> {
        // The stored bytes are only decoded from: read them into one buffer per thread
        // rather than a fresh, zeroed allocation per chunk.
        thread_local! {
            static BLOB: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        check_stored_len(pack, offset, stored_len)?;
        BLOB.with(|cell| {
            let mut buf = cell.borrow_mut();
            let len = BLOB_HEADER_LEN + stored_len as usize;
            if buf.len() < len {
                buf.resize(len, 0);
            }
            let info = self.read_blob(pack, offset, key, stored_len, &mut buf[..len]);
            let r = info.and_then(|info| {
                decode(&info, &buf[BLOB_HEADER_LEN..len]).map_err(|e| PackError::Corrupt { pack, offset, what: format!("cannot decode chunk {}: {e}", key.short()) })
            });
            // Threads that live as long as the process (the mount's, ingest's workers) keep
            // no more than a payload chunk's worth after an outsized blob.
            if buf.len() > BLOB_KEPT {
                *buf = Vec::new();
            }
            r
        })
    }

    /// The level gc settled sealed pack `id` at (`super::settled_level`), from its first
    /// blob: gc writes every blob of a pack at one level, and ingest at 0. None if the pack
    /// holds no blob. (On an object store this reads a cache block of the pack.)
    pub fn first_settled(&self, id: u64) -> Result<Option<u8>> {
        Ok(self.first_header(id)?.and_then(|h| super::settled_level(&h)))
    }

    /// The store format sealed pack `id` was written for (`super::written_for`; 0 before
    /// blobs said), from its first blob: one writer writes every blob of a pack.
    pub fn first_written_for(&self, id: u64) -> Result<Option<u8>> {
        Ok(self.first_header(id)?.and_then(|h| super::written_for(&h)))
    }

    /// The header of sealed pack `id`'s first blob; None if it holds none.
    fn first_header(&self, id: u64) -> Result<Option<[u8; BLOB_HEADER_LEN]>> {
        let mut h = [0u8; BLOB_HEADER_LEN];
        let f = match self.local(id)? {
            Some(f) => f,
            None => self.elsewhere_file(id, 0, BLOB_HEADER_LEN as u64)?,
        };
        match f.read_exact_at(&mut h, 0) {
            Ok(()) => Ok(Some(h)),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
            Err(source) => Err(PackError::Io { pack: id, source }),
        }
    }

    /// Like `read`, but returns the blob's stored (possibly compressed) bytes, checked.
    pub fn read_stored(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32) -> Result<(BlobInfo, Vec<u8>)> {
        check_stored_len(pack, offset, stored_len)?;
        let mut blob = vec![0u8; BLOB_HEADER_LEN + stored_len as usize];
        let info = self.read_blob(pack, offset, key, stored_len, &mut blob)?;
        blob.drain(..BLOB_HEADER_LEN);
        Ok((info, blob))
    }

    /// Reads one blob, header included, into `buf` (exactly its size) and checks that it
    /// holds `key` intact.
    fn read_blob(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32, buf: &mut [u8]) -> Result<BlobInfo> {
        let local = self.local(pack)?;
        let r = self.read_checked(local, pack, offset, key, stored_len, buf);
        match r {
            // Where packs are also kept in a bucket, a blob that does not check out is read
            // once more, afresh: a cached block may have been evicted (a hole punched) under
            // this read, or a handle of `packs/` kept while the pack moved into the cache.
            // The object store's bytes decide.
            Err(PackError::Corrupt { .. }) if self.elsewhere.forget_range(pack, offset, buf.len() as u64) => {
                self.forget(pack);
                let local = self.local(pack)?;
                self.read_checked(local, pack, offset, key, stored_len, buf)
            }
            r => r,
        }
    }

    /// Reads one blob from `local` (or the node's cache of the bucket's pack) and checks
    /// that it holds `key`.
    fn read_checked(&self, local: Option<Arc<File>>, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32, buf: &mut [u8]) -> Result<BlobInfo> {
        let f = match local {
            Some(f) => f,
            None => self.elsewhere_file(pack, offset, buf.len() as u64)?,
        };
        f.read_exact_at(buf, offset).map_err(|source| {
            if source.kind() == io::ErrorKind::UnexpectedEof {
                PackError::Corrupt { pack, offset, what: "blob runs past the end of the pack".into() }
            } else {
                PackError::Io { pack, source }
            }
        })?;
        let corrupt = |what: &str| PackError::Corrupt { pack, offset, what: what.to_string() };
        let (info, crc) = decode_header(buf, offset).ok_or_else(|| corrupt("bad blob header"))?;
        if info.key != *key || info.stored_len != stored_len {
            return Err(corrupt(&format!("blob holds {} instead of {}", info.key.short(), key.short())));
        }
        if crc32fast::hash(&buf[BLOB_HEADER_LEN..]) != crc {
            return Err(corrupt(&format!("checksum mismatch in chunk {}", key.short())));
        }
        Ok(info)
    }
}

/// No chunk is stored in more than a few MiB (the largest are 4 MiB payload pieces); a
/// length beyond this bound is a damaged index entry, which must not become a huge
/// allocation.
pub const MAX_STORED: u32 = 64 << 20;

fn check_stored_len(pack: u64, offset: u64, stored_len: u32) -> Result<()> {
    if stored_len > MAX_STORED {
        return Err(PackError::Corrupt { pack, offset, what: format!("blob length {stored_len} is beyond any chunk's") });
    }
    Ok(())
}

