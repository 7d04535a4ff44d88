//! RTP packets from a publisher back into frames.
//!
//! Why: RTSP publishers (ffmpeg, GStreamer, cameras) send RTP; the hub wants whole
//! frames in the canonical form (length-prefixed NAL units, raw AAC/Opus frames), with
//! a keyframe flag and any parameter sets that arrived in band.
//!
//! Call contract: [`RtpDepacketizer::push`] one RTP packet at a time, in sequence order
//! (put a [`super::JitterBuffer`] in front for UDP), then drain [`RtpDepacketizer::poll`]
//! to `None`. An error from `push` is about that packet only: the depacketizer stays
//! usable, and the frame the packet belonged to is dropped.
//!
//! # Invariants
//! - A video frame is the packets sharing one timestamp; it ends at the marker bit or
//!   when the timestamp changes. A sequence gap inside a frame, an FU without its start
//!   or end, or a malformed packet drops that frame (counted in
//!   [`DepacketizerStats::frames_dropped`]); frames after it are unaffected.
//! - A gap between frames drops the frame that follows it, whose head may be lost.
//! - Frames never exceed [`MAX_FRAME_LEN`]; output NAL lengths are 4 bytes.
//! - AUD NAL units are dropped, as in the packetizer.

use super::header::RtpPacket;
use super::{AacParams, RtpCodec, RtpError, MAX_AUS_PER_PACKET, MAX_FRAME_LEN, MAX_QUEUED_FRAMES};
use crate::codec::{
    h264_is_keyframe_nal, h265_is_keyframe_nal, H264_NAL_AUD, H264_NAL_PPS, H264_NAL_SPS,
    H265_NAL_AUD, H265_NAL_PPS, H265_NAL_SPS, H265_NAL_VPS,
};
use crate::codec::{AvcConfig, CodecError, HevcConfig};
use crate::{Frame, MediaKind, Timestamp, Track, TrackConfig, CLOCK_HZ};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::VecDeque;

/// A packet further behind the expected sequence number than this is taken as the
/// sender restarting its numbering, not as a late packet (RFC 3550 A.1's MAX_MISORDER).
const MAX_MISORDER: u16 = 100;
/// Most parameter sets of one type remembered from one frame; real streams send one.
const MAX_PARAMETER_SETS: usize = 8;
/// Largest parameter set remembered: real ones are tens of bytes; VPS/SPS with VUI and
/// scaling lists stay well under this.
const MAX_PARAMETER_SET_LEN: usize = 4096;

/// Parameter sets seen in band (NAL header included, no length prefix).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParameterSets {
    /// H.265 video parameter sets.
    pub vps: Vec<Bytes>,
    /// Sequence parameter sets.
    pub sps: Vec<Bytes>,
    /// Picture parameter sets.
    pub pps: Vec<Bytes>,
}

impl ParameterSets {
    /// Whether no set is present.
    pub fn is_empty(&self) -> bool {
        self.vps.is_empty() && self.sps.is_empty() && self.pps.is_empty()
    }

    /// The track configuration these sets describe, for updating the stream's track.
    pub fn to_config(&self, codec: RtpCodec) -> Result<TrackConfig, CodecError> {
        match codec {
            RtpCodec::H264 => {
                AvcConfig::from_parameter_sets(&self.sps, &self.pps).map(TrackConfig::H264)
            }
            RtpCodec::H265 => HevcConfig::from_parameter_sets(&self.vps, &self.sps, &self.pps)
                .map(TrackConfig::H265),
            _ => Err(CodecError::Unsupported {
                what: "parameter sets for an audio codec",
            }),
        }
    }

    fn clear(&mut self) {
        self.vps.clear();
        self.sps.clear();
        self.pps.clear();
    }
}

/// One reassembled frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepacketizedFrame {
    /// Video or audio.
    pub kind: MediaKind,
    /// The RTP timestamp (of this access unit, for AAC packets carrying several).
    pub timestamp: u32,
    /// `timestamp` unwrapped to 64 bits: the first packet's value, then moved by each
    /// packet's signed 32-bit difference, so it survives the 2^32 wrap.
    pub extended_timestamp: i64,
    /// `extended_timestamp` on the 90 kHz clock. RTP carries no decode time; callers
    /// rebase this (per stream, using RTCP sender reports for lip sync if they wish).
    pub pts: Timestamp,
    /// IDR (H.264), IRAP (H.265); always true for audio.
    pub keyframe: bool,
    /// Length-prefixed NAL units (4-byte lengths) for video, one raw frame for audio.
    pub payload: Bytes,
    /// The parameter sets now in force, when this frame carried sets that differ from
    /// the previous ones (or from the track's, see [`RtpDepacketizer::for_track`]).
    pub parameter_sets: Option<ParameterSets>,
}

impl DepacketizedFrame {
    /// The hub's frame, with `dts = pts`.
    pub fn into_frame(self) -> Frame {
        Frame {
            kind: self.kind,
            dts: self.pts,
            pts: self.pts,
            keyframe: self.keyframe,
            payload: self.payload,
        }
    }
}

/// Counters for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DepacketizerStats {
    /// Packets accepted by `push` (parsed headers).
    pub packets: u64,
    /// Frames emitted.
    pub frames: u64,
    /// Frames dropped: incomplete, after a gap, malformed, or with the output queue full.
    pub frames_dropped: u64,
    /// Sequence numbers skipped over (lost packets).
    pub lost: u64,
    /// Packets dropped as older than already processed ones (late or duplicate).
    pub late: u64,
}

/// Reassembles the frames of one publisher track. See the module docs for the contract.
#[derive(Debug)]
pub struct RtpDepacketizer {
    codec: RtpCodec,
    clock_rate: u32,
    aac: AacParams,
    expected_seq: Option<u16>,
    last_ts: Option<u32>,
    ext_ts: i64,
    // The video frame being assembled.
    frame: BytesMut,
    frame_ts: Option<u32>,
    broken: bool,
    keyframe: bool,
    /// Offset of the length prefix of the NAL unit an FU is filling.
    fu_start: Option<usize>,
    found: ParameterSets,
    known: ParameterSets,
    // The AAC access unit being reassembled from fragments.
    aac_frag: BytesMut,
    aac_frag_size: usize,
    aac_frag_ts: Option<u32>,
    /// A fragment was lost: the rest of this AU is ignored and it is dropped once.
    aac_frag_broken: bool,
    au_sizes: Vec<usize>,
    ready: VecDeque<DepacketizedFrame>,
    stats: DepacketizerStats,
}

impl RtpDepacketizer {
    /// A depacketizer for `codec` on a clock of `clock_rate` Hz (from the SDP rtpmap);
    /// `aac` is the `fmtp` layout for AAC and ignored otherwise.
    pub fn new(codec: RtpCodec, clock_rate: u32, aac: AacParams) -> Result<Self, RtpError> {
        if clock_rate == 0 {
            return Err(RtpError::Malformed { what: "clock rate" });
        }
        if codec == RtpCodec::Aac {
            aac.validate()?;
        }
        if let Some(name) = sending_only(codec) {
            return Err(RtpError::NoCodec { codec: name });
        }
        Ok(RtpDepacketizer {
            codec,
            clock_rate,
            aac,
            expected_seq: None,
            last_ts: None,
            ext_ts: 0,
            frame: BytesMut::new(),
            frame_ts: None,
            broken: false,
            keyframe: false,
            fu_start: None,
            found: ParameterSets::default(),
            known: ParameterSets::default(),
            aac_frag: BytesMut::new(),
            aac_frag_size: 0,
            aac_frag_ts: None,
            aac_frag_broken: false,
            au_sizes: Vec::new(),
            ready: VecDeque::new(),
            stats: DepacketizerStats::default(),
        })
    }

    /// A depacketizer for a known track (AAC-hbr for AAC), which knows the track's
    /// parameter sets, so only different in-band sets are reported.
    pub fn for_track(track: &Track) -> Result<Self, RtpError> {
        let mut d = Self::new(
            RtpCodec::for_track(track)?,
            super::clock_rate(track)?,
            AacParams::HBR,
        )?;
        d.known = match &track.config {
            TrackConfig::H264(c) => ParameterSets {
                vps: Vec::new(),
                sps: c.sps.clone(),
                pps: c.pps.clone(),
            },
            TrackConfig::H265(c) => ParameterSets {
                vps: c.vps.clone(),
                sps: c.sps.clone(),
                pps: c.pps.clone(),
            },
            _ => ParameterSets::default(),
        };
        Ok(d)
    }

    /// Sets the parameter sets in force (from the SDP), so in-band copies of the same
    /// sets are not reported as changes.
    pub fn set_known_parameter_sets(&mut self, sets: ParameterSets) {
        self.known = sets;
    }

    /// The payload format.
    pub fn codec(&self) -> RtpCodec {
        self.codec
    }

    /// The counters so far.
    pub fn stats(&self) -> DepacketizerStats {
        self.stats
    }

    /// The next reassembled frame, if any. Drain to `None` after each push.
    pub fn poll(&mut self) -> Option<DepacketizedFrame> {
        self.ready.pop_front()
    }

    /// Ends the video frame in progress as if its marker had arrived (end of stream).
    pub fn finish(&mut self) {
        self.finish_frame();
    }

    /// Takes one RTP packet (no interleave header).
    pub fn push(&mut self, packet: &[u8]) -> Result<(), RtpError> {
        let p = RtpPacket::parse(packet)?;
        self.stats.packets += 1;
        let seq = p.header.sequence;
        let mut gap = false;
        if let Some(expected) = self.expected_seq {
            let ahead = seq.wrapping_sub(expected);
            if ahead >= 0x8000 && expected.wrapping_sub(seq) <= MAX_MISORDER {
                self.stats.late += 1;
                return Ok(());
            }
            if ahead != 0 {
                gap = true;
                self.stats.lost += u64::from(if ahead >= 0x8000 { 1 } else { ahead });
            }
        }
        self.expected_seq = Some(seq.wrapping_add(1));
        let ts = p.header.timestamp;
        match self.codec {
            RtpCodec::H264 | RtpCodec::H265 => {
                self.video_packet(ts, p.header.marker, p.payload, gap)
            }
            RtpCodec::Aac => self.aac_packet(ts, p.header.marker, p.payload, gap),
            RtpCodec::Opus | RtpCodec::Pcma | RtpCodec::Pcmu => {
                if !p.payload.is_empty() {
                    let ext = self.extend(ts);
                    self.emit(ts, ext, true, Bytes::copy_from_slice(p.payload), None);
                }
                Ok(())
            }
            // `new` refuses these.
            RtpCodec::Vp8 | RtpCodec::Vp9 | RtpCodec::Av1 => Err(RtpError::Unsupported {
                what: "depacketizing VP8, VP9 or AV1",
            }),
        }
    }

    /// Unwraps a 32-bit timestamp against the previous one.
    fn extend(&mut self, ts: u32) -> i64 {
        self.ext_ts = match self.last_ts {
            None => i64::from(ts),
            // The signed difference: reinterpreting the wrapped u32 is the point.
            Some(last) => self
                .ext_ts
                .saturating_add(i64::from(ts.wrapping_sub(last) as i32)),
        };
        self.last_ts = Some(ts);
        self.ext_ts
    }

    fn emit(
        &mut self,
        timestamp: u32,
        extended_timestamp: i64,
        keyframe: bool,
        payload: Bytes,
        parameter_sets: Option<ParameterSets>,
    ) {
        if self.ready.len() >= MAX_QUEUED_FRAMES {
            self.stats.frames_dropped += 1;
            return;
        }
        let scaled = i128::from(extended_timestamp) * i128::from(CLOCK_HZ);
        let pts = scaled.div_euclid(i128::from(self.clock_rate));
        let pts = Timestamp::try_from(pts).unwrap_or(if pts < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        });
        self.stats.frames += 1;
        self.ready.push_back(DepacketizedFrame {
            kind: if self.codec.is_video() {
                MediaKind::Video
            } else {
                MediaKind::Audio
            },
            timestamp,
            extended_timestamp,
            pts,
            keyframe,
            payload,
            parameter_sets,
        });
    }

    // ---- video ----

    fn video_packet(
        &mut self,
        ts: u32,
        marker: bool,
        payload: &[u8],
        gap: bool,
    ) -> Result<(), RtpError> {
        match self.frame_ts {
            Some(current) if current != ts => {
                // The previous frame ended without its marker; if packets are missing
                // we cannot tell whose they were, so it goes.
                if gap {
                    self.broken = true;
                }
                self.finish_frame();
            }
            Some(_) if gap => self.broken = true,
            _ => {}
        }
        if self.frame_ts.is_none() {
            self.frame_ts = Some(ts);
            self.broken = gap;
        }
        let result = if self.broken {
            Ok(())
        } else if self.codec == RtpCodec::H265 {
            self.h265_payload(payload)
        } else {
            self.h264_payload(payload)
        };
        if result.is_err() {
            self.broken = true;
        }
        if marker {
            self.finish_frame();
        }
        result
    }

    fn finish_frame(&mut self) {
        if self.fu_start.is_some() {
            self.broken = true;
        }
        if let Some(ts) = self.frame_ts {
            if self.broken {
                self.stats.frames_dropped += 1;
            } else if !self.frame.is_empty() {
                let params = self.take_parameter_set_change();
                let ext = self.extend(ts);
                let payload = self.frame.split().freeze();
                self.emit(ts, ext, self.keyframe, payload, params);
            }
        }
        self.frame.clear();
        self.frame_ts = None;
        self.broken = false;
        self.keyframe = false;
        self.fu_start = None;
        self.found.clear();
    }

    fn take_parameter_set_change(&mut self) -> Option<ParameterSets> {
        if self.found.is_empty() {
            return None;
        }
        let mut now = self.known.clone();
        for (found, known) in [
            (&mut self.found.vps, &mut now.vps),
            (&mut self.found.sps, &mut now.sps),
            (&mut self.found.pps, &mut now.pps),
        ] {
            if !found.is_empty() {
                *known = std::mem::take(found);
            }
        }
        if now == self.known {
            return None;
        }
        self.known = now.clone();
        Some(now)
    }

    fn room(&self, more: usize) -> Result<(), RtpError> {
        let len = self.frame.len().saturating_add(more);
        if len > MAX_FRAME_LEN {
            return Err(RtpError::TooLarge {
                what: "reassembled frame",
                len,
                limit: MAX_FRAME_LEN,
            });
        }
        Ok(())
    }

    fn no_fu_in_progress(&mut self) -> Result<(), RtpError> {
        if self.fu_start.is_some() {
            return Err(RtpError::Malformed {
                what: "NAL unit inside an unfinished fragmentation unit",
            });
        }
        Ok(())
    }

    /// Appends one complete NAL unit with its length prefix.
    fn append_nal(&mut self, nal: &[u8]) -> Result<(), RtpError> {
        if nal.is_empty() {
            return Ok(());
        }
        if self.is_aud(nal) {
            return Ok(());
        }
        self.room(nal.len().saturating_add(4))?;
        // `room` bounds the length well below 2^32.
        self.frame.put_u32(nal.len() as u32);
        self.frame.put_slice(nal);
        self.inspect(nal);
        Ok(())
    }

    fn is_aud(&self, nal: &[u8]) -> bool {
        let b0 = nal.first().copied().unwrap_or(0);
        match self.codec {
            RtpCodec::H265 => (b0 >> 1) & 0x3f == H265_NAL_AUD,
            _ => b0 & 0x1f == H264_NAL_AUD,
        }
    }

    /// Notes a keyframe, and returns the parameter set list a NAL unit with this first
    /// header byte belongs to.
    fn inspect_header(&mut self, b0: u8) -> Option<&mut Vec<Bytes>> {
        if self.codec == RtpCodec::H265 {
            let t = (b0 >> 1) & 0x3f;
            self.keyframe |= h265_is_keyframe_nal(t);
            match t {
                H265_NAL_VPS => Some(&mut self.found.vps),
                H265_NAL_SPS => Some(&mut self.found.sps),
                H265_NAL_PPS => Some(&mut self.found.pps),
                _ => None,
            }
        } else {
            let t = b0 & 0x1f;
            self.keyframe |= h264_is_keyframe_nal(t);
            match t {
                H264_NAL_SPS => Some(&mut self.found.sps),
                H264_NAL_PPS => Some(&mut self.found.pps),
                _ => None,
            }
        }
    }

    /// Notes keyframes and parameter sets of a complete NAL unit.
    fn inspect(&mut self, nal: &[u8]) {
        let b0 = nal.first().copied().unwrap_or(0);
        if let Some(list) = self.inspect_header(b0) {
            if nal.len() <= MAX_PARAMETER_SET_LEN
                && list.len() < MAX_PARAMETER_SETS
                && !list.iter().any(|s| s.as_ref() == nal)
            {
                list.push(Bytes::copy_from_slice(nal));
            }
        }
    }

    fn h264_payload(&mut self, payload: &[u8]) -> Result<(), RtpError> {
        let Some(&b0) = payload.first() else {
            return Err(RtpError::Truncated {
                what: "H.264 RTP payload",
            });
        };
        match b0 & 0x1f {
            1..=23 => {
                self.no_fu_in_progress()?;
                self.append_nal(payload)
            }
            24 => {
                self.no_fu_in_progress()?;
                self.aggregate(payload.get(1..).unwrap_or_default(), "STAP-A")
            }
            28 => {
                let Some(&fu) = payload.get(1) else {
                    return Err(RtpError::Truncated {
                        what: "FU-A header",
                    });
                };
                let header = [(b0 & 0xe0) | (fu & 0x1f)];
                self.fragment(fu, &header, payload.get(2..).unwrap_or_default())
            }
            _ => Err(RtpError::Unsupported {
                what: "H.264 packetization (STAP-B, MTAP, FU-B, reserved)",
            }),
        }
    }

    fn h265_payload(&mut self, payload: &[u8]) -> Result<(), RtpError> {
        let Some(&[b0, b1]) = payload.get(..2) else {
            return Err(RtpError::Truncated {
                what: "H.265 RTP payload header",
            });
        };
        match (b0 >> 1) & 0x3f {
            0..=47 => {
                self.no_fu_in_progress()?;
                self.append_nal(payload)
            }
            48 => {
                self.no_fu_in_progress()?;
                self.aggregate(payload.get(2..).unwrap_or_default(), "aggregation packet")
            }
            49 => {
                let Some(&fu) = payload.get(2) else {
                    return Err(RtpError::Truncated { what: "FU header" });
                };
                let header = [(b0 & 0x81) | ((fu & 0x3f) << 1), b1];
                self.fragment(fu, &header, payload.get(3..).unwrap_or_default())
            }
            _ => Err(RtpError::Unsupported {
                what: "H.265 packetization (PACI, reserved)",
            }),
        }
    }

    /// STAP-A / AP body: 16-bit size, NAL unit, repeated (no DONL).
    fn aggregate(&mut self, mut rest: &[u8], what: &'static str) -> Result<(), RtpError> {
        while !rest.is_empty() {
            let Some(&[s0, s1]) = rest.get(..2) else {
                return Err(RtpError::Truncated { what });
            };
            let end = 2 + usize::from(u16::from_be_bytes([s0, s1]));
            let Some(nal) = rest.get(2..end) else {
                return Err(RtpError::Truncated { what });
            };
            self.append_nal(nal)?;
            rest = rest.get(end..).unwrap_or_default();
        }
        Ok(())
    }

    /// One FU-A / FU packet: `fu` is the FU header, `header` the rebuilt NAL header.
    fn fragment(&mut self, fu: u8, header: &[u8], data: &[u8]) -> Result<(), RtpError> {
        let (start, end) = (fu & 0x80 != 0, fu & 0x40 != 0);
        if start {
            self.no_fu_in_progress()?;
            self.room(4 + header.len() + data.len())?;
            self.fu_start = Some(self.frame.len());
            self.frame.put_u32(0);
            self.frame.put_slice(header);
        } else if self.fu_start.is_none() {
            return Err(RtpError::Malformed {
                what: "fragmentation unit without its start",
            });
        }
        self.room(data.len())?;
        self.frame.put_slice(data);
        if end {
            let Some(pos) = self.fu_start.take() else {
                return Ok(());
            };
            let body = pos + 4;
            let len = self.frame.len().saturating_sub(body);
            // `room` bounds the frame well below 2^32.
            if let Some(prefix) = self.frame.get_mut(pos..body) {
                prefix.copy_from_slice(&(len as u32).to_be_bytes());
            }
            let b0 = self.frame.get(body).copied().unwrap_or(0);
            if self.is_aud(&[b0]) {
                self.frame.truncate(pos);
            } else if len <= MAX_PARAMETER_SET_LEN {
                let nal = self
                    .frame
                    .get(body..)
                    .map(Bytes::copy_from_slice)
                    .unwrap_or_default();
                self.inspect(&nal);
            } else {
                // Too big to be a parameter set we keep; only the keyframe flag matters.
                let _ = self.inspect_header(b0);
            }
        }
        Ok(())
    }

    // ---- AAC ----

    fn drop_aac_fragment(&mut self) {
        if self.aac_frag_ts.take().is_some() {
            self.stats.frames_dropped += 1;
        }
        self.aac_frag.clear();
        self.aac_frag_size = 0;
        self.aac_frag_broken = false;
    }

    fn aac_packet(
        &mut self,
        ts: u32,
        marker: bool,
        payload: &[u8],
        gap: bool,
    ) -> Result<(), RtpError> {
        if gap && self.aac_frag_ts.is_some() {
            self.aac_frag_broken = true;
        }
        let Some(&[l0, l1]) = payload.get(..2) else {
            return Err(RtpError::Truncated {
                what: "AU-headers-length",
            });
        };
        let bits = usize::from(u16::from_be_bytes([l0, l1]));
        let header_end = 2 + bits.div_ceil(8);
        let Some(headers) = payload.get(2..header_end) else {
            return Err(RtpError::Truncated { what: "AU headers" });
        };
        let data = payload.get(header_end..).unwrap_or_default();
        let mut sizes = std::mem::take(&mut self.au_sizes);
        sizes.clear();
        let parsed = parse_au_headers(&self.aac, headers, bits, &mut sizes);
        let result = parsed.and_then(|()| self.aac_units(ts, marker, gap, data, &sizes));
        self.au_sizes = sizes;
        if result.is_err() {
            self.drop_aac_fragment();
        }
        result
    }

    fn aac_units(
        &mut self,
        ts: u32,
        marker: bool,
        gap: bool,
        data: &[u8],
        sizes: &[usize],
    ) -> Result<(), RtpError> {
        match sizes {
            [] => Ok(()),
            // An AU of no bytes carries nothing to decode, and is no fragment of the
            // one in progress (whose size is not 0): nothing comes of either.
            [0] => {
                self.drop_aac_fragment();
                Ok(())
            }
            [size] if *size > data.len() || self.aac_frag_ts.is_some() => {
                // A fragment of one AU; every fragment carries the whole AU's size.
                let size = *size;
                if self.aac_frag_ts != Some(ts) || self.aac_frag_size != size {
                    self.drop_aac_fragment();
                    self.aac_frag_ts = Some(ts);
                    self.aac_frag_size = size;
                    // After a gap this may not be the first fragment.
                    self.aac_frag_broken = gap && data.len() < size;
                }
                let len = self.aac_frag.len().saturating_add(data.len());
                if len > size {
                    return Err(RtpError::Malformed {
                        what: "AAC fragments longer than their AU",
                    });
                }
                if !self.aac_frag_broken {
                    self.aac_frag.put_slice(data);
                }
                if len == size && !self.aac_frag_broken {
                    self.aac_frag_ts = None;
                    self.aac_frag_size = 0;
                    let au = self.aac_frag.split().freeze();
                    let ext = self.extend(ts);
                    self.emit(ts, ext, true, au, None);
                } else if marker {
                    // The last fragment came and the AU is short or lost a piece.
                    self.drop_aac_fragment();
                }
                Ok(())
            }
            _ => {
                self.drop_aac_fragment();
                let total = sizes.iter().fold(0usize, |n, s| n.saturating_add(*s));
                if total > data.len() {
                    return Err(RtpError::Truncated {
                        what: "AAC access units",
                    });
                }
                let ext = self.extend(ts);
                let mut rest = data;
                let mut offset = 0u32;
                let mut ext_offset = 0i64;
                for &size in sizes {
                    let (au, tail) = rest.split_at_checked(size).unwrap_or((rest, &[]));
                    rest = tail;
                    if !au.is_empty() {
                        self.emit(
                            ts.wrapping_add(offset),
                            ext.saturating_add(ext_offset),
                            true,
                            Bytes::copy_from_slice(au),
                            None,
                        );
                    }
                    offset = offset.wrapping_add(self.aac.constant_duration);
                    ext_offset = ext_offset.saturating_add(i64::from(self.aac.constant_duration));
                }
                Ok(())
            }
        }
    }
}

/// The name of a codec Sluice only sends (no publisher sends it to us over RTP).
fn sending_only(codec: RtpCodec) -> Option<&'static str> {
    match codec {
        RtpCodec::Vp8 => Some("VP8"),
        RtpCodec::Vp9 => Some("VP9"),
        RtpCodec::Av1 => Some("AV1"),
        _ => None,
    }
}

/// Reads the AU-header section (RFC 3640 §3.2.1) into AU sizes.
fn parse_au_headers(
    p: &AacParams,
    headers: &[u8],
    bits: usize,
    sizes: &mut Vec<usize>,
) -> Result<(), RtpError> {
    let mut r = Bits {
        data: headers,
        pos: 0,
        end: bits,
    };
    while r.pos < r.end {
        if sizes.len() >= MAX_AUS_PER_PACKET {
            return Err(RtpError::TooLarge {
                what: "AU count of one packet",
                len: sizes.len() + 1,
                limit: MAX_AUS_PER_PACKET,
            });
        }
        let size = r.read(p.size_length)?;
        let index_len = if sizes.is_empty() {
            p.index_length
        } else {
            p.index_delta_length
        };
        r.read(index_len)?;
        if p.cts_delta_length > 0 && r.read(1)? == 1 {
            r.read(p.cts_delta_length)?;
        }
        if p.dts_delta_length > 0 && r.read(1)? == 1 {
            r.read(p.dts_delta_length)?;
        }
        sizes.push(size as usize);
    }
    Ok(())
}

/// A bit reader bounded by a bit count, for AU headers.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl Bits<'_> {
    /// Reads `n` (at most 16) bits.
    fn read(&mut self, n: u8) -> Result<u32, RtpError> {
        let mut v = 0u32;
        for _ in 0..n.min(16) {
            if self.pos >= self.end {
                return Err(RtpError::Truncated { what: "AU header" });
            }
            let byte = self
                .data
                .get(self.pos / 8)
                .ok_or(RtpError::Truncated { what: "AU header" })?;
            v = (v << 1) | u32::from((byte >> (7 - self.pos % 8)) & 1);
            self.pos += 1;
        }
        Ok(v)
    }
}
