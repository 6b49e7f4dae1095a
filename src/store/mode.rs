//! What this store is, decided once, from its settings and from how it was opened: `Mode`
//! (where the packs live and who writes) and `Share` (what of the store this node writes).
//! Each decision that follows from them is made here, once, and the rest of the store asks
//! for the decision (`Share::id_base`, `Share::settles`, `Mode::settle_budget`), never for
//! the mode. What differs between the nodes of a bucket is done by the part the nodes wing
//! chooses by `Mode` at open (`crate::nodes`, behind `Peers`), not by asking again.

use super::{Config, Writers, REMOTE_FORMAT_VERSION, DICT_FORMAT_VERSION, SHARED_FORMAT_VERSION, SHARED_V6};
use crate::bucket::node_of;

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
    Follower,
}

/// Bytes of packs one gc settles at most on an object store: the new packs must reach the
/// bucket within gc's upload wait (10 minutes: 7 MB/s). A local store's limit is its room.
pub const SETTLE_REMOTE_BUDGET: u64 = 4 << 30;

impl Mode {
    /// The mode of a store of `config` opened by a process that asked to follow or not.
    pub fn at_open(config: &Config, follow: bool) -> Mode {
        match (&config.backend, follow, Writers::of(config.version)) {
            (None, _, _) => Mode::Local,
            (Some(_), true, _) => Mode::Follower,
            (Some(_), false, Writers::Several) => Mode::SharedWriter,
            (Some(_), false, Writers::One) => Mode::BucketWriter,
        }
    }

    /// Whether this node follows a bucket another node writes: it writes nothing.
    pub fn follows(self) -> bool {
        self == Mode::Follower
    }

    /// How many bytes of packs one gc may settle, with `room` the half of the disk's free
    /// room it may take: all of it here, at most `SETTLE_REMOTE_BUDGET` on a bucket.
    pub fn settle_budget(self, room: u64) -> u64 {
        match self {
            Mode::Local => room,
            _ => room.min(SETTLE_REMOTE_BUDGET),
        }
    }
}

/// What of its store this node writes: the whole of it (one writer at a time, one metadata
/// log numbered across the nodes that take turns), or on a store several nodes write at once
/// its own share: ids in its range (`node << 48`), its directory at the root, its own log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    Whole,
    Node(u16),
}

impl Share {
    /// The share of a node of a store of `config` (a follower's too: its records and ids are
    /// numbered as its writers' are).
    pub fn of(config: &Config) -> Share {
        match Writers::of(config.version) {
            Writers::Several => Share::Node(config.node.unwrap_or(0)),
            Writers::One => Share::Whole,
        }
    }

    /// The first id of this node's range of inode and recipe ids (0: one counter).
    pub fn id_base(self) -> u64 {
        match self {
            Share::Whole => 0,
            Share::Node(n) => (n as u64) << 48,
        }
    }

    /// Whether this node may change inode `ino` (or add and remove entries in it): every one,
    /// or only those of its range, and never the root, which the node that made the store
    /// made once.
    pub fn owns(self, ino: u64) -> bool {
        match self {
            Share::Whole => true,
            Share::Node(n) => node_of(ino) == n && ino != super::ROOT_INO,
        }
    }

    /// The node whose log this node's metadata log records are in (they carry it: log
    /// version 2), and whose records are its own; None where one log numbers them all.
    pub fn log_node(self) -> Option<u16> {
        match self {
            Share::Whole => None,
            Share::Node(n) => Some(n),
        }
    }

    /// Whether gc settles the packs ingest wrote (`settle`). Not where several nodes write:
    /// another node's open pack may get an id below what this one has settled, and the
    /// marks would pass it by; so what ingest writes there is what stays.
    pub fn settles(self) -> bool {
        self == Share::Whole
    }

    /// Whether gc drops the entry of a chunk nothing uses only with its pack. Where several
    /// nodes write, every node's index holds the blobs of the packs it has taken in (a node
    /// that rebuilds finds them there), and a node may dedup against such a chunk before
    /// this one sees the record that does: its entry stays while its pack does.
    pub fn keeps_unused_entries(self) -> bool {
        self != Share::Whole
    }
}

impl Writers {
    /// How many nodes write a store of format `version`: several for 6 and 8.
    pub fn of(version: u32) -> Writers {
        if version == SHARED_V6 || version == SHARED_FORMAT_VERSION {
            Writers::Several
        } else {
            Writers::One
        }
    }
}

/// Why settings of a known format version make no store, if they do not: version 4 is
/// version 3 with a back end (from 5 on, either may have one), and a store several nodes
/// write has a back end, a node number and a node name.
pub(super) fn misfit(cfg: &Config) -> Option<String> {
    let bucket = cfg.backend.is_some();
    if cfg.version < DICT_FORMAT_VERSION && bucket != (cfg.version == REMOTE_FORMAT_VERSION) {
        return Some(format!("{} a back end", if bucket { "with" } else { "without" }));
    }
    if Writers::of(cfg.version) == Writers::Several && (!bucket || cfg.node.is_none() || cfg.node_name.is_none()) {
        return Some("(several writers) without a back end, node number and node name".into());
    }
    if cfg.compact_at_gc && !super::predicted_parses(cfg.version) {
        return Some("with compact_at_gc, which only a store of predicted parses takes (12)".into());
    }
    None
}
