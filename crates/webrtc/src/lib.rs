//! WebRTC for Sluice, sans-IO: [`Peer`] answers a WHEP viewer's offer and sends the
//! stream's shared RTP packets with the viewer's header and SRTP (str0m in ICE-lite
//! and RTP mode, on aws-lc-rs); [`stun`] routes a first datagram to its session by
//! the ICE username fragment it names. Sockets, timers and the clock are the
//! server's.
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

mod peer;
pub mod stun;

pub use peer::{
    Answer, Incoming, Offered, Peer, PeerConfig, PeerError, PeerEvent, PeerOutput, Role, Via,
    VideoCodec, MAX_OFFER,
};
