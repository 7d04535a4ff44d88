//! Decoder configurations parsed from records real encoders wrote.
//!
//! `data/x264_720p.avcC` and `data/x265_1080p.hvcC` are the `avcC`/`hvcC` boxes ffmpeg
//! wrote into MP4 files encoded by x264 (High, 1280x720) and x265 (Main, 1920x1080,
//! which also carries an SEI array with x265's settings string).

use bytes::Bytes;
use sluice_media::codec::{
    h264_nal_type, h265_nal_type, nal_units, AacConfig, AvcConfig, CodecError, HevcConfig,
    OpusConfig, H264_NAL_PPS, H264_NAL_SPS, H265_NAL_PPS, H265_NAL_SPS, H265_NAL_VPS,
};

const AVCC_720P: &[u8] = include_bytes!("../data/x264_720p.avcC");
const HVCC_1080P: &[u8] = include_bytes!("../data/x265_1080p.hvcC");

#[test]
fn x264_720p_avcc() {
    let c = AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("valid avcC");
    assert_eq!((c.profile, c.compatibility, c.level), (100, 0, 31));
    assert_eq!(c.nal_length_size, 4);
    assert_eq!((c.width, c.height), (1280, 720));
    assert_eq!((c.sps.len(), c.pps.len()), (1, 1));
    assert_eq!(h264_nal_type(&c.sps[0]), Some(H264_NAL_SPS));
    assert_eq!(h264_nal_type(&c.pps[0]), Some(H264_NAL_PPS));
    assert_eq!(c.record, Bytes::from_static(AVCC_720P));
}

#[test]
fn avcc_rebuilt_from_its_parameter_sets_is_identical() {
    // x264's record has the high-profile extension, which we write too.
    let c = AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("valid avcC");
    let rebuilt = AvcConfig::from_parameter_sets(&c.sps, &c.pps).expect("builds");
    assert_eq!(rebuilt, c);
}

#[test]
fn x265_1080p_hvcc() {
    let c = HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("valid hvcC");
    assert_eq!(c.nal_length_size, 4);
    assert_eq!((c.width, c.height), (1920, 1080));
    assert_eq!((c.vps.len(), c.sps.len(), c.pps.len()), (1, 1, 1));
    assert_eq!(h265_nal_type(&c.vps[0]), Some(H265_NAL_VPS));
    assert_eq!(h265_nal_type(&c.sps[0]), Some(H265_NAL_SPS));
    assert_eq!(h265_nal_type(&c.pps[0]), Some(H265_NAL_PPS));
}

#[test]
fn hvcc_rebuilt_from_its_parameter_sets_keeps_profile_and_size() {
    let c = HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("valid hvcC");
    let rebuilt = HevcConfig::from_parameter_sets(&c.vps, &c.sps, &c.pps).expect("builds");
    assert_eq!((rebuilt.width, rebuilt.height), (1920, 1080));
    assert_eq!(
        (&rebuilt.vps, &rebuilt.sps, &rebuilt.pps),
        (&c.vps, &c.sps, &c.pps)
    );
    // Profile/tier/level, chroma format, bit depths and length size as x265 wrote them.
    assert_eq!(rebuilt.record[1..13], c.record[1..13]);
    assert_eq!(rebuilt.record[16..19], c.record[16..19]);
    assert_eq!(rebuilt.record[21] & 0x3f, c.record[21] & 0x3f);
}

#[test]
fn truncated_records_are_errors() {
    for n in 0..AVCC_720P.len() - 4 {
        let r = AvcConfig::parse(Bytes::copy_from_slice(&AVCC_720P[..n]));
        assert!(
            matches!(r, Err(CodecError::Truncated { .. })),
            "avcC prefix {n}: {r:?}"
        );
    }
    for n in 0..HVCC_1080P.len() {
        let r = HevcConfig::parse(Bytes::copy_from_slice(&HVCC_1080P[..n]));
        assert!(r.is_err(), "hvcC prefix {n}");
    }
}

#[test]
fn missing_parameter_sets_are_errors() {
    let c = AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("valid avcC");
    assert!(AvcConfig::from_parameter_sets(&[], &c.pps).is_err());
    assert!(AvcConfig::from_parameter_sets(&c.sps, &[]).is_err());
    let h = HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("valid hvcC");
    assert!(HevcConfig::from_parameter_sets(&[], &h.sps, &h.pps).is_err());
    // Parameter sets in the wrong slots.
    assert!(HevcConfig::from_parameter_sets(&h.vps, &h.sps, &h.vps).is_err());
}

#[test]
fn aac_configs() {
    let parse = |b: &'static [u8]| {
        AacConfig::parse(Bytes::from_static(b)).map(|c| (c.object_type, c.sample_rate, c.channels))
    };
    assert_eq!(parse(&[0x11, 0x90]), Ok((2, 48000, 2)), "LC 48 kHz stereo");
    assert_eq!(
        parse(&[0x12, 0x10]),
        Ok((2, 44100, 2)),
        "LC 44.1 kHz stereo"
    );
    assert_eq!(
        parse(&[0x17, 0x80, 0x2a, 0xf8, 0x10]),
        Ok((2, 22000, 2)),
        "explicit rate"
    );
    // Object type escape: 31 then 6 bits (32 + 10 = 42, USAC), 48 kHz, stereo.
    // 11111 001010 0011 0010 ...
    assert_eq!(
        parse(&[0xf9, 0x46, 0x40]),
        Ok((42, 48000, 2)),
        "object type escape"
    );
}

#[test]
fn adts_header_matches_ffmpeg() {
    // First ADTS header ffmpeg writes for a 371-byte LC 48 kHz stereo frame.
    let c = AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("valid ASC");
    let h = c.adts_header(371).expect("fits ADTS");
    assert_eq!(h, [0xff, 0xf1, 0x4c, 0x80, 0x2f, 0x5f, 0xfc]);
}

#[test]
fn opus_head() {
    let head = Bytes::from_static(&[
        b'O', b'p', b'u', b's', b'H', b'e', b'a', b'd', 1, 1, 0x38, 0x01, 0x44, 0xac, 0, 0, 0, 0, 0,
    ]);
    let c = OpusConfig::parse(head).expect("valid OpusHead");
    assert_eq!(
        (c.channels, c.pre_skip, c.input_sample_rate),
        (1, 312, 44100)
    );
    let d = OpusConfig::stereo_48k();
    assert_eq!(
        (d.channels, d.pre_skip, d.input_sample_rate),
        (2, 312, 48000)
    );
}

#[test]
fn nal_units_of_a_frame() {
    let payload = Bytes::from_static(&[0, 0, 0, 3, 0x09, 0x10, 0x00, 0, 0, 0, 2, 0x65, 0x88]);
    let types: Vec<_> = nal_units(&payload, 4)
        .map(|n| n.ok().and_then(|n| h264_nal_type(&n)))
        .collect();
    assert_eq!(types, vec![Some(9), Some(5)]);
}
