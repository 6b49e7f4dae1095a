//! The mount's search indexer: once `STORE/search/` exists (`warcfs search update`), a
//! thread of its own brings it up to date (`search::build::update`) whenever the store has
//! changed, a few seconds after, never on a FUSE thread and at a lower CPU priority than
//! the mount's other work, so that files being written are stored first. It stops between
//! two files at unmount, with what it did committed; what it did not do, the next mount (or
//! `warcfs search update`) does. A kill -9 loses only what was not committed (`search`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::store::Store;

/// How often the thread looks for changes.
const EVERY: Duration = Duration::from_secs(2);
/// Its nice value (the mount's other threads run at 0).
const NICE: i32 = 10;

pub(super) struct SearchIndexer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SearchIndexer {
    pub(super) fn start(store: Arc<Store>) -> std::io::Result<SearchIndexer> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new().name("warcfs-search".into()).spawn(move || run(&store, &s))?;
        Ok(SearchIndexer { stop, thread: Some(thread) })
    }

    /// Asks the thread to stop (after the file it is indexing) and waits for it.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(store: &Store, stop: &AtomicBool) {
    // SAFETY: setpriority on this thread's own id (Linux applies it to the one thread).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, NICE);
    }
    let dir = crate::store::layout::search(store.root());
    let mut done_at = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(EVERY);
        let gen = store.generation();
        if !crate::search::exists(&dir) || done_at == Some(gen) {
            continue;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::search::build::update(store, &dir, None, &|| stop.load(Ordering::Relaxed))));
        match r {
            Ok(Ok(u)) => {
                if u.files_indexed + u.files_removed + u.files_moved + u.files_reparsed > 0 {
                    log::info!("search index: {} files indexed, {} removed, {} moved, {} kept (their parses rewritten by gc), {} captures, {} documents added, {} deleted", u.files_indexed, u.files_removed, u.files_moved, u.files_reparsed, u.captures, u.documents_added, u.documents_deleted);
                }
            }
            Ok(Err(e)) => log::error!("search index {}: {e}; trying again once the store changes", dir.display()),
            Err(_) => log::error!("search index {}: a bug (a panic, above); trying again once the store changes", dir.display()),
        }
        // (A failed update is tried again once the store changes.)
        done_at = Some(gen);
    }
}
