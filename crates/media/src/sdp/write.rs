//! Writing the SDP of a stream for DESCRIBE.
//!
//! The layout follows what ffmpeg and GStreamer accept and what they produce
//! themselves: session-level `c=IN IP4 0.0.0.0` (the player learns addresses from
//! SETUP), `a=control:*` so track controls are relative to the content base, one
//! `m=` section per track with port 0.

use super::SdpError;
use crate::rtp::{clock_rate, RtpCodec};
use crate::{Track, TrackConfig};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::BytesMut;
use std::fmt::Write as _;

/// The `a=range` of the session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SdpRange {
    /// A live stream: `npt=now-`.
    Live,
    /// A file of this many seconds: `npt=0-D`.
    Vod {
        /// Duration in seconds.
        duration_secs: f64,
    },
}

/// One track to describe.
#[derive(Debug, Clone, Copy)]
pub struct SdpTrack<'a> {
    /// The track.
    pub track: &'a Track,
    /// Its payload type, as its packetizer writes it
    /// ([`RtpCodec::default_payload_type`] usually).
    pub payload_type: u8,
    /// Its control URL, relative to the content base (`trackID=0`).
    pub control: &'a str,
}

/// What [`write_sdp`] describes.
#[derive(Debug, Clone, Copy)]
pub struct SessionDescription<'a> {
    /// `o=` session id (any number; a timestamp is customary).
    pub session_id: u64,
    /// `o=` session version; bump when the tracks change.
    pub session_version: u64,
    /// `o=` address of the server (an IPv4 address; `127.0.0.1` will do).
    pub origin_address: &'a str,
    /// `s=` session name (the stream path, say).
    pub name: &'a str,
    /// Live or on demand.
    pub range: SdpRange,
    /// The tracks, in order.
    pub tracks: &'a [SdpTrack<'a>],
}

fn check_text(s: &str, what: &'static str) -> Result<(), SdpError> {
    if s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(SdpError::InvalidText { what });
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn base64_list(sets: &[bytes::Bytes]) -> String {
    sets.iter()
        .map(|s| BASE64.encode(s))
        .collect::<Vec<_>>()
        .join(",")
}

/// Appends the SDP of `desc` to `out`, CRLF line endings. Writes nothing on error:
/// text with CR/LF/NUL, a track without an RTP payload format.
pub fn write_sdp(desc: &SessionDescription<'_>, out: &mut BytesMut) -> Result<(), SdpError> {
    check_text(desc.origin_address, "origin address")?;
    check_text(desc.name, "session name")?;
    for (index, t) in desc.tracks.iter().enumerate() {
        check_text(t.control, "track control")?;
        RtpCodec::for_track(t.track).map_err(|_| SdpError::NoCodec { index })?;
    }
    let mut s = String::with_capacity(512);
    let name = if desc.name.is_empty() {
        "Sluice"
    } else {
        desc.name
    };
    // Writing to a String cannot fail.
    let _ = write!(
        s,
        "v=0\r\no=- {} {} IN IP4 {}\r\ns={}\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\na=tool:sluice\r\na=control:*\r\n",
        desc.session_id, desc.session_version, desc.origin_address, name
    );
    match desc.range {
        SdpRange::Live => s.push_str("a=range:npt=now-\r\n"),
        SdpRange::Vod { duration_secs } => {
            let d = if duration_secs.is_finite() && duration_secs > 0.0 {
                duration_secs
            } else {
                0.0
            };
            let _ = write!(s, "a=range:npt=0-{d:.3}\r\n");
        }
    }
    for t in desc.tracks {
        write_media(&mut s, t);
    }
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn write_media(s: &mut String, t: &SdpTrack<'_>) {
    let pt = t.payload_type & 0x7f;
    let rate = clock_rate(t.track).unwrap_or(90_000);
    match &t.track.config {
        TrackConfig::H264(c) => {
            let _ = write!(s, "m=video 0 RTP/AVP {pt}\r\na=rtpmap:{pt} H264/90000\r\n");
            let _ = write!(
                s,
                "a=fmtp:{pt} packetization-mode=1;profile-level-id={:02X}{:02X}{:02X}",
                c.profile, c.compatibility, c.level
            );
            if !c.sps.is_empty() && !c.pps.is_empty() {
                let _ = write!(
                    s,
                    ";sprop-parameter-sets={},{}",
                    base64_list(&c.sps),
                    base64_list(&c.pps)
                );
            }
            s.push_str("\r\n");
        }
        TrackConfig::H265(c) => {
            let _ = write!(s, "m=video 0 RTP/AVP {pt}\r\na=rtpmap:{pt} H265/90000\r\n");
            let _ = write!(
                s,
                "a=fmtp:{pt} sprop-vps={};sprop-sps={};sprop-pps={}\r\n",
                base64_list(&c.vps),
                base64_list(&c.sps),
                base64_list(&c.pps)
            );
        }
        TrackConfig::Aac(c) => {
            let _ = write!(
                s,
                "m=audio 0 RTP/AVP {pt}\r\na=rtpmap:{pt} MPEG4-GENERIC/{rate}"
            );
            if c.channels > 0 {
                let _ = write!(s, "/{}", c.channels);
            }
            let _ = write!(
                s,
                "\r\na=fmtp:{pt} streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config={}\r\n",
                hex(&c.asc)
            );
        }
        TrackConfig::Opus(c) => {
            let _ = write!(
                s,
                "m=audio 0 RTP/AVP {pt}\r\na=rtpmap:{pt} opus/48000/2\r\n"
            );
            if c.channels >= 2 {
                let _ = write!(s, "a=fmtp:{pt} sprop-stereo=1\r\n");
            }
        }
        TrackConfig::Pcma { channels } | TrackConfig::Pcmu { channels } => {
            let name = if matches!(t.track.config, TrackConfig::Pcma { .. }) {
                "PCMA"
            } else {
                "PCMU"
            };
            let _ = write!(s, "m=audio 0 RTP/AVP {pt}\r\na=rtpmap:{pt} {name}/8000");
            if *channels > 1 {
                let _ = write!(s, "/{channels}");
            }
            s.push_str("\r\n");
        }
        TrackConfig::Vp8 { .. } | TrackConfig::Vp9 { .. } => {
            let name = if matches!(t.track.config, TrackConfig::Vp8 { .. }) {
                "VP8"
            } else {
                "VP9"
            };
            let _ = write!(
                s,
                "m=video 0 RTP/AVP {pt}\r\na=rtpmap:{pt} {name}/90000\r\n"
            );
        }
        TrackConfig::Av1 { record } => {
            let _ = write!(s, "m=video 0 RTP/AVP {pt}\r\na=rtpmap:{pt} AV1/90000\r\n");
            // Declarative use (AV1 RTP §7.2.3): the stream's profile, level and tier,
            // from the av1C header (seq_profile, seq_level_idx_0, seq_tier_0).
            if let Some(&[0x81, b1, b2]) = record.get(..3) {
                let _ = write!(
                    s,
                    "a=fmtp:{pt} profile={};level-idx={};tier={}\r\n",
                    b1 >> 5,
                    b1 & 0x1f,
                    b2 >> 7
                );
            }
        }
        // Rejected by `write_sdp` before anything is written.
        TrackConfig::Mp3 { .. } => return,
    }
    let _ = write!(s, "a=control:{}\r\n", t.control);
}
