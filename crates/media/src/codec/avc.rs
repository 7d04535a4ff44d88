//! H.264: the `avcC` record (ISO/IEC 14496-15 §5.3.3.1) and the SPS fields we need.
//!
//! Why: the `avcC` record is the H.264 sequence header of FLV/RTMP and MP4; RTSP and
//! WebRTC deliver bare SPS/PPS instead, so we build the record from them too.

use super::bits::{rbsp, BitReader};
use super::{byte, read_parameter_sets, write_parameter_set, CodecError};
use bytes::Bytes;

/// Most SPS an `avcC` can list (a 5-bit count).
const MAX_SPS: usize = 31;
/// Most PPS an `avcC` can list (an 8-bit count).
const MAX_PPS: usize = 255;

/// An H.264 decoder configuration: the `avcC` record and what Sluice reads from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvcConfig {
    /// The `AVCDecoderConfigurationRecord`, byte for byte as received or built.
    pub record: Bytes,
    /// `AVCProfileIndication` (66 baseline, 77 main, 100 high, ...).
    pub profile: u8,
    /// `profile_compatibility` (the constraint flags byte of the SPS).
    pub compatibility: u8,
    /// `AVCLevelIndication` (31 for level 3.1, ...).
    pub level: u8,
    /// Size in bytes of the NAL unit length prefixes of frames (1, 2 or 4).
    pub nal_length_size: u8,
    /// Sequence parameter sets, NAL header included, as slices of `record`.
    pub sps: Vec<Bytes>,
    /// Picture parameter sets, NAL header included, as slices of `record`.
    pub pps: Vec<Bytes>,
    /// Displayed width in pixels (after cropping); 0 if the SPS could not be read.
    pub width: u32,
    /// Displayed height in pixels (after cropping); 0 if the SPS could not be read.
    pub height: u32,
}

impl AvcConfig {
    /// Parses an `avcC` record. Trailing bytes (the high-profile extension) are kept in
    /// `record` and otherwise ignored.
    pub fn parse(record: Bytes) -> Result<Self, CodecError> {
        const WHAT: &str = "avcC";
        let version = byte(&record, 0, WHAT)?;
        if version != 1 {
            return Err(CodecError::Malformed {
                what: "avcC version",
            });
        }
        let profile = byte(&record, 1, WHAT)?;
        let compatibility = byte(&record, 2, WHAT)?;
        let level = byte(&record, 3, WHAT)?;
        let nal_length_size = (byte(&record, 4, WHAT)? & 0x03) + 1;
        let num_sps = usize::from(byte(&record, 5, WHAT)? & 0x1f);
        let mut pos = 6;
        let sps = read_parameter_sets(&record, &mut pos, num_sps, "avcC SPS")?;
        let num_pps = usize::from(byte(&record, pos, WHAT)?);
        pos += 1;
        let pps = read_parameter_sets(&record, &mut pos, num_pps, "avcC PPS")?;
        let (width, height) = sps
            .first()
            .and_then(|s| Sps::parse(s).ok())
            .map_or((0, 0), |s| (s.width, s.height));
        Ok(AvcConfig {
            record,
            profile,
            compatibility,
            level,
            nal_length_size,
            sps,
            pps,
            width,
            height,
        })
    }

    /// Builds the `avcC` record for the given parameter sets (NAL header included, no
    /// start code), with 4-byte NAL lengths. Profile and level come from the first SPS.
    /// For the high profiles, the chroma/bit-depth extension is written when the SPS
    /// can be read.
    pub fn from_parameter_sets(sps: &[Bytes], pps: &[Bytes]) -> Result<Self, CodecError> {
        let first = sps.first().ok_or(CodecError::Missing { what: "SPS" })?;
        if pps.is_empty() {
            return Err(CodecError::Missing { what: "PPS" });
        }
        let Some(&[_, profile, compatibility, level]) = first.get(..4) else {
            return Err(CodecError::Truncated { what: "SPS" });
        };
        if sps.len() > MAX_SPS {
            return Err(CodecError::TooLarge {
                what: "SPS count",
                len: sps.len(),
                limit: MAX_SPS,
            });
        }
        if pps.len() > MAX_PPS {
            return Err(CodecError::TooLarge {
                what: "PPS count",
                len: pps.len(),
                limit: MAX_PPS,
            });
        }
        let mut out = vec![1, profile, compatibility, level, 0xfc | 3];
        // Both counts were bounded above.
        out.push(0xe0 | (sps.len() as u8));
        for s in sps {
            write_parameter_set(&mut out, s, "SPS")?;
        }
        out.push(pps.len() as u8);
        for p in pps {
            write_parameter_set(&mut out, p, "PPS")?;
        }
        if matches!(profile, 100 | 110 | 122 | 144) {
            if let Ok(s) = Sps::parse(first) {
                out.push(0xfc | s.chroma_format_idc);
                out.push(0xf8 | s.bit_depth_luma_minus8);
                out.push(0xf8 | s.bit_depth_chroma_minus8);
                out.push(0); // numOfSequenceParameterSetExt
            }
        }
        Self::parse(Bytes::from(out))
    }
}

/// The fields of an H.264 sequence parameter set that Sluice uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sps {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) chroma_format_idc: u8,
    pub(crate) bit_depth_luma_minus8: u8,
    pub(crate) bit_depth_chroma_minus8: u8,
}

impl Sps {
    /// Parses an SPS NAL unit (header byte included) up to the frame cropping fields
    /// (ITU-T H.264 §7.3.2.1.1).
    pub(crate) fn parse(nal: &[u8]) -> Result<Self, CodecError> {
        const WHAT: &str = "H.264 SPS";
        let data = rbsp(nal);
        let mut r = BitReader::new(&data, WHAT);
        r.skip(8)?; // NAL header
        let profile_idc = r.u8(8)?;
        r.skip(16)?; // constraint flags, level_idc
        r.ue_max(31)?; // seq_parameter_set_id
        let mut chroma_format_idc = 1;
        let mut separate_colour_plane = false;
        let mut bit_depth_luma_minus8 = 0;
        let mut bit_depth_chroma_minus8 = 0;
        if matches!(
            profile_idc,
            100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
        ) {
            chroma_format_idc = r.ue_max(3)? as u8;
            if chroma_format_idc == 3 {
                separate_colour_plane = r.bit()?;
            }
            bit_depth_luma_minus8 = r.ue_max(6)? as u8;
            bit_depth_chroma_minus8 = r.ue_max(6)? as u8;
            r.skip(1)?; // qpprime_y_zero_transform_bypass_flag
            if r.bit()? {
                // seq_scaling_matrix_present_flag
                let lists = if chroma_format_idc == 3 { 12 } else { 8 };
                for i in 0..lists {
                    if r.bit()? {
                        skip_scaling_list(&mut r, if i < 6 { 16 } else { 64 })?;
                    }
                }
            }
        }
        r.ue_max(12)?; // log2_max_frame_num_minus4
        match r.ue_max(2)? {
            0 => {
                r.ue_max(12)?; // log2_max_pic_order_cnt_lsb_minus4
            }
            1 => {
                r.skip(1)?; // delta_pic_order_always_zero_flag
                r.se()?; // offset_for_non_ref_pic
                r.se()?; // offset_for_top_to_bottom_field
                let cycle = r.ue_max(255)?;
                for _ in 0..cycle {
                    r.se()?;
                }
            }
            _ => {}
        }
        r.ue()?; // max_num_ref_frames
        r.skip(1)?; // gaps_in_frame_num_value_allowed_flag
        let width_mbs = u64::from(r.ue()?) + 1;
        let height_map_units = u64::from(r.ue()?) + 1;
        let frame_mbs_only = r.bit()?;
        if !frame_mbs_only {
            r.skip(1)?; // mb_adaptive_frame_field_flag
        }
        r.skip(1)?; // direct_8x8_inference_flag
        let (mut crop_l, mut crop_r, mut crop_t, mut crop_b) = (0u64, 0u64, 0u64, 0u64);
        if r.bit()? {
            crop_l = r.ue()?.into();
            crop_r = r.ue()?.into();
            crop_t = r.ue()?.into();
            crop_b = r.ue()?.into();
        }
        let field_factor: u64 = if frame_mbs_only { 1 } else { 2 };
        let chroma_array_type = if separate_colour_plane {
            0
        } else {
            chroma_format_idc
        };
        let (crop_unit_x, crop_unit_y) = match chroma_array_type {
            0 => (1, field_factor),
            1 => (2, 2 * field_factor),
            2 => (2, field_factor),
            _ => (1, field_factor),
        };
        let malformed = CodecError::Malformed {
            what: "H.264 SPS size",
        };
        let width = (width_mbs * 16)
            .checked_sub((crop_l + crop_r) * crop_unit_x)
            .ok_or(malformed.clone())?;
        let height = (field_factor * height_map_units * 16)
            .checked_sub((crop_t + crop_b) * crop_unit_y)
            .ok_or(malformed.clone())?;
        Ok(Sps {
            width: u32::try_from(width).map_err(|_| malformed.clone())?,
            height: u32::try_from(height).map_err(|_| malformed)?,
            chroma_format_idc,
            bit_depth_luma_minus8,
            bit_depth_chroma_minus8,
        })
    }
}

/// Skips a `scaling_list()` of `size` entries (§7.3.2.1.1.1).
fn skip_scaling_list(r: &mut BitReader<'_>, size: usize) -> Result<(), CodecError> {
    let mut last: i64 = 8;
    let mut next: i64 = 8;
    for _ in 0..size {
        if next != 0 {
            let delta = i64::from(r.se()?);
            next = (last + delta).rem_euclid(256);
        }
        if next != 0 {
            last = next;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x264, High profile, 1280x720 (no cropping).
    const SPS_720P: &[u8] = &[
        0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00, 0x03,
        0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0x20, 0xf1, 0x83, 0x19, 0x60,
    ];
    /// x264, Constrained Baseline, 1920x1080 (1088 coded, 8 rows cropped).
    const SPS_1080P: &[u8] = &[
        0x67, 0x42, 0xc0, 0x28, 0xda, 0x01, 0xe0, 0x08, 0x9f, 0x97, 0x01, 0x10, 0x00, 0x00, 0x03,
        0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0x20, 0xf1, 0x83, 0x2a,
    ];

    #[test]
    fn sps_sizes() {
        let s = Sps::parse(SPS_720P).map(|s| (s.width, s.height, s.chroma_format_idc));
        assert_eq!(s, Ok((1280, 720, 1)));
        let s = Sps::parse(SPS_1080P).map(|s| (s.width, s.height));
        assert_eq!(s, Ok((1920, 1080)));
    }

    #[test]
    fn truncated_sps_is_an_error_or_the_full_answer() {
        // The fields we read end before the VUI, so long prefixes still parse.
        for n in 0..SPS_720P.len() {
            if let Ok(s) = Sps::parse(&SPS_720P[..n]) {
                assert_eq!((s.width, s.height), (1280, 720), "prefix {n}");
                assert!(n > 8, "prefix {n}");
            }
        }
    }

    #[test]
    fn built_record_round_trips() {
        let sps = Bytes::from_static(SPS_720P);
        let pps = Bytes::from_static(&[0x68, 0xef, 0x8f, 0xcb]);
        let c =
            AvcConfig::from_parameter_sets(std::slice::from_ref(&sps), std::slice::from_ref(&pps));
        let Ok(c) = c else {
            panic!("build failed: {c:?}")
        };
        assert_eq!((c.profile, c.compatibility, c.level), (100, 0, 31));
        assert_eq!(c.nal_length_size, 4);
        assert_eq!((c.sps, c.pps), (vec![sps], vec![pps]));
        assert_eq!((c.width, c.height), (1280, 720));
        // High profile: the 4-byte extension follows the PPS.
        assert_eq!(&c.record[c.record.len() - 4..], &[0xfd, 0xf8, 0xf8, 0x00]);
    }

    #[test]
    fn unreadable_sps_gives_zero_size() {
        let record = Bytes::from_static(&[1, 100, 0, 31, 0xff, 0xe1, 0, 2, 0x67, 0x64, 0]);
        let c = AvcConfig::parse(record).map(|c| (c.width, c.height, c.sps.len(), c.pps.len()));
        assert_eq!(c, Ok((0, 0, 1, 0)));
    }
}
