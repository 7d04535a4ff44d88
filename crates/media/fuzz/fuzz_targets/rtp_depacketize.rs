//! RTP packets into the depacketizers and the jitter buffer. The first byte picks the
//! codec and AU header layout; the rest is a list of packets, each behind a 1-byte length.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_media::rtp::{AacParams, JitterBuffer, RtpCodec, RtpDepacketizer, RtpPacket};

fuzz_target!(|data: &[u8]| {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let codec = match which % 6 {
        0 => RtpCodec::H264,
        1 => RtpCodec::H265,
        2 => RtpCodec::Aac,
        3 => RtpCodec::Opus,
        4 => RtpCodec::Pcma,
        _ => RtpCodec::Pcmu,
    };
    let params = if which & 0x80 != 0 {
        AacParams {
            size_length: 6,
            index_length: 2,
            index_delta_length: 2,
            cts_delta_length: 3,
            dts_delta_length: 3,
            ..AacParams::HBR
        }
    } else {
        AacParams::HBR
    };
    let Ok(mut direct) = RtpDepacketizer::new(codec, 90_000, params) else {
        return;
    };
    let Ok(mut ordered) = RtpDepacketizer::new(codec, 90_000, params) else {
        return;
    };
    let mut jitter = JitterBuffer::new(16, 4);
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (packet, tail) = tail.split_at(len);
        rest = tail;
        let _ = RtpPacket::parse(packet);
        let _ = direct.push(packet);
        while let Some(f) = direct.poll() {
            assert!(!f.payload.is_empty());
        }
        let _ = jitter.push(Bytes::copy_from_slice(packet));
        while let Some(p) = jitter.pop() {
            let _ = ordered.push(&p);
            while ordered.poll().is_some() {}
        }
    }
    jitter.skip_missing();
    while let Some(p) = jitter.pop() {
        let _ = ordered.push(&p);
    }
    direct.finish();
    ordered.finish();
    while direct.poll().is_some() {}
    while ordered.poll().is_some() {}
});
