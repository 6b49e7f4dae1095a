//! A store whose sealed packs live in an S3-compatible object store (format version 4).
//!
//! STORE stays a local directory: the index (a cache of the packs, rebuilt from the bucket
//! by `repair index`), staging, the open packs, sealed packs waiting for their upload, and a
//! bounded cache of pack ranges (`pack::remote`). The bucket holds what makes the store:
//! `warcfs.json` (the shared settings) and the sealed packs, which hold every chunk, recipe
//! and metadata log record. One process writes to a bucket at a time (a lock object, see
//! `bucket::client::take_lock`); each node names its packs in a range of its own.

use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::bucket::{bucket_listing, gc_generation, hostname};
use crate::store::backend::{remote_err, SIGNATURE};
use crate::store::maint::repair::RepairReport;
use crate::store::{io_at, Config, Result, Store, StoreError, FORMAT_NAME, FORMAT_VERSION, SHARED_FORMAT_VERSION};
use crate::bucket::client::{Remote, RemotePacks};
use crate::LockExt;

/// Brings a node's index in line with the bucket before it is used: if the bucket's packs
/// are not those the index last reflected (`SIGNATURE`), another node wrote or gc'ed since,
/// and the index is rebuilt from the bucket. The old index is kept aside until the new one
/// is whole (and put back if the rebuild fails). A writer is refused if the rebuild found
/// problems (a gap in the log, say): writing, and gc above all, from such an index could
/// lose what it lacks. Returns the index and the packs it reflects.
/// `owner`: the writer's lock, renewed while the rebuild runs; None for a follower.
/// What `sync_index` gives: the index, the bucket's packs now, and the packs the index has
/// taken in (the same unless it is to catch up by following).
pub(in crate::store) struct Synced {
    pub index: crate::index::Index,
    pub listed: Vec<(u64, u64)>,
    pub taken_in: Vec<u64>,
}

pub(in crate::store) fn sync_index(root: &Path, config: &Config, index: crate::index::Index, r: &Arc<RemotePacks>, fresh: bool, owner: Option<&str>) -> Result<Synced> {
    let writer = owner.is_some();
    let url = r.remote.url().to_string();
    let probe = crate::pack::PackReader::with_remote(crate::store::layout::packs(root), crate::store::layout::packs_tmp(root), r.clone());
    let (sig, list) = bucket_listing(&probe).map_err(|err| StoreError::Remote { url: url.clone(), err })?.expect("a remote reader");
    if fresh || index.meta_u64_opt(SIGNATURE)? == Some(sig) {
        let taken_in = list.iter().map(|p| p.0).collect();
        return Ok(Synced { index, listed: list, taken_in });
    }
    // A writer of a store several nodes write, whose index took in exactly the packs it
    // noted at close (`TAKEN_IN`), with no gc since (the bucket's gc generation is the one
    // noted, and every pack noted is still there): the other nodes' new packs are taken in
    // as the mount does (`follow`, by the caller), not by a rebuild.
    if writer && crate::store::several_writers(config.version) {
        if let Some((generation, before)) = read_taken_in(root).filter(|b| index.meta_u64_opt(SIGNATURE).ok().flatten() == Some(crate::bucket::signature_of(&b.1))) {
            let now: std::collections::HashSet<u64> = list.iter().map(|p| p.0).collect();
            // (Unknown: rebuild, the careful way.)
            let same_gc = gc_generation(&r.remote).is_ok_and(|g| g == generation);
            if same_gc && before.iter().all(|p| now.contains(&p.0)) {
                log::info!("{}: the bucket has {} packs this node has not taken in; following them", root.display(), list.len() - before.len());
                let taken_in = before.iter().map(|p| p.0).collect();
                return Ok(Synced { index, listed: list, taken_in });
            }
        }
    }
    log::warn!("{}: the bucket changed since this node last saw it; rebuilding its index from the bucket", root.display());
    drop(index);
    let (index_dir, aside) = (crate::store::layout::index(root), root.join("index.stale"));
    if aside.exists() {
        fs::remove_dir_all(&aside).map_err(io_at(&aside))?;
    }
    fs::rename(&index_dir, &aside).map_err(io_at(&index_dir))?;
    let mut rep = RepairReport::default();
    let mut renewed = std::time::Instant::now();
    let mut tick = || {
        if let Some(owner) = owner {
            if renewed.elapsed() >= crate::bucket::lock::LOCK_REFRESH {
                if let Err(e) = crate::bucket::lock::refresh_lock(&r.remote, owner) {
                    log::warn!("renewing the bucket's lock during the rebuild: {e}");
                }
                renewed = std::time::Instant::now();
            }
        }
    };
    let list = match crate::store::maint::repair::build_index(root, config, &mut rep, Some(r.clone()), &mut tick) {
        Ok(list) => list,
        Err(e) => {
            let _ = fs::remove_dir_all(&index_dir);
            let _ = fs::rename(&aside, &index_dir);
            return Err(e);
        }
    };
    let _ = fs::remove_dir_all(&aside);
    let index = crate::store::open::open_index(root, &index_dir, false, config.version)?;
    let list_ids: Vec<u64> = list.iter().map(|p| p.0).collect();
    if !rep.problems.is_empty() {
        for p in &rep.problems {
            log::warn!("rebuilding the index from the bucket: {p}");
        }
        if writer {
            return Err(StoreError::RebuiltWithProblems { path: root.to_path_buf(), count: rep.problems.len(), first: rep.problems[0].clone() });
        }
    }
    Ok(Synced { index, listed: list, taken_in: list_ids })
}

/// The packs a shared store's writer had taken in when it last closed (the listing its
/// `bucket_signature` was computed from), after the bucket's gc generation then: 8 bytes,
/// then 16 bytes a pack, id and size, all little-endian.
const TAKEN_IN: &str = "bucket-packs";

fn read_taken_in(root: &Path) -> Option<(u64, Vec<(u64, u64)>)> {
    let bytes = fs::read(root.join(TAKEN_IN)).ok()?;
    if bytes.len() < 8 || (bytes.len() - 8) % 16 != 0 {
        return None;
    }
    let le = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Some((le(&bytes[..8]), bytes[8..].chunks_exact(16).map(|c| (le(&c[..8]), le(&c[8..]))).collect()))
}



/// How long closing a store waits for its sealed packs to go up.
pub const CLOSE_UPLOAD_WAIT: Duration = Duration::from_secs(60);
/// The bucket's settings object.
const BUCKET_CONFIG: &str = "warcfs.json";

/// What `init --backend` did.
pub enum Joined {
    /// The bucket held no store: one was created there.
    Created(Box<Store>),
    /// The bucket held a store: this node joined it, its index rebuilt from the bucket.
    Joined(RepairReport),
}

/// The settings every node shares, as kept in the bucket.
#[derive(serde::Serialize, serde::Deserialize)]
struct Shared {
    format: String,
    version: u32,
    verify: crate::store::Verify,
    compression: crate::store::Compression,
    pack_size: u64,
}

/// `warcfs init STORE --backend URL`: creates the store in the bucket, or joins the store
/// already there as one more node (its settings are the bucket's, whatever `config` says).
/// `writers`: as asked (None: the bucket's, or one for a new store); `name`: this node's name
/// on a store several nodes write (default: the host's name), which must be its own.
pub fn init_remote(root: &Path, url: &str, mut config: Config, writers: Option<crate::store::Writers>, name: Option<String>) -> Result<Joined> {
    if crate::store::layout::config(root).exists() {
        return Err(StoreError::Exists(root.display().to_string()));
    }
    let remote = Remote::connect(url).map_err(remote_err(url))?;
    let existing = remote.get(BUCKET_CONFIG).map_err(remote_err(url))?;
    config.version = if writers == Some(crate::store::Writers::Several) { SHARED_FORMAT_VERSION } else { FORMAT_VERSION };
    config.backend = Some(url.to_string());
    let existing_version = match &existing {
        Some(bytes) => serde_json::from_slice::<Shared>(bytes).ok().map(|s| s.version),
        None => None,
    };
    let shared_store = crate::store::several_writers(existing_version.unwrap_or(config.version));
    if let (Some(w), Some(v)) = (writers, existing_version) {
        if (w == crate::store::Writers::Several) != crate::store::several_writers(v) {
            return Err(StoreError::Format { path: root.to_path_buf(), found: format!("{url} holds a store for {} (this asked for {w:?}); leave --writers out to join it as it is", if crate::store::several_writers(v) { "several writers" } else { "one writer at a time" }) });
        }
    }
    if !shared_store && name.is_some() {
        return Err(StoreError::Format { path: root.to_path_buf(), found: "--node-name names a node of a store several nodes write (--writers several)".into() });
    }
    let node_name = name.unwrap_or_else(hostname);
    if shared_store {
        let ok = !node_name.is_empty() && node_name.len() <= 255 && !node_name.contains(['/', '\0']) && node_name != "." && node_name != ".." && !node_name.starts_with(".warcfs");
        if !ok {
            return Err(StoreError::InvalidPath(format!("node name {node_name:?} (it names this node's directory at the store's root)")));
        }
        // Each node writes under /NAME/: two nodes of one name would share a directory.
        for (n, _, _) in remote.list("nodes").map_err(remote_err(url))? {
            let body = remote.get(&format!("nodes/{n}")).map_err(remote_err(url))?.unwrap_or_default();
            if String::from_utf8_lossy(&body).lines().next().and_then(|l| l.strip_prefix("name=")) == Some(node_name.as_str()) {
                return Err(StoreError::Exists(format!("node name {node_name:?} in {url} (node {n}); choose another with --node-name")));
            }
        }
        config.node_name = Some(node_name.clone());
    }
    // A node number no pack in the bucket uses yet (nor 0, the local stores' range).
    // A node number no node registered (`nodes/NNNN`) and no pack uses yet (nor 0, the
    // local stores' range); registered at once, so that the next joiner skips it too.
    let mut used: std::collections::HashSet<u16> = remote.list("packs").map_err(remote_err(url))?.iter().filter_map(|(n, _, _)| crate::pack::parse_pack_name(n)).map(|id| (id >> 48) as u16).collect();
    used.extend(remote.list("nodes").map_err(remote_err(url))?.iter().filter_map(|(n, _, _)| u16::from_str_radix(n, 16).ok()));
    let mut node = 0u16;
    while node == 0 || used.contains(&node) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        node = h.finish() as u16;
    }
    let registered = if shared_store { format!("name={node_name}\n{} {}\n", hostname(), root.display()) } else { format!("{} {}\n", hostname(), root.display()) };
    remote.put(&format!("nodes/{node:04x}"), registered.into_bytes()).map_err(remote_err(url))?;
    if shared_store {
        // Two nodes registering one name at once: both see the other now, and back off.
        for (n, _, _) in remote.list("nodes").map_err(remote_err(url))? {
            if n == format!("{node:04x}") {
                continue;
            }
            let body = remote.get(&format!("nodes/{n}")).map_err(remote_err(url))?.unwrap_or_default();
            if String::from_utf8_lossy(&body).lines().next().and_then(|l| l.strip_prefix("name=")) == Some(node_name.as_str()) {
                let _ = remote.delete(&format!("nodes/{node:04x}"));
                return Err(StoreError::Exists(format!("node name {node_name:?} in {url} (node {n}, registered at the same time); choose another with --node-name")));
            }
        }
    }
    config.node = Some(node);
    match existing {
        None => {
            let shared = Shared { format: FORMAT_NAME.into(), version: config.version, verify: config.verify, compression: config.compression, pack_size: config.pack_size };
            remote.put(BUCKET_CONFIG, serde_json::to_vec_pretty(&shared).expect("settings serialise")).map_err(remote_err(url))?;
            drop(remote);
            Ok(Joined::Created(Box::new(Store::init(root, config)?)))
        }
        Some(bytes) => {
            let shared: Shared = serde_json::from_slice(&bytes).map_err(|e| StoreError::Format { path: root.to_path_buf(), found: format!("{url}/{BUCKET_CONFIG} unreadable: {e}") })?;
            // A bucket store keeps the version it was made at: every node writes it alike.
            if shared.format != FORMAT_NAME || (!crate::store::VERSIONS.contains(&shared.version) || shared.version == crate::store::LOCAL_V3) {
                return Err(StoreError::Format { path: root.to_path_buf(), found: format!("{url} holds {} version {}", shared.format, shared.version) });
            }
            drop(remote);
            config.version = shared.version;
            config.verify = shared.verify;
            config.compression = shared.compression;
            config.pack_size = shared.pack_size;
            fs::create_dir_all(root).map_err(io_at(root))?;
            crate::store::open::set_mode(root, 0o700)?;
            let cfg_path = crate::store::layout::config(root);
            let json = serde_json::to_vec_pretty(&config).expect("config serialises");
            crate::pack::write_file_atomic(&cfg_path, &json).map_err(io_at(&cfg_path))?;
            match crate::store::repair_index(root) {
                Ok(rep) => Ok(Joined::Joined(rep)),
                Err(e) => {
                    // Not a node yet: leave nothing that looks like one.
                    let _ = fs::remove_file(&cfg_path);
                    Err(e)
                }
            }
        }
    }
}

impl Store {
    /// Waits until every sealed pack is in the bucket (at most `timeout`); an error names
    /// how many are not, where they wait, and the last upload error. A local store has
    /// nothing to wait for.
    pub fn wait_uploaded(&self, timeout: Duration) -> Result<()> {
        let left = self.packs.wait_uploaded(timeout);
        if left.is_empty() {
            return Ok(());
        }
        let (_, err) = self.packs.upload_state();
        Err(StoreError::Remote {
            url: self.config.backend.clone().unwrap_or_default(),
            err: std::io::Error::other(format!(
                "{} sealed packs are not uploaded yet ({}); they are kept in {} and go up with the next warcfs that opens the store",
                left.len(),
                err.unwrap_or_else(|| "still uploading".into()),
                crate::store::layout::packs(&self.root).display()
            )),
        })
    }

    /// Closing a store on an object store: waits (at most `timeout`) for the sealed packs to
    /// go up, then stops uploading and gives up the bucket's lock if nothing is left (what
    /// is left keeps it: see `pack::upload`). For a process that does not drop its `Store`
    /// (the mount's daemon).
    pub fn close_remote(&self, timeout: Duration) -> Result<()> {
        if !self.packs.uploads() {
            return Ok(());
        }
        // A shared store's writer that wrote many records since its last checkpoint writes
        // one before it goes (see `checkpoint_if_due`).
        match self.checkpoint_if_due(crate::store::journal::CHECKPOINT_RECORDS) {
            // Its records go up with the rest.
            Ok(true) => {
                if let Err(e) = self.seal_journal(&mut self.journal.locked()) {
                    log::warn!("{}: sealing the checkpoint written at close: {e} (it goes up with the next open)", self.root.display());
                }
            }
            Ok(false) => {}
            Err(e) => log::warn!("{}: a checkpoint of this node's log at close: {e}", self.root.display()),
        }
        let r = self.wait_uploaded(timeout);
        if r.is_ok() {
            // Not noting it only costs the next open a rebuild: the uploads stop anyway.
            if let Err(e) = self.note_bucket() {
                log::warn!("{}: noting the bucket's packs at close: {e} (the next open rebuilds the index from the bucket)", self.root.display());
                let mut b = crate::index::Batch::new();
                b.put_meta_u64_unlogged(&self.index, SIGNATURE, 0);
                let _ = self.index.write(b);
            }
        }
        self.packs.stop_uploads();
        r
    }

    /// Notes the bucket's packs as this node knows them now (see `SIGNATURE`). Called when
    /// the node stops writing, its packs uploaded. On a store several nodes write, the others write meanwhile: the packs this index has
    /// taken in are this node's and those `follow` applied, so it follows once more first,
    /// and notes the listing only if that left nothing out (else 0, no listing's signature:
    /// the next open rebuilds).
    pub(in crate::store) fn note_bucket(&self) -> Result<()> {
        if self.mode.shared() {
            self.follow()?;
        }
        // The gc generation before the listing: a gc between the two then shows as a newer
        // generation at the next open, never as an older listing under the newer number.
        let generation = match self.bucket.as_ref() {
            Some(r) if self.mode.shared() => Some(gc_generation(&r.remote).map_err(io_at(&self.root))?),
            _ => None,
        };
        if let Some((mut sig, list)) = bucket_listing(&self.packs).map_err(io_at(&self.root))? {
            if self.mode.shared() {
                let st = self.follow.locked();
                if st.busy || !st.waiting.is_empty() || list.iter().any(|p| crate::bucket::node_of(p.0) != self.node() && !st.seen.contains(&p.0)) {
                    sig = 0;
                }
            }
            if let (Some(generation), true) = (generation, sig != 0) {
                // What the signature stands for, so that the next open can catch up.
                let mut bytes = generation.to_le_bytes().to_vec();
                bytes.extend(list.iter().flat_map(|p| [p.0.to_le_bytes(), p.1.to_le_bytes()]).flatten());
                let path = self.root.join(TAKEN_IN);
                crate::pack::write_file_atomic(&path, &bytes).map_err(io_at(&path))?;
            }
            let mut b = crate::index::Batch::new();
            b.put_meta_u64_unlogged(&self.index, SIGNATURE, sig);
            self.index.write(b)?;
        }
        Ok(())
    }

    /// Sets the size of this node's cache of pack ranges (object-store back end only).
    pub fn set_pack_cache(&self, bytes: u64) {
        if let Some(r) = self.bucket.as_ref() {
            r.set_capacity(bytes);
        }
    }

    /// Packs waiting for their upload, and the last upload error (0 on a local store).
    pub fn uploads(&self) -> (u64, Option<String>) {
        self.packs.upload_state()
    }
}
