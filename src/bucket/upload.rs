//! Uploads of sealed packs to the object store, on a thread of their own, so that no lock is
//! held while bytes cross the network.
//!
//! A sealed pack stays in `packs/` (synced, so the index may point at it) until its object
//! is complete in the bucket; only then is it moved into the node's cache, where it may be
//! evicted. While the object store is down, packs wait in `packs/` and are tried again with
//! backoff (2 s, doubling to a minute); a process that stops first leaves them to the next
//! one, which queues every pack it finds in `packs/`. The same thread keeps the process's
//! lock object in the bucket fresh (`lock`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::client::{pack_object, RemotePacks};
use crate::pack::pack_name;
use crate::LockExt;

const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

pub struct Uploads {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    remote: Arc<RemotePacks>,
    packs_dir: PathBuf,
    /// The pack reader's open handles: an uploaded pack's handle must go (the file moves
    /// into the cache, where eviction punches holes in it).
    files: crate::pack::OpenFiles,
    lock: String,
}

#[derive(Default)]
struct State {
    queue: VecDeque<u64>,
    /// The pack being uploaded now.
    busy: Option<u64>,
    stop: bool,
    /// Someone waits for the queue to empty: a failed upload is tried again at once rather
    /// than after its backoff (the object store may be back).
    hurry: bool,
    /// Another node took the bucket's lock over (ours lapsed): nothing more goes up.
    fenced: bool,
    last_error: Option<String>,
}

impl Uploads {
    pub fn start(remote: Arc<RemotePacks>, packs_dir: PathBuf, files: crate::pack::OpenFiles, ids: Vec<u64>, lock: String) -> std::io::Result<Uploads> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { queue: ids.into(), ..State::default() }),
            changed: Condvar::new(),
            remote,
            packs_dir,
            files,
            lock,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("warcfs-upload".into()).spawn(move || work(&s))?;
        Ok(Uploads { shared, thread: Mutex::new(Some(thread)) })
    }

    pub fn push(&self, id: u64) {
        self.shared.state.locked().queue.push_back(id);
        self.shared.changed.notify_all();
    }

    /// Whether another node took the bucket's lock over: this process must not write.
    pub fn fenced(&self) -> bool {
        self.shared.state.locked().fenced
    }

    /// Packs waiting (or being uploaded), and the last error met.
    pub fn state(&self) -> (u64, Option<String>) {
        let st = self.shared.state.locked();
        (st.queue.len() as u64 + st.busy.is_some() as u64, st.last_error.clone())
    }

    /// Waits until nothing is waiting, for at most `timeout`; returns what still waits.
    pub fn wait_idle(&self, timeout: Duration) -> Vec<u64> {
        let end = Instant::now() + timeout;
        let mut st = self.shared.state.locked();
        st.hurry = true;
        self.shared.changed.notify_all();
        loop {
            if st.queue.is_empty() && st.busy.is_none() {
                st.hurry = false;
                return Vec::new();
            }
            let now = Instant::now();
            if now >= end || st.fenced {
                st.hurry = false;
                return st.busy.iter().chain(st.queue.iter()).copied().collect();
            }
            st = self.shared.changed.wait_timeout(st, end - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Stops the thread after the upload in progress; removes the lock object if nothing
    /// is left to upload. Later pushes are left for the next process.
    pub fn stop(&self) {
        self.shared.state.locked().stop = true;
        self.shared.changed.notify_all();
        let t = self.thread.locked().take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

impl Drop for Uploads {
    fn drop(&mut self) {
        self.stop();
    }
}

fn work(s: &Shared) {
    let mut backoff = FIRST_BACKOFF;
    // When the last renewal that succeeded began (the object store's time of the lock is
    // at least that late).
    let mut refreshed = Instant::now();
    // The lock's body while packs wait here (see `PENDING`): what it said before, to put
    // back once they are up.
    let mut pending_mark: Option<Vec<u8>> = None;
    let lease = s.lock.starts_with(super::lock::LEASE);
    loop {
        let id = {
            let mut st = s.state.locked();
            loop {
                if st.stop {
                    // Packs left to upload keep the lock, marked so that no other node takes
                    // it over by age before they are there (the next process here uploads
                    // them). A fenced process has no lock to give back.
                    let left = st.queue.len();
                    let fenced = st.fenced;
                    drop(st);
                    let r = match (fenced, left) {
                        (true, _) => Ok(()),
                        (false, 0) => super::lock::unlock(&s.remote.remote, &s.lock),
                        (false, n) => super::lock::mark_pending(&s.remote.remote, &s.lock, n),
                    };
                    if let Err(e) = r {
                        log::warn!("the lock object {}: {e}", s.lock);
                    }
                    return;
                }
                if let Some(id) = st.queue.pop_front() {
                    st.busy = Some(id);
                    break id;
                }
                let (g, _) = s.changed.wait_timeout(st, Duration::from_secs(5)).unwrap_or_else(|p| p.into_inner());
                st = g;
                if refreshed.elapsed() >= super::lock::LOCK_REFRESH {
                    break u64::MAX;
                }
            }
        };
        if refreshed.elapsed() >= super::lock::LOCK_REFRESH {
            // A lease (a store several nodes write) that went unrenewed past its staleness
            // lapsed: a gc may have run meanwhile and taken chunks this node's packs rely on,
            // so nothing more goes up until the node starts again (its open rebuilds the
            // index from the bucket and says if anything is missing).
            let lapsed = lease && refreshed.elapsed() >= super::lock::LOCK_STALE;
            let attempt = Instant::now();
            let refreshed_now = super::lock::refresh_lock(&s.remote.remote, &s.lock).and_then(|()| {
                if lapsed {
                    Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, format!("this node's lease lapsed ({} s without renewing it)", refreshed.elapsed().as_secs())))
                } else {
                    Ok(())
                }
            });
            match refreshed_now {
                Ok(()) => refreshed = attempt,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    log::error!("{}: {e}; sealed packs stay in {} (start this node again once the other has stopped, or on a shared store, now)", s.remote.remote.url(), s.packs_dir.display());
                    let mut st = s.state.locked();
                    st.fenced = true;
                    st.last_error = Some(e.to_string());
                    if id != u64::MAX {
                        st.queue.push_front(id);
                    }
                    st.busy = None;
                    drop(st);
                    s.changed.notify_all();
                    // Wait to be stopped: nothing may go up any more.
                    let mut st = s.state.locked();
                    while !st.stop {
                        st = s.changed.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    continue;
                }
                Err(e) => log::warn!("refreshing the lock object {}: {e}", s.lock),
            }
        }
        if id == u64::MAX {
            continue;
        }
        let path = s.packs_dir.join(pack_name(id));
        let result = if lease && refreshed.elapsed() >= super::lock::LOCK_STALE / 2 {
            // A lease not renewed for half its life may lapse before this upload ends: a gc
            // could then take chunks this pack's records rely on. Not now.
            Err(std::io::Error::other(format!("the lease {} has not been renewed for {} s", s.lock, refreshed.elapsed().as_secs())))
        } else if path.exists() {
            // While packs wait here, the lock says so: a node killed now keeps it (no gc, no
            // other writer by age) until it starts again and uploads them. (A lease says so
            // from the start, for as long as its node writes: nothing to mark or put back.)
            if pending_mark.is_none() && !lease {
                let before = s.remote.remote.get(&format!("locks/{}", s.lock)).ok().flatten().filter(|b| !b.starts_with(super::lock::PENDING.as_bytes()));
                let left = s.state.locked().queue.len() + 1;
                match super::lock::mark_pending(&s.remote.remote, &s.lock, left) {
                    Ok(()) => pending_mark = Some(before.unwrap_or_default()),
                    Err(e) => log::warn!("marking the lock object {} as holding packs to upload: {e}", s.lock),
                }
            }
            crate::failpoint::crash_at("pack_uploading");
            s.remote.remote.put_file(&pack_object(id), &path).and_then(|()| {
                s.files.locked().pop(&id);
                s.remote.adopt(id, &path)
            })
        } else {
            // Uploaded (and adopted) before, or deleted by gc since it was queued.
            Ok(())
        };
        let failed = result.is_err();
        if !failed && s.state.locked().queue.is_empty() {
            if let Some(body) = pending_mark.take() {
                if let Err(e) = s.remote.remote.put(&format!("locks/{}", s.lock), body) {
                    log::warn!("the lock object {}: {e}", s.lock);
                }
            }
        }
        {
            let mut st = s.state.locked();
            st.busy = None;
            match result {
                Ok(()) => {
                    st.last_error = None;
                    backoff = FIRST_BACKOFF;
                }
                Err(e) => {
                    log::warn!("uploading pack {id:016x} to {}: {e}; trying again in {} s", s.remote.remote.url(), backoff.as_secs());
                    st.last_error = Some(e.to_string());
                    st.queue.push_front(id);
                }
            }
        }
        s.changed.notify_all();
        if failed {
            // Wait out the backoff, unless told to stop; someone waiting for the uploads cuts
            // it short, but never below the first backoff (an error that comes back at once,
            // a refused key say, must not turn into a loop of requests and log lines).
            let start = Instant::now();
            let end = start + backoff;
            let mut st = s.state.locked();
            let hurried = start + FIRST_BACKOFF;
            loop {
                let now = Instant::now();
                if st.stop || now >= end || (st.hurry && now >= hurried) {
                    break;
                }
                let until = if st.hurry { end.min(hurried) } else { end };
                st = s.changed.wait_timeout(st, until.saturating_duration_since(now)).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

impl crate::pack::UploadQueue for Uploads {
    fn push(&self, id: u64) {
        Uploads::push(self, id)
    }
    fn fenced(&self) -> bool {
        Uploads::fenced(self)
    }
    fn state(&self) -> (u64, Option<String>) {
        Uploads::state(self)
    }
    fn wait_idle(&self, timeout: Duration) -> Vec<u64> {
        Uploads::wait_idle(self, timeout)
    }
    fn stop(&self) {
        Uploads::stop(self)
    }
}
