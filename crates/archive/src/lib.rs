//! Sans-IO recordings index: which wall-clock time each recording file holds, kept in
//! a small crash-safe log beside the files and read back from the files themselves
//! when the log is missing or stale.
//!
//! Why a crate of its own: everything here parses bytes that come from the disk (index
//! logs, recording files that a crash cut anywhere, files an operator copied in), so it
//! is fuzzed, and it never does I/O: the server reads and writes, this crate decides.
//!
//! - [`span`]: a file's span (UTC ms, bytes, format) and a stream's sorted spans with
//!   range queries by binary search, gaps and runs.
//! - [`log`]: the on-disk index of one stream, an append-only log of fixed CRC-checked
//!   records; a torn tail is detected and ignored; compaction.
//! - [`prft`]: the `prft` box (ISO/IEC 14496-12 ProducerReferenceTimeBox) that maps
//!   each fMP4 fragment's media time to NTP wall-clock time.
//! - [`fmp4`]: a file's span from its boxes (a bounded pull parser: it asks for the
//!   byte ranges it needs, never for a whole `mdat`).
//! - [`ts`]: an MPEG-TS file's span from the PTS at its head and tail.
//! - [`name`]: recording file names (`<stream>-<YYYYmmdd-HHMMSS>[-N].<ext>`).
//! - [`time`]: UTC ms to and from RFC 3339 text.
//! - [`range`]: the `APP/NAME@FROM..TO` time range of playback URLs.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
// Bytes from the disk must never panic: no unwrap, expect or unchecked indexing
// outside tests.
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

pub mod fmp4;
pub mod log;
pub mod name;
pub mod prft;
pub mod range;
pub mod span;
pub mod time;
pub mod ts;

pub use fmp4::{Fmp4Scan, ScanError, Scanned};
pub use log::{LogError, LogRead};
pub use name::FileId;
pub use range::{RangeError, TimeRange};
pub use span::{FileSpan, Format, StreamSpans};
