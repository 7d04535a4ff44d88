//! [`RtpSource`]: the RTP packetizers of one stream, one per kind of track, fed every
//! frame in stream order, with an RTCP sender report every few seconds of media.
//!
//! Why a type of its own: RTSP players of a stream share its RTP bytes, so a frame is
//! packetized once, by whoever publishes the stream, and the numbering must survive the
//! publisher: sequence numbers and timestamps continue across a publisher's return and
//! across decoder configuration changes, as if one source had sent everything.
//!
//! Sans-IO: the random starting points (RFC 3550 §5.1) and the wall clock of sender
//! reports are inputs ([`RtpStart`], the `now` of [`RtpSource::packetize`]).
//!
//! # Invariants
//! - Per kind, sequence numbers run on by one per packet, and timestamps follow the
//!   frames' presentation times, whatever packetizer (codec) is current.
//! - A frame RTP cannot carry consumes nothing: no sequence number, no report.

use super::rtcp;
use super::{RtpCodec, RtpFrame, RtpPacketizer, DEFAULT_MTU};
use crate::{Frame, MediaKind, Timestamp, Track, CLOCK_HZ};
use bytes::{Bytes, BytesMut};
use std::time::Duration;

/// Media time between RTCP sender reports of a track (RFC 3550 suggests ~5 s): they
/// map RTP timestamps to wall-clock time, which players use to sync audio and video.
pub const SENDER_REPORT_TICKS: Timestamp = 5 * CLOCK_HZ as Timestamp;

/// The CNAME of our sender reports' SDES (RFC 3550 requires one in each compound).
const CNAME: &str = "sluice";

/// The interleaved RTP channel of a kind of track, the same for every RTSP player
/// (RTCP goes on the next one): so the interleaved bytes of a frame are shared.
pub fn rtp_channel(kind: MediaKind) -> u8 {
    match kind {
        MediaKind::Video => 0,
        MediaKind::Audio => 2,
    }
}

/// Where a track's RTP numbering starts. RFC 3550 §5.1 wants each value random, so
/// that sources are hard to guess and a restarted one does not look like the old.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpStart {
    /// The synchronization source identifier.
    pub ssrc: u32,
    /// The first sequence number.
    pub seq: u16,
    /// Added to every RTP timestamp.
    pub timestamp: u32,
}

/// All RTP packets of one frame, each behind its interleave header, in ONE buffer: an
/// RTSP/TCP player gets the whole frame in one `writev` entry.
#[derive(Debug, Clone)]
pub struct RtpForm {
    /// The interleaved packets (and a sender report after them when one was due).
    pub data: Bytes,
    /// Sequence number of the first packet (`RTP-Info: seq=` for a player starting here).
    pub first_seq: u16,
    /// RTP timestamp of the first packet (`RTP-Info: rtptime=`).
    pub timestamp: u32,
}

/// The RTP packetizers of one stream; see the module docs.
///
/// # Call contract
/// [`RtpSource::set_track`] for each decoder configuration, then
/// [`RtpSource::packetize`] for each frame in stream order, with the wall-clock time.
#[derive(Debug)]
pub struct RtpSource {
    video: Option<RtpPacketizer>,
    audio: Option<RtpPacketizer>,
    /// Per kind: where numbering goes on while no packetizer exists (a codec RTP does
    /// not carry), so a later one continues it.
    start: [RtpStart; 2],
    /// Per kind: presentation time of the last RTCP sender report.
    last_report: [Option<Timestamp>; 2],
    scratch: RtpFrame,
}

fn index(kind: MediaKind) -> usize {
    usize::from(kind == MediaKind::Audio)
}

impl RtpSource {
    /// A source whose video and audio numbering start at `video` and `audio`.
    pub fn new(video: RtpStart, audio: RtpStart) -> Self {
        RtpSource {
            video: None,
            audio: None,
            start: [video, audio],
            last_report: [None, None],
            scratch: RtpFrame::new(),
        }
    }

    fn slot(&mut self, kind: MediaKind) -> (&mut Option<RtpPacketizer>, &mut RtpStart) {
        let [video, audio] = &mut self.start;
        match kind {
            MediaKind::Video => (&mut self.video, video),
            MediaKind::Audio => (&mut self.audio, audio),
        }
    }

    /// A new decoder configuration: a new packetizer that continues the numbering (none,
    /// and the numbering waits, for a codec RTP does not carry).
    pub fn set_track(&mut self, track: &Track) {
        let (slot, start) = self.slot(track.kind());
        // VP8/VP9 picture IDs continue too, so viewers see no jump back.
        let mut picture_id = 0;
        if let Some(old) = slot.take() {
            *start = RtpStart {
                ssrc: old.ssrc(),
                seq: old.next_seq(),
                timestamp: old.rtp_timestamp(0),
            };
            picture_id = old.next_picture_id();
        }
        let Ok(codec) = RtpCodec::for_track(track) else {
            return;
        };
        if let Ok(mut p) =
            RtpPacketizer::new(track, codec.default_payload_type(), start.ssrc, DEFAULT_MTU)
        {
            p.set_start(start.seq, start.timestamp);
            p.set_picture_id(picture_id);
            *slot = Some(p);
        }
    }

    /// The RTP form of a frame whose track was set, or `None` when RTP cannot carry it.
    /// Every [`SENDER_REPORT_TICKS`] of a track's media, an interleaved RTCP sender
    /// report (stamped `now`, the wall-clock time since the Unix epoch) follows the
    /// frame's packets in the same buffer, so every player gets it with no work of its
    /// own.
    pub fn packetize(&mut self, frame: &Frame, now: Duration) -> Option<RtpForm> {
        let channel = rtp_channel(frame.kind);
        let i = index(frame.kind);
        let p = match frame.kind {
            MediaKind::Video => self.video.as_mut()?,
            MediaKind::Audio => self.audio.as_mut()?,
        };
        // On error nothing was written and no sequence number consumed.
        p.packetize_interleaved(frame, channel, &mut self.scratch)
            .ok()?;
        let f = self.scratch.freeze()?;
        let [video_report, audio_report] = &mut self.last_report;
        let last_report = if i == 0 { video_report } else { audio_report };
        let due = last_report.is_none_or(|last| frame.pts - last >= SENDER_REPORT_TICKS);
        let data = if due {
            *last_report = Some(frame.pts);
            // A compound packet: the report, then the SDES CNAME RFC 3550 requires.
            let mut report = BytesMut::new();
            rtcp::write_sender_report(
                &mut report,
                &p.sender_report(rtcp::ntp_timestamp(now), frame.pts),
            );
            rtcp::write_sdes_cname(&mut report, p.ssrc(), CNAME);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::AvcConfig;
    use crate::TrackConfig;

    fn track(level: u8) -> Track {
        let sps = Bytes::from(vec![
            0x67, 0x42, 0xc0, level, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8,
        ]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
        ))
    }

    fn frame(n: i64) -> Frame {
        Frame {
            kind: MediaKind::Video,
            dts: n * 3600,
            pts: n * 3600,
            keyframe: n % 25 == 0,
            payload: Bytes::from_static(&[0, 0, 0, 3, 0x41, 0x9a, 0x02]),
        }
    }

    fn start(ssrc: u32) -> RtpStart {
        RtpStart {
            ssrc,
            seq: 65_530,
            timestamp: 1000,
        }
    }

    /// The RTCP packets interleaved in a frame's form, checking the RTP ones' channel.
    fn reports(form: &RtpForm) -> Vec<Vec<Result<rtcp::RtcpPacket, super::super::RtpError>>> {
        let mut out = Vec::new();
        let mut rest = &form.data[..];
        while let [b'$', channel, hi, lo, tail @ ..] = rest {
            let len = usize::from(u16::from_be_bytes([*hi, *lo]));
            if *channel == 1 {
                assert_eq!(tail[1], 200, "an RTCP sender report on the RTCP channel");
                out.push(rtcp::parse_compound(&tail[..len]).collect());
            } else {
                assert_eq!(*channel, 0);
            }
            rest = &tail[len..];
        }
        assert!(rest.is_empty());
        out
    }

    #[test]
    fn sender_reports_follow_frames_every_five_seconds() {
        let mut source = RtpSource::new(start(7), start(8));
        source.set_track(&track(0x1e));
        let mut count = 0;
        for n in 0..(11 * 25) {
            // The wall clock is an input: a fake one, a second per 25 frames.
            let now = Duration::from_millis(1_700_000_000_000 + n as u64 * 40);
            let form = source.packetize(&frame(n), now).expect("packetized");
            for packets in reports(&form) {
                match &packets[..] {
                    [Ok(rtcp::RtcpPacket::SenderReport { info, .. }), Ok(rtcp::RtcpPacket::SourceDescription { .. })] =>
                    {
                        assert_eq!(info.ntp_time, rtcp::ntp_timestamp(now));
                        assert_eq!(info.ssrc, 7);
                    }
                    other => panic!("{other:?}"),
                }
                count += 1;
            }
        }
        assert_eq!(count, 3, "at 0, 5 and 10 s of media");
    }

    #[test]
    fn numbering_continues_across_configuration_changes() {
        let mut source = RtpSource::new(start(7), start(8));
        let now = Duration::ZERO;
        assert!(source.packetize(&frame(0), now).is_none(), "no track yet");
        source.set_track(&track(0x1e));
        let a = source.packetize(&frame(0), now).expect("packetized");
        assert_eq!(a.first_seq, 65_530);
        assert_eq!(a.timestamp, 1000);
        source.set_track(&track(0x1f));
        let b = source.packetize(&frame(1), now).expect("packetized");
        assert_eq!(b.first_seq, 65_531, "one packet later, across the change");
        assert_eq!(b.timestamp, 1000 + 3600);
        assert_eq!(
            u32::from_be_bytes([b.data[12], b.data[13], b.data[14], b.data[15]]),
            7,
            "the same SSRC"
        );
    }

    #[test]
    fn vp9_picture_ids_continue_across_configuration_changes() {
        let vp9 = |b: u8| {
            Track::new(TrackConfig::Vp9 {
                record: Bytes::from(vec![b]),
            })
        };
        let mut source = RtpSource::new(start(7), start(8));
        let frame = |n: i64| Frame {
            payload: Bytes::from_static(&[0x86, 0, 0]),
            ..frame(n)
        };
        // Interleaved: 4 bytes, then the RTP header, then the descriptor's picture ID.
        let picture_id = |form: &RtpForm| u16::from_be_bytes([form.data[17], form.data[18]]);
        source.set_track(&vp9(1));
        let a = source.packetize(&frame(0), Duration::ZERO).expect("vp9");
        source.set_track(&vp9(2));
        let b = source.packetize(&frame(1), Duration::ZERO).expect("vp9");
        assert_eq!(picture_id(&a), 0x8000);
        assert_eq!(picture_id(&b), 0x8001);
    }
}
