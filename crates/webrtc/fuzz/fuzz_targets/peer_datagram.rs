//! Datagrams from the network into an answered peer (STUN, DTLS, SRTP garbage): an
//! error for that datagram at most, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_webrtc::{Offered, Peer, PeerConfig, PeerOutput, Role, VideoCodec, Via};
use std::time::{Duration, Instant};

const OFFER: &str = include_str!("../offer.sdp");

fuzz_target!(|data: &[u8]| {
    let config = PeerConfig {
        candidates: vec!["127.0.0.1:8189".parse().expect("an address")],
        tcp_candidates: vec!["127.0.0.1:8189".parse().expect("an address")],
    };
    let role = Role::Play(Offered {
        video: Some(VideoCodec::H264),
        opus: true,
    });
    let now = Instant::now();
    let mut peer = Peer::answer(OFFER, role, &config, now)
        .expect("the seed offer is answered")
        .peer;
    let from = "127.0.0.1:5000".parse().expect("an address");
    // The input split into datagrams at 0xff, over UDP or TCP by their index.
    for (i, datagram) in data.split(|&b| b == 0xff).enumerate() {
        let via = if i % 3 == 2 { Via::Tcp } else { Via::Udp };
        let at = now + Duration::from_millis(i as u64);
        let _ = peer.handle_datagram(at, via, from, datagram);
        for _ in 0..64 {
            if let PeerOutput::Timeout(_) = peer.poll_output() {
                break;
            }
        }
    }
});
