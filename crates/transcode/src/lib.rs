//! Audio transcoding for Sluice, without I/O, both ways between the audio codecs of
//! its protocols:
//! - [`AacToOpus`]: AAC access units in, Opus packets out, for WebRTC players of
//!   streams whose audio is AAC (RTMP's, RTSP's, SRT's);
//! - [`OpusToAac`]: Opus packets in, AAC-LC frames out, for the players that know no
//!   Opus (RTMP, FLV, MPEG-TS) of streams whose audio is Opus (WHIP's, OBS's).
//!
//! One transcoder per stream, not per viewer: the caller runs it on a thread of its
//! own, off the event loops, and shares what it makes. AAC to Opus is symphonia's AAC-LC
//! decoder, rubato's sinc resampler (any rate to the 48 kHz Opus runs at), and
//! libopus through the `opus` crate, in 20 ms frames.
//!
//! Timestamps: an AAC frame carries 1024 samples at its own rate, an Opus frame 960 at
//! 48 kHz, so output frames do not line up with input frames. Output time is counted in
//! samples from the first input frame (or the last discontinuity), which keeps it exact
//! however the frame sizes fall; a jump in the input's time restarts the count there.
//! Opus to AAC is libopus's decoder and FDK AAC's encoder, timed the same way (see
//! [`OpusToAac`]'s module).

mod chain;
mod opus_to_aac;

pub use chain::{AacToOpus, OpusFrame, OpusFrameLength};
pub use opus_to_aac::{AacFrame, OpusToAac, AAC_FRAME, AAC_RATE};

/// Why a transcoder could not be made, or a frame not transcoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The stream's audio is of a kind the decoder does not handle (HE-AAC, more than
    /// two channels, a program config element, multichannel Opus): nothing is made for
    /// this stream.
    #[error("unsupported audio: {0}")]
    Unsupported(String),
    /// One frame could not be decoded: silence (AAC) or the decoder's concealment
    /// (Opus) stands in for it.
    #[error("frame not decodable: {0}")]
    Decode(String),
    /// The encoder (libopus, FDK AAC) refused a frame or a setting.
    #[error("encoder: {0}")]
    Encode(String),
}
