//! What this store is, decided once when it is opened: every other module asks `Mode`
//! instead of testing the settings' back end, the format version and how it was opened.

use super::Config;

/// What a process has opened: where the packs live and who writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Packs on this disk (or a store opened to read while another process owns it).
    Local,
    /// Sealed packs in a bucket, which this node is the one writer of.
    BucketWriter,
    /// One of several nodes writing one bucket at once, each in its own namespace.
    SharedWriter,
    /// Reads a bucket other nodes write and follows what they publish; changes nothing.
    /// `shared`: the bucket is one several nodes write (its records carry their node).
    Follower { shared: bool },
}

impl Mode {
    /// The mode of a store of `config` opened by a process that asked to follow or not.
    pub fn at_open(config: &Config, follow: bool) -> Mode {
        let shared = super::several_writers(config.version);
        match (&config.backend, follow, shared) {
            (None, _, _) => Mode::Local,
            (Some(_), true, shared) => Mode::Follower { shared },
            (Some(_), false, true) => Mode::SharedWriter,
            (Some(_), false, false) => Mode::BucketWriter,
        }
    }

    /// Whether this node follows a bucket another node writes.
    pub fn follows(self) -> bool {
        matches!(self, Mode::Follower { .. })
    }

    /// Whether several nodes write this store: ids in per-node ranges, per-node logs,
    /// leases and a gc lock.
    pub fn shared(self) -> bool {
        matches!(self, Mode::SharedWriter | Mode::Follower { shared: true })
    }

    /// Whether files change without this process (a follower, or one of several writers).
    pub fn changed_elsewhere(self) -> bool {
        self.follows() || self.shared()
    }
}
