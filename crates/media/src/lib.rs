//! The media model shared by every protocol in Sluice, and the containers built on it.
//!
//! A [`Frame`] is one access unit of one track with its timestamps on the fixed
//! [`CLOCK_HZ`] clock and its payload as shared [`bytes::Bytes`]. A [`Track`] says what
//! the frames are and carries the decoder configuration (SPS/PPS/VPS, AudioSpecificConfig)
//! that every output format needs. Containers (FLV, AMF0, later MPEG-TS, fMP4, RTP) are
//! sans-IO: they parse from and serialize into caller-owned buffers. [`fragment`] is
//! the one place that cuts frames into fMP4 or MPEG-TS fragments, for live HLS,
//! recordings and HLS of files.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
// Input from the network must never panic: no unwrap, expect or unchecked indexing
// outside tests (a bound that cannot fail says why with `get` or a checked form).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod amf0;
pub mod codec;
pub mod flv;
pub mod fmp4;
pub mod fragment;
mod frame;
pub mod mp4;
pub mod rtp;
pub mod sdp;
mod track;
pub mod ts;

pub use frame::{Frame, MediaKind, Timestamp, CLOCK_HZ};
pub use track::{AudioCodec, Track, TrackConfig, VideoCodec};
