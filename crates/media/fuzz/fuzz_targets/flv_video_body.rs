//! Video tag bodies (RTMP video message payloads): legacy and Enhanced RTMP.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use sluice_media::flv::{parse_video, video_frame_header, write_video_config, VideoTag};
use sluice_media::{Track, TrackConfig};

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    match parse_video(&body) {
        // A configuration we parsed, we can write and read back the same.
        Ok(VideoTag::Config(track)) => {
            let mut out = BytesMut::new();
            write_video_config(&mut out, &track).expect("a video track");
            assert_eq!(parse_video(&out.freeze()), Ok(VideoTag::Config(track)));
        }
        // A frame's payload is a slice of the body, and reframing it keeps it intact.
        Ok(VideoTag::Frame { keyframe, data, .. }) => {
            assert!(data.len() < body.len());
            let vp9 = Track::new(TrackConfig::Vp9 {
                record: Bytes::new(),
            });
            let mut out = BytesMut::new();
            video_frame_header(&mut out, &vp9, keyframe, 0).expect("a video track");
            out.extend_from_slice(&data);
            match parse_video(&out.freeze()) {
                Ok(VideoTag::Frame {
                    keyframe: k,
                    data: d,
                    ..
                }) => {
                    assert_eq!((k, d), (keyframe, data));
                }
                other => panic!("reframed frame read back as {other:?}"),
            }
        }
        _ => {}
    }
});
