//! A packet: one frame, sequence header or metadata message of a stream, with each
//! output format's bytes made at most once and shared by every player.
//!
//! Why lazily: a format nobody plays costs nothing, and the first worker that needs a
//! format builds it for all the others (`OnceLock`), so the bytes exist once per
//! stream whatever the number of players or workers. Formats are registered in
//! `format`; a packet holds one slot per registered format.
//!
//! The exception is RTP: a packetizer numbers packets on from frame to frame, so the
//! RTP form of a frame is made once, in stream order, by the publisher as it pushes
//! the frame ([`RtpSource`], only while an RTSP listener is on), and shared by every
//! RTSP player like the lazy forms.

use crate::core::format::{self, Format};
use bytes::{Bytes, BytesMut};
use sluice_media::rtp::{rtcp, RtpCodec, RtpFrame, RtpPacketizer, DEFAULT_MTU};
use sluice_media::{Frame, MediaKind, Track};
use std::sync::{Arc, OnceLock};

/// What a packet carries.
#[derive(Debug)]
pub enum Payload {
    /// A coded frame of the given track.
    Media { frame: Frame, track: Arc<Track> },
    /// A new decoder configuration (sequence header) for one kind of track.
    Config(Arc<Track>),
    /// A script data message (`onMetaData` and its object, AMF0).
    Metadata(Bytes),
}

/// Parameters that shape the shared bytes; the same for all players of a server.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub rtmp_chunk_size: usize,
}

/// One unit of the stream's timeline.
#[derive(Debug)]
pub struct Packet {
    pub payload: Payload,
    /// Decode time in ms on the stream's continuous timeline.
    pub ts_ms: i64,
    /// A player can start here: a video keyframe, or any audio frame of a stream
    /// without video.
    pub key: bool,
    /// This packet in each registered output format, built on first use.
    forms: [OnceLock<Bytes>; format::COUNT],
    /// The frame's RTP packets, made by the stream's [`RtpSource`] when the packet was
    /// pushed (not lazily: sequence numbers must follow stream order).
    pub rtp: Option<RtpForm>,
}

/// All RTP packets of one frame, each behind its interleave header, in ONE buffer:
/// an RTSP/TCP player gets the whole frame in one `writev` entry.
#[derive(Debug, Clone)]
pub struct RtpForm {
    pub data: Bytes,
    /// Sequence number of the first packet (`RTP-Info: seq=` for a player starting here).
    pub first_seq: u16,
    /// RTP timestamp of the first packet (`RTP-Info: rtptime=`).
    pub timestamp: u32,
}

/// The interleaved RTP channel of a kind of track, the same for every RTSP player
/// (RTCP goes on the next one): so the interleaved bytes of a frame are shared.
pub fn rtp_channel(kind: MediaKind) -> u8 {
    match kind {
        MediaKind::Video => 0,
        MediaKind::Audio => 2,
    }
}

/// The RTP packetizers of one stream, one per kind of track, fed every frame in
/// stream order by the stream's publisher (whoever it is: sequence numbers and
/// timestamps continue across a publisher's return and across decoder changes).
#[derive(Debug)]
pub struct RtpSource {
    video: Option<RtpPacketizer>,
    audio: Option<RtpPacketizer>,
    /// Per kind: SSRC, next sequence number and timestamp offset while no packetizer
    /// exists (a codec RTP does not carry), so a later one continues them.
    start: [(u32, u16, u32); 2],
    /// Per kind: presentation time of the last RTCP sender report.
    last_report: [Option<i64>; 2],
    scratch: RtpFrame,
}

/// Media time between RTCP sender reports of a track (RFC 3550 suggests ~5 s): they
/// map RTP timestamps to wall-clock time, which players use to sync audio and video.
const SENDER_REPORT_TICKS: i64 = 5 * 90_000;

impl RtpSource {
    /// Random SSRCs, first sequence numbers and timestamp offsets (RFC 3550 §5.1).
    pub fn new() -> Self {
        RtpSource {
            video: None,
            audio: None,
            start: [rand::random(), rand::random()],
            last_report: [None, None],
            scratch: RtpFrame::new(),
        }
    }

    fn slot(&mut self, kind: MediaKind) -> (&mut Option<RtpPacketizer>, &mut (u32, u16, u32)) {
        match kind {
            MediaKind::Video => (&mut self.video, &mut self.start[0]),
            MediaKind::Audio => (&mut self.audio, &mut self.start[1]),
        }
    }

    /// A new decoder configuration: a new packetizer that continues the numbering.
    pub fn set_track(&mut self, track: &Track) {
        let (slot, start) = self.slot(track.kind());
        if let Some(old) = slot.take() {
            *start = (old.ssrc(), old.next_seq(), old.rtp_timestamp(0));
        }
        let (ssrc, seq, offset) = *start;
        let Ok(codec) = RtpCodec::for_track(track) else {
            return;
        };
        if let Ok(mut p) =
            RtpPacketizer::new(track, codec.default_payload_type(), ssrc, DEFAULT_MTU)
        {
            p.set_start(seq, offset);
            *slot = Some(p);
        }
    }

    /// The RTP form of a frame whose track was set, or `None` when RTP cannot carry it.
    /// Every [`SENDER_REPORT_TICKS`] of a track's media, an interleaved RTCP sender
    /// report follows the frame's packets in the same buffer, so every player gets it
    /// with no work of its own.
    pub fn packetize(&mut self, frame: &Frame) -> Option<RtpForm> {
        let channel = rtp_channel(frame.kind);
        let index = usize::from(frame.kind == MediaKind::Audio);
        let p = match frame.kind {
            MediaKind::Video => self.video.as_mut()?,
            MediaKind::Audio => self.audio.as_mut()?,
        };
        // On error nothing was written and no sequence number consumed.
        p.packetize_interleaved(frame, channel, &mut self.scratch)
            .ok()?;
        let f = self.scratch.freeze()?;
        let due =
            self.last_report[index].is_none_or(|last| frame.pts - last >= SENDER_REPORT_TICKS);
        let data = if due {
            self.last_report[index] = Some(frame.pts);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            // A compound packet: the report, then the SDES CNAME RFC 3550 requires.
            let mut report = BytesMut::new();
            rtcp::write_sender_report(
                &mut report,
                &p.sender_report(rtcp::ntp_timestamp(now), frame.pts),
            );
            rtcp::write_sdes_cname(&mut report, p.ssrc(), "sluice");
            let mut out = BytesMut::with_capacity(f.data.len() + report.len() + 4);
            out.extend_from_slice(&f.data);
            out.extend_from_slice(&[b'$', channel + 1]);
            out.extend_from_slice(&u16::try_from(report.len()).unwrap_or(0).to_be_bytes());
            out.extend_from_slice(&report);
            out.freeze()
        } else {
            f.data
        };
        Some(RtpForm {
            data,
            first_seq: f.first_seq,
            timestamp: f.timestamp,
        })
    }
}

impl Default for RtpSource {
    fn default() -> Self {
        Self::new()
    }
}

impl Packet {
    pub fn new(payload: Payload, ts_ms: i64, key: bool) -> Arc<Packet> {
        Self::with_rtp(payload, ts_ms, key, None)
    }

    /// A packet with its RTP form made in advance (see [`RtpSource`]).
    pub fn with_rtp(payload: Payload, ts_ms: i64, key: bool, rtp: Option<RtpForm>) -> Arc<Packet> {
        Arc::new(Packet {
            payload,
            ts_ms,
            key,
            forms: std::array::from_fn(|_| OnceLock::new()),
            rtp,
        })
    }

    /// Bytes in the ring's accounting: the payload and its RTP form (made eagerly),
    /// whatever lazy formats get built.
    pub fn size(&self) -> usize {
        let rtp = self.rtp.as_ref().map_or(0, |r| r.data.len());
        rtp + match &self.payload {
            Payload::Media { frame, .. } => frame.payload.len(),
            Payload::Config(_) => 64,
            Payload::Metadata(b) => b.len(),
        }
    }

    /// Video or audio for media and decoder configurations; `None` for metadata.
    pub fn kind(&self) -> Option<MediaKind> {
        match &self.payload {
            Payload::Media { frame, .. } => Some(frame.kind),
            Payload::Config(track) => Some(track.kind()),
            Payload::Metadata(_) => None,
        }
    }

    pub fn is_video(&self) -> bool {
        match &self.payload {
            Payload::Media { frame, .. } => frame.kind == MediaKind::Video,
            Payload::Config(track) => track.kind() == MediaKind::Video,
            Payload::Metadata(_) => false,
        }
    }

    /// The bytes of this packet for a player of `format` (empty when the player does
    /// not take it), made once per packet and format and shared.
    pub fn bytes(&self, format: Format, shape: &Shape) -> &Bytes {
        static EMPTY: Bytes = Bytes::new();
        if !format.wants(self.kind()) {
            return &EMPTY;
        }
        self.forms[format.id.index()].get_or_init(|| format.id.build(self, shape))
    }

    /// Length of this packet in `format`.
    pub fn len(&self, format: Format, shape: &Shape) -> usize {
        self.bytes(format, shape).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_media::codec::AvcConfig;
    use sluice_media::TrackConfig;

    #[test]
    fn sender_reports_follow_frames_every_five_seconds() {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        let track = Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap(),
        ));
        let mut source = RtpSource::new();
        source.set_track(&track);
        let mut reports = 0;
        for n in 0..(11 * 25) {
            let frame = Frame {
                kind: MediaKind::Video,
                dts: n * 3600,
                pts: n * 3600,
                keyframe: n % 25 == 0,
                payload: Bytes::from_static(&[0, 0, 0, 3, 0x41, 0x9a, 0x02]),
            };
            let form = source.packetize(&frame).unwrap();
            // Walk the interleaved units: `$`, channel, length, then the unit.
            let mut rest = &form.data[..];
            while let [b'$', channel, hi, lo, tail @ ..] = rest {
                let len = usize::from(u16::from_be_bytes([*hi, *lo]));
                if *channel == 1 {
                    assert_eq!(tail[1], 200, "an RTCP sender report on the RTCP channel");
                    let packets: Vec<_> = rtcp::parse_compound(&tail[..len]).collect();
                    assert!(
                        matches!(
                            packets[..],
                            [
                                Ok(rtcp::RtcpPacket::SenderReport { .. }),
                                Ok(rtcp::RtcpPacket::SourceDescription { .. })
                            ]
                        ),
                        "{packets:?}"
                    );
                    reports += 1;
                } else {
                    assert_eq!(*channel, 0);
                }
                rest = &tail[len..];
            }
            assert!(rest.is_empty());
        }
        assert_eq!(reports, 3, "at 0, 5 and 10 s of media");
    }
}
