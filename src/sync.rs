//! Locks that stay usable after a panic (the mount contains panics per request), work
//! shared out to the process's two pairs of worker threads, and buffers kept for reuse.

/// Locks that outlive a panic. A panic inside the mount is contained (its request gets EIO,
/// see `fuse::guard`) and the mutexes it held must stay usable: std would poison them, and
/// every later request touching one would panic in turn. What they guard is kept consistent
/// by short critical sections, not by poisoning.
pub(crate) trait LockExt<T> {
    fn locked(&self) -> std::sync::MutexGuard<'_, T>;
}

impl<T> LockExt<T> for std::sync::Mutex<T> {
    fn locked(&self) -> std::sync::MutexGuard<'_, T> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `Condvar::wait` that, like `LockExt::locked`, carries on past a poisoned lock.
pub(crate) fn wait_on<'a, T>(cv: &std::sync::Condvar, guard: std::sync::MutexGuard<'a, T>) -> std::sync::MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f` on `len` bytes of the calling thread's buffer in `slot`, grown as needed and
/// never shrunk (its bytes as the last use left them: a buffer reused is not zeroed again),
/// and keeps it for the thread's next use unless it grew past `keep_max`. A fresh buffer
/// for every use would cost a page fault and a zeroed page for each 4 KiB it touches.
pub(crate) fn with_thread_buffer<R>(slot: &'static std::thread::LocalKey<std::cell::Cell<Vec<u8>>>, len: usize, keep_max: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut buf = slot.with(|b| b.take());
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let r = f(&mut buf[..len]);
    if buf.len() <= keep_max {
        slot.with(|b| b.set(buf));
    }
    r
}

/// The two pairs of worker threads of the process, started once: ingest proves a window's
/// parses on one while it stores the window before on the other, as it did with threads of
/// their own for each call. (One pair for both made a call of each wait for the other's to
/// end on both threads.)
#[derive(Clone, Copy)]
pub(crate) enum Workers {
    Proving,
    Storing,
}

fn pool(workers: Workers) -> Option<&'static rayon::ThreadPool> {
    static POOLS: std::sync::OnceLock<[Option<rayon::ThreadPool>; 2]> = std::sync::OnceLock::new();
    let pools = POOLS.get_or_init(|| {
        ["prove", "store"].map(|name| {
            let built = rayon::ThreadPoolBuilder::new().num_threads(2).thread_name(move |i| format!("warcfs-{name}-{i}")).build();
            // Without them, work runs on the caller's thread: slower, never wrong.
            built.map_err(|e| log::warn!("cannot start worker threads ({e}); working on one thread")).ok()
        })
    });
    pools[workers as usize].as_ref()
}

/// Runs `work` on each index of `order` on a pair of worker threads (`Workers`), each taking
/// the next index as it comes free (so `order` decides what is left for the end), with state
/// of its own from `init`; the results by index (`n` indices; None where none was given). A
/// panic goes on in the caller. Threads of their own for each call (500 for an import of the
/// crawl corpus) were each a new stack and a new malloc arena to fault in, with the
/// thread-local tables of the parse made afresh (measured: the history of docs/BENCHMARKS.md).
pub(crate) fn each_of<S, T: Send>(workers: Workers, order: &[usize], n: usize, init: impl Fn() -> S + Sync, work: impl Fn(&mut S, usize) -> T + Sync) -> Vec<Option<T>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let run = || {
        let mut state = None;
        let mut done = Vec::new();
        while let Some(&i) = order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
            let state = state.get_or_insert_with(&init);
            done.push((i, work(state, i)));
        }
        done
    };
    let done = match pool(workers) {
        Some(pool) => pool.broadcast(|_| run()),
        None => vec![run()],
    };
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for (i, r) in done.into_iter().flatten() {
        out[i] = Some(r);
    }
    out
}

/// `work` on each of `0..n` on the storing pair of worker threads (`each_of`; this one
/// alone for fewer than two), each with state of its own from `init`; the results in order
/// (None only if a thread gave none).
pub(crate) fn on_two_threads<S, T: Send>(n: usize, init: impl Fn() -> S + Sync, work: impl Fn(&mut S, usize) -> T + Sync) -> Vec<Option<T>> {
    if n == 0 {
        return Vec::new();
    }
    if n < 2 {
        let mut state = init();
        return (0..n).map(|i| Some(work(&mut state, i))).collect();
    }
    let order: Vec<usize> = (0..n).collect();
    each_of(Workers::Storing, &order, n, init, work)
}

/// Buffers one stage of work is done with, for the next: a fresh buffer of megabytes is
/// fresh pages, each zeroed by the kernel as it is first touched. At most `kept` of them, and
/// none of more than `max_bytes` (one an outsized member or window grew is let go).
pub(crate) struct Spare {
    buffers: std::sync::Mutex<Vec<Vec<u8>>>,
    kept: usize,
    max_bytes: usize,
}

impl Spare {
    pub(crate) fn new(kept: usize, max_bytes: usize) -> Spare {
        Spare { buffers: std::sync::Mutex::new(Vec::new()), kept, max_bytes }
    }

    /// A buffer of at least `capacity` bytes if one is kept (its bytes as they were left,
    /// so that a read over them need not zero them first; the smallest that will do), else
    /// a new, empty one.
    pub(crate) fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity == 0 {
            return Vec::new();
        }
        let mut buffers = self.buffers.locked();
        match buffers.iter().enumerate().filter(|(_, b)| b.capacity() >= capacity).min_by_key(|(_, b)| b.capacity()) {
            Some((i, _)) => buffers.swap_remove(i),
            None => Vec::new(),
        }
    }

    pub(crate) fn give(&self, buf: Vec<u8>) {
        if buf.capacity() <= self.max_bytes {
            let mut buffers = self.buffers.locked();
            if buffers.len() < self.kept {
                buffers.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{with_thread_buffer, Spare};

    #[test]
    fn a_thread_buffer_is_reused_with_its_bytes_and_not_kept_past_its_bound() {
        thread_local! {
            static SLOT: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
        }
        with_thread_buffer(&SLOT, 100, 1000, |b| b.fill(7));
        // The same buffer, its bytes as they were left.
        assert!(with_thread_buffer(&SLOT, 50, 1000, |b| b.len() == 50 && b.iter().all(|&x| x == 7)));
        // Grown past the bound: used, then let go.
        assert_eq!(with_thread_buffer(&SLOT, 2000, 1000, |b| b.len()), 2000);
        assert_eq!(SLOT.with(|b| b.take()).capacity(), 0);
    }

    #[test]
    fn a_spare_buffer_is_the_smallest_that_will_do_and_none_is_lost_to_an_empty_ask() {
        let spare = Spare::new(3, 1 << 20);
        for cap in [30_000, 10_000, 20_000] {
            spare.give(Vec::with_capacity(cap));
        }
        // Too large to keep: let go.
        spare.give(Vec::with_capacity(2 << 20));
        assert_eq!(spare.take(0).capacity(), 0);
        assert!((20_000..30_000).contains(&spare.take(15_000).capacity()));
        assert!((10_000..20_000).contains(&spare.take(1).capacity()));
        assert!(spare.take(30_000).capacity() >= 30_000);
        assert_eq!(spare.take(1).capacity(), 0, "all three were taken");
    }
}
