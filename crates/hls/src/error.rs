//! The one error type of this crate, saying whose fault each failure is.
//!
//! [`HlsError::BadQuery`] is the viewer's fault (answer 400). [`HlsError::Unexpected`],
//! [`HlsError::BadDuration`], [`HlsError::TooManyParts`], [`HlsError::Config`],
//! [`HlsError::NoSecret`] and [`HlsError::Encrypt`] are
//! the caller's: a call out of order, a duration the publisher's timestamps made
//! absurd, or a configuration out of range. None of them changes the timeline.

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HlsError {
    /// A playlist request's query (`_HLS_msn`, `_HLS_part`, `_HLS_skip`) is malformed.
    #[error("bad playlist request: {what}")]
    BadQuery {
        /// What was wrong with it.
        what: &'static str,
    },
    /// A timeline call that the timeline's state does not allow.
    #[error("{call} not allowed {state}")]
    Unexpected {
        /// The call that was made.
        call: &'static str,
        /// The state the timeline was in.
        state: &'static str,
    },
    /// A segment or part duration that is not positive or exceeds its limit.
    #[error("{what} duration of {ticks} ticks is out of range")]
    BadDuration {
        /// `"segment"` or `"part"`.
        what: &'static str,
        /// The duration given, in 90 kHz ticks.
        ticks: i64,
    },
    /// The segment in progress already has [`crate::MAX_PARTS_PER_SEGMENT`] parts.
    #[error("more than {limit} parts in one segment")]
    TooManyParts {
        /// The limit.
        limit: u32,
    },
    /// The cipher refused a key or a segment: ours, since we make both.
    #[error("segment encryption failed")]
    Encrypt,
    /// Encryption is configured but the segmenter was given no key secret.
    #[error("encryption configured without a key secret")]
    NoSecret,
    /// A configuration value is out of range.
    #[error("invalid HLS configuration: {what}")]
    Config {
        /// Which value, and its range.
        what: &'static str,
    },
}
