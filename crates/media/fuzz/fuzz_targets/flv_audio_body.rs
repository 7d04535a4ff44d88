//! Audio tag bodies (RTMP audio message payloads): legacy and Enhanced RTMP.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use sluice_media::flv::{parse_audio, write_audio_config, AudioTag};

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    if let Ok(AudioTag::Config(track)) = parse_audio(&body) {
        let mut out = BytesMut::new();
        assert_eq!(write_audio_config(&mut out, &track), Ok(true));
        assert_eq!(parse_audio(&out.freeze()), Ok(AudioTag::Config(track)));
    }
});
