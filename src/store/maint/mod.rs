//! Maintenance: whole-store passes that run beside or instead of the mount. `stats` (what
//! is stored, and where its bytes go), `gc` (with the sorted reference stream gc and fsck
//! share), `settle` (gc's rewrite of packs at an archival zstd level; `train`, the dictionary it
//! compresses their text chunks with; `reparse`, gc's rewrite of fast parses compact), `fsck` (every
//! reference checked), `repair` (the index rebuilt from the packs), `snapshot` (a
//! consistent copy of the store).

pub(in crate::store) mod fsck;
pub(in crate::store) mod gc;
pub(in crate::store) mod reparse;
pub(in crate::store) mod repair;
pub(in crate::store) mod settle;
pub(in crate::store) mod snapshot;
pub(in crate::store) mod stats;
pub(in crate::store) mod train;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod reparse_tests;
