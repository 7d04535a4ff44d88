//! AAC in ADTS (ISO/IEC 13818-7 §6.2, 14496-3 §1.A.2): PES payloads to raw frames and
//! the AudioSpecificConfig of the track.
//!
//! Why: MPEG-TS carries AAC behind a 7- or 9-byte ADTS header per frame; the hub's
//! frames are raw, and every output needs the AudioSpecificConfig, which we rebuild
//! from the header fields.
//!
//! # Invariants
//! - A frame is emitted only whole: header checked, `frame_length` bytes present.
//! - A frame cut by the end of its PES is finished from the next PES of the stream,
//!   unless packets were lost in between; at most one frame (8191 bytes) is carried.
//! - The track is announced before the first frame and again when the header fields
//!   that make the AudioSpecificConfig change.

use bytes::{Bytes, BytesMut};

use super::Outputs;
use crate::codec::AacConfig;
use crate::{Frame, MediaKind, Timestamp, Track, TrackConfig, CLOCK_HZ};

/// `sampling_frequency_index` values 0..=12.
const SAMPLE_RATES: [u32; 13] = [
    96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
];
/// ADTS header without CRC.
const HEADER_LEN: usize = 7;
/// ADTS header with CRC.
const HEADER_WITH_CRC_LEN: usize = 9;
/// Samples of one AAC frame (AAC-LC and the HE-AAC core).
const SAMPLES_PER_FRAME: u64 = 1024;

/// The fields of one ADTS header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AdtsHeader {
    /// `profile` (object type - 1).
    pub(super) profile: u8,
    /// `sampling_frequency_index`, below 13.
    pub(super) rate_index: u8,
    /// `channel_configuration`.
    pub(super) channels: u8,
    /// 7, or 9 with a CRC.
    pub(super) header_len: usize,
    /// `frame_length`: header and raw data, at least `header_len`.
    pub(super) frame_len: usize,
    /// `number_of_raw_data_blocks_in_frame` + 1.
    pub(super) blocks: u8,
}

/// What starts at an offset of an ADTS stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Parsed {
    /// A valid header.
    Header(AdtsHeader),
    /// Too few bytes to tell.
    Incomplete,
    /// Not a valid ADTS header.
    Invalid,
}

impl AdtsHeader {
    /// Reads the header at the start of `b`.
    pub(super) fn parse(b: &[u8]) -> Parsed {
        let Some(&[b0, b1]) = b.get(..2) else {
            return match b {
                [] | [0xff] => Parsed::Incomplete,
                _ => Parsed::Invalid,
            };
        };
        // syncword (12 bits), ID, layer (always 0).
        if b0 != 0xff || b1 & 0xf6 != 0xf0 {
            return Parsed::Invalid;
        }
        let header_len = if b1 & 1 != 0 {
            HEADER_LEN
        } else {
            HEADER_WITH_CRC_LEN
        };
        let Some(&[_, _, b2, b3, b4, b5, b6]) = b.get(..HEADER_LEN) else {
            return Parsed::Incomplete;
        };
        let rate_index = (b2 >> 2) & 0x0f;
        let frame_len =
            (usize::from(b3 & 0x03) << 11) | (usize::from(b4) << 3) | usize::from(b5 >> 5);
        if usize::from(rate_index) >= SAMPLE_RATES.len() || frame_len < header_len {
            return Parsed::Invalid;
        }
        Parsed::Header(AdtsHeader {
            profile: b2 >> 6,
            rate_index,
            channels: ((b2 & 0x01) << 2) | (b3 >> 6),
            header_len,
            frame_len,
            blocks: (b6 & 0x03) + 1,
        })
    }

    /// The 2-byte AudioSpecificConfig these fields describe.
    pub(super) fn audio_specific_config(&self) -> [u8; 2] {
        let object_type = self.profile + 1;
        [
            (object_type << 3) | (self.rate_index >> 1),
            ((self.rate_index & 1) << 7) | (self.channels << 3),
        ]
    }

    fn sample_rate(&self) -> u32 {
        SAMPLE_RATES
            .get(usize::from(self.rate_index))
            .copied()
            .unwrap_or(48_000)
    }
}

/// The time of the frame `index` frames after one at `start`, at `sample_rate`.
fn frame_time(start: Timestamp, index: u64, sample_rate: u32) -> Timestamp {
    let ticks = u128::from(index) * u128::from(SAMPLES_PER_FRAME) * u128::from(CLOCK_HZ)
        / u128::from(sample_rate.max(1));
    start.saturating_add(i64::try_from(ticks).unwrap_or(i64::MAX))
}

/// Turns the PES payloads of one AAC stream into frames and tracks.
#[derive(Debug, Default)]
pub(super) struct AdtsStream {
    /// The start of a frame cut by the end of its PES, and that frame's time.
    carry: Option<(BytesMut, Timestamp)>,
    /// Where the frame after the last one emitted would start.
    next_pts: Option<Timestamp>,
    /// The AudioSpecificConfig of the last track announced.
    announced: Option<[u8; 2]>,
    /// The sample rate of the last header read, to time a frame whose header is cut.
    rate: Option<u32>,
}

impl AdtsStream {
    /// The time the next frame would have: for a PES without timestamps.
    pub(super) fn next_pts(&self) -> Option<Timestamp> {
        self.next_pts
    }

    /// Splits one PES payload into frames. `pts` applies to the first frame that
    /// starts in it; `after_loss` says packets were lost since the last PES, so a
    /// frame carried from it cannot be finished.
    pub(super) fn pes(&mut self, es: Bytes, pts: Timestamp, after_loss: bool, out: &mut Outputs) {
        let mut data = es;
        // Frames that start at or after `fresh` in `data` began in this PES.
        let mut fresh = 0;
        let mut start = pts;
        if let Some((mut carried, at)) = self.carry.take() {
            if after_loss {
                out.stats.frames_dropped += 1;
            } else {
                fresh = carried.len();
                carried.extend_from_slice(&data);
                data = carried.freeze();
                start = at;
            }
        }
        let mut pos = 0;
        let mut index = 0u64;
        while let Some(rest) = data.get(pos..).filter(|r| !r.is_empty()) {
            if pos >= fresh && fresh > 0 {
                // The carried frame is done; times restart from this PES's.
                fresh = 0;
                start = pts;
                index = 0;
            }
            let header = match AdtsHeader::parse(rest) {
                Parsed::Header(h) => h,
                Parsed::Incomplete => {
                    let rate = self.rate.unwrap_or(48_000);
                    self.carry = Some((BytesMut::from(rest), frame_time(start, index, rate)));
                    break;
                }
                Parsed::Invalid => {
                    // Garbage: on to the next byte that could start a sync word.
                    let skip = rest
                        .get(1..)
                        .and_then(|r| r.iter().position(|&b| b == 0xff))
                        .map_or(rest.len(), |i| i + 1);
                    pos += skip;
                    continue;
                }
            };
            self.rate = Some(header.sample_rate());
            let at = frame_time(start, index, header.sample_rate());
            let Some(frame) = rest.get(..header.frame_len) else {
                self.carry = Some((BytesMut::from(rest), at));
                break;
            };
            // In range: `frame` is `data[pos..pos + frame_len]` and `header_len <= frame_len`.
            let body = data.slice(pos + header.header_len..pos + frame.len());
            pos += header.frame_len;
            index += 1;
            self.next_pts = Some(frame_time(start, index, header.sample_rate()));
            if header.blocks != 1 || body.is_empty() {
                // Several raw data blocks cannot be told apart without decoding.
                out.stats.frames_dropped += 1;
                continue;
            }
            self.emit(&header, at, body, out);
        }
    }

    fn emit(&mut self, header: &AdtsHeader, pts: Timestamp, body: Bytes, out: &mut Outputs) {
        let asc = header.audio_specific_config();
        let mut track = None;
        if self.announced != Some(asc) {
            match AacConfig::parse(Bytes::copy_from_slice(&asc)) {
                Ok(c) => track = Some((pts, Track::new(TrackConfig::Aac(c)))),
                Err(_) if self.announced.is_none() => {
                    out.stats.frames_without_config += 1;
                    return;
                }
                // Keep the track we have; the frame may still decode.
                Err(_) => {}
            }
        }
        let frame = Frame {
            kind: MediaKind::Audio,
            dts: pts,
            pts,
            keyframe: true,
            payload: body,
        };
        if out.frame(track, frame) {
            self.announced = Some(asc);
        }
    }

    /// End of input: a frame still waiting for its end is dropped.
    pub(super) fn finish(&mut self, out: &mut Outputs) {
        if self.carry.take().is_some() {
            out.stats.frames_dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ts::demux::Demuxed;

    fn adts(config: &AacConfig, body: &[u8]) -> Vec<u8> {
        let mut f = config.adts_header(body.len()).expect("ADTS").to_vec();
        f.extend_from_slice(body);
        f
    }

    fn lc_48k_stereo() -> AacConfig {
        AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("ASC")
    }

    fn frames(out: &mut Outputs) -> Vec<(Timestamp, Vec<u8>)> {
        std::iter::from_fn(|| out.queue.pop_front())
            .filter_map(|d| match d {
                Demuxed::Frame(f) => Some((f.pts, f.payload.to_vec())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn header_fields_and_config() {
        let c = lc_48k_stereo();
        let h = c.adts_header(100).expect("ADTS");
        let Parsed::Header(p) = AdtsHeader::parse(&h) else {
            panic!("{h:?}")
        };
        assert_eq!(
            p,
            AdtsHeader {
                profile: 1,
                rate_index: 3,
                channels: 2,
                header_len: 7,
                frame_len: 107,
                blocks: 1
            }
        );
        assert_eq!(p.audio_specific_config(), [0x11, 0x90]);
        // With CRC (protection_absent = 0): 9 bytes.
        let mut crc = h;
        crc[1] &= 0xfe;
        let Parsed::Header(p) = AdtsHeader::parse(&crc) else {
            panic!()
        };
        assert_eq!(p.header_len, 9);
        assert_eq!(AdtsHeader::parse(&h[..6]), Parsed::Incomplete);
        assert_eq!(AdtsHeader::parse(&[0xff]), Parsed::Incomplete);
        assert_eq!(AdtsHeader::parse(&[0xff, 0xf3]), Parsed::Invalid); // layer 1
        assert_eq!(AdtsHeader::parse(&[0xfe, 0xf1]), Parsed::Invalid);
        let mut bad_rate = h;
        bad_rate[2] |= 0x3c;
        assert_eq!(AdtsHeader::parse(&bad_rate), Parsed::Invalid);
        // frame_length shorter than the header.
        let short = [0xff, 0xf1, 0x4c, 0x80, 0x00, 0xbf, 0xfc];
        assert_eq!(AdtsHeader::parse(&short), Parsed::Invalid);
    }

    #[test]
    fn frames_of_one_pes_get_their_times() {
        let c = lc_48k_stereo();
        let mut es = Vec::new();
        for i in 0..3u8 {
            es.extend(adts(&c, &[0x21, i, 0x55]));
        }
        let mut s = AdtsStream::default();
        let mut out = Outputs::default();
        s.pes(Bytes::from(es), 9000, false, &mut out);
        let Some(Demuxed::Track(9000, t)) = out.queue.front() else {
            panic!("{:?}", out.queue)
        };
        assert_eq!(t.config, TrackConfig::Aac(c));
        // 1024 samples at 48 kHz: 1920 ticks.
        assert_eq!(
            frames(&mut out),
            vec![
                (9000, vec![0x21, 0, 0x55]),
                (10920, vec![0x21, 1, 0x55]),
                (12840, vec![0x21, 2, 0x55])
            ]
        );
        assert_eq!(s.next_pts(), Some(14760));
    }

    #[test]
    fn garbage_is_skipped_and_cut_frames_are_carried() {
        let c = lc_48k_stereo();
        let f1 = adts(&c, &[1; 50]);
        let f2 = adts(&c, &[2; 50]);
        let f3 = adts(&c, &[3; 50]);
        let mut first = vec![0xff, 0x00, 0x12];
        first.extend_from_slice(&f1);
        first.extend_from_slice(&f2[..20]);
        let mut second = f2[20..].to_vec();
        second.extend_from_slice(&f3);
        let mut s = AdtsStream::default();
        let mut out = Outputs::default();
        s.pes(Bytes::from(first), 0, false, &mut out);
        assert_eq!(frames(&mut out), vec![(0, vec![1; 50])]);
        // f2 started in the first PES: its time follows f1; f3 takes the new PES's.
        s.pes(Bytes::from(second.clone()), 5000, false, &mut out);
        assert_eq!(
            frames(&mut out),
            vec![(1920, vec![2; 50]), (5000, vec![3; 50])]
        );
        // After a loss the carried part is dropped and the rest skipped as garbage.
        let mut third = f1.clone();
        third.extend_from_slice(&f2[..3]);
        s.pes(Bytes::from(third), 7000, false, &mut out);
        assert_eq!(frames(&mut out), vec![(7000, vec![1; 50])]);
        s.pes(Bytes::from(second), 20000, true, &mut out);
        assert_eq!(frames(&mut out), vec![(20000, vec![3; 50])]);
        assert_eq!(out.stats.frames_dropped, 1);
        // A frame cut at the end of input is dropped.
        s.pes(Bytes::from(f1[..30].to_vec()), 30000, false, &mut out);
        s.finish(&mut out);
        assert_eq!(out.stats.frames_dropped, 2);
        assert!(frames(&mut out).is_empty());
    }

    #[test]
    fn config_changes_announce_a_track() {
        let mut s = AdtsStream::default();
        let mut out = Outputs::default();
        let stereo = lc_48k_stereo();
        let mono = AacConfig::parse(Bytes::from_static(&[0x11, 0x88])).expect("ASC");
        for (c, t) in [(&stereo, 0), (&stereo, 1920), (&mono, 3840)] {
            s.pes(Bytes::from(adts(c, &[0x21, 0x10])), t, false, &mut out);
        }
        let tracks: Vec<_> = std::iter::from_fn(|| out.queue.pop_front())
            .filter_map(|d| match d {
                Demuxed::Track(at, t) => Some((at, t.config)),
                _ => None,
            })
            .collect();
        assert_eq!(
            tracks,
            vec![
                (0, TrackConfig::Aac(stereo)),
                (3840, TrackConfig::Aac(mono))
            ]
        );
    }

    #[test]
    fn frame_times_do_not_overflow() {
        assert_eq!(frame_time(i64::MAX - 5, 3, 48_000), i64::MAX);
        assert_eq!(frame_time(0, u64::MAX, 1), i64::MAX);
        assert_eq!(frame_time(0, 3, 44_100), 3 * 1024 * 90_000 / 44_100);
    }
}
