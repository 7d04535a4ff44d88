//! SDP offers (WHEP bodies): answered or refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_webrtc::{Offered, Peer, PeerConfig, Role, VideoCodec};
use std::time::Instant;

fuzz_target!(|data: &[u8]| {
    let Ok(offer) = std::str::from_utf8(data) else {
        return;
    };
    let config = PeerConfig {
        candidates: vec!["127.0.0.1:8189".parse().expect("an address")],
        tcp_candidates: vec!["127.0.0.1:8189".parse().expect("an address")],
    };
    for video in [Some(VideoCodec::H264), Some(VideoCodec::H265), None] {
        let role = Role::Play(Offered { video, opus: true });
        let _ = Peer::answer(offer, role, &config, Instant::now());
    }
    let _ = Peer::answer(offer, Role::Publish, &config, Instant::now());
});
