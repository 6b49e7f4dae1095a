//! The command line's definitions: every subcommand with its arguments and options.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::store::{Compression, Verify};

#[derive(Parser)]
#[command(name = "warcfs", version, about = "A deduplicating, byte-exact store for web archives")]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Repair {
    /// Rebuild the index (names, directories, attributes, recipes, refcounts) from the
    /// packs alone, when STORE/index is missing or unreadable. An unreadable index is kept
    /// aside as index.unreadable.N; an index that opens is never replaced. Run
    /// `warcfs fsck STORE` afterwards.
    Index { store: PathBuf },
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create a new, empty store.
    Init {
        store: PathBuf,
        /// How a digest match is proven before two chunks become one.
        #[arg(long, value_enum, default_value = "bytes")]
        verify: Verify,
        #[arg(long, value_enum, default_value = "zstd")]
        compression: Compression,
        /// Size a sealed pack grows to, in bytes (default 32 MiB). Small packs make more
        /// files; object stores and rsync prefer the default.
        #[arg(long, default_value_t = crate::store::PACK_TARGET, value_parser = clap::value_parser!(u64).range(crate::store::MIN_PACK_SIZE..))]
        pack_size: u64,
    },
    /// Copy files and directories into the store, as `cp -r SRC... DIR` would.
    Import {
        store: PathBuf,
        #[arg(required = true)]
        src: Vec<PathBuf>,
        /// Directory in the store to copy into.
        #[arg(long, default_value = "/")]
        to: String,
    },
    /// Write a stored file's exact bytes to stdout.
    Cat { store: PathBuf, path: String },
    /// List a directory (or one file) of the store.
    Ls {
        store: PathBuf,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Remove files (and, with -r, directories) from the store.
    Rm {
        store: PathBuf,
        #[arg(required = true)]
        paths: Vec<String>,
        #[arg(short, long)]
        recursive: bool,
    },
    /// Show what is stored and how well it deduplicates.
    Stats {
        store: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check that every file's bytes can be rebuilt and every refcount is right.
    Fsck {
        store: PathBuf,
        /// Also re-hash every chunk.
        #[arg(long)]
        deep: bool,
    },
    /// Reclaim space held by chunks that no file references.
    Gc { store: PathBuf },
    /// Print a CDXJ index of the stored WARCs under PATHs (default: all), built from their
    /// header chunks alone, sorted, for pywb and other replay tools.
    Index {
        store: PathBuf,
        paths: Vec<String>,
        #[arg(long, default_value = "cdxj")]
        format: String,
    },
    /// Make DEST a complete, consistent copy of the store as of now (hard links where
    /// possible); run again to update it. Works while the store is mounted.
    Snapshot { store: PathBuf, dest: PathBuf },
    /// Mount a store as a directory (creates the store if missing). Returns once the mount
    /// is live; `fusermount3 -u MOUNTPOINT`, `umount` or SIGTERM end it.
    Mount {
        store: PathBuf,
        mountpoint: PathBuf,
        /// Stay in the foreground and log to stderr as well.
        #[arg(short, long)]
        foreground: bool,
        /// Mount options: allow_other, allow_root, ro, min_free=SIZE (free space that written data must leave on the store's disk, default 256M, so its metadata always finds room), and the generic fstab ones.
        #[arg(short = 'o')]
        options: Vec<String>,
    },
    /// Unmount a warcfs mount and return once every file written through it is stored and
    /// its daemon has exited (`fusermount3 -u` returns before that).
    Umount { mountpoint: PathBuf },
    /// Rebuild a part of the store from the packs, which hold everything.
    #[command(subcommand)]
    Repair(Repair),
}
