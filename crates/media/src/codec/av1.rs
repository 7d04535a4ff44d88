//! AV1 open bitstream units (OBUs) and the `av1C` record, as far as transport needs.
//!
//! Why: an AV1 frame as FLV and MP4 carry it is a temporal unit in the low-overhead
//! bitstream format: OBUs, each with a header and (usually) a LEB128 size. RTP wants the
//! OBUs one by one without their sizes, without temporal delimiters, and a sequence
//! header in front of key frames; the `av1C` record carries that sequence header in
//! its `configOBUs`.
//!
//! # Invariants
//! - Every size is checked against the data before it is used; a LEB128 longer than
//!   8 bytes or above 2^32 - 1 (AV1 §4.10.5) is `Malformed`.
//! - An OBU without `obu_has_size_field` runs to the end of the data (ISOBMFF allows
//!   it for the last OBU of a sample).
//! - Nothing here allocates; after an error the iterator ends.

use super::CodecError;

/// `obu_type` of a sequence header.
pub const AV1_OBU_SEQUENCE_HEADER: u8 = 1;
/// `obu_type` of a temporal delimiter.
pub const AV1_OBU_TEMPORAL_DELIMITER: u8 = 2;
/// `obu_type` of a tile list (large scale tile decoding; never sent over RTP).
pub const AV1_OBU_TILE_LIST: u8 = 8;

/// Most bytes of a `leb128()` (AV1 §4.10.5 reads at most 8).
const MAX_LEB128_LEN: usize = 8;
/// `obu_has_size_field` in the first header byte.
const HAS_SIZE_FIELD: u8 = 0x02;
/// `obu_extension_flag` in the first header byte.
const EXTENSION_FLAG: u8 = 0x04;
/// `obu_forbidden_bit`.
const FORBIDDEN_BIT: u8 = 0x80;

/// Reads a `leb128()` at the start of `data`: its value and how many bytes it took.
pub fn read_leb128(data: &[u8]) -> Result<(u32, usize), CodecError> {
    let mut value: u64 = 0;
    for (i, &b) in data.iter().take(MAX_LEB128_LEN).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let value = u32::try_from(value).map_err(|_| CodecError::Malformed {
                what: "AV1 leb128 above 2^32 - 1",
            })?;
            return Ok((value, i + 1));
        }
    }
    if data.len() >= MAX_LEB128_LEN {
        Err(CodecError::Malformed {
            what: "AV1 leb128 longer than 8 bytes",
        })
    } else {
        Err(CodecError::Truncated { what: "AV1 leb128" })
    }
}

/// Bytes of the shortest `leb128()` of `value`.
pub fn leb128_len(value: usize) -> usize {
    let bits = usize::BITS - value.leading_zeros();
    (bits as usize).div_ceil(7).max(1)
}

/// Writes the shortest `leb128()` of `value` into `buf`; returns the bytes used.
pub fn write_leb128(value: usize, buf: &mut [u8; 10]) -> usize {
    let mut v = value;
    let mut n = 0;
    for slot in buf.iter_mut() {
        // The low 7 bits; the mask makes the cast exact.
        let low = (v & 0x7f) as u8;
        v >>= 7;
        n += 1;
        if v == 0 {
            *slot = low;
            break;
        }
        *slot = low | 0x80;
    }
    n
}

/// One OBU of a temporal unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Obu<'a> {
    /// `obu_type`.
    pub obu_type: u8,
    /// The OBU header as received: 1 byte, or 2 with the extension header.
    pub header: &'a [u8],
    /// The OBU payload, without the size field.
    pub payload: &'a [u8],
}

impl Obu<'_> {
    /// The header with `obu_has_size_field` cleared, as RTP sends it, and its length.
    pub fn header_without_size(&self) -> ([u8; 2], usize) {
        let b0 = self.header.first().copied().unwrap_or(0) & !HAS_SIZE_FIELD;
        let b1 = self.header.get(1).copied().unwrap_or(0);
        ([b0, b1], self.header.len())
    }
}

/// The OBUs of a low-overhead bitstream (a temporal unit, or `configOBUs`).
#[derive(Debug, Clone)]
pub struct Obus<'a> {
    rest: &'a [u8],
}

/// Iterates the OBUs of `data`.
pub fn av1_obus(data: &[u8]) -> Obus<'_> {
    Obus { rest: data }
}

impl<'a> Obus<'a> {
    fn parse(&mut self) -> Result<Obu<'a>, CodecError> {
        let data = self.rest;
        let &b0 = data.first().ok_or(CodecError::Truncated {
            what: "AV1 OBU header",
        })?;
        if b0 & FORBIDDEN_BIT != 0 {
            return Err(CodecError::Malformed {
                what: "AV1 OBU forbidden bit",
            });
        }
        let header_len = if b0 & EXTENSION_FLAG != 0 { 2 } else { 1 };
        let header = data.get(..header_len).ok_or(CodecError::Truncated {
            what: "AV1 OBU extension header",
        })?;
        let after = data.get(header_len..).unwrap_or_default();
        let (payload, rest) = if b0 & HAS_SIZE_FIELD != 0 {
            let (size, used) = read_leb128(after)?;
            let body = after.get(used..).unwrap_or_default();
            let size = usize::try_from(size).map_err(|_| CodecError::Truncated {
                what: "AV1 OBU payload",
            })?;
            body.split_at_checked(size).ok_or(CodecError::Truncated {
                what: "AV1 OBU payload",
            })?
        } else {
            (after, &[][..])
        };
        self.rest = rest;
        Ok(Obu {
            obu_type: (b0 >> 3) & 0x0f,
            header,
            payload,
        })
    }
}

impl<'a> Iterator for Obus<'a> {
    type Item = Result<Obu<'a>, CodecError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let obu = self.parse();
        if obu.is_err() {
            self.rest = &[];
        }
        Some(obu)
    }
}

/// The `configOBUs` of an `av1C` record (AV1-ISOBMFF §2.3): the bytes after its
/// 4-byte header, usually one sequence header OBU. `Malformed` unless the record
/// starts with `marker = 1, version = 1`.
pub fn av1c_config_obus(record: &[u8]) -> Result<&[u8], CodecError> {
    match record.split_first() {
        Some((0x81, rest)) => rest.get(3..).ok_or(CodecError::Truncated { what: "av1C" }),
        Some(_) => Err(CodecError::Malformed {
            what: "av1C marker or version",
        }),
        None => Err(CodecError::Truncated { what: "av1C" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb128_round_trips() {
        for v in [0usize, 1, 127, 128, 300, 16_383, 16_384, (1 << 32) - 1] {
            let mut buf = [0u8; 10];
            let n = write_leb128(v, &mut buf);
            assert_eq!(n, leb128_len(v), "{v}");
            assert_eq!(read_leb128(&buf[..n]), Ok((v as u32, n)));
        }
        // Padded encodings are valid too (AV1 allows them).
        assert_eq!(read_leb128(&[0x80, 0x80, 0x00]), Ok((0, 3)));
    }

    #[test]
    fn leb128_overflow_and_truncation() {
        assert!(matches!(
            read_leb128(&[0xff; 9]),
            Err(CodecError::Malformed { .. })
        ));
        // 2^35: fits 8 bytes but not 32 bits.
        assert!(matches!(
            read_leb128(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
            Err(CodecError::Malformed { .. })
        ));
        assert!(matches!(
            read_leb128(&[0x80, 0x80]),
            Err(CodecError::Truncated { .. })
        ));
        assert!(read_leb128(&[]).is_err());
    }

    #[test]
    fn obus_with_and_without_sizes() {
        // TD (size 0), SH with extension (size 2), then a frame OBU without size.
        let data = [0x12, 0x00, 0x0e, 0x28, 0x02, 0xaa, 0xbb, 0x30, 1, 2, 3];
        let obus: Vec<Obu<'_>> = av1_obus(&data).map(|o| o.expect("obu")).collect();
        assert_eq!(obus.len(), 3);
        assert_eq!(obus[0].obu_type, AV1_OBU_TEMPORAL_DELIMITER);
        assert_eq!(obus[1].obu_type, AV1_OBU_SEQUENCE_HEADER);
        assert_eq!(obus[1].header, &[0x0e, 0x28]);
        assert_eq!(obus[1].payload, &[0xaa, 0xbb]);
        assert_eq!(obus[1].header_without_size(), ([0x0c, 0x28], 2));
        assert_eq!(obus[2].obu_type, 6);
        assert_eq!(obus[2].payload, &[1, 2, 3]);
    }

    #[test]
    fn hostile_obus_end_in_an_error() {
        for data in [
            &[0x0a][..],                                                   // size field missing
            &[0x0a, 0x05, 1],                                              // size past the end
            &[0x0e],       // extension header missing
            &[0x8a, 0x00], // forbidden bit
            &[0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], // leb128 overflow
        ] {
            let mut it = av1_obus(data);
            assert!(matches!(it.next(), Some(Err(_))), "{data:?}");
            assert!(it.next().is_none());
        }
    }

    #[test]
    fn av1c_config_obus_follow_the_header() {
        assert_eq!(
            av1c_config_obus(&[0x81, 0, 0, 0, 0x0a, 0x00]),
            Ok(&[0x0a, 0x00][..])
        );
        assert_eq!(av1c_config_obus(&[0x81, 0, 0, 0]), Ok(&[][..]));
        assert!(av1c_config_obus(&[0x01, 0, 0, 0]).is_err());
        assert!(av1c_config_obus(&[0x81, 0]).is_err());
    }
}
