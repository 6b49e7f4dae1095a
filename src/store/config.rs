//! The store's settings (`warcfs.json`), fixed at init: format version, verify mode,
//! compression, pack size and, for a bucket-backed store, the back end and this node's
//! number and cache size. Layout: docs/FORMAT.md, "The store directory".

use serde::{Deserialize, Serialize};

use super::{FORMAT_NAME, FORMAT_VERSION, PACKED_V11, PACK_TARGET};

/// How a digest hit is proven to be the same bytes before it is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// Compare the bytes (ZFS dedup=verify).
    Bytes,
    /// Compare digest and length.
    Size,
    /// Trust SHA-256.
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Zstd,
    None,
}

/// How many nodes write a bucket-backed store (`init --backend URL --writers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Writers {
    /// One node at a time (its lock object in the bucket); others follow it read-only.
    One,
    /// Several at once, each under its own directory at the root (format version 6 or 8).
    Several,
}

/// How a store keeps its gzip members' deflate parses (`init --parses`), fixed at init by
/// the store's format version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Parses {
    /// Every match ranked on the text's own chains (version 11): a member rebuilds at about
    /// 340 MB/s of its text.
    #[default]
    Fast,
    /// zlib's own search, cut short, and where it must be corrected (version 12;
    /// `format::deflate`): a fifth of the parse bytes, but a member rebuilds at about
    /// two fifths of the speed and imports take about 1.5 times as long; and gc settles at zstd
    /// level 15 rather than 9 (`maint::settle::COMPACT_LEVEL`), about 6 times gc's time. For
    /// stores written once and read seldom.
    Compact,
    /// Fast at ingest, compact once gc has run (version 12): imports and reads of files not
    /// yet gc'd as fast's, the store after gc as small as compact's and read at its speed;
    /// gc takes the time compact's imports would have.
    CompactAtGc,
}

impl Parses {
    /// The format version a new store one node writes is made at.
    pub fn version(self) -> u32 {
        match self {
            Parses::Fast => PACKED_V11,
            Parses::Compact | Parses::CompactAtGc => FORMAT_VERSION,
        }
    }

    /// Whether ingest writes the fast form and gc rewrites it compact (`Config::compact_at_gc`).
    pub fn compact_at_gc(self) -> bool {
        self == Parses::CompactAtGc
    }
}

/// The store's settings, fixed at init.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub format: String,
    pub version: u32,
    pub verify: Verify,
    pub compression: Compression,
    /// Sealed data packs grow to about this many bytes (`init --pack-size`).
    #[serde(default = "default_pack_size")]
    pub pack_size: u64,
    /// Where sealed packs live if not here: `s3://BUCKET/PREFIX` (`init --backend`; format
    /// version 4). None: in `packs/`, the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// This node's cache of pack ranges, in bytes (object-store back end only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<u64>,
    /// This node's number (object-store back end only): the top 16 bits of the ids of the
    /// packs it writes, so that nodes sharing a bucket never name two packs alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u16>,
    /// This node's name in a store several nodes write (format version 6 or 8): the directory at
    /// the store's root that it writes under (`init --node-name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Ingest keeps gzip members' parses in the fast (ranked) form, and gc rewrites the
    /// files it finds so in the compact (predicted) form (`init --parses compact-at-gc`, a
    /// store of version 12: readers take both forms). Absent: ingest writes what the
    /// version says (a warcfs that does not know this setting writes the compact form).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compact_at_gc: bool,
}

fn default_pack_size() -> u64 {
    PACK_TARGET
}

impl Default for Config {
    fn default() -> Config {
        Config {
            format: FORMAT_NAME.into(),
            version: Parses::default().version(),
            verify: Verify::Bytes,
            compression: Compression::Zstd,
            pack_size: PACK_TARGET,
            backend: None,
            cache_size: None,
            node: None,
            node_name: None,
            compact_at_gc: false,
        }
    }
}

