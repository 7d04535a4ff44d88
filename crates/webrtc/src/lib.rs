//! WebRTC for Sluice, sans-IO: [`Peer`] answers a WHEP viewer's offer (str0m in
//! RTP mode, on aws-lc-rs, for ICE and DTLS) and then sends the stream's
//! shared RTP packets with the viewer's header and our own SRTP ([`outbound`],
//! [`srtp`], [`rtcp`], with the keys [`keys`] copies out of the handshake); [`stun`]
//! routes a first datagram to its session by the ICE username fragment it names, and
//! answers consent checks. Sockets, timers and the clock are the server's.
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

pub mod keys;
pub mod outbound;
mod peer;
pub mod restart;
pub mod rtcp;
pub mod srtp;
pub mod stun;

pub use peer::{
    Answer, Incoming, Offered, Peer, PeerConfig, PeerError, PeerEvent, PeerOutput, Role, Via,
    VideoCodec, MAX_OFFER, SETTLE,
};
