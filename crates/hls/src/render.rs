//! The media playlist of a timeline, for MPEG-TS, fMP4, and fMP4 with Low-Latency HLS.
//!
//! Why: the server renders a playlist once per timeline change and serves the same
//! bytes to every viewer; this file is the only one that knows tag syntax and order.
//!
//! # What is written
//! Header: `EXTM3U`, `EXT-X-VERSION` (3 for TS: decimal `EXTINF`; 6 for fMP4:
//! `EXT-X-MAP` in a playlist without `EXT-X-I-FRAMES-ONLY`; the Low-Latency tags need
//! no higher version, and version 9 is only required by `EXT-X-SKIP`, which we never
//! write), `EXT-X-TARGETDURATION`, for Low-Latency `EXT-X-SERVER-CONTROL`
//! (`CAN-BLOCK-RELOAD=YES`, `PART-HOLD-BACK` = 3 part targets, `HOLD-BACK` = 3 target
//! durations) and `EXT-X-PART-INF`, `EXT-X-MEDIA-SEQUENCE`,
//! `EXT-X-DISCONTINUITY-SEQUENCE` (once a discontinuity left the window),
//! `EXT-X-INDEPENDENT-SEGMENTS` (every segment starts at a keyframe, in both
//! variants), and `EXT-X-MAP` for fMP4.
//!
//! Then each listed segment: `EXT-X-DISCONTINUITY` after a publisher restart,
//! `EXT-X-PROGRAM-DATE-TIME` (on every segment: simple, and exact after any clock
//! drift), the `EXT-X-DATERANGE`s that begin with it (SCTE-35 ad markers, see
//! `daterange`), its `EXT-X-PART`s when Low-Latency and the segment starts within three
//! target durations of the playlist's end (the spec's removal rule), `EXTINF` with
//! three decimals, and its URI. For Low-Latency, then the parts of the segment in
//! progress (with its discontinuity and date) and an `EXT-X-PRELOAD-HINT` for the
//! next part (none between segments when the caller names them: the next name is not
//! known yet). `EXT-X-ENDLIST` once the stream ended (and no hint).
//!
//! With [`Encryption::Aes128`], each listed segment is preceded by its
//! `EXT-X-KEY:METHOD=AES-128,URI="…",IV=0x…`: the key of its period and its msn as IV
//! (see `crypt`). Every segment gets one, since the explicit IV is the segment's own;
//! `EXT-X-MAP` comes before the first, so the init segment stays in the clear.
//!
//! URIs come from the caller's [`SegmentNames`]; any byte that may not appear in a
//! quoted playlist string or URI line (controls, space, `"`, non-ASCII) is
//! percent-encoded, so a stream name chosen by a publisher cannot inject tags.

use std::fmt::Write as _;

use crate::config::{Encryption, Variant};
use crate::datetime::write_iso8601_ms;
use crate::timeline::{ticks_to_ms, Segment, Timeline};

/// `EXT-X-VERSION` of MPEG-TS playlists (decimal `EXTINF` durations).
pub const VERSION_TS: u32 = 3;
/// `EXT-X-VERSION` of fMP4 playlists (`EXT-X-MAP` without `EXT-X-I-FRAMES-ONLY`).
pub const VERSION_FMP4: u32 = 6;

/// How the server names its segments, parts and init segment in playlists.
/// Each method appends a URI, relative to the playlist or absolute, to `out`.
///
/// A segment is known by its *name*: its msn, unless the timeline's caller named it
/// (`Timeline::start_named_segment`).
pub trait SegmentNames {
    /// The URI of the segment named `name`.
    fn segment(&self, name: u64, out: &mut String);
    /// The URI of part `part` of the segment named `name`.
    fn part(&self, name: u64, part: u32, out: &mut String);
    /// The URI of the init segment (`EXT-X-MAP`); asked for the fMP4 variant only.
    fn init(&self, out: &mut String);
    /// The URI of the key of `period` (`EXT-X-KEY`); asked only when segments are
    /// encrypted. The default, `key/PERIOD`, suits a caller with one stream instance.
    fn key(&self, period: u64, out: &mut String) {
        let _ = write!(out, "key/{period}");
    }
}

impl Timeline {
    /// Appends the media playlist for the current state to `out` (which it does not
    /// clear). See the module docs of `render` for what is written.
    pub fn render(&self, names: &dyn SegmentNames, out: &mut String) {
        let low_latency = self.config.low_latency;
        out.push_str("#EXTM3U\n");
        let version = match self.variant {
            Variant::Ts => VERSION_TS,
            Variant::Fmp4 => VERSION_FMP4,
        };
        let _ = writeln!(out, "#EXT-X-VERSION:{version}");
        let _ = writeln!(out, "#EXT-X-TARGETDURATION:{}", self.target_duration_s);
        if low_latency {
            out.push_str("#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=");
            write_seconds(out, self.part_target_ms.saturating_mul(3));
            out.push_str(",HOLD-BACK=");
            write_seconds(out, self.target_duration_s.saturating_mul(3000));
            out.push_str("\n#EXT-X-PART-INF:PART-TARGET=");
            write_seconds(out, self.part_target_ms);
            out.push('\n');
        }
        let _ = writeln!(out, "#EXT-X-MEDIA-SEQUENCE:{}", self.media_sequence());
        if self.discontinuity_sequence > 0 {
            let _ = writeln!(
                out,
                "#EXT-X-DISCONTINUITY-SEQUENCE:{}",
                self.discontinuity_sequence
            );
        }
        out.push_str("#EXT-X-INDEPENDENT-SEGMENTS\n");
        if self.variant == Variant::Fmp4 {
            out.push_str("#EXT-X-MAP:URI=\"");
            push_uri(out, |out| names.init(out));
            out.push_str("\"\n");
        }

        let first_with_parts = if low_latency {
            self.first_msn_with_parts()
        } else {
            u64::MAX
        };
        for segment in self.listed_segments() {
            write_prelude(out, segment);
            if let Encryption::Aes128 { rotation } = self.config.encryption {
                write_key(out, names, segment.msn, rotation);
            }
            if segment.msn >= first_with_parts {
                write_parts(out, names, segment);
            }
            out.push_str("#EXTINF:");
            write_seconds(out, ticks_to_ms(segment.duration));
            out.push_str(",\n");
            push_uri(out, |out| names.segment(segment.name, out));
            out.push('\n');
        }

        if self.ended {
            out.push_str("#EXT-X-ENDLIST\n");
            return;
        }
        if low_latency {
            let hint = match &self.open {
                Some(open) => {
                    if !open.parts.is_empty() {
                        write_prelude(out, open);
                        write_parts(out, names, open);
                    }
                    Some((
                        open.name,
                        u32::try_from(open.parts.len()).unwrap_or(u32::MAX),
                    ))
                }
                // Between segments: the next one's name is its msn, unless the caller
                // names segments (then it is not known before the segment starts).
                None => (!self.named).then_some((self.next_msn, 0)),
            };
            if let Some((name, part)) = hint {
                out.push_str("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"");
                push_uri(out, |out| names.part(name, part, out));
                out.push_str("\"\n");
            }
        }
    }

    /// The oldest listed msn whose parts are listed: segments that start within three
    /// target durations of the playlist's end.
    fn first_msn_with_parts(&self) -> u64 {
        let limit = self
            .target_duration_s
            .saturating_mul(3)
            .saturating_mul(crate::config::TICKS_PER_SECOND.unsigned_abs());
        let mut from_end: u64 = self.open.as_ref().map_or(0, |open| {
            open.parts
                .iter()
                .fold(0u64, |sum, part| sum.saturating_add(part.duration))
        });
        let mut first = self.complete_end();
        for segment in self.listed_segments().rev() {
            from_end = from_end.saturating_add(segment.duration);
            if from_end > limit {
                break;
            }
            first = segment.msn;
        }
        first
    }
}

/// The tags that open a segment, before its parts: discontinuity, date, and the date
/// ranges (ad markers) that begin with it.
fn write_prelude(out: &mut String, segment: &Segment) {
    if segment.discontinuity {
        out.push_str("#EXT-X-DISCONTINUITY\n");
    }
    out.push_str("#EXT-X-PROGRAM-DATE-TIME:");
    write_iso8601_ms(out, segment.wall_clock_ms);
    out.push('\n');
    for range in &segment.date_ranges {
        range.render(out);
    }
}

/// `EXT-X-KEY` of segment `msn`: its period's key URI and its msn as IV.
fn write_key(out: &mut String, names: &dyn SegmentNames, msn: u64, rotation: u32) {
    out.push_str("#EXT-X-KEY:METHOD=AES-128,URI=\"");
    push_uri(out, |out| names.key(msn / u64::from(rotation.max(1)), out));
    let _ = writeln!(out, "\",IV=0x{:032x}", u128::from(msn));
}

fn write_parts(out: &mut String, names: &dyn SegmentNames, segment: &Segment) {
    for (index, part) in segment.parts.iter().enumerate() {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        out.push_str("#EXT-X-PART:DURATION=");
        write_seconds(out, ticks_to_ms(part.duration));
        out.push_str(",URI=\"");
        push_uri(out, |out| names.part(segment.name, index, out));
        out.push('"');
        if part.independent {
            out.push_str(",INDEPENDENT=YES");
        }
        out.push('\n');
    }
}

/// Writes `ms` as seconds with three decimals (`2.002`), without floating point.
pub(crate) fn write_seconds(out: &mut String, ms: u64) {
    let _ = write!(out, "{}.{:03}", ms / 1000, ms % 1000);
}

/// Lets `write` append a URI, then percent-encodes the bytes that may not appear in
/// a quoted string or URI line.
fn push_uri(out: &mut String, write: impl FnOnce(&mut String)) {
    let start = out.len();
    write(out);
    let Some(tail) = out.get(start..) else {
        return;
    };
    if tail.bytes().all(uri_safe) {
        return;
    }
    let raw = out.split_off(start);
    for byte in raw.bytes() {
        if uri_safe(byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

/// Visible ASCII except `"`.
fn uri_safe(byte: u8) -> bool {
    byte.is_ascii_graphic() && byte != b'"'
}
