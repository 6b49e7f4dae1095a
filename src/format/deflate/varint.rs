//! Varints (`format::varint`) read for the stored forms of a parse (`stored`, `predict`),
//! with deflate's errors: every value read is bounded before it sizes anything.

use super::{ParseError, Result};

pub(super) use crate::format::varint::put as put_varint;

pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) i: usize,
}

impl Cursor<'_> {
    pub(super) fn byte(&mut self) -> Result<u8> {
        let v = *self.b.get(self.i).ok_or(ParseError::Damaged("ends early"))?;
        self.i += 1;
        Ok(v)
    }

    #[inline(always)]
    pub(super) fn varint(&mut self) -> Result<u64> {
        // Most values (gaps, refs, lengths) fit one byte.
        if let Some(&b) = self.b.get(self.i) {
            if b < 0x80 {
                self.i += 1;
                return Ok(b as u64);
            }
        }
        self.varint_long()
    }

    pub(super) fn varint_long(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ParseError::Damaged("varint too long"))
    }

    /// A varint that must fit `max`, so that it can size nothing larger.
    #[inline(always)]
    pub(super) fn bounded(&mut self, max: u64) -> Result<u64> {
        let v = self.varint()?;
        if v > max {
            return Err(ParseError::Damaged("value out of range"));
        }
        Ok(v)
    }

    pub(super) fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        let s = self.b.get(self.i..self.i.saturating_add(n)).ok_or(ParseError::Damaged("ends early"))?;
        self.i += n;
        Ok(s)
    }
}
