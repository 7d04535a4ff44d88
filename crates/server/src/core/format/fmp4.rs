//! Fragmented MP4 as one byte stream (HTTP-fMP4, and the same in WebSocket messages):
//! an init segment, then one `moof` + `mdat` per frame, for MSE players.
//!
//! Why a fragment per frame: a fragment of several frames would hold the first back
//! until the last came, and the fan-out sends what it has at every merge window; one
//! per frame costs a `moof` (about 100 bytes) per frame and adds no latency.
//!
//! Why made in stream order (see [`super::OrderedForm`]): a sample's duration is not
//! known until the next frame of its track comes, and MSE needs one (a duration much
//! too long makes a B-frame's interval cover the next P-frame, which is then removed).
//! The maker gives each sample the interval between the two previous frames of its
//! track, exact at a constant frame rate, and numbers the fragments (`mfhd`).
//!
//! # Invariants
//! - A player gets the init segment first ([`OutputFormat::preamble`], from the stream's
//!   current decoder configurations), then fragments from a start keyframe on; the
//!   configurations themselves have no fMP4 form.
//! - The init segment describes what the player then gets: a decoder configuration in
//!   line that differs from the one the player was sent ends the player (see
//!   [`OutputFormat::fixed_tracks`] and `fanout`), since MSE refuses an init segment whose
//!   tracks differ and needs `changeType()` for another codec; the viewer reconnects and
//!   gets the new init segment. The same configuration again (a publisher that came
//!   back) changes nothing.
//! - Only the stream's own tracks fMP4 carries (H.264, H.265, AV1, VP9, AAC, Opus) are
//!   in it; a frame of another track has no fMP4 form. The maker and the init segment
//!   decide alike ([`carries`]).
//! - Decode times never go back per track (a step back is clamped, as HLS does).

use super::{FormatId, OrderedForm, OutputFormat};
use crate::core::packet::{Packet, Payload, Shape};
use bytes::{Bytes, BytesMut};
use sluice_media::fmp4::{self, InitTrack, Sample, TrackRun};
use sluice_media::fragment::{default_duration, timescale, track_id, Container};
use sluice_media::{Frame, MediaKind, Timestamp, Track, TrackConfig, CLOCK_HZ};
use std::sync::Arc;

/// A longer interval between two frames of a track is a gap in what the maker saw (its
/// players all left, then one came back), not the track's rhythm: the previous duration
/// stays. Slide shows at one frame a second stay well under it.
const MAX_INTERVAL: Timestamp = 5 * CLOCK_HZ as Timestamp;

/// Longest WebSocket frame header (a 64-bit length), reserved before a fragment so the
/// header goes in front without copying the fragment.
const WS_HEADER_MAX: usize = 10;

/// Whether the fMP4 byte stream carries `track`: what HLS's fMP4 carries, and AV1 and
/// VP9, whose sample entries MSE players read.
pub(crate) fn carries(track: &Track) -> bool {
    Container::Fmp4.carries(track)
        || matches!(
            track.config,
            TrackConfig::Av1 { .. } | TrackConfig::Vp9 { .. }
        )
}

/// fMP4 as HTTP sends it.
pub(super) struct Fmp4;

/// fMP4 with each fragment (and the init segment) in one binary WebSocket message.
pub(super) struct WsFmp4;

impl OutputFormat for Fmp4 {
    fn name(&self) -> &'static str {
        "fmp4"
    }

    /// Never built on demand: the maker sets it (see the module).
    fn build(&self, _: &Packet, _: &Shape) -> Bytes {
        Bytes::new()
    }

    fn ordered(&self) -> Option<Box<dyn OrderedForm>> {
        Some(Box::new(Fmp4Form::new(FormatId::FMP4, false)))
    }

    fn preamble(&self, configs: &[Arc<Packet>]) -> Vec<Bytes> {
        init_segment(configs).into_iter().collect()
    }

    fn fixed_tracks(&self) -> bool {
        true
    }
}

impl OutputFormat for WsFmp4 {
    fn name(&self) -> &'static str {
        "ws-fmp4"
    }

    fn build(&self, _: &Packet, _: &Shape) -> Bytes {
        Bytes::new()
    }

    fn ordered(&self) -> Option<Box<dyn OrderedForm>> {
        Some(Box::new(Fmp4Form::new(FormatId::WS_FMP4, true)))
    }

    fn preamble(&self, configs: &[Arc<Packet>]) -> Vec<Bytes> {
        init_segment(configs)
            .map(|init| {
                let mut out = BytesMut::with_capacity(init.len() + WS_HEADER_MAX);
                ws_header(&mut out, init.len());
                out.extend_from_slice(&init);
                out.freeze()
            })
            .into_iter()
            .collect()
    }

    fn fixed_tracks(&self) -> bool {
        true
    }
}

fn ws_header(out: &mut BytesMut, len: usize) {
    sluice_http::ws::write_frame_header(out, sluice_http::ws::Opcode::Binary, len);
}

/// The stream's own video and audio configurations among `configs`, when fMP4 carries
/// them.
fn own_tracks(configs: &[Arc<Packet>]) -> [Option<&Arc<Track>>; 2] {
    let find = |kind: MediaKind| {
        configs.iter().find_map(|p| match &p.payload {
            Payload::Config(track) if !p.derived && track.kind() == kind && carries(track) => {
                Some(track)
            }
            _ => None,
        })
    };
    [find(MediaKind::Video), find(MediaKind::Audio)]
}

/// The init segment for the stream's configurations now; `None` when it has no track
/// fMP4 carries (or one the writer refuses: a player then gets no media).
fn init_segment(configs: &[Arc<Packet>]) -> Option<Bytes> {
    let tracks: Vec<InitTrack<'_>> = own_tracks(configs)
        .into_iter()
        .flatten()
        .map(|track| InitTrack {
            track_id: track_id(track.kind()),
            track,
            timescale: timescale(Container::Fmp4, track),
        })
        .collect();
    let mut out = BytesMut::new();
    match fmp4::write_init(&mut out, &tracks) {
        Ok(()) => Some(out.freeze()),
        Err(e) => {
            tracing::debug!(error = %e, "no fMP4 init segment");
            None
        }
    }
}

/// One track as the maker follows it.
#[derive(Debug)]
struct TrackClock {
    id: u32,
    timescale: u32,
    /// Decode time of its newest frame (after clamping), in [`CLOCK_HZ`] ticks.
    last_dts: Option<Timestamp>,
    /// The duration the next sample gets: the newest interval between two frames, in
    /// the track's timescale; the codec's usual one before there is any.
    duration: u32,
}

impl TrackClock {
    fn new(track: &Track) -> TrackClock {
        let timescale = timescale(Container::Fmp4, track);
        let (units, per_second) = default_duration(track);
        let duration = u64::from(units) * u64::from(timescale) / u64::from(per_second.max(1));
        TrackClock {
            id: track_id(track.kind()),
            timescale,
            last_dts: None,
            duration: u32::try_from(duration.max(1)).unwrap_or(u32::MAX),
        }
    }

    /// `ticks` of [`CLOCK_HZ`] in the track's timescale.
    fn scaled(&self, ticks: Timestamp) -> i128 {
        i128::from(ticks) * i128::from(self.timescale) / i128::from(CLOCK_HZ)
    }
}

/// The stream's fMP4 fragments, made in stream order while players claim them.
#[derive(Debug)]
struct Fmp4Form {
    id: FormatId,
    /// Each fragment in one binary WebSocket message.
    ws: bool,
    video: Option<TrackClock>,
    audio: Option<TrackClock>,
    /// The next fragment's `mfhd` sequence number.
    sequence: u32,
}

impl Fmp4Form {
    fn new(id: FormatId, ws: bool) -> Fmp4Form {
        Fmp4Form {
            id,
            ws,
            video: None,
            audio: None,
            sequence: 1,
        }
    }

    fn slot(&mut self, kind: MediaKind) -> &mut Option<TrackClock> {
        match kind {
            MediaKind::Video => &mut self.video,
            MediaKind::Audio => &mut self.audio,
        }
    }

    /// The fragment of `frame`, or empty when its track is not carried or the writer
    /// refuses it.
    fn fragment(&mut self, frame: &Frame) -> Bytes {
        let sequence = self.sequence;
        let ws = self.ws;
        let Some(clock) = self.slot(frame.kind).as_mut() else {
            return Bytes::new();
        };
        let (mut dts, mut pts) = (frame.dts, frame.pts);
        if let Some(last) = clock.last_dts {
            if dts < last {
                pts = pts.saturating_add(last.saturating_sub(dts));
                dts = last;
            } else if dts > last && dts - last <= MAX_INTERVAL {
                let d = clock.scaled(dts) - clock.scaled(last);
                clock.duration = u32::try_from(d.max(1)).unwrap_or(u32::MAX);
            }
        }
        clock.last_dts = Some(dts);
        let sample = Sample {
            duration: clock.duration,
            cts_offset: i32::try_from(clock.scaled(pts.saturating_sub(dts))).unwrap_or(0),
            keyframe: frame.keyframe || frame.kind == MediaKind::Audio,
            data: frame.payload.clone(),
        };
        let run = TrackRun {
            track_id: clock.id,
            base_decode_time: u64::try_from(clock.scaled(dts)).unwrap_or(0),
            samples: std::slice::from_ref(&sample),
        };
        let mut out = BytesMut::new();
        if ws {
            out.extend_from_slice(&[0; WS_HEADER_MAX]);
        }
        if let Err(e) = fmp4::write_fragment(&mut out, sequence, &[run]) {
            tracing::debug!(error = %e, "frame without an fMP4 form");
            return Bytes::new();
        }
        self.sequence = sequence.wrapping_add(1);
        if !ws {
            return out.freeze();
        }
        // The header goes right before the fragment, in the room reserved for it.
        let len = out.len() - WS_HEADER_MAX;
        let mut header = BytesMut::with_capacity(WS_HEADER_MAX);
        ws_header(&mut header, len);
        let at = WS_HEADER_MAX - header.len();
        out[at..WS_HEADER_MAX].copy_from_slice(&header);
        out.freeze().slice(at..)
    }
}

impl OrderedForm for Fmp4Form {
    /// The stream's own tracks that fMP4 carries; a new configuration restarts the
    /// track's clock (its players are ended and start again).
    fn track(&mut self, track: &Arc<Track>, derived: bool) {
        if derived {
            return;
        }
        *self.slot(track.kind()) = carries(track).then(|| TrackClock::new(track));
    }

    fn takes(&self, packet: &Packet) -> bool {
        match &packet.payload {
            Payload::Media { frame, .. } if !packet.derived => match frame.kind {
                MediaKind::Video => self.video.is_some(),
                MediaKind::Audio => self.audio.is_some(),
            },
            _ => false,
        }
    }

    fn made(&self, packet: &Packet) -> bool {
        packet.has_form(self.id)
    }

    fn make(&mut self, packet: &Packet, frame: &Frame) {
        packet.set_form(self.id, self.fragment(frame));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_media::codec::{AacConfig, AvcConfig};

    fn avc() -> Arc<Track> {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Arc::new(Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
        )))
    }

    fn aac() -> Arc<Track> {
        Arc::new(Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("ASC"),
        )))
    }

    fn frame(kind: MediaKind, ms: i64, cts_ms: i64, keyframe: bool) -> Frame {
        Frame {
            kind,
            dts: Frame::ticks_from_ms(ms),
            pts: Frame::ticks_from_ms(ms + cts_ms),
            keyframe,
            payload: Bytes::from(vec![0xab; 50]),
        }
    }

    /// The boxes at the top level of `data`: (type, body).
    fn boxes(mut data: &[u8]) -> Vec<([u8; 4], &[u8])> {
        let mut out = Vec::new();
        while data.len() >= 8 {
            let size = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
            assert!(size >= 8 && size <= data.len(), "box size {size}");
            out.push((data[4..8].try_into().unwrap(), &data[8..size]));
            data = &data[size..];
        }
        assert!(data.is_empty(), "{} bytes after the last box", data.len());
        out
    }

    /// The body of the first box of type `kind` anywhere in `data` (a plain search).
    fn find<'a>(data: &'a [u8], kind: &[u8; 4]) -> &'a [u8] {
        let at = data
            .windows(4)
            .position(|w| w == kind)
            .unwrap_or_else(|| panic!("no {}", String::from_utf8_lossy(kind)));
        let size = u32::from_be_bytes(data[at - 4..at].try_into().unwrap()) as usize;
        &data[at + 4..at - 4 + size]
    }

    fn u32_at(data: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(data[at..at + 4].try_into().unwrap())
    }

    fn config(track: &Arc<Track>) -> Arc<Packet> {
        Packet::new(Payload::Config(track.clone()), 0, false)
    }

    #[test]
    fn init_segment_has_the_carried_tracks() {
        let configs = [config(&avc()), config(&aac())];
        let init = Fmp4.preamble(&configs);
        assert_eq!(init.len(), 1);
        let top = boxes(&init[0]);
        let kinds: Vec<_> = top.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [*b"ftyp", *b"moov"]);
        assert_eq!(init[0].windows(4).filter(|w| w == b"trak").count(), 2);
        // A G.711 audio track is left out, not the stream.
        let pcma = Arc::new(Track::new(TrackConfig::Pcma { channels: 1 }));
        let init = Fmp4.preamble(&[config(&avc()), config(&pcma)]);
        assert_eq!(init[0].windows(4).filter(|w| w == b"trak").count(), 1);
        // Nothing fMP4 carries: no init segment at all.
        assert!(Fmp4.preamble(&[config(&pcma)]).is_empty());
    }

    #[test]
    fn each_frame_is_one_fragment_timed_by_the_previous_interval() {
        let mut form = Fmp4Form::new(FormatId::FMP4, false);
        form.track(&avc(), false);
        form.track(&aac(), false);
        // 25 fps with a B-frame's composition offset, then 48 kHz AAC.
        let a = form.fragment(&frame(MediaKind::Video, 1000, 80, true));
        let b = form.fragment(&frame(MediaKind::Video, 1040, 0, false));
        let c = form.fragment(&frame(MediaKind::Audio, 1000, 0, false));
        for f in [&a, &b, &c] {
            let kinds: Vec<_> = boxes(f).iter().map(|(k, _)| *k).collect();
            assert_eq!(kinds, [*b"moof", *b"mdat"]);
        }
        // mfhd: version/flags, then the sequence number, counting up across tracks.
        assert_eq!(u32_at(find(&a, b"mfhd"), 4), 1);
        assert_eq!(u32_at(find(&c, b"mfhd"), 4), 3);
        // tfdt v1: the decode time in the track's timescale (90 kHz video).
        let tfdt = find(&b, b"tfdt");
        assert_eq!(u64::from_be_bytes(tfdt[4..12].try_into().unwrap()), 93_600);
        // trun: the second frame lasts what the first did to it (40 ms); the first
        // gets a 25 fps frame before there is an interval.
        let duration = |f: &Bytes| u32_at(find(f, b"trun"), 12);
        assert_eq!(duration(&a), 3600);
        assert_eq!(duration(&b), 3600);
        // AAC: 1024 samples at 48 kHz, its timescale.
        assert_eq!(duration(&c), 1024);
        let tfdt = find(&c, b"tfdt");
        assert_eq!(u64::from_be_bytes(tfdt[4..12].try_into().unwrap()), 48_000);
        assert!(a.ends_with(&[0xab; 50]));
    }

    #[test]
    fn a_gap_keeps_the_previous_duration() {
        let mut form = Fmp4Form::new(FormatId::FMP4, false);
        form.track(&avc(), false);
        form.fragment(&frame(MediaKind::Video, 0, 0, true));
        form.fragment(&frame(MediaKind::Video, 100, 0, false));
        let after_gap = form.fragment(&frame(MediaKind::Video, 60_000, 0, true));
        assert_eq!(u32_at(find(&after_gap, b"trun"), 12), 9000);
    }

    #[test]
    fn decode_times_never_go_back() {
        let mut form = Fmp4Form::new(FormatId::FMP4, false);
        form.track(&avc(), false);
        form.fragment(&frame(MediaKind::Video, 1000, 0, true));
        let back = form.fragment(&frame(MediaKind::Video, 900, 0, false));
        let tfdt = find(&back, b"tfdt");
        assert_eq!(u64::from_be_bytes(tfdt[4..12].try_into().unwrap()), 90_000);
    }

    #[test]
    fn websocket_messages_frame_each_fragment() {
        let mut form = Fmp4Form::new(FormatId::WS_FMP4, true);
        form.track(&avc(), false);
        let bytes = form.fragment(&frame(MediaKind::Video, 0, 0, true));
        // FIN + binary, then a 7-bit or 16-bit length: the fragment follows whole.
        assert_eq!(bytes[0], 0x82);
        let (len, at) = match bytes[1] {
            126 => (usize::from(u16::from_be_bytes([bytes[2], bytes[3]])), 4),
            n => (usize::from(n), 2),
        };
        assert_eq!(bytes.len() - at, len);
        let kinds: Vec<_> = boxes(&bytes[at..]).iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [*b"moof", *b"mdat"]);
        let init = WsFmp4.preamble(&[config(&avc())]);
        assert_eq!(init[0][0], 0x82);
    }

    #[test]
    fn derived_and_uncarried_tracks_have_no_form() {
        let mut form = Fmp4Form::new(FormatId::FMP4, false);
        form.track(&avc(), false);
        form.track(&aac(), true);
        let audio = frame(MediaKind::Audio, 0, 0, true);
        let derived = Packet::derived(
            Payload::Media {
                frame: audio.clone(),
                track: aac(),
            },
            0,
            None,
        );
        assert!(!form.takes(&derived));
        let own = Packet::new(
            Payload::Media {
                frame: audio,
                track: aac(),
            },
            0,
            true,
        );
        assert!(!form.takes(&own), "no own audio configured");
        assert!(form
            .fragment(&frame(MediaKind::Audio, 0, 0, true))
            .is_empty());
    }
}
