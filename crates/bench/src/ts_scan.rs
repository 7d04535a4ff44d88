//! Counting frames in MPEG-TS as it arrives (SRT players), without keeping media.
//!
//! A video frame starts at each PES start on the video PID: its PTS is the frame's
//! time, the adaptation field's `random_access_indicator` marks a keyframe (Sluice's
//! muxer and ffmpeg's set it), and the bench publisher's stamp is looked for in the
//! rest of that first TS packet. An audio PES counts as one audio frame (a PES may
//! carry several AAC frames: the count is of PES packets). PAT and PMT say which
//! PIDs are which; everything else is skipped.
//!
//! Per player: the PIDs and up to 187 bytes of a packet split across two reads.

/// One TS packet.
const PACKET: usize = 188;
const SYNC: u8 = 0x47;

/// What a packet started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TsEvent {
    Video {
        /// PTS in ms (wrapping), when the PES has one.
        pts_ms: Option<u32>,
        keyframe: bool,
        stamp: Option<u64>,
    },
    Audio,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MPEG-TS sync lost (a packet starts with {0:#04x})")]
pub(crate) struct LostSync(u8);

pub(crate) struct TsScanner {
    carry: [u8; PACKET],
    have: usize,
    pmt: Option<u16>,
    video: Option<u16>,
    /// Whether the video is H.264 (only then is a stamp looked for).
    h264: bool,
    audio: Option<u16>,
}

impl TsScanner {
    pub(crate) fn new() -> TsScanner {
        TsScanner {
            carry: [0; PACKET],
            have: 0,
            pmt: None,
            video: None,
            h264: false,
            audio: None,
        }
    }

    /// Scans `data` (any split of the stream), calling `on` for each frame start.
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        mut on: impl FnMut(TsEvent),
    ) -> Result<(), LostSync> {
        if self.have > 0 {
            let take = (PACKET - self.have).min(data.len());
            self.carry[self.have..self.have + take].copy_from_slice(&data[..take]);
            self.have += take;
            data = &data[take..];
            if self.have < PACKET {
                return Ok(());
            }
            self.have = 0;
            let packet = self.carry;
            self.packet(&packet, &mut on)?;
        }
        let mut chunks = data.chunks_exact(PACKET);
        for packet in &mut chunks {
            self.packet(packet, &mut on)?;
        }
        let rest = chunks.remainder();
        self.carry[..rest.len()].copy_from_slice(rest);
        self.have = rest.len();
        Ok(())
    }

    fn packet(&mut self, p: &[u8], on: &mut impl FnMut(TsEvent)) -> Result<(), LostSync> {
        if p[0] != SYNC {
            return Err(LostSync(p[0]));
        }
        let pusi = p[1] & 0x40 != 0;
        let pid = u16::from_be_bytes([p[1] & 0x1f, p[2]]);
        let afc = (p[3] >> 4) & 3;
        let (random_access, payload_at) = match afc {
            1 => (false, 4),
            3 => {
                let len = usize::from(p[4]);
                (len > 0 && p[5] & 0x40 != 0, 5 + len)
            }
            _ => return Ok(()),
        };
        let Some(payload) = p.get(payload_at..) else {
            return Ok(());
        };
        if !pusi {
            return Ok(());
        }
        if pid == 0 {
            self.pmt = pat_first_pmt(payload).or(self.pmt);
        } else if Some(pid) == self.pmt {
            self.pmt_streams(payload);
        } else if Some(pid) == self.video {
            let (pts_ms, es) = pes(payload);
            let stamp = if self.h264 {
                es.and_then(crate::stamp::find_in_annexb)
            } else {
                None
            };
            on(TsEvent::Video {
                pts_ms,
                keyframe: random_access,
                stamp,
            });
        } else if Some(pid) == self.audio {
            on(TsEvent::Audio);
        }
        Ok(())
    }

    /// The first video and audio elementary streams of a PMT section.
    fn pmt_streams(&mut self, payload: &[u8]) {
        let Some(section) = section(payload) else {
            return;
        };
        // table_id 2, then 9 bytes to program_info_length.
        if section.first() != Some(&2) || section.len() < 12 {
            return;
        }
        let info_len = usize::from(u16::from_be_bytes([section[10], section[11]]) & 0x0fff);
        let len = usize::from(u16::from_be_bytes([section[1], section[2]]) & 0x0fff);
        // The section's end, less its CRC.
        let end = (3 + len).saturating_sub(4).min(section.len());
        let mut at = 12 + info_len;
        let (mut video, mut audio) = (None, None);
        while at + 5 <= end {
            let kind = section[at];
            let pid = u16::from_be_bytes([section[at + 1] & 0x1f, section[at + 2]]);
            let es_info =
                usize::from(u16::from_be_bytes([section[at + 3], section[at + 4]]) & 0x0fff);
            match kind {
                0x1b | 0x24 if video.is_none() => video = Some((pid, kind == 0x1b)),
                // AAC (ADTS or LATM), MPEG audio, and private data (Opus).
                0x0f | 0x11 | 0x03 | 0x04 | 0x06 if audio.is_none() => audio = Some(pid),
                _ => {}
            }
            at += 5 + es_info;
        }
        if let Some((pid, h264)) = video {
            (self.video, self.h264) = (Some(pid), h264);
        }
        self.audio = audio.or(self.audio);
    }
}

/// The section a payload unit start carries, past its pointer field.
fn section(payload: &[u8]) -> Option<&[u8]> {
    let pointer = usize::from(*payload.first()?);
    payload.get(1 + pointer..)
}

/// The PMT PID of the first program (not the network PID, program 0) of a PAT.
fn pat_first_pmt(payload: &[u8]) -> Option<u16> {
    let s = section(payload)?;
    if *s.first()? != 0 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([*s.get(1)?, *s.get(2)?]) & 0x0fff);
    let end = (3 + len).saturating_sub(4).min(s.len());
    let mut at = 8;
    while at + 4 <= end {
        let program = u16::from_be_bytes([s[at], s[at + 1]]);
        if program != 0 {
            return Some(u16::from_be_bytes([s[at + 2] & 0x1f, s[at + 3]]));
        }
        at += 4;
    }
    None
}

/// A PES start's PTS (ms) and the elementary stream bytes after its header.
fn pes(payload: &[u8]) -> (Option<u32>, Option<&[u8]>) {
    if payload.len() < 9 || payload[..3] != [0, 0, 1] {
        return (None, None);
    }
    let es = payload.get(9 + usize::from(payload[8])..);
    let pts = (payload[7] & 0x80 != 0)
        .then(|| payload.get(9..14))
        .flatten()
        .map(|b| {
            let v = (u64::from(b[0] >> 1) & 7) << 30
                | u64::from(b[1]) << 22
                | u64::from(b[2] >> 1) << 15
                | u64::from(b[3]) << 7
                | u64::from(b[4] >> 1);
            (v / 90) as u32
        });
    (pts, es)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use sluice_media::codec::{AacConfig, AvcConfig};
    use sluice_media::ts::TsMuxer;
    use sluice_media::{Frame, MediaKind, Track, TrackConfig};

    fn frame(kind: MediaKind, ms: i64, keyframe: bool, payload: Vec<u8>) -> Frame {
        let t = Frame::ticks_from_ms(ms);
        Frame {
            kind,
            dts: t,
            pts: t,
            keyframe,
            payload: Bytes::from(payload),
        }
    }

    /// A stream as Sluice's muxer makes it: tables, a keyframe stamped by the bench
    /// publisher, a second frame 40 ms later, and audio.
    fn stream() -> BytesMut {
        let sps = Bytes::from_static(&[
            0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00,
            0x03, 0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0x20, 0xf1, 0x83, 0x19, 0x60,
        ]);
        let pps = Bytes::from_static(&[0x68, 0xef, 0x8f, 0xcb]);
        let avc = AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap();
        let video = Track::new(TrackConfig::H264(avc));
        let aac = AacConfig::parse(Bytes::from_static(&[0x12, 0x10])).unwrap();
        let audio = Track::new(TrackConfig::Aac(aac));
        let mut mux = TsMuxer::new(Some(&video), Some(&audio)).unwrap();
        let mut out = BytesMut::new();
        mux.write_tables(&mut out);
        let mut sei = BytesMut::new();
        crate::stamp::push_sei(&mut sei, 42);
        let mut nals = (sei.len() as u32).to_be_bytes().to_vec();
        nals.extend_from_slice(&sei);
        nals.extend_from_slice(&[0, 0, 0, 3, 0x65, 1, 2]);
        let f = frame(MediaKind::Video, 1000, true, nals);
        mux.write_frame(&f, &mut out).unwrap();
        let f = frame(MediaKind::Video, 1040, false, vec![0, 0, 0, 3, 0x41, 1, 2]);
        mux.write_frame(&f, &mut out).unwrap();
        let f = frame(MediaKind::Audio, 1020, true, vec![1; 20]);
        mux.write_frame(&f, &mut out).unwrap();
        out
    }

    #[test]
    fn frames_keyframes_stamps_and_audio_in_any_split() {
        let ts = stream();
        for split in [1, 7, 188, 1316, ts.len()] {
            let mut scan = TsScanner::new();
            let mut events = Vec::new();
            for piece in ts.chunks(split) {
                scan.feed(piece, |e| events.push(e)).unwrap();
            }
            let Some(TsEvent::Video {
                pts_ms: Some(base), ..
            }) = events.first().copied()
            else {
                panic!("{events:?}")
            };
            assert_eq!(
                events,
                [
                    TsEvent::Video {
                        pts_ms: Some(base),
                        keyframe: true,
                        stamp: Some(42)
                    },
                    TsEvent::Video {
                        pts_ms: Some(base + 40),
                        keyframe: false,
                        stamp: None
                    },
                    TsEvent::Audio,
                ],
                "split {split}"
            );
        }
    }

    #[test]
    fn lost_sync_is_an_error_and_junk_is_not_a_panic() {
        let mut scan = TsScanner::new();
        assert_eq!(scan.feed(&[0x48; 188], |_| {}), Err(LostSync(0x48)));
        let mut scan = TsScanner::new();
        let mut p = [0xffu8; 188];
        for first in 0..=255u8 {
            p[0] = SYNC;
            p[1] = first;
            p[3] = first;
            p[4] = first;
            let _ = scan.feed(&p, |_| {});
        }
    }
}
