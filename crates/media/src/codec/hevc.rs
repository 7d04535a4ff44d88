//! H.265: the `hvcC` record (ISO/IEC 14496-15 §8.3.3.1) and the SPS fields we need.
//!
//! Why: the `hvcC` record is the H.265 sequence header of FLV/Enhanced RTMP and MP4;
//! RTSP and WebRTC deliver bare VPS/SPS/PPS instead, so we build the record from them.

use super::bits::{rbsp, BitReader};
use super::nal::{h265_nal_type, H265_NAL_PPS, H265_NAL_SPS, H265_NAL_VPS};
use super::{be_u16, byte, read_parameter_sets, write_parameter_set, CodecError};
use bytes::Bytes;

/// Bytes before the first NAL unit array of an `hvcC` record (`numOfArrays` included).
const HVCC_FIXED_LEN: usize = 23;

/// An H.265 decoder configuration: the `hvcC` record and what Sluice reads from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HevcConfig {
    /// The `HEVCDecoderConfigurationRecord`, byte for byte as received or built.
    pub record: Bytes,
    /// Size in bytes of the NAL unit length prefixes of frames (1, 2 or 4).
    pub nal_length_size: u8,
    /// Video parameter sets, NAL header included, as slices of `record`.
    pub vps: Vec<Bytes>,
    /// Sequence parameter sets, NAL header included, as slices of `record`.
    pub sps: Vec<Bytes>,
    /// Picture parameter sets, NAL header included, as slices of `record`.
    pub pps: Vec<Bytes>,
    /// Displayed width in pixels (after the conformance window); 0 if the SPS could not be read.
    pub width: u32,
    /// Displayed height in pixels (after the conformance window); 0 if the SPS could not be read.
    pub height: u32,
}

impl HevcConfig {
    /// Parses an `hvcC` record. Arrays of other NAL unit types (SEI) are skipped but
    /// kept in `record`.
    pub fn parse(record: Bytes) -> Result<Self, CodecError> {
        const WHAT: &str = "hvcC";
        let version = byte(&record, 0, WHAT)?;
        // Version 0 was written by some early muxers with the same layout.
        if version > 1 {
            return Err(CodecError::Malformed {
                what: "hvcC version",
            });
        }
        let nal_length_size = (byte(&record, 21, WHAT)? & 0x03) + 1;
        let num_arrays = byte(&record, 22, WHAT)?;
        let mut pos = HVCC_FIXED_LEN;
        let (mut vps, mut sps, mut pps) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..num_arrays {
            let nal_type = byte(&record, pos, "hvcC array")? & 0x3f;
            let count = usize::from(be_u16(&record, pos + 1, "hvcC array")?);
            pos += 3;
            let sets = read_parameter_sets(&record, &mut pos, count, "hvcC NAL unit")?;
            match nal_type {
                H265_NAL_VPS => vps.extend(sets),
                H265_NAL_SPS => sps.extend(sets),
                H265_NAL_PPS => pps.extend(sets),
                _ => {}
            }
        }
        let (width, height) = sps
            .first()
            .and_then(|s| Sps::parse(s).ok())
            .map_or((0, 0), |s| (s.width, s.height));
        Ok(HevcConfig {
            record,
            nal_length_size,
            vps,
            sps,
            pps,
            width,
            height,
        })
    }

    /// Builds the `hvcC` record for the given parameter sets (NAL header included, no
    /// start code), with 4-byte NAL lengths. Profile, tier, level, chroma format and
    /// bit depths come from the first SPS, which must be readable.
    pub fn from_parameter_sets(
        vps: &[Bytes],
        sps: &[Bytes],
        pps: &[Bytes],
    ) -> Result<Self, CodecError> {
        if vps.is_empty() {
            return Err(CodecError::Missing { what: "VPS" });
        }
        if pps.is_empty() {
            return Err(CodecError::Missing { what: "PPS" });
        }
        let first = sps.first().ok_or(CodecError::Missing { what: "SPS" })?;
        let s = Sps::parse(first)?;
        let mut out = Vec::with_capacity(64);
        out.push(1);
        out.extend_from_slice(&s.profile_tier_level);
        out.extend_from_slice(&[0xf0, 0x00]); // min_spatial_segmentation_idc = 0
        out.push(0xfc); // parallelismType = 0 (unknown)
        out.push(0xfc | s.chroma_format_idc);
        out.push(0xf8 | s.bit_depth_luma_minus8);
        out.push(0xf8 | s.bit_depth_chroma_minus8);
        out.extend_from_slice(&[0, 0]); // avgFrameRate unknown
        let nested = if s.temporal_id_nesting { 0x04 } else { 0 };
        out.push(((s.max_sub_layers_minus1 + 1) << 3) | nested | 3);
        out.push(3); // numOfArrays
        for (nal_type, sets) in [
            (H265_NAL_VPS, vps),
            (H265_NAL_SPS, sps),
            (H265_NAL_PPS, pps),
        ] {
            let count = u16::try_from(sets.len()).map_err(|_| CodecError::TooLarge {
                what: "parameter set count",
                len: sets.len(),
                limit: usize::from(u16::MAX),
            })?;
            out.push(0x80 | nal_type); // array_completeness = 1
            out.extend_from_slice(&count.to_be_bytes());
            for set in sets {
                if h265_nal_type(set) != Some(nal_type) {
                    return Err(CodecError::Malformed {
                        what: "parameter set NAL type",
                    });
                }
                write_parameter_set(&mut out, set, "parameter set")?;
            }
        }
        Self::parse(Bytes::from(out))
    }
}

/// The fields of an H.265 sequence parameter set that Sluice uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sps {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) max_sub_layers_minus1: u8,
    pub(crate) temporal_id_nesting: bool,
    /// The 12 bytes of the general profile, tier and level, as `hvcC` carries them.
    pub(crate) profile_tier_level: [u8; 12],
    pub(crate) chroma_format_idc: u8,
    pub(crate) bit_depth_luma_minus8: u8,
    pub(crate) bit_depth_chroma_minus8: u8,
}

impl Sps {
    /// Parses an SPS NAL unit (2-byte header included) up to the bit depths
    /// (ITU-T H.265 §7.3.2.2.1).
    pub(crate) fn parse(nal: &[u8]) -> Result<Self, CodecError> {
        const WHAT: &str = "H.265 SPS";
        let data = rbsp(nal);
        let mut r = BitReader::new(&data, WHAT);
        r.skip(16)?; // NAL header
        r.skip(4)?; // sps_video_parameter_set_id
        let max_sub_layers_minus1 = r.u8(3)?;
        if max_sub_layers_minus1 > 6 {
            return Err(CodecError::Malformed {
                what: "sps_max_sub_layers_minus1",
            });
        }
        let temporal_id_nesting = r.bit()?;
        let mut profile_tier_level = [0u8; 12];
        for b in &mut profile_tier_level {
            *b = r.u8(8)?;
        }
        let mut sub_profile = [false; 7];
        let mut sub_level = [false; 7];
        let sub_layers = usize::from(max_sub_layers_minus1);
        for (p, l) in sub_profile.iter_mut().zip(&mut sub_level).take(sub_layers) {
            *p = r.bit()?;
            *l = r.bit()?;
        }
        if max_sub_layers_minus1 > 0 {
            r.skip(2 * (8 - usize::from(max_sub_layers_minus1)))?; // reserved_zero_2bits
        }
        for (&p, &l) in sub_profile.iter().zip(&sub_level).take(sub_layers) {
            if p {
                r.skip(88)?;
            }
            if l {
                r.skip(8)?;
            }
        }
        r.ue_max(15)?; // sps_seq_parameter_set_id
        let chroma_format_idc = r.ue_max(3)? as u8;
        let mut separate_colour_plane = false;
        if chroma_format_idc == 3 {
            separate_colour_plane = r.bit()?;
        }
        let pic_width = u64::from(r.ue()?);
        let pic_height = u64::from(r.ue()?);
        let (mut left, mut right, mut top, mut bottom) = (0u64, 0u64, 0u64, 0u64);
        if r.bit()? {
            left = r.ue()?.into();
            right = r.ue()?.into();
            top = r.ue()?.into();
            bottom = r.ue()?.into();
        }
        let bit_depth_luma_minus8 = r.ue_max(8)? as u8;
        let bit_depth_chroma_minus8 = r.ue_max(8)? as u8;
        let (sub_width, sub_height) = match (separate_colour_plane, chroma_format_idc) {
            (false, 1) => (2, 2),
            (false, 2) => (2, 1),
            _ => (1, 1),
        };
        let malformed = CodecError::Malformed {
            what: "H.265 SPS size",
        };
        let width = pic_width
            .checked_sub((left + right) * sub_width)
            .ok_or(malformed.clone())?;
        let height = pic_height
            .checked_sub((top + bottom) * sub_height)
            .ok_or(malformed.clone())?;
        Ok(Sps {
            width: u32::try_from(width).map_err(|_| malformed.clone())?,
            height: u32::try_from(height).map_err(|_| malformed)?,
            max_sub_layers_minus1,
            temporal_id_nesting,
            profile_tier_level,
            chroma_format_idc,
            bit_depth_luma_minus8,
            bit_depth_chroma_minus8,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x265, Main profile, 1920x1080 (1088 coded, conformance window of 8 rows).
    const SPS_1080P: &[u8] = &[
        0x42, 0x01, 0x01, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x90, 0x00, 0x00, 0x03, 0x00, 0x00,
        0x03, 0x00, 0x78, 0xa0, 0x03, 0xc0, 0x80, 0x11, 0x07, 0xcb, 0x96, 0x56, 0x54, 0xa4, 0xc2,
        0xf0, 0x16, 0x80, 0x80, 0x00, 0x00, 0x03, 0x00, 0x80, 0x00, 0x00, 0x0c, 0x84,
    ];
    const VPS_1080P: &[u8] = &[
        0x40, 0x01, 0x0c, 0x01, 0xff, 0xff, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x90, 0x00, 0x00,
        0x03, 0x00, 0x00, 0x03, 0x00, 0x78, 0x95, 0x94, 0x09,
    ];
    const PPS_1080P: &[u8] = &[0x44, 0x01, 0xc0, 0x73, 0xc1, 0x89];

    #[test]
    fn sps_size_applies_conformance_window() {
        let s = Sps::parse(SPS_1080P);
        assert_eq!(s.map(|s| (s.width, s.height)), Ok((1920, 1080)));
    }

    #[test]
    fn built_record_round_trips() {
        let (v, s, p) = (
            Bytes::from_static(VPS_1080P),
            Bytes::from_static(SPS_1080P),
            Bytes::from_static(PPS_1080P),
        );
        let c = HevcConfig::from_parameter_sets(
            std::slice::from_ref(&v),
            std::slice::from_ref(&s),
            std::slice::from_ref(&p),
        );
        let Ok(c) = c else {
            panic!("build failed: {c:?}")
        };
        assert_eq!((c.vps, c.sps, c.pps), (vec![v], vec![s], vec![p]));
        assert_eq!((c.width, c.height, c.nal_length_size), (1920, 1080, 4));
        // general_profile_space/tier/profile_idc = Main, level 4.0 (120).
        assert_eq!(c.record[1], 0x01);
        assert_eq!(c.record[12], 120);
    }

    #[test]
    fn truncated_sps_is_an_error_or_the_full_answer() {
        // The fields we read end before the VUI, so long prefixes still parse.
        for n in 0..SPS_1080P.len() {
            if let Ok(s) = Sps::parse(&SPS_1080P[..n]) {
                assert_eq!((s.width, s.height), (1920, 1080), "prefix {n}");
                assert!(n > 8, "prefix {n}");
            }
        }
    }
}
