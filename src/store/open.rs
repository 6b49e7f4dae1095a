//! Opening a store's directory: its lock, its settings file, its index (refused, never made
//! anew, when missing), the packs a crash left open, and the scratch a killed process left.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use super::*;

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
pub(super) fn recovered(root: &Path) -> Result<()> {
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
pub(super) fn open_index(root: &Path, index_dir: &Path, read_only: bool, version: u32) -> Result<Index> {
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
    // Version 4 is version 3 with a back end: one without the other is not a store we wrote
    // (from version 5 on, either may have one).
    if cfg.version < DICT_FORMAT_VERSION && cfg.backend.is_some() != (cfg.version == REMOTE_FORMAT_VERSION) {
        return Err(StoreError::Format { path: store, found: format!("{name} version {version} {} a back end", if cfg.backend.is_some() { "with" } else { "without" }) });
    }
    if several_writers(cfg.version) && (cfg.backend.is_none() || cfg.node.is_none() || cfg.node_name.is_none()) {
        return Err(StoreError::Format { path: store, found: format!("{name} version {version} (several writers) without a back end, node number and node name") });
    }
    Ok(cfg)
}

pub(super) fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_at(path))
}

/// Takes the store's exclusive lock, or names the process that holds it.
pub(super) fn take_lock(root: &Path) -> Result<File> {
    let path = crate::store::layout::lock(root);
    let mut f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io_at(&path))?;
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
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
