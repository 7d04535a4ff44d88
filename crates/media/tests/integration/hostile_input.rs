//! Every parser takes arbitrary bytes and answers with a value or an error, never a
//! panic. Besides pure noise, inputs start with valid-looking prefixes so the fuzzing
//! reaches the deeper branches (sequence headers, ModEx, multitrack, SPS fields).

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_media::codec::{nal_units, AacConfig, AvcConfig, HevcConfig, OpusConfig};
use sluice_media::flv::{parse_audio, parse_video, TagReader, MAX_TAG_LEN};

const PREFIXES: &[&[u8]] = &[
    b"",
    b"\x17\x00\x00\x00\x00\x01",
    b"\x17\x00\x00\x00\x00\x01\x64\x00\x1f\xff\xe1\x00\x19\x67",
    b"\x1c\x00\x00\x00\x00\x01",
    b"\x27\x01",
    b"\x90hvc1\x01",
    b"\x90avc1\x01",
    b"\x91hvc1",
    b"\x93av01",
    b"\x97",
    b"\x96\x00hvc1\x00",
    b"\x96\x10hvc1",
    b"\xaf\x00",
    b"\xaf\x01",
    b"\x90OpusOpusHead",
    b"\x90mp4a",
    b"\x91.mp3\xff\xfb",
    b"\x97\x00",
    b"\x95\x00Opus\x00",
    b"\x2f\xff",
    b"OpusHead\x01",
    b"FLV\x01\x05\x00\x00\x00\x09",
];

fn input() -> impl Strategy<Value = Bytes> {
    (
        proptest::sample::select(PREFIXES),
        proptest::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(|(p, rest)| {
            let mut v = p.to_vec();
            v.extend(rest);
            Bytes::from(v)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn tag_bodies_never_panic(b in input()) {
        let _ = parse_video(&b);
        let _ = parse_audio(&b);
        // Every prefix too: truncation is the commonest damage.
        for n in 0..b.len().min(24) {
            let _ = parse_video(&b.slice(..n));
            let _ = parse_audio(&b.slice(..n));
        }
    }

    #[test]
    fn configs_never_panic(b in input()) {
        let _ = AvcConfig::parse(b.clone());
        let _ = HevcConfig::parse(b.clone());
        let _ = AacConfig::parse(b.clone());
        let _ = OpusConfig::parse(b.clone());
        if let Ok(c) = AacConfig::parse(b.clone()) {
            let _ = c.adts_header(b.len());
        }
        let sets = [b.clone()];
        let _ = AvcConfig::from_parameter_sets(&sets, &sets);
        let _ = HevcConfig::from_parameter_sets(&sets, &sets, &sets);
        for size in 0..=5 {
            for unit in nal_units(&b, size).flatten() {
                prop_assert!(!unit.is_empty());
            }
        }
    }

    #[test]
    fn configs_from_bytes_after_a_record_header_never_panic(
        rest in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        // Records whose parameter sets are noise, so the SPS readers see garbage.
        let mut avcc = vec![1, 100, 0, 31, 0xff, 0xe1];
        avcc.extend_from_slice(&u16::try_from(rest.len()).unwrap_or(0).to_be_bytes());
        avcc.extend_from_slice(&rest);
        avcc.push(0);
        let c = AvcConfig::parse(Bytes::from(avcc));
        prop_assert!(c.is_ok());
        let mut hvcc = vec![1u8; 22];
        hvcc.extend_from_slice(&[1, 0x21, 0, 1]);
        hvcc.extend_from_slice(&u16::try_from(rest.len() + 2).unwrap_or(0).to_be_bytes());
        hvcc.extend_from_slice(&[0x42, 0x01]);
        hvcc.extend_from_slice(&rest);
        let c = HevcConfig::parse(Bytes::from(hvcc));
        prop_assert!(c.is_ok());
    }

    #[test]
    fn tag_reader_never_panics(b in input(), cut in 1usize..64) {
        let mut reader = TagReader::new();
        let mut buf = BytesMut::new();
        for chunk in b.chunks(cut) {
            buf.extend_from_slice(chunk);
            while let Ok(Some(tag)) = reader.read(&mut buf) {
                prop_assert!(tag.body.len() <= MAX_TAG_LEN);
            }
        }
    }
}
