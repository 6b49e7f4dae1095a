//! Test hooks for the failures a test cannot cause from outside: a bug (a panic) at a named
//! place, an I/O error where the disk would have to fail, or damaged bytes. Armed only in debug builds, by
//! the process's environment: `WARCFS_FAILPOINTS=read=2,persist_sync=1` makes the first two
//! passes through `panic_at("read")` panic and the first through `io_error("persist_sync")`
//! fail; `load=1+1` lets the first pass through `load` by and fails the second. Release
//! builds compile them all to nothing.
//!
//! `WARCFS_HOLD=name:FILE` holds a process at `hold(name)` while FILE exists, so that a test
//! can look at a state (a file staged on one node) that would otherwise pass too soon.
//!
//! Kept by hand (~110 lines): the `fail` crate's actions (panic, return, sleep, print) have
//! no "SIGKILL this process at the k-th pass", which every crash test needs (`crash_at`).

/// Whether the failpoint `name` fires on this pass (its count is used up one pass at a time).
#[cfg(debug_assertions)]
fn fires(name: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    // (passes to let through first, passes that fire then)
    static ARMED: OnceLock<HashMap<String, (AtomicU64, AtomicU64)>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        let spec = std::env::var("WARCFS_FAILPOINTS").unwrap_or_default();
        spec.split(',')
            .filter_map(|p| p.split_once('='))
            .filter_map(|(n, c)| {
                let (skip, count) = c.trim().split_once('+').unwrap_or(("0", c.trim()));
                Some((n.trim().to_string(), (AtomicU64::new(skip.parse().ok()?), AtomicU64::new(count.parse().ok()?))))
            })
            .collect()
    });
    let take = |n: &AtomicU64| n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
    armed.get(name).is_some_and(|(skip, left)| !take(skip) && take(left))
}

#[cfg(not(debug_assertions))]
#[inline(always)]
fn fires(_name: &str) -> bool {
    false
}

/// Whether `name` is armed on this pass: for a condition a test cannot bring about on time
/// from outside (a source file changing in the middle of its import).
#[inline(always)]
pub(crate) fn armed(name: &str) -> bool {
    fires(name)
}

/// Panics, as a bug here would, when `name` is armed.
#[inline(always)]
pub(crate) fn panic_at(name: &str) {
    if fires(name) {
        panic!("failpoint {name} fired");
    }
}

/// Fails with EIO, as a failing disk would, when `name` is armed.
#[inline(always)]
pub(crate) fn io_error(name: &str) -> std::io::Result<()> {
    if fires(name) {
        return Err(std::io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

/// Flips the last byte of `buf`, as a damaged store or a bug would, when `name` is armed.
#[inline(always)]
pub(crate) fn corrupt(name: &str, buf: &mut [u8]) {
    if fires(name) {
        if let Some(b) = buf.last_mut() {
            *b ^= 0xff;
        }
    }
}

/// Waits while the file `WARCFS_HOLD=name:PATH` names exists, when `name` is this place
/// (debug builds only; several places as `name:PATH,name:PATH`): for a state that a test
/// must look at before this process moves on (a file staged on one node, seen from another
/// before its ingest commits it).
#[inline(always)]
pub(crate) fn hold(name: &str) {
    #[cfg(debug_assertions)]
    if let Ok(spec) = std::env::var("WARCFS_HOLD") {
        for (n, path) in spec.split(',').filter_map(|s| s.split_once(':')) {
            if n == name {
                while std::path::Path::new(path).exists() {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

/// Kills the process with SIGKILL, as `kill -9` or a crash would, on the k-th pass through
/// the durability point `name` when `WARCFS_CRASH_AT=name:k` (debug builds only). Nothing
/// runs after it: no destructor, no buffered write, no unwinding.
#[inline(always)]
pub(crate) fn crash_at(name: &str) {
    #[cfg(debug_assertions)]
    {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::OnceLock;
        static ARMED: OnceLock<Option<(String, u64, AtomicU64)>> = OnceLock::new();
        let armed = ARMED.get_or_init(|| {
            let spec = std::env::var("WARCFS_CRASH_AT").ok()?;
            let (n, k) = spec.split_once(':')?;
            Some((n.trim().to_string(), k.trim().parse().ok()?, AtomicU64::new(0)))
        });
        if let Some((n, k, passes)) = armed {
            if n == name && passes.fetch_add(1, Ordering::SeqCst) + 1 == *k {
                crate::disk::power_cut();
                // SAFETY: signalling our own process.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
