//! Sans-IO HLS: the segment timeline of a live variant, its media playlist (MPEG-TS,
//! fMP4, and fMP4 with Low-Latency HLS), and the blocking-reload logic of playlist
//! requests. No media bytes, sockets or clocks: the muxer tells a [`Timeline`] when
//! segments and parts start and end; the server keeps the bytes by media sequence
//! number, renders the playlist after each change and asks the timeline whether a
//! request can be answered.
//!
//! Files: `config` (settings and limits), `timeline` (segments, parts, window),
//! `crypt` (AES-128 segment encryption and its keys), `daterange` (SCTE-35 cues as
//! `EXT-X-DATERANGE`),
//! `render` (playlist text), `datetime` (ISO 8601 dates), `query` (`_HLS_*`
//! directives), `readiness` (blocking reload, preload hints), `error`; `parse` reads
//! other servers' playlists (an edge pulling HLS).
//!
//! ```
//! use sluice_hls::{HlsConfig, SegmentNames, Timeline, Variant};
//!
//! struct Names;
//! impl SegmentNames for Names {
//!     fn segment(&self, msn: u64, out: &mut String) { out.push_str(&format!("s{msn}.m4s")) }
//!     fn part(&self, msn: u64, part: u32, out: &mut String) { out.push_str(&format!("p{msn}.{part}.m4s")) }
//!     fn init(&self, out: &mut String) { out.push_str("init.mp4") }
//! }
//!
//! let mut timeline = Timeline::new(HlsConfig::default(), Variant::Fmp4)?;
//! let msn = timeline.start_segment(false, 1_700_000_000_000)?;
//! timeline.add_part(27_000, true)?; // 300 ms at 90 kHz
//! let released = timeline.end_segment(27_000)?;
//! assert_eq!((msn, released), (0, vec![]));
//! let mut playlist = String::new();
//! timeline.render(&Names, &mut playlist);
//! assert!(playlist.contains("#EXTINF:0.300,\ns0.m4s\n"));
//! # Ok::<(), sluice_hls::HlsError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
// Input from the network must never panic: no unwrap, expect or unchecked indexing
// outside tests (a bound that cannot fail says why with `get` or a checked form).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod config;
mod crypt;
mod daterange;
mod datetime;
mod error;
pub mod parse;
mod query;
mod readiness;
mod render;
mod segmenter;
mod timeline;
pub mod vod;

pub use config::{
    Encryption, HlsConfig, Variant, MAX_KEY_ROTATION, MAX_PARTS_PER_SEGMENT, MAX_SEGMENT_TICKS,
    MAX_WINDOW, TICKS_PER_SECOND,
};
pub use crypt::{iv, KeySecret, SegmentKeys, KEY_LABEL, KEY_LEN, SECRET_LEN};
pub use daterange::{DateRange, Scte35Attribute, Splices, MAX_OPEN_BREAKS, MAX_PENDING};
pub use datetime::write_iso8601_ms;
pub use error::HlsError;
pub use query::{parse_blocking_request, BlockingRequest};
pub use readiness::{Availability, Readiness};
pub use render::{SegmentNames, VERSION_FMP4, VERSION_TS};
pub use segmenter::{Fmp4Segmenter, SegmentError, TsSegmenter};
pub use timeline::Timeline;
