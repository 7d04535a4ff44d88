//! MPEG-TS (ISO/IEC 13818-1): the muxer behind HLS with `.ts` segments, and the
//! demuxer behind SRT ingest.
//!
//! Why: most HLS players still ask for MPEG-TS segments. The fragment engine
//! ([`crate::fragment`]) calls [`TsMuxer`] once per frame per output, and the bytes it
//! writes form the segment every viewer of that stream downloads, so each frame is
//! muxed exactly once. SRT publishers send MPEG-TS; [`TsDemuxer`] turns it back into
//! tracks and frames.
//!
//! - `psi`: the PAT and PMT sections with their CRC, one packet each.
//! - `packet`: 188-byte packets, the adaptation field (PCR, random access, stuffing)
//!   and the PES header.
//! - `muxer`: [`TsMuxer`], which turns [`Frame`](crate::Frame)s into PES packets:
//!   Annex-B access units for H.264/H.265, ADTS frames for AAC, MP3 frames as they are.
//! - `demux`: [`TsDemuxer`], the reverse for H.264/H.265, AAC and Opus, from packets
//!   in any split; see its module for what it reads and its limits.
//! - `scte35`: [`SpliceInfo`], an SCTE-35 cue section (ad breaks) from a TS input.
//! - `udp_url`: [`UdpUrl`], where TS arrives over UDP for an ingest (`udp://`, `rtp://`,
//!   a multicast group with its sources and interface).
//! - `out_url`: [`TsOutUrl`], where TS is sent over UDP by a push (`udp://`, `rtp://`,
//!   with TTL, interface, packets per datagram and a constant rate).
//! - `pace`: [`Pacer`], TS packets out as datagrams at their PCR's time, at the
//!   stream's rate or a constant one filled with null packets (PCRs rewritten).
//!
//! # Layout of what we write
//! One program (number 1). PAT on PID 0, PMT on [`PMT_PID`], video on [`VIDEO_PID`],
//! audio on [`AUDIO_PID`], SCTE-35 cues (from a stream's first on) on [`CUE_PID`]. The PCR travels on the video PID when there is video, else on
//! the audio PID. Every PES starts a new packet and ends with adaptation-field stuffing,
//! so a segment is always a whole number of 188-byte packets.
//!
//! # Timestamps
//! Frame timestamps (90 kHz, signed) become 33-bit PTS/DTS after adding
//! [`TIMESTAMP_OFFSET`], modulo 2^33. The PCR runs [`PCR_LEAD`] behind the DTS of the
//! frame that carries it. A frame with a DTS earlier than `-TIMESTAMP_OFFSET +
//! PCR_LEAD` still muxes; its timestamps wrap, as 33-bit MPEG timestamps do after 26.5 h.
//!
//! # Invariants
//! - Every packet is 188 bytes and starts with 0x47.
//! - Continuity counters are per PID, run on across [`TsMuxer::write_tables`] calls and
//!   increase by one for every packet (all our packets carry a payload).
//! - [`TsMuxer::write_frame`] writes nothing when it returns an error.
//! - NAL payloads are copied once, into the caller's buffer; nothing else is allocated
//!   per frame once the muxer's scratch list has grown to the largest frame's NAL count.

mod demux;
mod muxer;
mod out_url;
mod pace;
mod packet;
mod psi;
mod scte35;
mod udp_url;

pub use demux::{
    Cue, DemuxStats, Demuxed, TsDemuxer, MAX_AUDIO_PES_LEN, MAX_QUEUED_OUTPUTS, MAX_VIDEO_PES_LEN,
};
pub use muxer::TsMuxer;
pub use out_url::{
    TsOutUrl, TsOutUrlError, MAX_BITRATE, MAX_OUT_URL_LEN, MAX_PACKETS_PER_DATAGRAM, MIN_BITRATE,
};
pub use pace::{
    PaceConfig, PaceStats, Paced, Pacer, CBR_MAX_LAG, MAX_LATE, MAX_PCR_STEP, MAX_QUEUED,
    MAX_UNSTAMPED,
};
pub use packet::PACKET_LEN;
pub use psi::crc32_mpeg2;
pub use scte35::{
    BreakDuration, CueDirection, Scte35Error, Segmentation, SpliceCommand, SpliceInfo,
    SpliceInsert, MAX_SECTION_LEN, SPLICE_INFO_TABLE_ID,
};
pub use udp_url::{Carriage, Interface, UdpUrl, UdpUrlError, MAX_SOURCES, MAX_URL_LEN};

use crate::codec::CodecError;
use crate::MediaKind;

/// PID of the program map table. 0x1000 is what ffmpeg uses too, so captures of our
/// segments look familiar next to ffmpeg's.
pub const PMT_PID: u16 = 0x1000;
/// PID of the video elementary stream.
pub const VIDEO_PID: u16 = 0x100;
/// PID of the audio elementary stream.
pub const AUDIO_PID: u16 = 0x101;
/// PID of SCTE-35 cue sections, once a stream has had a cue.
pub const CUE_PID: u16 = 0x102;
/// The program number in the PAT and PMT.
pub const PROGRAM_NUMBER: u16 = 1;

/// `stream_type` of H.264 video.
pub const STREAM_TYPE_H264: u8 = 0x1b;
/// `stream_type` of H.265 video.
pub const STREAM_TYPE_H265: u8 = 0x24;
/// `stream_type` of AAC in ADTS.
pub const STREAM_TYPE_AAC_ADTS: u8 = 0x0f;
/// `stream_type` of MPEG-1 audio (MP3 at 32, 44.1 or 48 kHz).
pub const STREAM_TYPE_MPEG1_AUDIO: u8 = 0x03;
/// `stream_type` of MPEG-2 audio (MP3 at the half rates 16, 22.05 or 24 kHz and below).
pub const STREAM_TYPE_MPEG2_AUDIO: u8 = 0x04;

/// Added to every frame timestamp before it becomes a PTS or DTS: 1.4 s, the start
/// time ffmpeg's muxer gives its streams. Sources start near 0 and B-frames or rebasing
/// can put a DTS somewhat below 0; with the offset the written values stay positive
/// and the PCR (which runs [`PCR_LEAD`] behind) does too.
pub const TIMESTAMP_OFFSET: i64 = 126_000;
/// How far the PCR runs behind the DTS of the frame carrying it: 700 ms (ffmpeg's
/// default `max_delay`), so a decoder following the PCR has the whole access unit in
/// its buffer before the DTS, even for a keyframe spread over many packets.
pub const PCR_LEAD: i64 = 63_000;
/// A PCR goes out when at least this much decode time has passed since the last one
/// (and always on video keyframes and on the first frame after the tables). 50 ms keeps
/// PCRs at most 100 ms apart whenever frames of the PCR stream are at most 50 ms apart:
/// any audio, and video of 20 frames per second or more.
pub const PCR_MIN_GAP: i64 = 4_500;

/// What went wrong muxing into MPEG-TS.
///
/// `Unsupported` comes from the tracks given at construction; `NoTrack` is the
/// caller's mistake; `Malformed`, `TooLarge` and `Codec` describe a frame the
/// publisher sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TsError {
    /// A codec or configuration MPEG-TS (or this muxer) cannot carry.
    #[error("unsupported {what} in MPEG-TS")]
    Unsupported {
        /// The codec or feature.
        what: &'static str,
    },
    /// A frame of a kind the muxer has no track for.
    #[error("no {kind:?} track in this muxer")]
    NoTrack {
        /// The frame's kind.
        kind: MediaKind,
    },
    /// A frame payload that is not what its track says (a NAL length running past the end).
    #[error("malformed {what}")]
    Malformed {
        /// The structure.
        what: &'static str,
    },
    /// A frame too large for the field that must carry its length.
    #[error("{what} of {len} bytes exceeds {limit}")]
    TooLarge {
        /// The item.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The largest size the field can carry.
        limit: usize,
    },
    /// An AAC configuration or frame that ADTS cannot express (object types above 4,
    /// rates outside its table, frames over 8191 bytes), or a NAL unit prefix that runs
    /// past the frame.
    #[error(transparent)]
    Codec(#[from] CodecError),
}
