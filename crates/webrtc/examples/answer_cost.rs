//! How long answering one WHEP offer takes (str0m's SDP, ICE and DTLS setup):
//! `cargo run --release -p sluice-webrtc --example answer_cost [N]`.

use sluice_webrtc::{Offered, Peer, PeerConfig, Role, VideoCodec};
use std::time::Instant;

const OFFER: &str = include_str!("../fuzz/offer.sdp");

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let config = PeerConfig {
        candidates: vec!["127.0.0.1:8189".parse().expect("an address")],
        tcp_candidates: vec!["127.0.0.1:8189".parse().expect("an address")],
    };
    let role = Role::Play(Offered {
        video: Some(VideoCodec::H264),
        opus: true,
    });
    // The first pays for one-time setup.
    Peer::answer(OFFER, role, &config, Instant::now()).expect("answered");
    let start = Instant::now();
    for _ in 0..n {
        Peer::answer(OFFER, role, &config, Instant::now()).expect("answered");
    }
    let each = start.elapsed() / n;
    println!("{n} answers: {each:?} each");
}
