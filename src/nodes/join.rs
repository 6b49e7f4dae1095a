//! A node joining a bucket's store: `init --backend` creating the store in the bucket or
//! registering one more node of the store there (`init_remote`), and, at every open, the
//! writer's lock taken (`lock_bucket`), the node's index brought in line with the bucket
//! (`sync_index`), its next pack id past the bucket's (`next_pack`) and its uploads started.
//!
//! STORE stays a local directory: the index (a cache of the packs, rebuilt from the bucket
//! when another node wrote since this one last did), staging, the open packs, sealed packs
//! waiting for their upload, and a bounded cache of pack ranges (`bucket::client`). The
//! bucket holds what makes the store: `warcfs.json` (the shared settings) and the sealed
//! packs, which hold every chunk, recipe and metadata log record. Each node names its packs
//! in a range of its own.

use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Arc;

use crate::bucket::client::{Remote, RemotePacks};
use crate::bucket::{gc_generation, hostname, signature_of, PackList};
use crate::store::{io_at, remote_err, Config, Opening, RepairReport, Result, Store, StoreError, Writers, FORMAT_NAME, SHARED_FORMAT_VERSION};

/// `repair index`, and a node joining a bucket's store: the index rebuilt from the packs
/// (`store::rebuild_index`), then the store opened once, which applies nothing more (the
/// log is all applied) but proves it opens, joining its bucket if it has one (read-only if
/// another node holds the bucket's lock).
pub fn repair_index(root: &Path) -> Result<RepairReport> {
    let rep = crate::store::rebuild_index(root)?;
    drop(Store::open_for_reading(root)?);
    Ok(rep)
}

/// The bucket of `o`, whose mode names one.
pub(super) fn bucket_of(o: &Opening) -> Result<Arc<RemotePacks>> {
    o.bucket.clone().ok_or_else(|| StoreError::Bug("a bucket's mode without its bucket".into()))
}

/// Who holds a lock in the bucket: host, process and store.
pub(super) fn holder(root: &Path) -> String {
    format!("{} pid {} {}", hostname(), std::process::id(), root.display())
}

/// Takes the bucket's lock object `owner` for a writer (`what` says who holds it), and
/// returns the bucket. While another node writes, the store is Busy: readers (`cat`, `ls`,
/// `stats`) then open it read-only.
pub(super) fn lock_bucket(o: &Opening, owner: &str, what: String) -> Result<Arc<RemotePacks>> {
    let r = bucket_of(o)?;
    crate::bucket::lock::take_lock(&r.remote, owner, &what).map_err(|err| {
        if err.kind() == std::io::ErrorKind::WouldBlock {
            StoreError::Busy { path: r.remote.url().into(), pid: err.to_string() }
        } else {
            StoreError::Remote { url: r.remote.url().to_string(), err }
        }
    })?;
    Ok(r)
}

/// The first id for a writer's new packs: past every pack here and every pack of its range
/// in the bucket's `listed` packs, and in its range (`store::node_base`).
pub(super) fn next_pack(o: &Opening, listed: &PackList) -> u64 {
    let node_base = crate::store::node_base(&o.config);
    let remote_max = listed.iter().map(|p| p.0).filter(|id| id >> 48 == node_base >> 48).max().unwrap_or(0);
    o.max_id.max(remote_max).max(node_base) + 1
}

/// Starts uploading `o`'s sealed packs, renewing the bucket's lock object `owner` meanwhile.
pub(super) fn start_uploads(o: &mut Opening, owner: String) -> Result<()> {
    o.packs.start_uploads(owner).map_err(io_at(&o.root))
}

/// What `sync_index` found: the bucket's packs now, and the packs the index has taken in
/// (the same unless it is to catch up by following).
pub(super) struct Synced {
    pub listed: PackList,
    pub taken_in: Vec<u64>,
}

/// Brings a node's index in line with the bucket before it is used: if the bucket's packs
/// are not those the index last reflected (`SIGNATURE`), another node wrote or gc'ed since,
/// and the index is rebuilt from the bucket (`Opening::rebuild_index`), unless `known` says
/// which of them it has taken in (a writer of a store several nodes write, which catches up
/// by following: `caught_up`). A writer is refused if the rebuild found problems (a gap in
/// the log, say): writing, and gc above all, from such an index could lose what it lacks.
/// `owner`: the writer's lock, renewed while the rebuild runs; None for a follower.
pub(super) fn sync_index(o: &mut Opening, r: &Arc<RemotePacks>, owner: Option<&str>, known: impl FnOnce(&Opening, &PackList) -> Option<Vec<u64>>) -> Result<Synced> {
    let (sig, list) = crate::bucket::bucket_listing(&o.packs).map_err(|err| StoreError::Remote { url: r.remote.url().to_string(), err })?;
    if o.created || o.noted_listing()? == Some(sig) {
        let taken_in = list.iter().map(|p| p.0).collect();
        return Ok(Synced { listed: list, taken_in });
    }
    if let Some(taken_in) = known(o, &list) {
        return Ok(Synced { listed: list, taken_in });
    }
    log::warn!("{}: the bucket changed since this node last saw it; rebuilding its index from the bucket", o.root.display());
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
    let (rep, list) = o.rebuild_index(&mut tick)?;
    if !rep.problems.is_empty() {
        for p in &rep.problems {
            log::warn!("rebuilding the index from the bucket: {p}");
        }
        if owner.is_some() {
            return Err(StoreError::RebuiltWithProblems { path: o.root.clone(), count: rep.problems.len(), first: rep.problems[0].clone() });
        }
    }
    let taken_in = list.iter().map(|p| p.0).collect();
    Ok(Synced { listed: list, taken_in })
}

/// A writer of a store several nodes write, whose index took in exactly the packs it
/// noted at close (`read_taken_in`), with no gc since (the bucket's gc generation is the one
/// noted, and every pack noted is still there): the packs it has taken in. The other nodes'
/// new packs are then taken in as a mount does (`follow`), not by a rebuild.
pub(super) fn caught_up(o: &Opening, r: &RemotePacks, listed: &PackList) -> Option<Vec<u64>> {
    let noted = o.noted_listing().ok().flatten();
    let (generation, before) = read_taken_in(&o.root).filter(|b| noted == Some(signature_of(&b.1)))?;
    let now: std::collections::HashSet<u64> = listed.iter().map(|p| p.0).collect();
    // (Unknown: rebuild, the careful way.)
    let same_gc = gc_generation(&r.remote).is_ok_and(|g| g == generation);
    if !same_gc || !before.iter().all(|p| now.contains(&p.0)) {
        return None;
    }
    log::info!("{}: the bucket has {} packs this node has not taken in; following them", o.root.display(), listed.len() - before.len());
    Some(before.iter().map(|p| p.0).collect())
}

/// `layout::bucket_packs`: the packs a shared store's writer had taken in when it last
/// closed (the listing its `bucket_signature` was computed from), after the bucket's gc
/// generation then: 8 bytes, then 16 bytes a pack, id and size, all little-endian.
fn read_taken_in(root: &Path) -> Option<(u64, PackList)> {
    let bytes = fs::read(crate::store::layout::bucket_packs(root)).ok()?;
    if bytes.len() < 8 || (bytes.len() - 8) % 16 != 0 {
        return None;
    }
    let le = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Some((le(&bytes[..8]), bytes[8..].chunks_exact(16).map(|c| (le(&c[..8]), le(&c[8..]))).collect()))
}

/// Notes the packs `list` this index stands for, after gc generation `generation`
/// (`read_taken_in`).
pub(super) fn write_taken_in(root: &Path, generation: u64, list: &PackList) -> Result<()> {
    let mut bytes = generation.to_le_bytes().to_vec();
    bytes.extend(list.iter().flat_map(|p| [p.0.to_le_bytes(), p.1.to_le_bytes()]).flatten());
    let path = crate::store::layout::bucket_packs(root);
    crate::pack::write_file_atomic(&path, &bytes).map_err(io_at(&path))
}

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
pub fn init_remote(root: &Path, url: &str, mut config: Config, writers: Option<Writers>, name: Option<String>) -> Result<Joined> {
    if crate::store::layout::config(root).exists() {
        return Err(StoreError::Exists(root.display().to_string()));
    }
    let remote = Remote::connect(url).map_err(remote_err(url))?;
    let existing = remote.get(BUCKET_CONFIG).map_err(remote_err(url))?;
    if writers == Some(Writers::Several) {
        config.version = SHARED_FORMAT_VERSION;
    }
    config.backend = Some(url.to_string());
    let existing_version = match &existing {
        Some(bytes) => serde_json::from_slice::<Shared>(bytes).ok().map(|s| s.version),
        None => None,
    };
    // How many nodes write the store: as the bucket's was made, or as asked.
    let kind = Writers::of(existing_version.unwrap_or(config.version));
    if let (Some(w), Some(_)) = (writers, existing_version) {
        if w != kind {
            let there = if kind == Writers::Several { "several writers" } else { "one writer at a time" };
            return Err(StoreError::Format { path: root.to_path_buf(), found: format!("{url} holds a store for {there} (this asked for {w:?}); leave --writers out to join it as it is") });
        }
    }
    let shared_store = kind == Writers::Several;
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
            crate::store::set_mode(root, 0o700)?;
            let cfg_path = crate::store::layout::config(root);
            let json = serde_json::to_vec_pretty(&config).expect("config serialises");
            crate::pack::write_file_atomic(&cfg_path, &json).map_err(io_at(&cfg_path))?;
            match repair_index(root) {
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
