//! A push's connection: the RTMP client session publishes to the target, and once
//! the target accepted, the stream's ring feeds it whenever the stream has news.

use super::{connection, dial, relay_error, Dialed};
use crate::ctx::Ctx;
use crate::driver::{Adapter, Conn, DriveError, Next};
use crate::relay::error::{Peer, RelayError};
use crate::relay::push::PushFeed;
use sluice_rtmp::{ClientEvent, ClientSession, RtmpError};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

type Error = DriveError<RtmpError>;

/// One connection of a push to an RTMP(S) target.
pub(super) async fn push(ctx: Rc<Ctx>, feed: &mut PushFeed<'_>) -> Result<(), RelayError> {
    let timeout = feed.timeout();
    let target = feed.target().clone();
    let tls = target.tls.then(|| feed.tls().clone());
    let Dialed { sock, peer, .. } =
        tokio::time::timeout(timeout, dial(&target.host, target.port, tls.as_ref()))
            .await
            .map_err(|_| RelayError::ConnectTimeout(timeout))??;
    let session = feed.session(crate::driver::now());
    let mut conn = connection(&ctx, "rtmp-push", sock, peer, session).bound_writes(timeout);
    let mut adapter = Push {
        feed,
        timeout,
        publishing: false,
        done: false,
    };
    let result = crate::driver::run(&mut conn, &mut adapter).await;
    match (adapter.done, result) {
        (true, _) => Ok(()),
        (false, Err(e)) => Err(relay_error(e, Peer::Target, RelayError::Rtmp)),
        (false, Ok(())) => Err(RelayError::Closed(Peer::Target)),
    }
}

/// A push's adapter: once the target accepted the publish, the stream's ring feeds
/// the session whenever the stream has something new.
struct Push<'f, 'a> {
    feed: &'f mut PushFeed<'a>,
    /// How long the target has to accept the publish.
    timeout: Duration,
    /// The target accepted the publish.
    publishing: bool,
    /// The push is no longer wanted.
    done: bool,
}

impl Push<'_, '_> {
    fn feed(&mut self, conn: &mut Conn<ClientSession>) -> Next {
        if self.feed.feed(&mut conn.session) {
            Next::Continue
        } else {
            self.done = true;
            Next::Close
        }
    }
}

impl Adapter<ClientSession> for Push<'_, '_> {
    type Wake = ();

    async fn on_event(
        &mut self,
        conn: &mut Conn<ClientSession>,
        event: ClientEvent,
    ) -> Result<Next, Error> {
        match event {
            ClientEvent::PublishStarted => {
                self.publishing = true;
                Ok(self.feed(conn))
            }
            ClientEvent::Rejected { code, description } => {
                Err(DriveError::Relay(RelayError::Refused {
                    peer: Peer::Target,
                    code,
                    description,
                }))
            }
            ClientEvent::TimedOut(_) => {
                Err(DriveError::Relay(RelayError::NotAccepted(self.timeout)))
            }
            _ => Ok(Next::Continue),
        }
    }

    fn wait(&mut self) -> impl Future<Output = ()> {
        self.feed.changed()
    }

    /// The stream has something new; what was fed before is written (the driver
    /// waits only once it is).
    fn on_wake(&mut self, conn: &mut Conn<ClientSession>, (): ()) -> Result<Next, Error> {
        self.feed.written();
        if !self.publishing {
            return Ok(Next::Continue);
        }
        Ok(self.feed(conn))
    }
}
