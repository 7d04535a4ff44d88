//! Reading a publisher's SDP (ANNOUNCE) into tracks.
//!
//! What ffmpeg, GStreamer and cameras send: one `m=` per track with one payload type,
//! `a=rtpmap`, `a=fmtp` with the decoder configuration, `a=control`. We take the first
//! payload type of each `m=` line. A media section we cannot take (unknown codec,
//! `application`, an AAC mode other than hbr/lbr) is listed in `skipped`, not an error;
//! a codec we know whose configuration is absent or unreadable yields a media with
//! `track: None` (the configuration may still come in band).

use super::{SdpError, MAX_LINES, MAX_LINE_LEN, MAX_MEDIA, MAX_SDP_LEN};
use crate::codec::{
    h264_nal_type, h265_nal_type, AacConfig, AvcConfig, HevcConfig, OpusConfig, H264_NAL_PPS,
    H264_NAL_SPS,
};
use crate::rtp::{AacParams, ParameterSets, RtpCodec, RtpDepacketizer, RtpError};
use crate::{Track, TrackConfig};
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use bytes::Bytes;

/// Base64 that accepts parameter sets with or without `=` padding, as encoders differ.
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A parsed SDP: the media we can take and those we skipped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SdpSession {
    /// Session-level `a=control`, if any (`*` or an aggregate URL).
    pub control: Option<String>,
    /// The media sections we understood, in order.
    pub media: Vec<SdpMedia>,
    /// The media sections we did not.
    pub skipped: Vec<SkippedMedia>,
}

/// One media section we can depacketize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdpMedia {
    /// `a=control` as written (relative like `streamid=0` or an absolute URL); empty
    /// when absent, meaning the aggregate URL.
    pub control: String,
    /// The payload format.
    pub codec: RtpCodec,
    /// The track, when its configuration was given and readable.
    pub track: Option<Track>,
    /// The payload type.
    pub payload_type: u8,
    /// The RTP clock rate from `a=rtpmap` (or the static type's).
    pub clock_rate: u32,
    /// The AU header layout, for AAC.
    pub aac: Option<AacParams>,
    /// H.264/H.265 parameter sets from `sprop-*`, even when they did not make a track.
    pub parameter_sets: ParameterSets,
}

impl SdpMedia {
    /// A depacketizer for this media, told the SDP's parameter sets.
    pub fn depacketizer(&self) -> Result<RtpDepacketizer, RtpError> {
        let mut d =
            RtpDepacketizer::new(self.codec, self.clock_rate, self.aac.unwrap_or_default())?;
        d.set_known_parameter_sets(self.parameter_sets.clone());
        Ok(d)
    }
}

/// A media section left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedMedia {
    /// The media type of the `m=` line (`video`, `audio`, `application`, ...).
    pub media: String,
    /// The encoding name from `a=rtpmap`, or the payload type when there was none.
    pub encoding: String,
    /// Why it was skipped.
    pub reason: &'static str,
}

/// One `m=` section as read, before interpretation.
#[derive(Debug, Default)]
struct RawMedia {
    media: String,
    payload_type: Option<u8>,
    rtpmap: Option<String>,
    fmtp: Option<String>,
    control: Option<String>,
}

/// Parses an SDP (UTF-8, CRLF or LF line endings).
pub fn parse_sdp(text: &[u8]) -> Result<SdpSession, SdpError> {
    if text.len() > MAX_SDP_LEN {
        return Err(SdpError::TooLarge {
            what: "SDP",
            len: text.len(),
            limit: MAX_SDP_LEN,
        });
    }
    let text = std::str::from_utf8(text).map_err(|_| SdpError::Malformed {
        what: "UTF-8",
        line: 0,
    })?;
    let mut session = SdpSession::default();
    let mut raw: Vec<RawMedia> = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let n = i + 1;
        if n > MAX_LINES {
            return Err(SdpError::TooLarge {
                what: "SDP line count",
                len: n,
                limit: MAX_LINES,
            });
        }
        if line.len() > MAX_LINE_LEN {
            return Err(SdpError::TooLarge {
                what: "SDP line",
                len: line.len(),
                limit: MAX_LINE_LEN,
            });
        }
        let line = line.trim_end_matches('\r').trim();
        if line.is_empty() {
            continue;
        }
        let Some((kind, value)) = line.split_once('=') else {
            return Err(SdpError::Malformed {
                what: "line (no '=')",
                line: n,
            });
        };
        match kind {
            "m" => {
                if raw.len() >= MAX_MEDIA {
                    return Err(SdpError::TooLarge {
                        what: "media count",
                        len: raw.len() + 1,
                        limit: MAX_MEDIA,
                    });
                }
                let mut fields = value.split_whitespace();
                let media = fields.next().unwrap_or_default().to_owned();
                // Port and protocol, then the formats; the first one is ours.
                let payload_type = fields
                    .nth(2)
                    .and_then(|f| f.parse::<u8>().ok())
                    .filter(|&p| p < 128);
                raw.push(RawMedia {
                    media,
                    payload_type,
                    ..RawMedia::default()
                });
            }
            "a" => {
                let (name, arg) = value.split_once(':').unwrap_or((value, ""));
                match (name, raw.last_mut()) {
                    ("control", None) => session.control = Some(arg.trim().to_owned()),
                    ("control", Some(m)) => m.control = Some(arg.trim().to_owned()),
                    ("rtpmap" | "fmtp", Some(m)) => {
                        let (pt, rest) = arg.split_once(char::is_whitespace).unwrap_or((arg, ""));
                        if pt.parse::<u8>().ok() == m.payload_type {
                            let slot = if name == "rtpmap" {
                                &mut m.rtpmap
                            } else {
                                &mut m.fmtp
                            };
                            *slot = Some(rest.trim().to_owned());
                        }
                    }
                    _ => {}
                }
            }
            k if k.len() == 1 => {}
            _ => {
                return Err(SdpError::Malformed {
                    what: "line type",
                    line: n,
                })
            }
        }
    }
    for m in raw {
        match interpret(&m) {
            Ok(media) => session.media.push(media),
            Err(reason) => session.skipped.push(SkippedMedia {
                media: m.media.clone(),
                encoding: m
                    .rtpmap
                    .as_deref()
                    .and_then(|r| r.split('/').next())
                    .map(str::to_owned)
                    .unwrap_or_else(|| m.payload_type.map(|p| p.to_string()).unwrap_or_default()),
                reason,
            }),
        }
    }
    Ok(session)
}

/// `key=value` pairs of an fmtp line, keys lowercased.
fn fmtp_params(fmtp: &str) -> impl Iterator<Item = (String, &str)> {
    fmtp.split(';').filter_map(|p| {
        let (k, v) = p.split_once('=')?;
        Some((k.trim().to_ascii_lowercase(), v.trim()))
    })
}

fn fmtp_get<'a>(fmtp: Option<&'a str>, key: &str) -> Option<&'a str> {
    fmtp_params(fmtp?).find(|(k, _)| k == key).map(|(_, v)| v)
}

fn decode_sets(list: Option<&str>) -> Vec<Bytes> {
    list.map(|l| {
        l.split(',')
            .filter_map(|s| LENIENT_BASE64.decode(s.trim()).ok())
            .filter(|s| !s.is_empty())
            .map(Bytes::from)
            .collect()
    })
    .unwrap_or_default()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if s.len() & 1 == 1 {
        return None;
    }
    s.chunks_exact(2)
        .map(|pair| {
            let digit = |c: u8| (c as char).to_digit(16);
            match pair {
                [hi, lo] => Some((digit(*hi)? * 16 + digit(*lo)?) as u8),
                _ => None,
            }
        })
        .collect()
}

/// Turns one raw media section into a track, or says why not.
fn interpret(m: &RawMedia) -> Result<SdpMedia, &'static str> {
    let pt = m.payload_type.ok_or("no usable payload type")?;
    // Encoding name, clock rate, channels.
    let (name, rate, channels) = match &m.rtpmap {
        Some(map) => {
            let mut parts = map.split('/');
            let name = parts.next().unwrap_or_default().trim().to_ascii_uppercase();
            let rate = parts.next().and_then(|r| r.trim().parse::<u32>().ok());
            let channels = parts.next().and_then(|c| c.trim().parse::<u8>().ok());
            (name, rate, channels)
        }
        None => match pt {
            0 => ("PCMU".to_owned(), Some(8000), None),
            8 => ("PCMA".to_owned(), Some(8000), None),
            _ => return Err("dynamic payload type without rtpmap"),
        },
    };
    let fmtp = m.fmtp.as_deref();
    let mut parameter_sets = ParameterSets::default();
    let mut aac = None;
    let (codec, track) = match name.as_str() {
        "H264" => {
            for set in decode_sets(fmtp_get(fmtp, "sprop-parameter-sets")) {
                match h264_nal_type(&set) {
                    Some(H264_NAL_SPS) => parameter_sets.sps.push(set),
                    Some(H264_NAL_PPS) => parameter_sets.pps.push(set),
                    _ => {}
                }
            }
            let track = AvcConfig::from_parameter_sets(&parameter_sets.sps, &parameter_sets.pps)
                .ok()
                .map(|c| Track::new(TrackConfig::H264(c)));
            (RtpCodec::H264, track)
        }
        "H265" | "HEVC" => {
            let keep = |sets: Vec<Bytes>, t: u8| -> Vec<Bytes> {
                sets.into_iter()
                    .filter(|s| h265_nal_type(s) == Some(t))
                    .collect()
            };
            parameter_sets.vps = keep(decode_sets(fmtp_get(fmtp, "sprop-vps")), 32);
            parameter_sets.sps = keep(decode_sets(fmtp_get(fmtp, "sprop-sps")), 33);
            parameter_sets.pps = keep(decode_sets(fmtp_get(fmtp, "sprop-pps")), 34);
            let track = HevcConfig::from_parameter_sets(
                &parameter_sets.vps,
                &parameter_sets.sps,
                &parameter_sets.pps,
            )
            .ok()
            .map(|c| Track::new(TrackConfig::H265(c)));
            (RtpCodec::H265, track)
        }
        "MPEG4-GENERIC" => {
            let mode = fmtp_get(fmtp, "mode").unwrap_or("AAC-hbr");
            let lbr = mode.eq_ignore_ascii_case("aac-lbr");
            if !lbr && !mode.eq_ignore_ascii_case("aac-hbr") {
                return Err("mpeg4-generic mode other than AAC-hbr/AAC-lbr");
            }
            let num = |key: &str, default: u8| -> Result<u8, &'static str> {
                match fmtp_get(fmtp, key) {
                    Some(v) => v
                        .parse()
                        .map_err(|_| "unreadable mpeg4-generic AU header lengths"),
                    None => Ok(default),
                }
            };
            let base = if lbr { (6, 2, 2) } else { (13, 3, 3) };
            let params = AacParams {
                size_length: num("sizelength", base.0)?,
                index_length: num("indexlength", base.1)?,
                index_delta_length: num("indexdeltalength", base.2)?,
                cts_delta_length: num("ctsdeltalength", 0)?,
                dts_delta_length: num("dtsdeltalength", 0)?,
                constant_duration: match fmtp_get(fmtp, "constantduration") {
                    Some(v) => v.parse().map_err(|_| "unreadable constantDuration")?,
                    None => crate::rtp::AAC_SAMPLES_PER_AU,
                },
            };
            params
                .validate()
                .map_err(|_| "unsupported mpeg4-generic AU header layout")?;
            if fmtp_get(fmtp, "auxiliarydatasizelength").is_some_and(|v| v != "0") {
                return Err("mpeg4-generic auxiliary data");
            }
            aac = Some(params);
            let track = fmtp_get(fmtp, "config")
                .and_then(decode_hex)
                .and_then(|asc| AacConfig::parse(Bytes::from(asc)).ok())
                .map(|c| Track::new(TrackConfig::Aac(c)));
            (RtpCodec::Aac, track)
        }
        "OPUS" => {
            let stereo = fmtp_get(fmtp, "sprop-stereo").or(fmtp_get(fmtp, "stereo")) == Some("1");
            let config = if stereo {
                Some(OpusConfig::stereo_48k())
            } else {
                mono_opus()
            };
            (
                RtpCodec::Opus,
                config.map(|c| Track::new(TrackConfig::Opus(c))),
            )
        }
        "PCMA" | "PCMU" => {
            let channels = channels.unwrap_or(1).max(1);
            if name == "PCMA" {
                (
                    RtpCodec::Pcma,
                    Some(Track::new(TrackConfig::Pcma { channels })),
                )
            } else {
                (
                    RtpCodec::Pcmu,
                    Some(Track::new(TrackConfig::Pcmu { channels })),
                )
            }
        }
        _ => return Err("codec not supported"),
    };
    let clock_rate = match codec {
        RtpCodec::H264 | RtpCodec::H265 | RtpCodec::Vp8 | RtpCodec::Vp9 | RtpCodec::Av1 => {
            rate.unwrap_or(90_000)
        }
        RtpCodec::Opus => 48_000,
        RtpCodec::Pcma | RtpCodec::Pcmu => rate.unwrap_or(8000),
        RtpCodec::Aac => rate.ok_or("mpeg4-generic without clock rate")?,
    };
    if clock_rate == 0 {
        return Err("clock rate 0");
    }
    Ok(SdpMedia {
        control: m.control.clone().unwrap_or_default(),
        codec,
        track,
        payload_type: pt,
        clock_rate,
        aac,
        parameter_sets,
    })
}

/// The usual `OpusHead` with one channel.
fn mono_opus() -> Option<OpusConfig> {
    let stereo = OpusConfig::stereo_48k();
    let mut head = stereo.head.to_vec();
    *head.get_mut(9)? = 1;
    OpusConfig::parse(Bytes::from(head)).ok()
}
