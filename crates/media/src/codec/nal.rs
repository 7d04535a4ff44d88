//! Length-prefixed NAL units (the FLV/MP4 form of H.264 and H.265 payloads).
//!
//! Why: converting a frame to Annex-B (MPEG-TS) or RTP must not copy NAL payloads;
//! [`nal_units`] yields each unit as a zero-copy slice of the frame payload.

use super::CodecError;
use bytes::Bytes;

/// H.264 `nal_unit_type` of an IDR slice.
pub const H264_NAL_IDR: u8 = 5;
/// H.264 `nal_unit_type` of an SEI message.
pub const H264_NAL_SEI: u8 = 6;
/// H.264 `nal_unit_type` of a sequence parameter set.
pub const H264_NAL_SPS: u8 = 7;
/// H.264 `nal_unit_type` of a picture parameter set.
pub const H264_NAL_PPS: u8 = 8;
/// H.264 `nal_unit_type` of an access unit delimiter.
pub const H264_NAL_AUD: u8 = 9;
/// H.265 `nal_unit_type` of a video parameter set.
pub const H265_NAL_VPS: u8 = 32;
/// H.265 `nal_unit_type` of a sequence parameter set.
pub const H265_NAL_SPS: u8 = 33;
/// H.265 `nal_unit_type` of a picture parameter set.
pub const H265_NAL_PPS: u8 = 34;
/// H.265 `nal_unit_type` of an access unit delimiter.
pub const H265_NAL_AUD: u8 = 35;
/// H.265 `nal_unit_type` of a prefix SEI message.
pub const H265_NAL_SEI_PREFIX: u8 = 39;

/// The `nal_unit_type` of an H.264 NAL unit (low 5 bits of its first byte).
pub fn h264_nal_type(nal: &[u8]) -> Option<u8> {
    nal.first().map(|b| b & 0x1f)
}

/// The `nal_unit_type` of an H.265 NAL unit (bits 1..7 of its first byte).
pub fn h265_nal_type(nal: &[u8]) -> Option<u8> {
    nal.first().map(|b| (b >> 1) & 0x3f)
}

/// An H.264 NAL unit type a decoder can start from (IDR).
pub fn h264_is_keyframe_nal(nal_type: u8) -> bool {
    nal_type == H264_NAL_IDR
}

/// An H.265 NAL unit type a decoder can start from (IRAP: BLA, IDR, CRA; 16..=23).
pub fn h265_is_keyframe_nal(nal_type: u8) -> bool {
    (16..=23).contains(&nal_type)
}

/// Iterates over the NAL units of a length-prefixed payload, as zero-copy slices.
///
/// `length_size` is the size of each big-endian length prefix (1 to 4; from the
/// `avcC`/`hvcC` record, 4 in Sluice's own frames). Zero-length units are skipped.
/// A length prefix that runs past the payload, or an invalid `length_size`, yields
/// one error and then the iterator ends.
pub fn nal_units(payload: &Bytes, length_size: u8) -> NalUnits {
    NalUnits {
        payload: payload.clone(),
        pos: 0,
        length_size,
        failed: false,
    }
}

/// The iterator returned by [`nal_units`].
#[derive(Debug, Clone)]
pub struct NalUnits {
    payload: Bytes,
    pos: usize,
    length_size: u8,
    failed: bool,
}

impl NalUnits {
    fn fail(&mut self, e: CodecError) -> Option<Result<Bytes, CodecError>> {
        self.failed = true;
        Some(Err(e))
    }
}

impl Iterator for NalUnits {
    type Item = Result<Bytes, CodecError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if !(1..=4).contains(&self.length_size) {
            return self.fail(CodecError::Malformed {
                what: "NAL length size",
            });
        }
        loop {
            if self.pos >= self.payload.len() {
                return None;
            }
            let size = usize::from(self.length_size);
            let Some(prefix) = self
                .pos
                .checked_add(size)
                .and_then(|end| self.payload.get(self.pos..end))
            else {
                return self.fail(CodecError::Truncated {
                    what: "NAL length prefix",
                });
            };
            let len = prefix
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            let start = self.pos + size;
            let Some(end) = start
                .checked_add(len)
                .filter(|&end| end <= self.payload.len())
            else {
                return self.fail(CodecError::Truncated { what: "NAL unit" });
            };
            self.pos = end;
            if len > 0 {
                return Some(Ok(self.payload.slice(start..end)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_without_copying_and_skips_empty_units() {
        let payload = Bytes::from_static(&[0, 0, 0, 2, 0x65, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0x41]);
        let units: Vec<_> = nal_units(&payload, 4).collect();
        assert_eq!(
            units,
            vec![
                Ok(Bytes::from_static(&[0x65, 1])),
                Ok(Bytes::from_static(&[0x41]))
            ]
        );
        let first = units[0].as_ref().map(|b| b.as_ptr()).ok();
        assert_eq!(first, Some(payload[4..].as_ptr()));
    }

    #[test]
    fn truncated_unit_is_one_error() {
        let payload = Bytes::from_static(&[0, 5, 1, 2]);
        let units: Vec<_> = nal_units(&payload, 2).collect();
        assert_eq!(units.len(), 1);
        assert!(units[0].is_err());
        assert_eq!(nal_units(&payload, 0).count(), 1);
        assert_eq!(nal_units(&Bytes::new(), 4).count(), 0);
    }

    #[test]
    fn nal_types() {
        assert_eq!(h264_nal_type(&[0x67]), Some(H264_NAL_SPS));
        assert_eq!(h265_nal_type(&[0x42, 0x01]), Some(H265_NAL_SPS));
        assert!(h265_is_keyframe_nal(19));
        assert!(h264_is_keyframe_nal(5));
        assert_eq!(h264_nal_type(&[]), None);
    }
}
