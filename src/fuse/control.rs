//! The control socket of a mounted store (`STORE/control.sock`): how a second process asks
//! the daemon that owns the store to do something only the owner can, such as a snapshot.
//! One request per connection, one line each way: `snapshot DEST` → `ok ...` / `error ...`;
//! `counters` → `ok {JSON}`, what the mount's reads have cost so far (see `ReadCounters`);
//! `ingests` → `ok {JSON}`, its background ingests (queued, waiting to be tried again,
//! failed attempts: see `store::Ingests`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::store::Store;

pub fn socket_path(store: &Path) -> PathBuf {
    store.join("control.sock")
}

/// Serves requests until the process exits.
pub fn serve(store: Arc<Store>) -> std::io::Result<()> {
    let path = socket_path(store.root());
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    std::thread::Builder::new().name("warcfs-control".into()).spawn(move || {
        for conn in listener.incoming().flatten() {
            if let Err(e) = handle(&store, conn) {
                log::warn!("control request: {e}");
            }
        }
    })?;
    Ok(())
}

fn handle(store: &Store, conn: UnixStream) -> std::io::Result<()> {
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line)?;
    let answer = match line.trim_end().split_once(' ') {
        Some(("snapshot", dest)) => match store.snapshot(Path::new(dest)) {
            Ok(r) => format!(
                "ok {} packs linked, {} copied, {} kept, {} removed, {} staged files copied",
                r.packs_linked, r.packs_copied, r.packs_kept, r.packs_removed, r.staged_files
            ),
            Err(e) => format!("error {e}"),
        },
        None if line.trim_end() == "counters" => match serde_json::to_string(&store.read_counters()) {
            Ok(j) => format!("ok {j}"),
            Err(e) => format!("error {e}"),
        },
        None if line.trim_end() == "ingests" => match serde_json::to_string(&store.ingests().now()) {
            Ok(j) => format!("ok {j}"),
            Err(e) => format!("error {e}"),
        },
        _ => format!("error unknown request {:?}", line.trim_end()),
    };
    if !answer.starts_with("ok {") {
        log::info!("control: {} -> {answer}", line.trim_end());
    }
    (&conn).write_all(answer.as_bytes())?;
    (&conn).write_all(b"\n")
}

/// The read counters of the daemon that has `store` mounted; None if it is not mounted
/// (or is a daemon too old to count).
pub fn read_counters(store: &Path) -> Option<crate::store::ReadCounters> {
    // A daemon that cannot answer this at once is busy or stuck: `stats` must not hang on it.
    let answer = ask(store, "counters", Some(std::time::Duration::from_secs(5))).ok()?;
    serde_json::from_str(answer.strip_prefix("ok ")?).ok()
}

/// The ingest counts of the daemon that has `store` mounted; None if it is not mounted.
pub fn ingests(store: &Path) -> Option<crate::store::Ingests> {
    let answer = ask(store, "ingests", Some(std::time::Duration::from_secs(5))).ok()?;
    serde_json::from_str(answer.strip_prefix("ok ")?).ok()
}

/// Sends one request to the daemon owning `store`; returns its answer line.
pub fn request(store: &Path, req: &str) -> std::io::Result<String> {
    ask(store, req, None)
}

fn ask(store: &Path, req: &str, timeout: Option<std::time::Duration>) -> std::io::Result<String> {
    let mut conn = UnixStream::connect(socket_path(store))?;
    conn.set_read_timeout(timeout)?;
    conn.write_all(req.as_bytes())?;
    conn.write_all(b"\n")?;
    let mut answer = String::new();
    BufReader::new(&conn).read_line(&mut answer)?;
    Ok(answer.trim_end().to_string())
}
