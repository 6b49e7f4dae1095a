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
