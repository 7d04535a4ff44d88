//! H.264 and H.265 access units: Annex-B byte streams to length-prefixed NAL units,
//! and the parameter sets that make up the track.
//!
//! Why: MPEG-TS carries video as Annex-B (start codes); the hub's frames carry 4-byte
//! length prefixes, and every output needs the track's `avcC`/`hvcC` record, which TS
//! never sends: we build it from the parameter sets found in band.
//!
//! # Invariants
//! - Access unit delimiters and filler data never reach a frame; parameter sets stay
//!   in it (a player joining at a keyframe gets them in band too).
//! - No frame goes out before a track built from parameter sets was announced.
//! - A new track is announced exactly when the parameter sets in force differ from
//!   those of the last announced track.

use bytes::{BufMut, Bytes, BytesMut};

use super::Outputs;
use crate::codec::{
    h264_is_keyframe_nal, h264_nal_type, h265_is_keyframe_nal, h265_nal_type, AvcConfig,
    HevcConfig, H264_NAL_AUD, H264_NAL_PPS, H264_NAL_SPS, H265_NAL_AUD, H265_NAL_PPS, H265_NAL_SPS,
    H265_NAL_VPS,
};
use crate::{Frame, MediaKind, Timestamp, Track, TrackConfig};

/// H.264 `nal_unit_type` of filler data: padding of constant bit rate encoders.
const H264_NAL_FILLER: u8 = 12;
/// H.265 `nal_unit_type` of filler data.
const H265_NAL_FILLER: u8 = 38;
/// Most parameter sets of one type remembered; real streams send one.
const MAX_PARAMETER_SETS: usize = 8;
/// Largest parameter set remembered: real ones are tens of bytes; VPS/SPS with VUI and
/// scaling lists stay well under this.
const MAX_PARAMETER_SET_LEN: usize = 4096;

/// The NAL units of an Annex-B byte stream: what lies between start codes (00 00 01,
/// or 00 00 00 01), without trailing zero bytes, empty units skipped. Bytes before the
/// first start code are not a NAL unit and are skipped too.
pub(super) fn annex_b_units(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = find_start_code(data).and_then(|at| data.get(at + 3..));
    std::iter::from_fn(move || loop {
        let data = rest?;
        let (unit, next) = match find_start_code(data) {
            Some(at) => (data.get(..at)?, data.get(at + 3..)),
            None => (data, None),
        };
        rest = next;
        let end = unit.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        if let Some(unit) = unit.get(..end).filter(|u| !u.is_empty()) {
            return Some(unit);
        }
    })
}

/// The offset of the first 00 00 01 in `data`.
fn find_start_code(data: &[u8]) -> Option<usize> {
    let mut i = 0;
    // Look at the third byte of each window: anything above 1 rules out start codes
    // ending at it or the two bytes before, so the scan moves 3 bytes at once.
    while let Some(&b2) = data.get(i + 2) {
        if b2 > 1 {
            i += 3;
        } else if b2 == 1 && data.get(i..i + 2) == Some(&[0, 0]) {
            return Some(i);
        } else {
            i += 1;
        }
    }
    None
}

/// Which of the two codecs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VideoCodec {
    /// H.264.
    H264,
    /// H.265.
    H265,
}

/// What a NAL unit type means to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Dropped: AUD, filler.
    Skip,
    /// A video, sequence or picture parameter set.
    Vps,
    Sps,
    Pps,
    /// A picture a decoder can start from.
    Keyframe,
    Other,
}

impl VideoCodec {
    fn classify(self, nal: &[u8]) -> Unit {
        match self {
            VideoCodec::H264 => match h264_nal_type(nal).unwrap_or(0) {
                H264_NAL_AUD | H264_NAL_FILLER => Unit::Skip,
                H264_NAL_SPS => Unit::Sps,
                H264_NAL_PPS => Unit::Pps,
                t if h264_is_keyframe_nal(t) => Unit::Keyframe,
                _ => Unit::Other,
            },
            VideoCodec::H265 => match h265_nal_type(nal).unwrap_or(0) {
                H265_NAL_AUD | H265_NAL_FILLER => Unit::Skip,
                H265_NAL_VPS => Unit::Vps,
                H265_NAL_SPS => Unit::Sps,
                H265_NAL_PPS => Unit::Pps,
                t if h265_is_keyframe_nal(t) => Unit::Keyframe,
                _ => Unit::Other,
            },
        }
    }
}

/// Parameter sets (NAL header included, no start code).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ParameterSets {
    vps: Vec<Bytes>,
    sps: Vec<Bytes>,
    pps: Vec<Bytes>,
}

impl ParameterSets {
    fn is_empty(&self) -> bool {
        self.vps.is_empty() && self.sps.is_empty() && self.pps.is_empty()
    }

    fn add(list: &mut Vec<Bytes>, nal: &[u8]) {
        if nal.len() <= MAX_PARAMETER_SET_LEN
            && list.len() < MAX_PARAMETER_SETS
            && !list.iter().any(|s| s.as_ref() == nal)
        {
            list.push(Bytes::copy_from_slice(nal));
        }
    }

    /// The sets in force once an access unit carrying `found` is decoded: each kind it
    /// carries replaces that kind; the others stay.
    fn updated(&self, found: ParameterSets) -> ParameterSets {
        let pick = |found: Vec<Bytes>, known: &Vec<Bytes>| {
            if found.is_empty() {
                known.clone()
            } else {
                found
            }
        };
        ParameterSets {
            vps: pick(found.vps, &self.vps),
            sps: pick(found.sps, &self.sps),
            pps: pick(found.pps, &self.pps),
        }
    }

    fn config(&self, codec: VideoCodec) -> Option<TrackConfig> {
        match codec {
            VideoCodec::H264 => AvcConfig::from_parameter_sets(&self.sps, &self.pps)
                .ok()
                .map(TrackConfig::H264),
            VideoCodec::H265 => HevcConfig::from_parameter_sets(&self.vps, &self.sps, &self.pps)
                .ok()
                .map(TrackConfig::H265),
        }
    }
}

/// Turns the PES payloads of one video stream into frames and tracks.
#[derive(Debug)]
pub(super) struct VideoStream {
    codec: VideoCodec,
    /// The parameter sets seen so far, merged.
    known: ParameterSets,
    /// Those of the last track announced; `None` before the first.
    announced: Option<ParameterSets>,
    /// DTS of the last frame, and its distance to the one before: a PES without
    /// timestamps gets the next step.
    last_dts: Option<(Timestamp, Timestamp)>,
}

impl VideoStream {
    /// A stream of `codec` with nothing known yet.
    pub(super) fn new(codec: VideoCodec) -> Self {
        VideoStream {
            codec,
            known: ParameterSets::default(),
            announced: None,
            last_dts: None,
        }
    }

    /// The DTS a PES without timestamps gets: one frame step after the last.
    pub(super) fn guess_dts(&self) -> Option<Timestamp> {
        self.last_dts.map(|(dts, step)| dts.saturating_add(step))
    }

    /// Turns one PES payload (an Annex-B access unit) into a frame, announcing the
    /// track first when its parameter sets are new or changed.
    pub(super) fn access_unit(
        &mut self,
        es: &[u8],
        pts: Timestamp,
        dts: Timestamp,
        out: &mut Outputs,
    ) {
        self.last_dts = Some(match self.last_dts {
            Some((last, _)) => (dts, dts.saturating_sub(last)),
            None => (dts, 0),
        });
        let mut payload = BytesMut::with_capacity(es.len().saturating_add(16));
        let mut found = ParameterSets::default();
        let mut keyframe = false;
        for nal in annex_b_units(es) {
            match self.codec.classify(nal) {
                Unit::Skip => continue,
                Unit::Vps => ParameterSets::add(&mut found.vps, nal),
                Unit::Sps => ParameterSets::add(&mut found.sps, nal),
                Unit::Pps => ParameterSets::add(&mut found.pps, nal),
                Unit::Keyframe => keyframe = true,
                Unit::Other => {}
            }
            // The PES limit keeps units far below 4 GiB.
            let Ok(len) = u32::try_from(nal.len()) else {
                continue;
            };
            payload.put_u32(len);
            payload.put_slice(nal);
        }
        if payload.is_empty() {
            out.stats.frames_dropped += 1;
            return;
        }
        if !found.is_empty() {
            self.known = self.known.updated(found);
        }
        let mut track = None;
        if self.announced.as_ref() != Some(&self.known) {
            if let Some(config) = self.known.config(self.codec) {
                track = Some((dts, Track::new(config)));
            }
        }
        if track.is_none() && self.announced.is_none() {
            // A decoder cannot use a frame before its parameter sets.
            out.stats.frames_without_config += 1;
            return;
        }
        let announcing = track.is_some();
        let frame = Frame {
            kind: MediaKind::Video,
            dts,
            pts,
            keyframe,
            payload: payload.freeze(),
        };
        if out.frame(track, frame) && announcing {
            self.announced = Some(self.known.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ts::demux::Demuxed;

    fn units(data: &[u8]) -> Vec<Vec<u8>> {
        annex_b_units(data).map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn annex_b_splits_on_3_and_4_byte_start_codes() {
        let data = [
            0xaa, 0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x67, 1, 2, 0, 0, 0, 0, 1, 0x68, 3, 0, 0, 1, 0,
            0, 1, 0x65, 0, 0, 3, 0, 5, 0, 0,
        ];
        assert_eq!(
            units(&data),
            vec![
                vec![0x09, 0xf0],
                vec![0x67, 1, 2],
                vec![0x68, 3],
                vec![0x65, 0, 0, 3, 0, 5]
            ]
        );
        assert!(units(&[]).is_empty());
        assert!(units(&[0, 0, 1]).is_empty());
        assert!(units(&[1, 2, 3, 0, 0]).is_empty());
        assert_eq!(units(&[0, 0, 1, 7]), vec![vec![7]]);
        assert_eq!(units(&[0, 0, 1, 0, 0, 0, 1, 7]), vec![vec![7]]);
    }

    #[test]
    fn start_code_search_does_not_skip_any() {
        // Every position of a start code behind filler of every length.
        for lead in 0..8 {
            for fill in [0x02u8, 0x00, 0x01, 0xff] {
                let mut d = vec![fill; lead];
                d.extend_from_slice(&[0, 0, 1, 0x41]);
                let expected = (0..=lead)
                    .find(|&i| d[i..].starts_with(&[0, 0, 1]))
                    .expect("there");
                assert_eq!(find_start_code(&d), Some(expected), "{d:?}");
            }
        }
    }

    fn avc_sps() -> Vec<u8> {
        vec![
            0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00,
            0x03, 0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0x20, 0xf1, 0x83, 0x19, 0x60,
        ]
    }

    fn annex_b(nals: &[&[u8]]) -> Vec<u8> {
        nals.iter()
            .flat_map(|n| [&[0, 0, 0, 1][..], n].concat())
            .collect()
    }

    fn drain(out: &mut Outputs) -> Vec<Demuxed> {
        std::iter::from_fn(|| out.queue.pop_front()).collect()
    }

    #[test]
    fn frames_wait_for_parameter_sets_and_tracks_follow_changes() {
        let mut v = VideoStream::new(VideoCodec::H264);
        let mut out = Outputs::default();
        let sps = avc_sps();
        let pps = [0x68, 0xef, 0x8f, 0xcb];
        let idr = [0x65, 0x88, 0x80];
        let p = [0x41, 0x9a, 0x01];
        // A P frame before any parameter set is dropped.
        v.access_unit(&annex_b(&[&[0x09, 0xf0], &p]), 0, 0, &mut out);
        assert!(drain(&mut out).is_empty());
        assert_eq!(out.stats.frames_without_config, 1);
        // A keyframe with SPS and PPS: the track, then the frame without the AUD.
        v.access_unit(
            &annex_b(&[&[0x09, 0xf0], &sps, &pps, &idr]),
            3000,
            3000,
            &mut out,
        );
        let got = drain(&mut out);
        assert_eq!(got.len(), 2);
        let Demuxed::Track(at, track) = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(*at, 3000);
        let TrackConfig::H264(c) = &track.config else {
            panic!("{track:?}")
        };
        assert_eq!((c.sps[0].as_ref(), c.pps[0].as_ref()), (&sps[..], &pps[..]));
        let Demuxed::Frame(f) = &got[1] else {
            panic!("{got:?}")
        };
        assert!(f.keyframe);
        let mut expected = Vec::new();
        for n in [&sps[..], &pps, &idr] {
            expected.extend_from_slice(&(n.len() as u32).to_be_bytes());
            expected.extend_from_slice(n);
        }
        assert_eq!(&f.payload[..], &expected[..]);
        // The same sets again: no new track.
        v.access_unit(&annex_b(&[&sps, &pps, &idr]), 6000, 6000, &mut out);
        assert!(matches!(&drain(&mut out)[..], [Demuxed::Frame(_)]));
        // A new PPS alone: a new track with the old SPS.
        let pps2 = [0x68, 0xee, 0x3c, 0x80];
        v.access_unit(&annex_b(&[&pps2, &p]), 9000, 9000, &mut out);
        let got = drain(&mut out);
        let [Demuxed::Track(9000, t), Demuxed::Frame(f)] = &got[..] else {
            panic!("{got:?}")
        };
        let TrackConfig::H264(c) = &t.config else {
            panic!("{t:?}")
        };
        assert_eq!(
            (c.sps[0].as_ref(), c.pps[0].as_ref()),
            (&sps[..], &pps2[..])
        );
        assert!(!f.keyframe);
        // Nothing but an AUD: no frame.
        v.access_unit(&annex_b(&[&[0x09, 0xf0]]), 12000, 12000, &mut out);
        assert!(drain(&mut out).is_empty());
        assert_eq!(out.stats.frames_dropped, 1);
        assert_eq!(v.guess_dts(), Some(15000));
    }

    #[test]
    fn h265_keyframes_are_irap() {
        assert_eq!(VideoCodec::H265.classify(&[0x26, 0x01]), Unit::Keyframe);
        assert_eq!(VideoCodec::H265.classify(&[0x2a, 0x01]), Unit::Keyframe); // CRA
        assert_eq!(VideoCodec::H265.classify(&[0x02, 0x01]), Unit::Other);
        assert_eq!(VideoCodec::H265.classify(&[0x46, 0x01]), Unit::Skip);
        assert_eq!(VideoCodec::H265.classify(&[0x4c, 0x01]), Unit::Skip);
        assert_eq!(VideoCodec::H265.classify(&[0x40, 0x01]), Unit::Vps);
        assert_eq!(VideoCodec::H264.classify(&[0x0c]), Unit::Skip);
        assert_eq!(VideoCodec::H264.classify(&[0x25]), Unit::Keyframe);
    }
}
