//! [`TsMuxer`]: frames in, MPEG-TS packets out.
//!
//! Why its own file: the muxer is the only part that knows codecs — Annex-B access
//! units with AUD and parameter sets for video, ADTS for AAC — and the PCR schedule.
//! The packet and table layers below it know only bytes.

use super::packet::{self, clock33, pes_header, Adaptation, MAX_PES_HEADER_LEN};
use super::psi::{self, PmtStream};
use super::{
    SpliceInfo, TsError, AUDIO_PID, CUE_PID, PCR_LEAD, PCR_MIN_GAP, PMT_PID, STREAM_TYPE_AAC_ADTS,
    STREAM_TYPE_H264, STREAM_TYPE_H265, STREAM_TYPE_MPEG1_AUDIO, STREAM_TYPE_MPEG2_AUDIO,
    TIMESTAMP_OFFSET, VIDEO_PID,
};
use crate::codec::{
    h264_nal_type, h265_nal_type, nal_units, AacConfig, H264_NAL_AUD, H264_NAL_PPS, H264_NAL_SPS,
    H265_NAL_AUD, H265_NAL_PPS, H265_NAL_SPS, H265_NAL_VPS,
};
use crate::{Frame, MediaKind, Timestamp, Track, TrackConfig};
use bytes::{Bytes, BytesMut};

/// `stream_id` of the (first) video stream.
const STREAM_ID_VIDEO: u8 = 0xe0;
/// `stream_id` of the (first) MPEG audio stream.
const STREAM_ID_AUDIO: u8 = 0xc0;
/// Annex-B start code written before every NAL unit.
const START_CODE: &[u8] = &[0, 0, 0, 1];
/// H.264 access unit delimiter: `primary_pic_type` 7 (any slice type), stop bit.
const H264_AUD: &[u8] = &[H264_NAL_AUD, 0xf0];
/// H.265 access unit delimiter: layer 0, temporal id 1, `pic_type` 2 (any), stop bit.
const H265_AUD: &[u8] = &[H265_NAL_AUD << 1, 0x01, 0x50];
/// Longest ADTS header (no CRC).
const ADTS_LEN: usize = 7;

/// Muxes the frames of one stream (up to one video and one audio track) into MPEG-TS.
///
/// # Call contract
/// Call [`write_tables`](Self::write_tables) at the start of every segment (and before
/// the first frame), then [`write_frame`](Self::write_frame) for each frame in decode
/// order. Everything goes into the caller's buffer; the muxer keeps only continuity
/// counters, the time of the last PCR and a scratch list reused across frames.
/// Segments cut at video keyframes decode on their own: keyframes carry the parameter
/// sets and a PCR.
#[derive(Debug)]
pub struct TsMuxer {
    video: Option<VideoStream>,
    audio: Option<AudioStream>,
    pat: Vec<u8>,
    pmt: Vec<u8>,
    pat_cc: u8,
    pmt_cc: u8,
    /// What the PMT lists, to list a cue stream later.
    pcr_pid: u16,
    streams: Vec<PmtStream>,
    /// The cue PID's continuity counter, once a cue was written.
    cue_cc: Option<u8>,
    /// Decode time of the frame that carried the last PCR; `None` forces the next.
    last_pcr: Option<Timestamp>,
    /// The pieces of the access unit being written (start codes, NAL units).
    scratch: Vec<Bytes>,
}

#[derive(Debug)]
struct VideoStream {
    codec: VideoCodec,
    nal_length_size: u8,
    /// The track's parameter sets in the order an access unit needs them, with their NAL type.
    parameter_sets: Vec<(u8, Bytes)>,
    cc: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VideoCodec {
    H264,
    H265,
}

impl VideoCodec {
    fn nal_type(self, nal: &[u8]) -> Option<u8> {
        match self {
            VideoCodec::H264 => h264_nal_type(nal),
            VideoCodec::H265 => h265_nal_type(nal),
        }
    }

    fn aud_type(self) -> u8 {
        match self {
            VideoCodec::H264 => H264_NAL_AUD,
            VideoCodec::H265 => H265_NAL_AUD,
        }
    }

    fn aud(self) -> &'static [u8] {
        match self {
            VideoCodec::H264 => H264_AUD,
            VideoCodec::H265 => H265_AUD,
        }
    }
}

#[derive(Debug)]
struct AudioStream {
    codec: AudioCodec,
    cc: u8,
}

#[derive(Debug)]
enum AudioCodec {
    Aac(AacConfig),
    Mp3,
}

impl TsMuxer {
    /// A muxer for `video` (H.264 or H.265) and `audio` (AAC that ADTS can describe, or
    /// MP3). Either may be absent, not both. Other codecs, and a video track passed as
    /// audio or the reverse, are [`TsError::Unsupported`].
    pub fn new(video: Option<&Track>, audio: Option<&Track>) -> Result<TsMuxer, TsError> {
        let video = video.map(video_stream).transpose()?;
        let audio = audio.map(audio_stream).transpose()?;
        let mut streams = Vec::with_capacity(2);
        if let Some(v) = &video {
            let stream_type = match v.codec {
                VideoCodec::H264 => STREAM_TYPE_H264,
                VideoCodec::H265 => STREAM_TYPE_H265,
            };
            streams.push(PmtStream {
                stream_type,
                pid: VIDEO_PID,
            });
        }
        if let Some((_, stream_type)) = &audio {
            streams.push(PmtStream {
                stream_type: *stream_type,
                pid: AUDIO_PID,
            });
        }
        let pcr_pid = match (&video, &audio) {
            (Some(_), _) => VIDEO_PID,
            (None, Some(_)) => AUDIO_PID,
            (None, None) => {
                return Err(TsError::Unsupported {
                    what: "stream without tracks",
                })
            }
        };
        Ok(TsMuxer {
            video,
            audio: audio.map(|(a, _)| a),
            pat: psi::pat_section(),
            pmt: psi::pmt_section(pcr_pid, &streams),
            pat_cc: 0,
            pmt_cc: 0,
            pcr_pid,
            streams,
            cue_cc: None,
            last_pcr: None,
            scratch: Vec::new(),
        })
    }

    /// Writes the PAT and the PMT, one packet each. The next frame on the PCR PID
    /// carries a PCR.
    pub fn write_tables(&mut self, out: &mut BytesMut) {
        psi::write_section(out, 0, &mut self.pat_cc, &self.pat);
        psi::write_section(out, PMT_PID, &mut self.pmt_cc, &self.pmt);
        self.last_pcr = None;
    }

    /// Writes an SCTE-35 cue that splices at `at` (the frames' clock) on [`CUE_PID`],
    /// retimed to the PTS this muxer gives `at` ([`SpliceInfo::retimed`]). The first
    /// cue adds the cue stream to the PMT (version 1) and writes the tables again
    /// first, so a demuxer knows the PID before its first section.
    pub fn write_cue(&mut self, info: &SpliceInfo, at: Timestamp, out: &mut BytesMut) {
        if self.cue_cc.is_none() {
            self.streams.push(PmtStream {
                stream_type: psi::STREAM_TYPE_SCTE35,
                pid: CUE_PID,
            });
            self.pmt = psi::pmt_section_versioned(self.pcr_pid, &self.streams, 1);
            self.write_tables(out);
        }
        let section = info.retimed(clock33(at.wrapping_add(TIMESTAMP_OFFSET)));
        let cc = self.cue_cc.get_or_insert(0);
        psi::write_section(out, CUE_PID, cc, &section);
    }

    /// Writes one frame as a PES packet in whole transport packets.
    ///
    /// Video: an AUD, then on keyframes whichever of the track's parameter sets the
    /// frame lacks (SPS and PPS; VPS, SPS and PPS for H.265), then the frame's NAL units
    /// (any AUD of its own dropped), each behind a 4-byte start code. PTS always, DTS when
    /// it differs. Keyframes set `random_access_indicator` and carry a PCR, as does any
    /// frame on the PCR PID [`PCR_MIN_GAP`] or more after the last PCR. Audio: AAC behind
    /// its ADTS header, MP3 as it is; in a stream without video every audio frame is a
    /// random access point.
    ///
    /// Writes nothing on error: a frame without a track of its kind, a payload whose NAL
    /// lengths run past its end or that holds no NAL unit, an AAC frame over 8184 bytes.
    pub fn write_frame(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), TsError> {
        match frame.kind {
            MediaKind::Video => self.write_video(frame, out),
            MediaKind::Audio => self.write_audio(frame, out),
        }
    }

    fn write_video(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), TsError> {
        let Some(video) = &mut self.video else {
            return Err(TsError::NoTrack {
                kind: MediaKind::Video,
            });
        };
        // First pass: validate the payload and see which NAL types it has.
        let mut present = 0u64;
        let mut count = 0usize;
        for nal in nal_units(&frame.payload, video.nal_length_size) {
            let nal = nal?;
            if let Some(t) = video.codec.nal_type(&nal) {
                present |= 1u64 << (t & 0x3f);
            }
            count += 1;
        }
        if count == 0 {
            return Err(TsError::Malformed {
                what: "video frame without NAL units",
            });
        }
        let has = |t: u8| present & (1u64 << (t & 0x3f)) != 0;

        let scratch = &mut self.scratch;
        scratch.clear();
        let start_code = Bytes::from_static(START_CODE);
        scratch.push(start_code.clone());
        scratch.push(Bytes::from_static(video.codec.aud()));
        if frame.keyframe {
            for (t, set) in &video.parameter_sets {
                if !has(*t) {
                    scratch.push(start_code.clone());
                    scratch.push(set.clone());
                }
            }
        }
        let aud_type = video.codec.aud_type();
        for nal in nal_units(&frame.payload, video.nal_length_size).flatten() {
            if video.codec.nal_type(&nal) == Some(aud_type) {
                continue;
            }
            scratch.push(start_code.clone());
            scratch.push(nal);
        }
        let len = scratch
            .iter()
            .fold(0usize, |n, p| n.saturating_add(p.len()));

        let (pts, dts) = pes_times(frame);
        let (header, header_len) = pes_header(STREAM_ID_VIDEO, pts, dts, len);
        let force_pcr = frame.keyframe;
        let pcr = pcr_due(&mut self.last_pcr, frame.dts, force_pcr);
        let af = Adaptation {
            pcr,
            random_access: frame.keyframe,
        };
        packet::write_pes(
            out,
            VIDEO_PID,
            &mut video.cc,
            af,
            header.get(..header_len).unwrap_or(&header),
            scratch,
        );
        Ok(())
    }

    fn write_audio(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), TsError> {
        let Some(audio) = &mut self.audio else {
            return Err(TsError::NoTrack {
                kind: MediaKind::Audio,
            });
        };
        let mut adts = [0u8; ADTS_LEN];
        let prefix_len = match &audio.codec {
            AudioCodec::Aac(c) => {
                adts = c.adts_header(frame.payload.len())?;
                ADTS_LEN
            }
            AudioCodec::Mp3 => 0,
        };
        let len = frame.payload.len().saturating_add(prefix_len);
        // Only video may leave PES_packet_length unbounded: 3 flag bytes and a PTS
        // precede the data.
        let limit = usize::from(u16::MAX) - 8;
        if len > limit {
            return Err(TsError::TooLarge {
                what: "audio PES packet",
                len,
                limit,
            });
        }
        let (pts, _) = pes_times(frame);
        let (pes, pes_len) = pes_header(STREAM_ID_AUDIO, pts, None, len);
        let mut header = [0u8; MAX_PES_HEADER_LEN + ADTS_LEN];
        let mut n = 0;
        for (dst, src) in header
            .iter_mut()
            .zip(pes.iter().take(pes_len).chain(adts.iter().take(prefix_len)))
        {
            *dst = *src;
            n += 1;
        }
        let on_pcr_pid = self.video.is_none();
        let pcr = if on_pcr_pid {
            pcr_due(&mut self.last_pcr, frame.dts, false)
        } else {
            None
        };
        let af = Adaptation {
            pcr,
            random_access: on_pcr_pid,
        };
        packet::write_pes(
            out,
            AUDIO_PID,
            &mut audio.cc,
            af,
            header.get(..n).unwrap_or(&header),
            std::slice::from_ref(&frame.payload),
        );
        Ok(())
    }
}

/// The PES form of a frame's PTS, and of its DTS when that differs.
fn pes_times(frame: &Frame) -> (u64, Option<u64>) {
    let pts = clock33(frame.pts.wrapping_add(TIMESTAMP_OFFSET));
    let dts = clock33(frame.dts.wrapping_add(TIMESTAMP_OFFSET));
    (pts, (dts != pts).then_some(dts))
}

/// The PCR base for a frame decoded at `dts`, if one is due: when `force`d, when no PCR
/// went out since the tables, or when `dts` moved [`PCR_MIN_GAP`] or more from the last
/// (backwards too: a jump in the source).
fn pcr_due(last: &mut Option<Timestamp>, dts: Timestamp, force: bool) -> Option<u64> {
    let due = force
        || last.is_none_or(|l| {
            dts.checked_sub(l)
                .is_none_or(|d| !(0..PCR_MIN_GAP).contains(&d))
        });
    if !due {
        return None;
    }
    *last = Some(dts);
    Some(clock33(
        dts.wrapping_add(TIMESTAMP_OFFSET).wrapping_sub(PCR_LEAD),
    ))
}

fn video_stream(track: &Track) -> Result<VideoStream, TsError> {
    let (codec, nal_length_size, parameter_sets) = match &track.config {
        TrackConfig::H264(c) => {
            let sets = c
                .sps
                .iter()
                .map(|s| (H264_NAL_SPS, s.clone()))
                .chain(c.pps.iter().map(|p| (H264_NAL_PPS, p.clone())))
                .collect();
            (VideoCodec::H264, c.nal_length_size, sets)
        }
        TrackConfig::H265(c) => {
            let sets = c
                .vps
                .iter()
                .map(|s| (H265_NAL_VPS, s.clone()))
                .chain(c.sps.iter().map(|s| (H265_NAL_SPS, s.clone())))
                .chain(c.pps.iter().map(|p| (H265_NAL_PPS, p.clone())))
                .collect();
            (VideoCodec::H265, c.nal_length_size, sets)
        }
        TrackConfig::Av1 { .. } => return Err(TsError::Unsupported { what: "AV1" }),
        TrackConfig::Vp9 { .. } => return Err(TsError::Unsupported { what: "VP9" }),
        TrackConfig::Vp8 { .. } => return Err(TsError::Unsupported { what: "VP8" }),
        _ => {
            return Err(TsError::Unsupported {
                what: "audio track as video",
            })
        }
    };
    Ok(VideoStream {
        codec,
        nal_length_size,
        parameter_sets,
        cc: 0,
    })
}

fn audio_stream(track: &Track) -> Result<(AudioStream, u8), TsError> {
    let (codec, stream_type) = match &track.config {
        TrackConfig::Aac(c) => {
            // Fail now, not on every frame, if ADTS cannot describe this configuration.
            c.adts_header(0)?;
            (AudioCodec::Aac(c.clone()), STREAM_TYPE_AAC_ADTS)
        }
        TrackConfig::Mp3 { sample_rate, .. } => {
            let stream_type = if *sample_rate >= 32_000 {
                STREAM_TYPE_MPEG1_AUDIO
            } else {
                STREAM_TYPE_MPEG2_AUDIO
            };
            (AudioCodec::Mp3, stream_type)
        }
        TrackConfig::Opus(_) => return Err(TsError::Unsupported { what: "Opus" }),
        TrackConfig::Pcma { .. } | TrackConfig::Pcmu { .. } => {
            return Err(TsError::Unsupported { what: "G.711" })
        }
        _ => {
            return Err(TsError::Unsupported {
                what: "video track as audio",
            })
        }
    };
    Ok((AudioStream { codec, cc: 0 }, stream_type))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::AvcConfig;

    fn h264_track() -> Track {
        let sps = Bytes::from_static(&[
            0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00,
            0x03, 0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0x20, 0xf1, 0x83, 0x19, 0x60,
        ]);
        let pps = Bytes::from_static(&[0x68, 0xef, 0x8f, 0xcb]);
        let c = AvcConfig::from_parameter_sets(&[sps], &[pps]);
        let Ok(c) = c else { panic!("{c:?}") };
        Track::new(TrackConfig::H264(c))
    }

    fn frame(kind: MediaKind, t: i64, keyframe: bool, payload: &'static [u8]) -> Frame {
        Frame {
            kind,
            dts: t,
            pts: t,
            keyframe,
            payload: Bytes::from_static(payload),
        }
    }

    /// A `splice_insert` out at `pts` with a segmentation descriptor whose UPID is
    /// `upid_len` bytes, so the section passes one packet when it is long.
    fn cue_section(pts: u64, upid_len: usize) -> SpliceInfo {
        let mut s = vec![0xfc, 0x30, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xf0, 0, 0x05];
        s.extend_from_slice(&[0, 0, 0, 9, 0x7f, 0xcf]); // event 9, out, program, timed
        s.push(0xfe | (pts >> 32) as u8);
        s.extend_from_slice(&(pts as u32).to_be_bytes());
        s.extend_from_slice(&[0, 1, 0, 0]);
        s[12] = (s.len() - 14) as u8;
        let mut d = vec![0x02, 0, b'C', b'U', b'E', b'I', 0, 0, 0, 9, 0x7f, 0xbf];
        d.extend_from_slice(&[0x0c, upid_len as u8]);
        d.extend(std::iter::repeat_n(0x41, upid_len));
        d.extend_from_slice(&[0x34, 0, 0]);
        d[1] = (d.len() - 2) as u8;
        s.extend_from_slice(&(d.len() as u16).to_be_bytes());
        s.extend_from_slice(&d);
        let len = s.len() - 3 + 4;
        s[1] = 0x30 | (len >> 8) as u8;
        s[2] = len as u8;
        let crc = psi::crc32_mpeg2(&s);
        s.extend_from_slice(&crc.to_be_bytes());
        SpliceInfo::parse(Bytes::from(s)).expect("section")
    }

    #[test]
    fn cues_pass_through_retimed_to_this_clock_and_listed_in_the_pmt() {
        use crate::ts::{Demuxed, TsDemuxer};
        let mut m = TsMuxer::new(Some(&h264_track()), None).expect("h264");
        let mut out = BytesMut::new();
        m.write_tables(&mut out);
        let key = frame(MediaKind::Video, 0, true, &[0, 0, 0, 2, 0x65, 0x88]);
        m.write_frame(&key, &mut out).expect("frame");
        // The input's clock put the splice at 7_000_000; this stream's, 2 s in.
        let info = cue_section(7_000_000, 180);
        m.write_cue(&info, 180_000, &mut out);
        m.write_cue(&cue_section(7_000_000, 0), 270_000, &mut out);
        let next = frame(MediaKind::Video, 3600, false, &[0, 0, 0, 2, 0x41, 0x9a]);
        m.write_frame(&next, &mut out).expect("frame");
        assert_eq!(out.len() % 188, 0);
        let mut d = TsDemuxer::new();
        d.push(&out);
        let cues: Vec<_> = std::iter::from_fn(|| d.poll())
            .filter_map(|o| match o {
                Demuxed::Cue(c) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(cues.len(), 2, "both read, the long one across packets");
        assert_eq!((cues[0].at, cues[1].at), (180_000, 270_000));
        assert_eq!(
            cues[0].info.command, info.command,
            "only the adjustment changed"
        );
        assert_eq!(cues[0].info.segmentations, info.segmentations);
        assert!(cues[0].info.raw.len() > 184);
    }

    #[test]
    fn aud_bytes() {
        assert_eq!(H264_AUD, &[0x09, 0xf0]);
        assert_eq!(H265_AUD, &[0x46, 0x01, 0x50]);
        assert_eq!(h265_nal_type(H265_AUD), Some(H265_NAL_AUD));
    }

    #[test]
    fn pcr_schedule() {
        let mut last = None;
        assert!(pcr_due(&mut last, 0, false).is_some());
        assert!(pcr_due(&mut last, 3000, false).is_none());
        assert!(pcr_due(&mut last, 4500, false).is_some());
        assert!(pcr_due(&mut last, 4501, true).is_some());
        assert!(pcr_due(&mut last, 0, false).is_some()); // backwards
        assert!(pcr_due(&mut last, i64::MAX, false).is_some());
        assert!(pcr_due(&mut last, i64::MIN, false).is_some());
        let mut last = Some(0);
        assert_eq!(
            pcr_due(&mut last, 9000, false),
            Some((9000 + TIMESTAMP_OFFSET - PCR_LEAD) as u64)
        );
    }

    #[test]
    fn bad_frames_write_nothing() {
        let mut m = TsMuxer::new(Some(&h264_track()), None).expect("h264");
        let mut out = BytesMut::new();
        let truncated = frame(MediaKind::Video, 0, true, &[0, 0, 0, 9, 0x65]);
        assert!(matches!(
            m.write_frame(&truncated, &mut out),
            Err(TsError::Codec(_))
        ));
        let empty = frame(MediaKind::Video, 0, true, &[]);
        assert!(matches!(
            m.write_frame(&empty, &mut out),
            Err(TsError::Malformed { .. })
        ));
        let audio = frame(MediaKind::Audio, 0, true, &[1, 2, 3]);
        assert_eq!(
            m.write_frame(&audio, &mut out),
            Err(TsError::NoTrack {
                kind: MediaKind::Audio
            })
        );
        assert!(out.is_empty());
    }

    #[test]
    fn unsupported_tracks() {
        assert!(TsMuxer::new(None, None).is_err());
        let opus = Track::new(TrackConfig::Opus(crate::codec::OpusConfig::stereo_48k()));
        assert_eq!(
            TsMuxer::new(None, Some(&opus)).err(),
            Some(TsError::Unsupported { what: "Opus" })
        );
        let video = h264_track();
        assert!(TsMuxer::new(None, Some(&video)).is_err());
        assert!(TsMuxer::new(Some(&opus), None).is_err());
    }

    #[test]
    fn keyframe_gets_aud_and_parameter_sets_once() {
        let track = h264_track();
        let mut m = TsMuxer::new(Some(&track), None).expect("h264");
        let mut out = BytesMut::new();
        // A keyframe that carries its own AUD and SPS but no PPS.
        let f = frame(
            MediaKind::Video,
            0,
            true,
            &[
                0, 0, 0, 2, 0x09, 0x10, 0, 0, 0, 2, 0x67, 0x01, 0, 0, 0, 2, 0x65, 0x88,
            ],
        );
        m.write_frame(&f, &mut out).expect("muxes");
        assert_eq!(out.len(), packet::PACKET_LEN);
        // Adaptation field: PCR and random access, stuffed so that the 14-byte PES header
        // and the 26 bytes of access unit end the packet: 184 - 1 - 14 - 26 = 143.
        assert_eq!(&out[4..6], &[143, 0x50]);
        let expected: &[u8] = &[
            0, 0, 0, 1, 0x09, 0xf0, 0, 0, 0, 1, 0x68, 0xef, 0x8f, 0xcb, 0, 0, 0, 1, 0x67, 0x01, 0,
            0, 0, 1, 0x65, 0x88,
        ];
        // The last packet is stuffed in its adaptation field, so the PES ends the packet.
        assert!(out.ends_with(expected), "{:02x?}", &out[..]);
    }
}
