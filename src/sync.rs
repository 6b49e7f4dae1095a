//! Locks that stay usable after a panic (the mount contains panics per request), and work
//! shared out to a few scoped threads.

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

/// Runs `work` on each index of `order` on `threads` threads of scope `s`, each taking the
/// next index as it comes free (so `order` decides what is left for the end) with state of
/// its own from `init`. `join_each` gathers the results.
pub(crate) fn spawn_each<'scope, 'env, S, T, I, W>(s: &'scope std::thread::Scope<'scope, 'env>, threads: usize, order: &'env [usize], init: &'env I, work: &'env W) -> Vec<std::thread::ScopedJoinHandle<'scope, Vec<(usize, T)>>>
where
    I: Fn() -> S + Sync,
    W: Fn(&mut S, usize) -> T + Sync,
    T: Send + 'scope,
{
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (0..threads)
        .map(|_| {
            let next = next.clone();
            s.spawn(move || {
                let mut state = init();
                let mut done = Vec::new();
                while let Some(&i) = order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    done.push((i, work(&mut state, i)));
                }
                done
            })
        })
        .collect()
}

/// The results of `spawn_each`'s threads, by index (`n` indices); a thread's panic goes on
/// in the caller.
pub(crate) fn join_each<T>(handles: Vec<std::thread::ScopedJoinHandle<'_, Vec<(usize, T)>>>, n: usize) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for h in handles {
        for (i, r) in h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)) {
            out[i] = Some(r);
        }
    }
    out
}

/// `work` on each of `0..n` on two scoped threads (this one alone for fewer than two), each
/// with state of its own from `init`; the results in order (None only if a thread gave none).
pub(crate) fn on_two_threads<S, T: Send>(n: usize, init: impl Fn() -> S + Sync, work: impl Fn(&mut S, usize) -> T + Sync) -> Vec<Option<T>> {
    if n == 0 {
        return Vec::new();
    }
    if n < 2 {
        let mut state = init();
        return (0..n).map(|i| Some(work(&mut state, i))).collect();
    }
    let order: Vec<usize> = (0..n).collect();
    std::thread::scope(|s| join_each(spawn_each(s, 2, &order, &init, &work), n))
}
