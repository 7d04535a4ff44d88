//! [`Muxer`]: the samples of up to one video and one audio track in, an init segment and
//! fragments out, in fMP4 or MPEG-TS.
//!
//! Why apart from the cutting: a file on demand knows its cuts before it reads a
//! sample and builds one fragment when asked; a live stream decides cuts as frames
//! come. Both need the same durations, timescales and origin, which live here; the
//! decisions live in [`Fragmenter`](super::Fragmenter) and [`CutRules`](super::CutRules).
//!
//! # Call contract
//! [`Muxer::take`] each frame of a fragment (per track in decode order), then, when
//! the fragment ends, [`Muxer::end_sample`] for tracks whose next decode time is known
//! (or [`Muxer::end_all`] to estimate), then [`Muxer::write_fragment`]. The newest
//! sample of each track stays for the next fragment unless it was ended.

use super::timescale::{default_ticks, timescale, to_clock, track_id};
use super::{Container, FragmentError};
use crate::fmp4::{self, InitTrack, Sample, TrackRun};
use crate::ts::{TsMuxer, PACKET_LEN};
use crate::{Frame, MediaKind, Timestamp, Track, CLOCK_HZ};
use bytes::{Bytes, BytesMut};

/// The first `mfhd` sequence number of an output.
pub(super) const FIRST_SEQUENCE: u32 = 1;

/// Writes the samples of one output (what one init segment describes) as fragments.
#[derive(Debug)]
pub struct Muxer {
    container: Container,
    /// The decode time that is time 0 of every track.
    origin: Timestamp,
    video: Option<MuxTrack>,
    audio: Option<MuxTrack>,
    /// MPEG-TS: the muxer, whose continuity counters run on from fragment to fragment.
    ts: Option<TsMuxer>,
    /// MPEG-TS: the frames taken since the last fragment, in the order taken, with
    /// times from the origin.
    frames: Vec<Frame>,
    /// The next fragment's `mfhd` sequence number.
    sequence: u32,
}

/// One sample waiting for its successor, which gives it its duration.
#[derive(Debug)]
struct Pending {
    dts: Timestamp,
    pts: Timestamp,
    keyframe: bool,
    /// The payload (fMP4; MPEG-TS keeps its frames in [`Muxer::frames`]).
    data: Bytes,
}

#[derive(Debug)]
struct MuxTrack {
    track: Track,
    kind: MediaKind,
    id: u32,
    timescale: u32,
    /// Decode time of the newest sample taken, after clamping.
    last_dts: Option<Timestamp>,
    pending: Option<Pending>,
    /// fMP4: samples with known durations, for the next fragment.
    samples: Vec<Sample>,
    /// Decode time of `samples[0]` in the track's timescale, from the origin.
    base: u64,
    /// Duration of the newest sample whose successor came (in the timescale): the
    /// estimate for a sample whose successor never comes.
    last_duration: u32,
    /// End of the newest sample with a duration ([`CLOCK_HZ`] ticks).
    end: Option<Timestamp>,
}

impl MuxTrack {
    fn new(container: Container, track: &Track) -> MuxTrack {
        let timescale = timescale(container, track);
        MuxTrack {
            kind: track.kind(),
            id: track_id(track.kind()),
            timescale,
            last_dts: None,
            pending: None,
            samples: Vec::new(),
            base: 0,
            last_duration: default_ticks(track, timescale),
            end: None,
            track: track.clone(),
        }
    }

    /// `dts` in the track's timescale, from `origin`.
    fn scaled(&self, dts: Timestamp, origin: Timestamp) -> i128 {
        i128::from(dts.saturating_sub(origin)) * i128::from(self.timescale) / i128::from(CLOCK_HZ)
    }

    /// Gives the pending sample its duration: up to `next` when known, else the estimate.
    fn commit(&mut self, next: Option<Timestamp>, origin: Timestamp, keep_data: bool) {
        let Some(p) = self.pending.take() else { return };
        let duration = match next {
            Some(next) => {
                let d = self.scaled(next, origin) - self.scaled(p.dts, origin);
                let d = u32::try_from(d.max(1)).unwrap_or(u32::MAX);
                self.last_duration = d;
                d
            }
            None => self.last_duration,
        };
        let end = p.dts.saturating_add(to_clock(duration, self.timescale));
        self.end = Some(self.end.map_or(end, |e| e.max(end)));
        if keep_data {
            if self.samples.is_empty() {
                self.base = u64::try_from(self.scaled(p.dts, origin)).unwrap_or(0);
            }
            let cts = i128::from(p.pts.saturating_sub(p.dts)) * i128::from(self.timescale)
                / i128::from(CLOCK_HZ);
            self.samples.push(Sample {
                duration,
                cts_offset: i32::try_from(cts).unwrap_or(0),
                keyframe: p.keyframe,
                data: p.data,
            });
        }
    }
}

impl Muxer {
    /// A muxer for `video` and `audio` (either may be absent, not both) whose time 0 is
    /// decode time `origin`. The tracks should be ones `container` carries
    /// ([`Container::carries`]); MPEG-TS refuses others here, fMP4 when writing the init.
    pub fn new(
        container: Container,
        video: Option<&Track>,
        audio: Option<&Track>,
        origin: Timestamp,
    ) -> Result<Muxer, FragmentError> {
        if video.is_none() && audio.is_none() {
            return Err(FragmentError::NoTracks);
        }
        let ts = match container {
            Container::Ts => Some(TsMuxer::new(video, audio)?),
            Container::Fmp4 => None,
        };
        Ok(Muxer {
            container,
            origin,
            video: video.map(|t| MuxTrack::new(container, t)),
            audio: audio.map(|t| MuxTrack::new(container, t)),
            ts,
            frames: Vec::new(),
            sequence: FIRST_SEQUENCE,
        })
    }

    /// Adds the tracks of `video` and `audio` the muxer lacks (a track whose
    /// configuration came after the output began); returns whether any was added. Call
    /// before the first fragment is written: the init segment must be written again.
    pub fn join(
        &mut self,
        video: Option<&Track>,
        audio: Option<&Track>,
    ) -> Result<bool, FragmentError> {
        let add_video = video.filter(|_| self.video.is_none());
        let add_audio = audio.filter(|_| self.audio.is_none());
        if add_video.is_none() && add_audio.is_none() {
            return Ok(false);
        }
        if self.container == Container::Ts {
            let v = self.video.as_ref().map(|t| &t.track).or(add_video);
            let a = self.audio.as_ref().map(|t| &t.track).or(add_audio);
            let ts = TsMuxer::new(v, a)?;
            self.ts = Some(ts);
        }
        if let Some(t) = add_video {
            self.video = Some(MuxTrack::new(self.container, t));
        }
        if let Some(t) = add_audio {
            self.audio = Some(MuxTrack::new(self.container, t));
        }
        Ok(true)
    }

    /// The container.
    pub fn container(&self) -> Container {
        self.container
    }

    /// The decode time that is time 0 of every track.
    pub fn origin(&self) -> Timestamp {
        self.origin
    }

    /// The track of `kind`, if the muxer has one.
    pub fn track(&self, kind: MediaKind) -> Option<&Track> {
        self.slot(kind).map(|t| &t.track)
    }

    /// The timescale of the track of `kind` ([`timescale`](fn@super::timescale)).
    pub fn timescale(&self, kind: MediaKind) -> Option<u32> {
        self.slot(kind).map(|t| t.timescale)
    }

    /// The decode time of the newest sample of `kind` taken (after clamping).
    pub fn last_dts(&self, kind: MediaKind) -> Option<Timestamp> {
        self.slot(kind).and_then(|t| t.last_dts)
    }

    /// The end of the media whose durations are known: the latest end of a sample
    /// given its duration, or `None` before any.
    pub fn end(&self) -> Option<Timestamp> {
        [self.video.as_ref(), self.audio.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|t| t.end)
            .max()
    }

    /// The next fragment's `mfhd` sequence number.
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    /// Numbers the next fragment `sequence` (fMP4 `mfhd`); the ones after follow it.
    pub fn set_sequence(&mut self, sequence: u32) {
        self.sequence = sequence;
    }

    fn slot(&self, kind: MediaKind) -> Option<&MuxTrack> {
        match kind {
            MediaKind::Video => self.video.as_ref(),
            MediaKind::Audio => self.audio.as_ref(),
        }
    }

    fn slot_mut(&mut self, kind: MediaKind) -> Option<&mut MuxTrack> {
        match kind {
            MediaKind::Video => self.video.as_mut(),
            MediaKind::Audio => self.audio.as_mut(),
        }
    }

    /// Writes what a reader needs before the fragments: the init segment (fMP4:
    /// `ftyp` + `moov`, one `trak` per track with its [`timescale`](fn@super::timescale)),
    /// or the PAT and PMT (MPEG-TS).
    pub fn write_init(&mut self, out: &mut BytesMut) -> Result<(), FragmentError> {
        if let Some(ts) = &mut self.ts {
            ts.write_tables(out);
            return Ok(());
        }
        fn init(t: &MuxTrack) -> InitTrack<'_> {
            InitTrack {
                track_id: t.id,
                track: &t.track,
                timescale: t.timescale,
            }
        }
        let result = match (self.video.as_ref(), self.audio.as_ref()) {
            (Some(v), Some(a)) => fmp4::write_init(out, &[init(v), init(a)]),
            (Some(t), None) | (None, Some(t)) => fmp4::write_init(out, &[init(t)]),
            (None, None) => return Err(FragmentError::NoTracks),
        };
        Ok(result?)
    }

    /// Takes one frame of a track the muxer has (else returns false and does nothing).
    /// A decode time behind the track's last is clamped to it, the presentation time
    /// moved alike. The track's previous sample gets its duration from this one.
    pub fn take(&mut self, frame: &Frame) -> bool {
        let origin = self.origin;
        let fmp4 = self.container == Container::Fmp4;
        let Some(t) = self.slot_mut(frame.kind) else {
            return false;
        };
        let (mut dts, mut pts) = (frame.dts, frame.pts);
        if let Some(last) = t.last_dts {
            if dts < last {
                pts = pts.saturating_add(last.saturating_sub(dts));
                dts = last;
            }
        }
        t.last_dts = Some(dts);
        t.commit(Some(dts), origin, fmp4);
        t.pending = Some(Pending {
            dts,
            pts,
            // Every audio frame is a sync sample.
            keyframe: frame.keyframe || t.kind == MediaKind::Audio,
            data: if fmp4 {
                frame.payload.clone()
            } else {
                Bytes::new()
            },
        });
        if !fmp4 {
            self.frames.push(Frame {
                kind: frame.kind,
                dts: dts.saturating_sub(origin),
                pts: pts.saturating_sub(origin),
                keyframe: frame.keyframe,
                payload: frame.payload.clone(),
            });
        }
        true
    }

    /// The sample after the newest of `kind` decodes at `next`: the newest gets its
    /// duration and goes into the next fragment written.
    pub fn end_sample(&mut self, kind: MediaKind, next: Timestamp) {
        let origin = self.origin;
        let fmp4 = self.container == Container::Fmp4;
        if let Some(t) = self.slot_mut(kind) {
            t.commit(Some(next), origin, fmp4);
        }
    }

    /// No sample follows the newest of each track: they get their track's last
    /// duration (or the codec's usual one) and go into the next fragment written.
    pub fn end_all(&mut self) {
        let origin = self.origin;
        let fmp4 = self.container == Container::Fmp4;
        for t in [self.video.as_mut(), self.audio.as_mut()]
            .into_iter()
            .flatten()
        {
            t.commit(None, origin, fmp4);
        }
    }

    /// Whether [`Muxer::write_fragment`] has samples to write.
    pub fn has_fragment(&self) -> bool {
        match self.container {
            Container::Ts => !self.frames.is_empty(),
            Container::Fmp4 => [self.video.as_ref(), self.audio.as_ref()]
                .into_iter()
                .flatten()
                .any(|t| !t.samples.is_empty()),
        }
    }

    /// Writes the samples with known durations (fMP4: `moof` + `mdat`, a run per track,
    /// video first) or every frame taken (MPEG-TS: the PAT and PMT, then a PES per frame
    /// in the order taken) as one fragment. Returns false, writing nothing, when there
    /// is nothing to write. The samples are done with either way, so memory stays
    /// bounded; on error the fMP4 fragment is not written, and an MPEG-TS fragment is
    /// written without the frames that failed.
    pub fn write_fragment(&mut self, out: &mut BytesMut) -> Result<bool, FragmentError> {
        match self.container {
            Container::Fmp4 => self.write_fmp4(out),
            Container::Ts => self.write_ts(out),
        }
    }

    fn write_fmp4(&mut self, out: &mut BytesMut) -> Result<bool, FragmentError> {
        let result = {
            let empty = TrackRun {
                track_id: 0,
                base_decode_time: 0,
                samples: &[],
            };
            let mut runs = [empty; 2];
            let mut n = 0;
            for t in [self.video.as_ref(), self.audio.as_ref()]
                .into_iter()
                .flatten()
                .filter(|t| !t.samples.is_empty())
            {
                if let Some(run) = runs.get_mut(n) {
                    *run = TrackRun {
                        track_id: t.id,
                        base_decode_time: t.base,
                        samples: &t.samples,
                    };
                    n += 1;
                }
            }
            match runs.get(..n) {
                Some(runs) if !runs.is_empty() => {
                    fmp4::write_fragment(out, self.sequence, runs).map(|()| true)
                }
                _ => Ok(false),
            }
        };
        if result == Ok(true) {
            self.sequence = self.sequence.wrapping_add(1);
        }
        for t in [self.video.as_mut(), self.audio.as_mut()]
            .into_iter()
            .flatten()
        {
            t.samples.clear();
        }
        Ok(result?)
    }

    fn write_ts(&mut self, out: &mut BytesMut) -> Result<bool, FragmentError> {
        let Some(ts) = &mut self.ts else {
            return Err(FragmentError::NoTracks);
        };
        if self.frames.is_empty() {
            return Ok(false);
        }
        out.reserve(ts_estimate(&self.frames));
        ts.write_tables(out);
        let mut first_error = None;
        for f in self.frames.drain(..) {
            if let Err(e) = ts.write_frame(&f, out) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(true),
        }
    }
}

/// About the bytes `frames` take in MPEG-TS, so a fragment's buffer is allocated once:
/// the tables, then per frame its payload in 184-byte packet payloads, its headers
/// (PES, AUD, ADTS, parameter sets) and a packet of stuffing at most.
fn ts_estimate(frames: &[Frame]) -> usize {
    let payload = frames
        .iter()
        .fold(0usize, |n, f| n.saturating_add(f.payload.len()));
    let per_frame = PACKET_LEN.saturating_add(64);
    payload
        .saturating_add(payload / 46) // 188/184
        .saturating_add(frames.len().saturating_mul(per_frame))
        .saturating_add(2 * PACKET_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{AacConfig, AvcConfig};
    use crate::TrackConfig;

    fn video() -> Track {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
        ))
    }

    fn audio() -> Track {
        Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("ASC"),
        ))
    }

    fn frame(kind: MediaKind, dts: Timestamp, keyframe: bool) -> Frame {
        Frame {
            kind,
            dts,
            pts: dts,
            keyframe,
            payload: Bytes::from_static(&[0, 0, 0, 2, 0x65, 0x88]),
        }
    }

    #[test]
    fn durations_come_from_successors_in_each_timescale() {
        let mut m =
            Muxer::new(Container::Fmp4, Some(&video()), Some(&audio()), 1000).expect("muxer");
        for n in 0..3 {
            assert!(m.take(&frame(MediaKind::Video, 1000 + n * 3600, n == 0)));
            assert!(m.take(&frame(MediaKind::Audio, 1000 + n * 1920, false)));
        }
        // The newest of each track waits; ending video at its next frame lets it go.
        m.end_sample(MediaKind::Video, 1000 + 3 * 3600);
        let v = m.video.as_ref().expect("video");
        let a = m.audio.as_ref().expect("audio");
        let durations = |t: &MuxTrack| t.samples.iter().map(|s| s.duration).collect::<Vec<_>>();
        assert_eq!(durations(v), [3600, 3600, 3600]);
        assert_eq!(
            durations(a),
            [1024, 1024],
            "48 kHz: 1920 ticks are 1024 samples"
        );
        assert!(
            a.samples.iter().all(|s| s.keyframe),
            "audio samples are sync"
        );
        assert_eq!(m.end(), Some(1000 + 3 * 3600));
        let mut out = BytesMut::new();
        assert_eq!(m.write_fragment(&mut out), Ok(true));
        assert_eq!(&out[4..8], b"moof");
        assert_eq!(m.sequence(), FIRST_SEQUENCE + 1);
        // Only the pending audio sample is left; it is not written until ended.
        assert!(!m.has_fragment());
        m.end_all();
        assert!(m.has_fragment());
    }

    #[test]
    fn decode_times_that_step_back_are_clamped() {
        let mut m = Muxer::new(Container::Fmp4, Some(&video()), None, 0).expect("muxer");
        m.take(&frame(MediaKind::Video, 3600, true));
        let mut back = frame(MediaKind::Video, 3000, false);
        back.pts = 6000;
        m.take(&back);
        assert_eq!(m.last_dts(MediaKind::Video), Some(3600));
        m.end_all();
        let v = m.video.as_ref().expect("video");
        assert_eq!(v.samples[0].duration, 1, "a step back lasts a tick");
        assert_eq!(v.samples[1].cts_offset, 3000, "pts moved with dts");
        assert!(!m.take(&frame(MediaKind::Audio, 0, true)), "no audio track");
    }

    #[test]
    fn ts_fragments_start_with_the_tables_and_keep_the_order_taken() {
        let mut m = Muxer::new(Container::Ts, Some(&video()), Some(&audio()), 0).expect("muxer");
        let mut init = BytesMut::new();
        m.write_init(&mut init).expect("tables");
        assert_eq!(init.len(), 2 * PACKET_LEN);
        m.take(&frame(MediaKind::Video, 0, true));
        m.take(&frame(MediaKind::Audio, 0, true));
        let mut out = BytesMut::new();
        assert_eq!(m.write_fragment(&mut out), Ok(true));
        assert_eq!(out.len() % PACKET_LEN, 0);
        let pids: Vec<u16> = out
            .chunks(PACKET_LEN)
            .map(|p| u16::from_be_bytes([p[1] & 0x1f, p[2]]))
            .collect();
        assert_eq!(pids, [0, 0x1000, 0x100, 0x101]);
        assert_eq!(m.write_fragment(&mut out), Ok(false));
    }

    #[test]
    fn a_late_track_joins() {
        let mut m = Muxer::new(Container::Ts, None, Some(&audio()), 0).expect("muxer");
        assert_eq!(m.join(Some(&video()), Some(&audio())), Ok(true));
        assert_eq!(m.join(Some(&video()), None), Ok(false));
        assert!(m.track(MediaKind::Video).is_some());
        assert_eq!(
            Muxer::new(Container::Fmp4, None, None, 0).err(),
            Some(FragmentError::NoTracks)
        );
    }
}
