//! Opening a store. Its directory is opened as the store opens it (`Store::open_dir`); what
//! this node then is among the nodes of its bucket is chosen here, once, by its `Mode`: a
//! store without a bucket is alone (`store::Alone`), one with a bucket is joined (`join`)
//! as its one writer (`writer`), as one of several writers (`shared`) or as a follower
//! (`follow`). A store another process owns is opened to read by `Store::open_read_only`,
//! joining nothing.

use std::path::Path;
use std::sync::Arc;

use crate::digest::{self, DigestFn};
use crate::store::{Alone, Config, Mode, OpenOptionsStore, Opening, Result, Store, StoreError};

use super::follow::Follower;
use super::shared::Shared;
use super::writer::Writer;

impl Store {
    /// Creates a new store at `root`; fails if one is already there.
    pub fn init(root: &Path, config: Config) -> Result<Store> {
        if crate::store::layout::config(root).exists() {
            return Err(StoreError::Io {
                path: root.to_path_buf(),
                err: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a store already exists here"),
            });
        }
        Store::open_with(root, &OpenOptionsStore { create: true, config, follower: false }, digest::sha256)
    }

    /// Opens an existing store, or creates it with the defaults if `create`.
    pub fn open(root: &Path, create: bool) -> Result<Store> {
        Store::open_with(root, &OpenOptionsStore { create, config: Config::default(), follower: false }, digest::sha256)
    }

    /// Opens a bucket-backed store as a follower of the node that writes to the bucket: no
    /// bucket lock, nothing written but what `follow` takes in. A local store opens as
    /// `open` does, read-only to its caller all the same.
    pub fn open_follower(root: &Path) -> Result<Store> {
        Store::open_with(root, &OpenOptionsStore { create: false, config: Config::default(), follower: true }, digest::sha256)
    }

    /// Opens the store to read: exclusively if it is free, read-only if another process
    /// (a mount) owns it.
    pub fn open_for_reading(root: &Path) -> Result<Store> {
        match Store::open(root, false) {
            Err(StoreError::Busy { .. }) => Store::open_read_only(root),
            r => r,
        }
    }

    pub(crate) fn open_with(root: &Path, opts: &OpenOptionsStore, digest: DigestFn) -> Result<Store> {
        let o = Store::open_dir(root, opts, digest)?;
        match o.mode {
            Mode::Local => alone(o),
            Mode::BucketWriter => Writer::open(o),
            Mode::SharedWriter => Shared::open(o),
            Mode::Follower => Follower::open(o),
        }
    }
}

/// A store without a bucket: no other node.
fn alone(o: Opening) -> Result<Store> {
    let next = o.max_id + 1;
    let store = o.into_store(next, Arc::new(Alone))?;
    store.finish_open()?;
    Ok(store)
}
