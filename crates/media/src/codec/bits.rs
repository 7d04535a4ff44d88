//! A most-significant-bit-first bit reader with Exp-Golomb codes, and RBSP extraction.
//!
//! Why: SPS fields (picture size, cropping, chroma format) are bit-packed and
//! variable-length; AudioSpecificConfig is bit-packed too. Every read is checked, so
//! a short or hostile input ends in `CodecError::Truncated`, never a panic.

use super::CodecError;

/// Longest Exp-Golomb prefix we accept: 31 leading zeros codes values up to 2^32 - 2,
/// more than any field we read can legally hold.
const MAX_EXP_GOLOMB_ZEROS: u32 = 31;

/// Reads bits from a byte slice, most significant bit first.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// Position in bits from the start of `data`.
    pos: usize,
    what: &'static str,
}

impl<'a> BitReader<'a> {
    /// A reader over `data`; `what` names the structure in errors.
    pub(crate) fn new(data: &'a [u8], what: &'static str) -> Self {
        BitReader { data, pos: 0, what }
    }

    fn truncated(&self) -> CodecError {
        CodecError::Truncated { what: self.what }
    }

    /// One bit.
    pub(crate) fn bit(&mut self) -> Result<bool, CodecError> {
        let byte = self
            .data
            .get(self.pos / 8)
            .ok_or_else(|| self.truncated())?;
        let bit = (byte >> (7 - (self.pos % 8))) & 1;
        self.pos += 1;
        Ok(bit == 1)
    }

    /// `n` bits (at most 32) as an unsigned number.
    pub(crate) fn bits(&mut self, n: u32) -> Result<u32, CodecError> {
        debug_assert!(n <= 32, "bits() reads at most 32 bits");
        let mut v: u64 = 0;
        for _ in 0..n.min(32) {
            v = (v << 1) | u64::from(self.bit()?);
        }
        // At most 32 bits were shifted in.
        u32::try_from(v).map_err(|_| self.truncated())
    }

    /// `n` bits (at most 8) as a byte.
    pub(crate) fn u8(&mut self, n: u32) -> Result<u8, CodecError> {
        let v = self.bits(n.min(8))?;
        u8::try_from(v).map_err(|_| self.truncated())
    }

    /// Skips `n` bits.
    pub(crate) fn skip(&mut self, n: usize) -> Result<(), CodecError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.truncated())?;
        if end > self.data.len().saturating_mul(8) {
            return Err(self.truncated());
        }
        self.pos = end;
        Ok(())
    }

    /// An unsigned Exp-Golomb code, `ue(v)`.
    pub(crate) fn ue(&mut self) -> Result<u32, CodecError> {
        let mut zeros = 0;
        while !self.bit()? {
            zeros += 1;
            if zeros > MAX_EXP_GOLOMB_ZEROS {
                return Err(CodecError::Malformed { what: self.what });
            }
        }
        let rest = u64::from(self.bits(zeros)?);
        let v = (1u64 << zeros) - 1 + rest;
        u32::try_from(v).map_err(|_| CodecError::Malformed { what: self.what })
    }

    /// A signed Exp-Golomb code, `se(v)`.
    pub(crate) fn se(&mut self) -> Result<i32, CodecError> {
        let k = i64::from(self.ue()?);
        let v = if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) };
        i32::try_from(v).map_err(|_| CodecError::Malformed { what: self.what })
    }

    /// A `ue(v)` that must not exceed `max`.
    pub(crate) fn ue_max(&mut self, max: u32) -> Result<u32, CodecError> {
        let v = self.ue()?;
        if v > max {
            return Err(CodecError::Malformed { what: self.what });
        }
        Ok(v)
    }
}

/// The RBSP of a NAL unit: its payload without the `emulation_prevention_three_byte`s
/// (every `00 00 03` becomes `00 00`). The caller passes the NAL unit with its header;
/// the header is kept, so offsets match the specification's syntax tables.
pub(crate) fn rbsp(nal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nal.len());
    let mut zeros = 0usize;
    for &b in nal {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_golomb_values() {
        // 1 | 010 | 011 | 00100 | 00101 -> 0, 1, 2, 3, 4
        let data = [0b1010_0110, 0b0100_0010, 0b1000_0000];
        let mut r = BitReader::new(&data, "test");
        assert_eq!(r.ue(), Ok(0));
        assert_eq!(r.ue(), Ok(1));
        assert_eq!(r.ue(), Ok(2));
        assert_eq!(r.ue(), Ok(3));
        let mut r = BitReader::new(&data, "test");
        assert_eq!(r.se(), Ok(0));
        assert_eq!(r.se(), Ok(1));
        assert_eq!(r.se(), Ok(-1));
        assert_eq!(r.se(), Ok(2));
    }

    #[test]
    fn exp_golomb_rejects_long_prefix_and_truncation() {
        let zeros = [0u8; 8];
        assert!(BitReader::new(&zeros, "t").ue().is_err());
        assert!(BitReader::new(&[0x00, 0x01], "t").ue().is_err());
        assert!(BitReader::new(&[], "t").bit().is_err());
    }

    #[test]
    fn rbsp_drops_emulation_prevention() {
        assert_eq!(rbsp(&[0, 0, 3, 1, 0, 0, 3]), vec![0, 0, 1, 0, 0]);
        assert_eq!(rbsp(&[0, 0, 3, 0, 0, 3, 0]), vec![0, 0, 0, 0, 0]);
        assert_eq!(rbsp(&[0, 3, 0]), vec![0, 3, 0]);
    }
}
