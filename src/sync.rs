//! Locks that stay usable after a panic (the mount contains panics per request).

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
