//! Sans-IO access checks: what a request says about who makes it ([`credentials`]),
//! which streams a rule covers ([`pattern`]), whether a JWT permits an action
//! ([`jwt`]), and the URLs of auth hooks and JWKS ([`url`]).
//!
//! Why a crate of its own: these parsers take what peers send (queries, headers,
//! tokens) and are fuzzed; apart from the server, their fuzz targets build in a
//! fraction of the time. Nothing here touches a socket: the server fetches a JWKS and
//! hands its keys over, asks the hooks, and reads the clock only where a token's
//! expiry is checked (by `jsonwebtoken`).
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

pub mod credentials;
mod decision;
pub mod jwt;
pub mod pattern;
pub mod url;

pub use credentials::Credentials;
pub use decision::{Action, Denial, Grant};
pub use pattern::{Pattern, PatternError};
pub use url::{Target, UrlError};
