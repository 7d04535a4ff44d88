//! The relays' way to the connection driver. A pull from an RTMP, RTMPS,
//! HTTP(S)-FLV or RTSP origin, and every push, runs its sans-IO client session in the one
//! driver (`driver::relay`), as the server's own connections do, with the time passed
//! in; the driver sits above the relays (`FLOORS`), so each worker hands its own
//! [`Link`] down once at start ([`install`]), and the relays' tasks, which run on that
//! worker, find it there.
//!
//! What crosses the seam is the relays' own logic: a pull's [`PullSink`] (what the
//! origin's media does to the hub, when the pull stops) and a push's [`PushFeed`]
//! (what the stream's ring gives the target); the driver's side owns the socket, the
//! session and its timers.

use super::error::RelayError;
use super::pull::{PullSink, Stop};
use super::push::PushFeed;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// A future of one relay connection.
pub type Connection<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What runs a relay's connection in the driver.
pub trait Link {
    /// One connection to the pull's RTMP(S), HTTP(S)-FLV or RTSP origin; it ends with why
    /// the pull stops or moves on.
    fn pull<'a>(&'a self, sink: &'a mut PullSink<'_>) -> Connection<'a, Stop>;

    /// One connection to the push's target: `Ok` once the push is no longer wanted
    /// (the stream ended, its rule went), else why the target failed.
    fn push<'a>(&'a self, feed: &'a mut PushFeed<'_>) -> Connection<'a, Result<(), RelayError>>;
}

thread_local! {
    /// This worker's link (relay tasks run on the worker that started them).
    static LINK: RefCell<Option<Rc<dyn Link>>> = const { RefCell::new(None) };
}

/// Makes `link` this worker's (the server does it when the worker starts).
pub fn install(link: Rc<dyn Link>) {
    LINK.with(|l| *l.borrow_mut() = Some(link));
}

/// This worker's link, or why a relay connection cannot run here.
pub(super) fn current() -> Result<Rc<dyn Link>, RelayError> {
    LINK.with(|l| l.borrow().clone())
        .ok_or(RelayError::NoDriver)
}
