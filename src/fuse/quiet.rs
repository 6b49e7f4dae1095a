//! Log lines for errors that come in floods. A full disk fails every write of every writer
//! (thousands a second): the first error of a kind is logged, then at most one line per
//! `INTERVAL`, counting the ones left out, so the log says what happened without filling
//! what little room is left.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::LockExt;

const INTERVAL: Duration = Duration::from_secs(10);

/// A kind of error: where it happened, and what it was.
pub type Kind = (&'static str, &'static str);

/// When a kind was last logged, and how many of it were left out since.
type Seen = HashMap<Kind, (Instant, u64)>;

fn seen() -> &'static Mutex<Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

/// The kind an I/O error is counted under when it may come in floods, None for the others
/// (each of which is logged).
fn flood_kind(errno: Option<i32>) -> Option<&'static str> {
    match errno {
        Some(libc::ENOSPC) => Some("no space left on device"),
        Some(libc::EDQUOT) => Some("disk quota exceeded"),
        _ => None,
    }
}

/// Logs `msg`, an error met at `place` with OS error `errno`: each one if it is not of a
/// flooding kind, else at most one line per `INTERVAL` (`error`).
pub fn io_error(place: &'static str, errno: Option<i32>, msg: impl std::fmt::Display) {
    match flood_kind(errno) {
        Some(kind) => error((place, kind), msg),
        None => log::error!("{msg}"),
    }
}

/// Logs `msg` as an error, unless one of `kind` was logged less than `INTERVAL` ago.
pub fn error(kind: Kind, msg: impl std::fmt::Display) {
    let left_out = {
        let mut seen = seen().locked();
        let now = Instant::now();
        match seen.get_mut(&kind) {
            Some((last, n)) if now.duration_since(*last) < INTERVAL => {
                *n += 1;
                return;
            }
            Some((last, n)) => {
                *last = now;
                std::mem::take(n)
            }
            None => {
                seen.insert(kind, (now, 0));
                0
            }
        }
    };
    if left_out > 0 {
        log::error!("{msg} ({left_out} more errors of this kind in the last {} s were not logged)", INTERVAL.as_secs());
    } else {
        log::error!("{msg}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_flood_is_one_line_per_interval() {
        // Only the first of a burst passes; the count of the others waits for the next line.
        let kind = ("test", "kind");
        super::error(kind, "first");
        for _ in 0..1000 {
            super::error(kind, "again");
        }
        let seen = super::seen().lock().unwrap();
        assert_eq!(seen.get(&kind).map(|s| s.1), Some(1000));
    }
}
