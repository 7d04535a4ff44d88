//! A sans-IO scanner for fragmented MP4 byte streams (HTTP-fMP4 and WebSocket-fMP4
//! players): the samples of each fragment, found as the bytes arrive.
//!
//! Why: a player's figures need, per frame, its track, decode time and whether it is
//! a sync sample. Those are in the `moov` (track kinds, timescales) and each `moof`
//! (`tfhd`, `tfdt`, `trun`); sample data (`mdat`) is skipped without being kept.
//!
//! # Invariants
//! - `feed` accepts any split of the stream and yields the same events.
//! - Only `moov` and `moof` are reassembled, each up to [`MAX_META_BOX`]; a bigger one
//!   is malformed. Other boxes are skipped by count. Memory is bounded by that.
//! - A fragment yields at most [`MAX_FRAGMENT_SAMPLES`]; one claiming more is malformed.
//! - Peer bytes never panic: every read is bounds-checked.

/// Why the scanner gave up: the bytes are not a fragmented MP4 stream we can follow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// What was malformed (or too large to reassemble).
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// Largest `moov` or `moof` reassembled: an init segment is a few KiB, a fragment's
/// `moof` about 100 bytes a sample; more is a peer making us buffer.
pub const MAX_META_BOX: usize = 1 << 20;
/// Tracks of an init segment we follow (Sluice sends one video and one audio).
const MAX_TRACKS: usize = 8;
/// Samples of one fragment we report: a `trun` without per-sample fields takes no
/// bytes per sample, so its count alone cannot bound the work; a real fragment holds
/// a few hundred (10 s of 60 fps video).
pub const MAX_FRAGMENT_SAMPLES: u32 = 4096;
/// `sample_is_non_sync_sample` in sample flags.
const NON_SYNC: u32 = 0x0001_0000;

/// One sample of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fmp4Sample {
    /// A video track's sample (else audio, or a track the init segment lacks).
    pub video: bool,
    /// A sync sample.
    pub keyframe: bool,
    /// Decode time in ms (from the track's timescale).
    pub dts_ms: u64,
    /// Its size in bytes.
    pub len: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TrackInfo {
    id: u32,
    video: bool,
    timescale: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a box header (8 bytes, 16 with a 64-bit size).
    Header,
    /// Reassembling a `moov` or `moof` body of this many bytes.
    Meta { kind: [u8; 4], len: usize },
    /// Skipping this many body bytes.
    Skip(u64),
}

/// Finds the samples of a fragmented MP4 byte stream.
#[derive(Debug)]
pub struct Fmp4Scanner {
    state: State,
    head: [u8; 16],
    have: usize,
    body: Vec<u8>,
    tracks: Vec<TrackInfo>,
}

impl Default for Fmp4Scanner {
    fn default() -> Self {
        Self::new()
    }
}

impl Fmp4Scanner {
    /// A scanner expecting the first box of the stream (the init segment's `ftyp`).
    pub fn new() -> Fmp4Scanner {
        Fmp4Scanner {
            state: State::Header,
            head: [0; 16],
            have: 0,
            body: Vec::new(),
            tracks: Vec::new(),
        }
    }

    /// Whether an init segment was read.
    pub fn has_init(&self) -> bool {
        !self.tracks.is_empty()
    }

    /// Scans `data`, calling `on` for each sample of each fragment read whole.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        on: &mut dyn FnMut(Fmp4Sample),
    ) -> Result<(), ScanError> {
        while !data.is_empty() {
            match self.state {
                State::Header => {
                    let want = if self.have >= 4 && self.head[..4] == [0, 0, 0, 1] {
                        16
                    } else {
                        8
                    };
                    let take = (want - self.have).min(data.len());
                    self.head[self.have..self.have + take].copy_from_slice(&data[..take]);
                    self.have += take;
                    data = &data[take..];
                    if self.have < want {
                        continue;
                    }
                    if want == 8 && self.head[..4] == [0, 0, 0, 1] {
                        continue; // a 64-bit size follows
                    }
                    self.start_box()?;
                }
                State::Meta { kind, len } => {
                    let take = (len - self.body.len()).min(data.len());
                    self.body.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.body.len() == len {
                        let body = std::mem::take(&mut self.body);
                        match &kind {
                            b"moov" => self.read_moov(&body)?,
                            _ => self.read_moof(&body, on)?,
                        }
                        self.body = body;
                        self.body.clear();
                        self.state = State::Header;
                    }
                }
                State::Skip(n) => {
                    let take = n.min(data.len() as u64);
                    data = &data[take as usize..];
                    self.state = if take == n {
                        State::Header
                    } else {
                        State::Skip(n - take)
                    };
                }
            }
        }
        Ok(())
    }

    fn start_box(&mut self) -> Result<(), ScanError> {
        let (size, header) =
            match u32::from_be_bytes([self.head[0], self.head[1], self.head[2], self.head[3]]) {
                1 => {
                    let mut b = [0; 8];
                    b.copy_from_slice(&self.head[8..16]);
                    (u64::from_be_bytes(b), 16u64)
                }
                // "To the end of the file": a stream never ends, so nothing follows it.
                0 => (u64::MAX, 8),
                n => (u64::from(n), 8),
            };
        if size < header {
            return Err(ScanError::Malformed("MP4 box size"));
        }
        let kind = [self.head[4], self.head[5], self.head[6], self.head[7]];
        self.have = 0;
        let len = size - header;
        self.state = match &kind {
            b"moov" | b"moof" => {
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= MAX_META_BOX)
                    .ok_or(ScanError::Malformed("MP4 box too large"))?;
                self.body.clear();
                if len == 0 {
                    State::Header
                } else {
                    State::Meta { kind, len }
                }
            }
            _ if len == 0 => State::Header,
            _ => State::Skip(len),
        };
        Ok(())
    }

    /// The tracks of an init segment: id, handler, timescale.
    fn read_moov(&mut self, moov: &[u8]) -> Result<(), ScanError> {
        self.tracks.clear();
        for trak in children(moov).filter(|(k, _)| k == b"trak") {
            let trak = trak.1;
            let id = child(trak, b"tkhd").and_then(|t| {
                // version 1 has 64-bit times before the id
                let at = if *t.first()? == 1 { 20 } else { 12 };
                u32_at(t, at)
            });
            let mdia = child(trak, b"mdia");
            let timescale = mdia.and_then(|m| child(m, b"mdhd")).and_then(|t| {
                let at = if *t.first()? == 1 { 20 } else { 12 };
                u32_at(t, at)
            });
            let video = mdia
                .and_then(|m| child(m, b"hdlr"))
                .and_then(|h| h.get(8..12))
                .map(|h| h == b"vide");
            let (Some(id), Some(timescale), Some(video)) = (id, timescale, video) else {
                return Err(ScanError::Malformed("MP4 trak"));
            };
            if self.tracks.len() < MAX_TRACKS {
                self.tracks.push(TrackInfo {
                    id,
                    video,
                    timescale: timescale.max(1),
                });
            }
        }
        Ok(())
    }

    /// The samples of a fragment's runs.
    fn read_moof(&self, moof: &[u8], on: &mut dyn FnMut(Fmp4Sample)) -> Result<(), ScanError> {
        let bad = ScanError::Malformed("MP4 traf");
        let mut samples = 0u32;
        for (_, traf) in children(moof).filter(|(k, _)| k == b"traf") {
            let tfhd = child(traf, b"tfhd").ok_or(bad.clone())?;
            let flags = u32_at(tfhd, 0).ok_or(bad.clone())? & 0x00ff_ffff;
            let id = u32_at(tfhd, 4).ok_or(bad.clone())?;
            // Optional fields after the id, in order: base offset (8), description
            // index, default duration, default size, default flags (4 each).
            let mut at = 8;
            if flags & 0x01 != 0 {
                at += 8;
            }
            if flags & 0x02 != 0 {
                at += 4;
            }
            let default_duration = if flags & 0x08 != 0 {
                let d = u32_at(tfhd, at);
                at += 4;
                d
            } else {
                None
            };
            if flags & 0x10 != 0 {
                at += 4;
            }
            let default_flags = if flags & 0x20 != 0 {
                u32_at(tfhd, at)
            } else {
                None
            };
            let track = self.tracks.iter().find(|t| t.id == id);
            let timescale = track.map_or(1000, |t| t.timescale);
            let video = track.is_some_and(|t| t.video);
            let mut dts = match child(traf, b"tfdt") {
                Some(t) if t.first() == Some(&1) => u64_at(t, 4).ok_or(bad.clone())?,
                Some(t) => u64::from(u32_at(t, 4).ok_or(bad.clone())?),
                None => 0,
            };
            for (_, trun) in children(traf).filter(|(k, _)| k == b"trun") {
                let flags = u32_at(trun, 0).ok_or(bad.clone())? & 0x00ff_ffff;
                let count = u32_at(trun, 4).ok_or(bad.clone())?;
                let mut at = 8;
                if flags & 0x001 != 0 {
                    at += 4;
                }
                let first_flags = if flags & 0x004 != 0 {
                    let f = u32_at(trun, at);
                    at += 4;
                    f
                } else {
                    None
                };
                let per_sample = [0x100, 0x200, 0x400, 0x800]
                    .iter()
                    .filter(|&&f| flags & f != 0)
                    .count()
                    * 4;
                // The entries must be there: a count the box cannot hold is malformed.
                let fits = usize::try_from(count)
                    .ok()
                    .and_then(|c| c.checked_mul(per_sample))
                    .and_then(|n| n.checked_add(at))
                    .is_some_and(|end| end <= trun.len());
                samples = samples.saturating_add(count);
                if !fits || samples > MAX_FRAGMENT_SAMPLES {
                    return Err(bad);
                }
                for i in 0..count {
                    let mut field = at;
                    let mut read = |bit: u32| {
                        if flags & bit == 0 {
                            return None;
                        }
                        let v = u32_at(trun, field);
                        field += 4;
                        v
                    };
                    let duration = read(0x100).or(default_duration).unwrap_or(0);
                    let len = read(0x200).unwrap_or(0);
                    let sample_flags = read(0x400)
                        .or(if i == 0 { first_flags } else { None })
                        .or(default_flags)
                        .unwrap_or(0);
                    read(0x800);
                    at = field;
                    on(Fmp4Sample {
                        video,
                        keyframe: sample_flags & NON_SYNC == 0,
                        dts_ms: dts.saturating_mul(1000) / u64::from(timescale),
                        len,
                    });
                    dts = dts.saturating_add(u64::from(duration));
                }
            }
        }
        Ok(())
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The boxes in `data` (32-bit sizes; a box that does not fit ends the list).
fn children(mut data: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    std::iter::from_fn(move || {
        let size = usize::try_from(u32_at(data, 0)?).ok()?;
        let kind: [u8; 4] = data.get(4..8)?.try_into().ok()?;
        let body = data.get(8..size)?;
        data = data.get(size..)?;
        Some((kind, body))
    })
}

fn child<'a>(data: &'a [u8], kind: &[u8; 4]) -> Option<&'a [u8]> {
    children(data).find(|(k, _)| k == kind).map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use sluice_media::codec::{AacConfig, AvcConfig};
    use sluice_media::fmp4::{write_fragment, write_init, InitTrack, Sample, TrackRun};
    use sluice_media::{Track, TrackConfig};

    fn stream() -> Vec<u8> {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        let video = Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap(),
        ));
        let audio = Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).unwrap(),
        ));
        let mut out = BytesMut::new();
        write_init(
            &mut out,
            &[
                InitTrack {
                    track_id: 1,
                    track: &video,
                    timescale: 90_000,
                },
                InitTrack {
                    track_id: 2,
                    track: &audio,
                    timescale: 48_000,
                },
            ],
        )
        .unwrap();
        for i in 0..3u64 {
            let sample = |keyframe| Sample {
                duration: 3600,
                cts_offset: 0,
                keyframe,
                data: Bytes::from(vec![7u8; 100]),
            };
            let v = [sample(i == 0)];
            write_fragment(
                &mut out,
                i as u32 + 1,
                &[TrackRun {
                    track_id: 1,
                    base_decode_time: 90_000 + i * 3600,
                    samples: &v,
                }],
            )
            .unwrap();
            let a = [Sample {
                duration: 1024,
                ..sample(true)
            }];
            write_fragment(
                &mut out,
                i as u32 + 10,
                &[TrackRun {
                    track_id: 2,
                    base_decode_time: 48_000 + i * 1024,
                    samples: &a,
                }],
            )
            .unwrap();
        }
        out.to_vec()
    }

    fn scan_in_pieces(data: &[u8], piece: usize) -> Vec<Fmp4Sample> {
        let mut scanner = Fmp4Scanner::new();
        let mut got = Vec::new();
        for chunk in data.chunks(piece) {
            scanner.feed(chunk, &mut |s| got.push(s)).unwrap();
        }
        assert!(scanner.has_init());
        got
    }

    #[test]
    fn finds_each_sample_whatever_the_split() {
        let data = stream();
        let whole = scan_in_pieces(&data, data.len());
        assert_eq!(whole.len(), 6);
        assert_eq!(
            whole[0],
            Fmp4Sample {
                video: true,
                keyframe: true,
                dts_ms: 1000,
                len: 100
            }
        );
        assert!(!whole[2].keyframe && whole[2].video && whole[2].dts_ms == 1040);
        assert!(!whole[1].video && whole[1].keyframe && whole[1].dts_ms == 1000);
        for piece in [1, 3, 7, 64] {
            assert_eq!(scan_in_pieces(&data, piece), whole, "pieces of {piece}");
        }
    }

    #[test]
    fn bad_boxes_are_errors_not_panics() {
        let mut s = Fmp4Scanner::new();
        assert!(s
            .feed(&[0, 0, 0, 4, b'f', b'r', b'e', b'e'], &mut |_| {})
            .is_err());
        let mut s = Fmp4Scanner::new();
        // A moof larger than we reassemble.
        assert!(s
            .feed(&[0x7f, 0, 0, 0, b'm', b'o', b'o', b'f'], &mut |_| {})
            .is_err());
        // A trun that claims more samples than it holds.
        let mut s = Fmp4Scanner::new();
        let trun = [0u8, 0, 0x01, 0x00, 0xff, 0xff, 0xff, 0xff];
        let tfhd = [0u8, 0, 0, 0, 0, 0, 0, 1];
        let mut traf = Vec::new();
        for (kind, body) in [(b"tfhd", &tfhd[..]), (b"trun", &trun[..])] {
            traf.extend_from_slice(&(8 + body.len() as u32).to_be_bytes());
            traf.extend_from_slice(kind);
            traf.extend_from_slice(body);
        }
        let mut moof = Vec::new();
        moof.extend_from_slice(&(16 + traf.len() as u32).to_be_bytes());
        moof.extend_from_slice(b"moof");
        moof.extend_from_slice(&(8 + traf.len() as u32).to_be_bytes());
        moof.extend_from_slice(b"traf");
        moof.extend_from_slice(&traf);
        assert!(s.feed(&moof, &mut |_| {}).is_err());
        // A trun without per-sample fields takes no bytes a sample: its count is bounded
        // by the fragment's limit, not by the box (4 billion samples once ran the fuzzer
        // out of memory).
        let mut s = Fmp4Scanner::new();
        let mut seen = 0u32;
        let at = moof.len() - 4;
        moof[at - 4..at].copy_from_slice(&[0, 0, 0, 0]);
        assert!(s.feed(&moof, &mut |_| seen += 1).is_err());
        assert_eq!(seen, 0);
    }
}
