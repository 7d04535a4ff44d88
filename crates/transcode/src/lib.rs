//! Audio transcoding for Sluice, without I/O: AAC access units in, Opus packets out,
//! for WebRTC players of streams whose audio is AAC (RTMP's, RTSP's, SRT's).
//!
//! One [`AacToOpus`] per stream, not per viewer: the caller runs it on a thread of its
//! own, off the event loops, and shares what it makes. The chain is symphonia's AAC-LC
//! decoder, rubato's sinc resampler (any rate to the 48 kHz Opus runs at), and
//! libopus through the `opus` crate, in 20 ms frames.
//!
//! Timestamps: an AAC frame carries 1024 samples at its own rate, an Opus frame 960 at
//! 48 kHz, so output frames do not line up with input frames. Output time is counted in
//! samples from the first input frame (or the last discontinuity), which keeps it exact
//! however the frame sizes fall; a jump in the input's time restarts the count there.

mod chain;

pub use chain::{AacToOpus, OpusFrame};

/// Why a transcoder could not be made, or a frame not transcoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The stream's audio is of a kind the decoder does not handle (HE-AAC, more than
    /// two channels, a program config element): nothing is made for this stream.
    #[error("unsupported audio: {0}")]
    Unsupported(String),
    /// One frame could not be decoded: silence stands in for it.
    #[error("AAC frame not decodable: {0}")]
    Decode(String),
    /// libopus refused a frame or a setting.
    #[error("Opus encoder: {0}")]
    Encode(String),
}
