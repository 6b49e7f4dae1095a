//! Sealed packs in an S3-compatible object store (`init --backend s3://BUCKET/PREFIX`).
//!
//! `Remote` is the client: object_store's S3 client, driven by a small tokio runtime of its
//! own so that the rest of warcfs stays synchronous. Endpoint, region and credentials come
//! from the standard AWS environment variables. Every call is retried by the client (with
//! backoff, for about `RETRY_TIMEOUT`); a call that still fails is an `io::Error` naming the
//! object, and the caller decides (a read is EIO, an upload is tried again later).
//!
//! `RemotePacks` is what a node keeps near it: a bounded cache of pack ranges in
//! `STORE/cache/packs/` (sparse files, 1 MiB blocks, least recently used evicted by punching
//! holes), filled by ranged GETs; and the upload queue of sealed packs (`upload`).
//!
//! Bucket layout (docs/FORMAT.md, "Object store"): `PREFIX/warcfs.json` (the store's
//! settings), `PREFIX/packs/<id>.pack` (sealed packs, the same bytes as on a local disk),
//! `PREFIX/locks/<owner>` (the writer's lock).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::LockExt;

/// How long the client retries one call before it reports the failure.
const RETRY_TIMEOUT: Duration = Duration::from_secs(20);
/// Objects larger than this are uploaded in parts of this size.
const PART: usize = 16 << 20;
/// The most a small object (`Remote::get`) may hold: settings, a lock's or a node's body.
const MAX_SMALL_OBJECT: u64 = 1 << 20;
/// Cache granularity: a cold read fetches the 1 MiB blocks it touches (one GET per run).
pub const BLOCK: u64 = 1 << 20;
/// The smallest cache: a read of the largest blob must not evict its own blocks.
pub const MIN_CACHE: u64 = 64 << 20;
/// The default cache of pack ranges (`init --cache-size`, `mount -o cache_size=`).
pub const DEFAULT_CACHE: u64 = 1 << 30;

fn other(what: String) -> io::Error {
    io::Error::other(what)
}

/// An S3 bucket (and a prefix in it) holding one store.
pub struct Remote {
    /// object_store's one trait over every back end: S3 (`s3://`) or a directory
    /// (`file://`, a shared filesystem).
    store: Arc<dyn ObjectStore>,
    prefix: String,
    url: String,
    rt: tokio::runtime::Runtime,
}

impl Remote {
    /// Connects to `s3://BUCKET[/PREFIX]` (nothing is sent until the first call), or opens
    /// `file:///DIR`, a directory that stands for a bucket (a filesystem several nodes share).
    pub fn connect(url: &str) -> io::Result<Remote> {
        let rt = || tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("warcfs-s3").enable_all().build();
        if let Some(dir) = url.strip_prefix("file://") {
            if !dir.starts_with('/') {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "a directory back end is file:///ABSOLUTE/PATH".to_string()));
            }
            fs::create_dir_all(dir)?;
            // Synced: once a pack is "uploaded" its local copy may go (found by review).
            let store = object_store::local::LocalFileSystem::new_with_prefix(dir).map_err(|e| other(e.to_string()))?.with_fsync(true);
            return Ok(Remote { store: Arc::new(store), prefix: String::new(), url: url.to_string(), rt: rt()? });
        }
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a back end is s3://BUCKET/PREFIX or file:///DIR".to_string()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no bucket named".to_string()));
        }
        let prefix = prefix.trim_matches('/').to_string();
        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket).with_retry(object_store::RetryConfig {
            backoff: object_store::BackoffConfig { init_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5), base: 2.0 },
            max_retries: 10,
            retry_timeout: RETRY_TIMEOUT,
        });
        if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
            match profile_credentials() {
                Some((id, secret)) => b = b.with_access_key_id(id).with_secret_access_key(secret),
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL, AWS_REGION), or put them in ~/.aws/credentials".to_string(),
                    ))
                }
            }
        }
        // A whole request (a part of up to PART bytes) may take this long: the default 30 s
        // would never let a pack up over a slow link.
        b = b.with_client_options(object_store::ClientOptions::new().with_timeout(Duration::from_secs(300)).with_connect_timeout(Duration::from_secs(10)));
        let endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT")).unwrap_or_default();
        if endpoint.starts_with("http://") {
            // A test cluster on loopback speaks plain HTTP.
            b = b.with_allow_http(true);
        }
        if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
            b = b.with_region("us-east-1");
        }
        let s3 = b.build().map_err(|e| other(e.to_string()))?;
        Ok(Remote { store: Arc::new(s3), prefix, url: url.to_string(), rt: rt()? })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, name: &str) -> ObjPath {
        if self.prefix.is_empty() {
            ObjPath::from(name)
        } else {
            ObjPath::from(format!("{}/{name}", self.prefix))
        }
    }

    fn err(&self, name: &str, e: object_store::Error) -> io::Error {
        let kind = if matches!(e, object_store::Error::NotFound { .. }) { io::ErrorKind::NotFound } else { io::ErrorKind::Other };
        io::Error::new(kind, format!("{name}: {e}"))
    }

    pub fn put(&self, name: &str, bytes: Vec<u8>) -> io::Result<()> {
        let p = self.path(name);
        self.rt.block_on(self.store.put(&p, PutPayload::from(bytes))).map(|_| ()).map_err(|e| self.err(name, e))
    }

    /// Uploads a file: whole if small, else as a multipart upload that is aborted on failure
    /// (an object appears only when complete).
    pub fn put_file(&self, name: &str, path: &Path) -> io::Result<()> {
        let f = File::open(path)?;
        let size = f.metadata()?.len();
        if size <= PART as u64 {
            return self.put(name, fs::read(path)?);
        }
        let p = self.path(name);
        self.rt.block_on(async {
            let mut up = self.store.put_multipart(&p).await.map_err(|e| self.err(name, e))?;
            let mut off = 0u64;
            let sent: io::Result<()> = async {
                while off < size {
                    let n = (size - off).min(PART as u64) as usize;
                    let mut buf = vec![0u8; n];
                    f.read_exact_at(&mut buf, off)?;
                    up.put_part(PutPayload::from(buf)).await.map_err(|e| self.err(name, e))?;
                    off += n as u64;
                }
                up.complete().await.map_err(|e| self.err(name, e))?;
                Ok(())
            }
            .await;
            if sent.is_err() {
                let _ = up.abort().await;
            }
            sent
        })
    }

    /// The whole object, or None if there is none: a small one (settings, locks, node
    /// registrations, the gc generation), refused past `MAX_SMALL_OBJECT` before it is read.
    pub fn get(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let p = self.path(name);
        let r = self.rt.block_on(async {
            let got = self.store.get(&p).await?;
            if got.meta.size > MAX_SMALL_OBJECT {
                return Ok(Err(got.meta.size));
            }
            got.bytes().await.map(Ok)
        });
        match r {
            Ok(Ok(b)) => Ok(Some(b.to_vec())),
            Ok(Err(size)) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: {name} holds {size} bytes, more than such an object can ({MAX_SMALL_OBJECT})", self.url))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(name, e)),
        }
    }

    pub fn get_range(&self, name: &str, range: Range<u64>) -> io::Result<Vec<u8>> {
        let p = self.path(name);
        let want = range.end - range.start;
        let b = self.rt.block_on(self.store.get_range(&p, range)).map_err(|e| self.err(name, e))?;
        if b.len() as u64 != want {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{name}: {} bytes where {want} were asked for", b.len())));
        }
        Ok(b.to_vec())
    }

    /// The size of an object, or None if there is none.
    pub fn size(&self, name: &str) -> io::Result<Option<u64>> {
        let p = self.path(name);
        match self.rt.block_on(self.store.head(&p)) {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(name, e)),
        }
    }

    /// The objects under `dir/`: (name relative to `dir/`, size, last modified).
    pub fn list(&self, dir: &str) -> io::Result<Vec<(String, u64, SystemTime)>> {
        let p = self.path(dir);
        let metas: Vec<object_store::ObjectMeta> =
            self.rt.block_on(self.store.list(Some(&p)).try_collect()).map_err(|e| self.err(dir, e))?;
        let base = format!("{p}/");
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let name = m.location.as_ref().strip_prefix(&base)?.to_string();
                Some((name, m.size, SystemTime::from(m.last_modified)))
            })
            .collect())
    }

    /// Deletes an object; one that is not there is not an error.
    pub fn delete(&self, name: &str) -> io::Result<()> {
        let p = self.path(name);
        match self.rt.block_on(self.store.delete(&p)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(name, e)),
        }
    }
}

/// The key pair of profile `$AWS_PROFILE` (or `default`) in the shared credentials file
/// (`$AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`), as the AWS tools read it.
fn profile_credentials() -> Option<(String, String)> {
    let path = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".aws").join("credentials")))?;
    let text = fs::read_to_string(path).ok()?;
    let want = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    let (mut section, mut id, mut secret) = (String::new(), None, None);
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
        } else if section == want {
            if let Some((k, v)) = line.split_once('=') {
                match k.trim() {
                    "aws_access_key_id" => id = Some(v.trim().to_string()),
                    "aws_secret_access_key" => secret = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
    }
    Some((id?, secret?))
}

/// The object name of pack `id`.
pub fn pack_object(id: u64) -> String {
    format!("packs/{}", crate::pack::pack_name(id))
}

/// Ranges of remote packs cached on the local disk.
pub struct RemotePacks {
    pub remote: Remote,
    dir: PathBuf,
    /// Blocks kept at most.
    capacity: std::sync::atomic::AtomicUsize,
    state: Mutex<CacheState>,
    arrived: std::sync::Condvar,
    /// Prefetches running at once (each a GET of up to PREFETCH_RUN).
    prefetching: Arc<tokio::sync::Semaphore>,
}

/// A prefetch fetches runs of missing blocks of up to this many bytes, PREFETCHES at once,
/// and never more than a quarter of the cache ahead (so that it does not evict itself).
const PREFETCH_RUN: u64 = 8 << 20;
const PREFETCHES: usize = 6;

struct CacheState {
    /// Cached blocks, (pack, block number), least recently used first out.
    blocks: lru::LruCache<(u64, u64), ()>,
    /// Sizes of remote packs met so far (immutable once sealed).
    sizes: HashMap<u64, u64>,
    /// Open cache files.
    files: lru::LruCache<u64, Arc<File>>,
    /// Blocks being fetched now (by a prefetch or another reader): a reader that needs one
    /// waits for it (`arrived`) rather than fetching it again.
    inflight: std::collections::HashSet<(u64, u64)>,
}

impl CacheState {
    /// Forgets pack `id`'s open cache file and cached blocks (its bytes are replaced, or gone).
    fn forget_pack(&mut self, id: u64) {
        self.files.pop(&id);
        let stale: Vec<(u64, u64)> = self.blocks.iter().map(|(k, _)| *k).filter(|k| k.0 == id).collect();
        for k in stale {
            self.blocks.pop(&k);
        }
    }
}

impl RemotePacks {
    /// A cache of `capacity` bytes in `dir`, which is emptied: which blocks a sparse file
    /// holds is known only to the process that filled it.
    pub fn new(remote: Remote, dir: PathBuf, capacity: u64) -> io::Result<RemotePacks> {
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        let capacity = ((capacity.max(MIN_CACHE) / BLOCK) as usize).into();
        let files = lru::LruCache::new(std::num::NonZeroUsize::new(64).expect("nonzero"));
        Ok(RemotePacks {
            remote,
            dir,
            capacity,
            state: Mutex::new(CacheState { blocks: lru::LruCache::unbounded(), sizes: HashMap::new(), files, inflight: Default::default() }),
            arrived: std::sync::Condvar::new(),
            prefetching: Arc::new(tokio::sync::Semaphore::new(PREFETCHES)),
        })
    }

    /// Sets the cache's size (`mount -o cache_size=`); it shrinks as blocks come in.
    pub fn set_capacity(&self, bytes: u64) {
        self.capacity.store((bytes.max(MIN_CACHE) / BLOCK) as usize, std::sync::atomic::Ordering::Relaxed);
    }

    /// The size of remote pack `id`.
    pub fn size(&self, id: u64) -> io::Result<u64> {
        if let Some(s) = self.state.locked().sizes.get(&id) {
            return Ok(*s);
        }
        let s = self.remote.size(&pack_object(id))?.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{} is missing from {}", pack_object(id), self.remote.url())))?;
        self.state.locked().sizes.insert(id, s);
        Ok(s)
    }

    /// Notes the size of a pack known from a listing (saves a HEAD per pack).
    pub fn know_size(&self, id: u64, size: u64) {
        self.state.locked().sizes.insert(id, size);
    }

    fn cache_file(&self, id: u64, size: u64) -> io::Result<Arc<File>> {
        if let Some(f) = self.state.locked().files.get(&id) {
            return Ok(f.clone());
        }
        let path = self.dir.join(crate::pack::pack_name(id));
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        if f.metadata()?.len() != size {
            f.set_len(size)?;
        }
        let f = Arc::new(f);
        self.state.locked().files.put(id, f.clone());
        Ok(f)
    }

    /// The cache file of pack `id` with the bytes `[offset, offset + len)` in it, fetched
    /// first if they are not. No lock is held while fetching.
    pub fn file_for(&self, id: u64, offset: u64, len: u64) -> io::Result<Arc<File>> {
        let size = self.size(id)?;
        if offset.saturating_add(len) > size {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{}: {len} bytes at {offset} run past its {size} bytes", pack_object(id))));
        }
        let f = self.cache_file(id, size)?;
        if len == 0 {
            return Ok(f);
        }
        let (first, last) = (offset / BLOCK, (offset + len - 1) / BLOCK);
        loop {
            // Blocks missing and not on their way are this reader's to fetch; those on their
            // way are waited for, then looked at again (a failed prefetch leaves them missing).
            let (mine, waiting) = {
                let mut st = self.state.locked();
                let mut mine = Vec::new();
                let mut waiting = false;
                for b in first..=last {
                    if st.blocks.get(&(id, b)).is_some() {
                        continue;
                    }
                    if st.inflight.contains(&(id, b)) {
                        waiting = true;
                    } else {
                        st.inflight.insert((id, b));
                        mine.push(b);
                    }
                }
                (mine, waiting)
            };
            let mut i = 0;
            while i < mine.len() {
                let mut j = i;
                while j + 1 < mine.len() && mine[j + 1] == mine[j] + 1 {
                    j += 1;
                }
                let (from, to) = (mine[i] * BLOCK, ((mine[j] + 1) * BLOCK).min(size));
                let got = self.remote.get_range(&pack_object(id), from..to).and_then(|bytes| f.write_all_at(&bytes, from));
                let run = mine[i]..mine[j] + 1;
                if let Err(e) = got {
                    // Give back what this reader took on, so that others try for themselves.
                    self.landed(id, mine[i..].iter().copied(), false);
                    return Err(e);
                }
                self.landed(id, run, true);
                i = j + 1;
            }
            if !waiting {
                return Ok(f);
            }
            let mut st = self.state.locked();
            while (first..=last).any(|b| st.inflight.contains(&(id, b))) {
                st = self.arrived.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    /// Blocks that were in flight have arrived (`ok`) or not: counted as cached, or simply
    /// no longer in flight; waiting readers are woken.
    fn landed(&self, id: u64, blocks: impl Iterator<Item = u64> + Clone, ok: bool) {
        {
            let mut st = self.state.locked();
            for b in blocks.clone() {
                st.inflight.remove(&(id, b));
            }
        }
        if ok {
            self.insert(id, blocks);
        }
        self.arrived.notify_all();
    }

    /// Starts fetching the blocks of pack `id` that `ranges` ((offset, len) pairs) touch and
    /// the cache lacks, in the background, a few GETs at once: a reader that is about to read
    /// them all (`cat`, read-ahead) then finds them here or on their way.
    pub fn prefetch(self: &Arc<Self>, id: u64, ranges: &[(u64, u64)]) {
        let Ok(size) = self.size(id) else { return };
        let Ok(f) = self.cache_file(id, size) else { return };
        let budget = (self.capacity.load(std::sync::atomic::Ordering::Relaxed) / 4) as u64;
        let mut wanted: Vec<u64> = ranges
            .iter()
            .filter(|(off, len)| *len > 0 && off + len <= size)
            .flat_map(|(off, len)| off / BLOCK..=(off + len - 1) / BLOCK)
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mine: Vec<u64> = {
            let mut st = self.state.locked();
            let mut mine = Vec::new();
            for b in wanted {
                if mine.len() as u64 >= budget {
                    break;
                }
                if st.blocks.peek(&(id, b)).is_none() && st.inflight.insert((id, b)) {
                    mine.push(b);
                }
            }
            mine
        };
        let mut i = 0;
        while i < mine.len() {
            let mut j = i;
            while j + 1 < mine.len() && mine[j + 1] == mine[j] + 1 && (mine[j + 1] - mine[i] + 1) * BLOCK <= PREFETCH_RUN {
                j += 1;
            }
            let run = mine[i]..mine[j] + 1;
            let (from, to) = (run.start * BLOCK, (run.end * BLOCK).min(size));
            // The task holds the cache weakly (the last owner must not drop the runtime from
            // inside one of its tasks), and a guard lands its blocks however it ends: a block
            // left in flight would keep its readers waiting for good.
            struct Landing {
                cache: std::sync::Weak<RemotePacks>,
                id: u64,
                run: Range<u64>,
                got: bool,
            }
            impl Drop for Landing {
                fn drop(&mut self) {
                    if let Some(c) = self.cache.upgrade() {
                        c.landed(self.id, self.run.clone(), self.got);
                    }
                }
            }
            let landing = Landing { cache: Arc::downgrade(self), id, run, got: false };
            let f = f.clone();
            let permits = self.prefetching.clone();
            let path = self.remote.path(&pack_object(id));
            let s3 = self.remote.store.clone();
            self.remote.rt.spawn(async move {
                // The whole guard moves in (not only the field written below).
                let mut landing = landing;
                let _permit = permits.acquire_owned().await;
                landing.got = match s3.get_range(&path, from..to).await {
                    Ok(b) if b.len() as u64 == to - from => f.write_all_at(&b, from).is_ok(),
                    Ok(_) => false,
                    Err(e) => {
                        log::debug!("prefetching {path}: {e}");
                        false
                    }
                };
            });
            i = j + 1;
        }
    }

    /// Counts blocks of pack `id` as cached, evicting the least recently used beyond the
    /// capacity (their space is given back by punching holes, outside the lock).
    fn insert(&self, id: u64, blocks: impl Iterator<Item = u64>) {
        let mut evicted = Vec::new();
        {
            let mut st = self.state.locked();
            for b in blocks {
                st.blocks.put((id, b), ());
            }
            while st.blocks.len() > self.capacity.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(((p, b), ())) = st.blocks.pop_lru() else { break };
                let f = st.files.peek(&p).cloned();
                evicted.push((f, p, b));
            }
        }
        for (f, p, b) in evicted {
            let f = match f {
                Some(f) => f,
                None => match OpenOptions::new().write(true).open(self.dir.join(crate::pack::pack_name(p))) {
                    Ok(f) => Arc::new(f),
                    Err(_) => continue,
                },
            };
            // SAFETY: fallocate on a descriptor we hold; a failure only keeps the bytes.
            unsafe {
                libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&*f), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, (b * BLOCK) as i64, BLOCK as i64);
            }
        }
    }

    /// Takes a pack just uploaded from `path` into the cache whole: its bytes are the
    /// object's, and the packs a node wrote last are the ones it reads next.
    pub fn adopt(&self, id: u64, path: &Path) -> io::Result<()> {
        let size = fs::metadata(path)?.len();
        let dest = self.dir.join(crate::pack::pack_name(id));
        {
            self.state.locked().forget_pack(id);
        }
        fs::rename(path, &dest)?;
        let f = Arc::new(OpenOptions::new().read(true).write(true).open(&dest)?);
        {
            let mut st = self.state.locked();
            st.sizes.insert(id, size);
            st.files.put(id, f.clone());
        }
        self.insert(id, 0..size.div_ceil(BLOCK));
        Ok(())
    }

    /// Forgets the cached blocks under `[offset, offset + len)` of pack `id`, so that the
    /// next read fetches them again.
    pub fn forget_range(&self, id: u64, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut st = self.state.locked();
        for b in offset / BLOCK..=(offset + len - 1) / BLOCK {
            st.blocks.pop(&(id, b));
        }
    }

    /// Deletes pack `id` from the bucket and from the cache.
    pub fn delete(&self, id: u64) -> io::Result<()> {
        self.remote.delete(&pack_object(id))?;
        {
            let mut st = self.state.locked();
            st.forget_pack(id);
            st.sizes.remove(&id);
        }
        let _ = fs::remove_file(self.dir.join(crate::pack::pack_name(id)));
        Ok(())
    }

    /// Puts pack `id` in the bucket's trash (`trash/<id>.pack`, a marker): from now on it is
    /// in no listing, so no index is built from it, but its object stays readable for
    /// `lock::TRASH_GRACE` (a follower still reading it, or one that has not followed gc's new
    /// packs yet) until a later gc purges it (`purge_trash`).
    pub fn trash(&self, id: u64) -> io::Result<()> {
        self.remote.put(&format!("trash/{}", crate::pack::pack_name(id)), Vec::new())?;
        {
            let mut st = self.state.locked();
            st.forget_pack(id);
            st.sizes.remove(&id);
        }
        let _ = fs::remove_file(self.dir.join(crate::pack::pack_name(id)));
        Ok(())
    }

    /// Deletes the packs trashed at least `grace` ago, then their markers; returns how
    /// many. Ages are the object store's times: the markers' against the newest lock object
    /// (the caller's own, renewed within a minute), never this node's clock.
    pub fn purge_trash(&self, grace: Duration) -> io::Result<u64> {
        let marks = self.remote.list("trash")?;
        if marks.is_empty() {
            return Ok(0);
        }
        let now = self.remote.list("locks")?.iter().map(|l| l.2).max().unwrap_or_else(SystemTime::now);
        let mut n = 0;
        for (name, _, marked) in marks {
            let Some(id) = crate::pack::parse_pack_name(&name) else { continue };
            if now.duration_since(marked).unwrap_or_default() < grace {
                continue;
            }
            // The object first: a marker without its pack is harmless, a pack without its
            // marker would come back into the listings.
            self.remote.delete(&pack_object(id))?;
            self.remote.delete(&format!("trash/{name}"))?;
            n += 1;
        }
        Ok(n)
    }

    /// The sealed packs in the bucket, but those in its trash: (id, size).
    pub fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        // Trash first: a pack trashed between the two listings is then left out (the other
        // order could list it as live).
        let trashed: std::collections::HashSet<u64> = self.remote.list("trash")?.iter().filter_map(|t| crate::pack::parse_pack_name(&t.0)).collect();
        for (name, size, _) in self.remote.list("packs")? {
            if let Some(id) = crate::pack::parse_pack_name(&name).filter(|id| !trashed.contains(id)) {
                self.know_size(id, size);
                out.push((id, size));
            }
        }
        Ok(out)
    }
}
