//! A prefix's block list (docs/FORMAT.md, "Prefix"): written by `encode`, read by `decode`,
//! and measured by `header_bytes` for `warcfs stats --bytes`, so the layout lives here once.

use super::{put_varint, Cursor};
use crate::format::deflate::{Block, BlockKind, Result, ParseError};

/// The most header bits a dynamic block's entry may say it holds.
const MAX_HEADER_BITS: u64 = 8192;

/// Appends the block list of `blocks`: their count, then per block its flags, its text
/// length and what its kind keeps. Dynamic headers are kept as written (kind 2), unless
/// `derived` says the block's header is zlib's for its symbols (kind 3: only in a store of
/// parses in the predicted form, whose rebuilds are slower anyway).
pub(super) fn put_blocks(prefix: &mut Vec<u8>, blocks: &[Block], derived: &[bool]) {
    put_varint(prefix, blocks.len() as u64);
    let mut prev = 0u32;
    for (i, b) in blocks.iter().enumerate() {
        let derive = derived.get(i).copied().unwrap_or(false);
        let ty = match &b.kind {
            BlockKind::Stored { .. } => 0u8,
            BlockKind::Fixed => 1,
            BlockKind::Dynamic { .. } if derive => 3,
            BlockKind::Dynamic { .. } => 2,
        };
        prefix.push(b.last as u8 | ty << 1);
        put_varint(prefix, (b.end - prev) as u64);
        prev = b.end;
        match &b.kind {
            BlockKind::Stored { pad } => prefix.push(*pad),
            BlockKind::Dynamic { header, bits } if !derive => {
                put_varint(prefix, *bits as u64);
                prefix.extend_from_slice(header);
            }
            BlockKind::Dynamic { .. } | BlockKind::Fixed => {}
        }
    }
}

/// The block count of a block list, bounded by the text's length (at most 16 blocks per
/// byte of text: runs of empty flush blocks beyond that are refused at ingest).
pub(super) fn get_count(c: &mut Cursor, plain_len: u64) -> Result<usize> {
    Ok(c.bounded((plain_len + 1) << 4)? as usize)
}

/// Reads one entry of a block list whose previous block ended at text offset `end`: the
/// block (a kind 3 block's header is empty, to be derived once the matches are read),
/// whether it is kind 3, and the bytes its kept header took (kind 2: the bit count and
/// the bits; 0 for other kinds).
pub(super) fn get_block(c: &mut Cursor, plain_len: u64, end: u64) -> Result<(Block, bool, usize)> {
    let flags = c.byte()?;
    let end = end + c.bounded(plain_len - end)?;
    let at = c.i;
    let kind = match flags >> 1 {
        0 => BlockKind::Stored { pad: c.byte()? },
        1 => BlockKind::Fixed,
        2 => {
            let bits = c.bounded(MAX_HEADER_BITS)?;
            let header = c.bytes(bits.div_ceil(8) as usize)?.to_vec();
            BlockKind::Dynamic { header, bits: bits as u32 }
        }
        3 => BlockKind::Dynamic { header: Vec::new(), bits: 0 },
        _ => return Err(ParseError::Damaged("block type")),
    };
    let kept = if flags >> 1 == 2 { c.i - at } else { 0 };
    Ok((Block { kind, last: flags & 1 != 0, end: end as u32 }, flags >> 1 == 3, kept))
}

/// How many bytes of a stored prefix (`Member.parse`) of a member of `plain_len` bytes of
/// text keep dynamic blocks' headers as written (kind 2: each one's bit count and bits).
/// `stats` counts them apart: they could be derived from the text and the matches (kind 3),
/// at a cost to every rebuild.
pub fn header_bytes(prefix: &[u8], plain_len: usize) -> Result<usize> {
    let mut c = Cursor { b: prefix, i: 0 };
    let (mut end, mut bytes) = (0u64, 0usize);
    for _ in 0..get_count(&mut c, plain_len as u64)? {
        let (b, _, kept) = get_block(&mut c, plain_len as u64, end)?;
        end = b.end as u64;
        bytes += kept;
    }
    Ok(bytes)
}
