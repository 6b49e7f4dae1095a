//! Content addresses. A chunk is named by the SHA-256 of its bytes plus a sequence number
//! that stays 0 unless `verify = bytes|size` found two different chunks with one digest.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

pub type Digest = [u8; 32];

/// The function that names chunks. Production stores always use SHA-256; unit tests swap in
/// a deliberately weak one to prove that the verify mode keeps colliding chunks apart.
pub type DigestFn = fn(&[u8]) -> Digest;

pub fn sha256(data: &[u8]) -> Digest {
    Sha256::digest(data).into()
}

/// A digest that collides for every pair of inputs of equal length (test builds only).
#[cfg(test)]
pub fn weak_for_tests(data: &[u8]) -> Digest {
    let mut d = [0u8; 32];
    d[..8].copy_from_slice(&(data.len() as u64).to_le_bytes());
    d
}

/// Hashes a digest (or a chunk key) for a map: by its first eight bytes, already uniform,
/// and any other field mixed in. SipHash over all 32 bytes was half a percent of an import,
/// most of it on the thread that stores. (Not keyed: to crowd one bucket, a file would
/// need SHA-256 digests that share their first bytes, each found by brute force.)
#[derive(Default, Clone, Copy)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        self.0 = (self.0.rotate_left(29) ^ u64::from_le_bytes(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    /// A slice's length, written before its bytes: a digest's is always 32.
    fn write_usize(&mut self, _: usize) {}
}

/// Builds `DigestHasher`s: `HashMap<Digest, _, DigestState>`.
pub type DigestState = std::hash::BuildHasherDefault<DigestHasher>;

/// Index key of one stored chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkKey {
    pub digest: Digest,
    pub seq: u32,
}

impl ChunkKey {
    pub const LEN: usize = 36;

    pub fn to_bytes(&self) -> [u8; 36] {
        let mut k = [0u8; 36];
        k[..32].copy_from_slice(&self.digest);
        k[32..].copy_from_slice(&self.seq.to_be_bytes());
        k
    }

    pub fn from_bytes(b: &[u8]) -> Option<ChunkKey> {
        if b.len() != 36 {
            return None;
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&b[..32]);
        Some(ChunkKey { digest, seq: u32::from_be_bytes(b[32..36].try_into().ok()?) })
    }

    pub fn short(&self) -> String {
        let hex: String = self.digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}/{}", self.seq)
    }
}

impl std::fmt::Display for ChunkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.digest {
            write!(f, "{b:02x}")?;
        }
        write!(f, "/{}", self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Digests equal in their first eight bytes still are two keys (they share a bucket);
    /// chunk keys of one digest hash apart by their seq.
    #[test]
    fn the_digest_hasher_keeps_keys_apart() {
        let mut a = sha256(b"a");
        let mut map: std::collections::HashMap<Digest, u32, DigestState> = Default::default();
        map.insert(a, 1);
        a[31] ^= 1;
        map.insert(a, 2);
        assert_eq!(map.len(), 2);
        let s = DigestState::default();
        let k = |seq| ChunkKey { digest: sha256(b"b"), seq };
        assert_ne!(s.hash_one(k(0)), s.hash_one(k(1)));
        assert_ne!(s.hash_one(sha256(b"b")), s.hash_one(sha256(b"c")));
    }
}
