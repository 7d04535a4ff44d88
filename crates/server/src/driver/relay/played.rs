//! A pull's adapter for the origins whose session says what it plays in its events
//! (RTMP, RTMPS, HTTP-FLV): [`Played`] turns each event into media or an end, and
//! [`Pull`] gives the media and a tick to the pull's sink.

use super::{connection, pull_ended, pull_tick, step, Opened};
use crate::driver::{Adapter, Conn, DriveError, Next};
use crate::relay::client::{Media, SILENCE};
use crate::relay::error::{Peer, RelayError};
use crate::relay::pull::{PullSink, Stop};
use sluice_http::flv_client::{FlvClient, FlvClientError, FlvEvent};
use sluice_media::flv::{TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_rtmp::{ClientEvent, ClientSession, RtmpError, Waited};
use sluice_session::Session;
use std::time::Duration;

/// A client session a pull plays its origin with: what its events give the hub.
pub(super) trait Played: Session {
    /// What `event` carries of the stream (`None`: nothing), or why it ends the
    /// connection; `timeout` is the pull's connect timeout.
    fn media(event: Self::Event, timeout: Duration) -> Result<Option<Media>, RelayError>;

    /// What a failure of the session means for the relay.
    fn error(e: Self::Error) -> RelayError;

    /// Bytes received from the origin.
    fn received(&self) -> u64;
}

impl Played for ClientSession {
    fn media(event: ClientEvent, timeout: Duration) -> Result<Option<Media>, RelayError> {
        Ok(Some(match event {
            ClientEvent::Video {
                timestamp_ms,
                payload,
            } => Media::Video(timestamp_ms, payload),
            ClientEvent::Audio {
                timestamp_ms,
                payload,
            } => Media::Audio(timestamp_ms, payload),
            ClientEvent::Metadata { payload } => Media::Metadata(payload),
            ClientEvent::Rejected { code, description } => {
                return Err(RelayError::Refused {
                    peer: Peer::Origin,
                    code,
                    description,
                })
            }
            ClientEvent::Status { code, .. } if ends_stream(&code) => {
                return Err(RelayError::StreamEnded(code))
            }
            ClientEvent::TimedOut(Waited::Start) => return Err(RelayError::NoStream(timeout)),
            ClientEvent::TimedOut(Waited::Input) => return Err(silent()),
            _ => return Ok(None),
        }))
    }

    fn error(e: RtmpError) -> RelayError {
        RelayError::Rtmp(e)
    }

    fn received(&self) -> u64 {
        self.bytes_received()
    }
}

impl Played for FlvClient {
    fn media(event: FlvEvent, timeout: Duration) -> Result<Option<Media>, RelayError> {
        let tag = match event {
            FlvEvent::Playing => return Ok(None),
            FlvEvent::TimedOut { start: true } => return Err(RelayError::NoStream(timeout)),
            FlvEvent::TimedOut { start: false } => return Err(silent()),
            FlvEvent::Tag(tag) => tag,
        };
        let ts = i64::from(tag.timestamp_ms);
        Ok(match tag.tag_type {
            TAG_VIDEO => Some(Media::Video(ts, tag.body)),
            TAG_AUDIO => Some(Media::Audio(ts, tag.body)),
            TAG_SCRIPT => Some(Media::Metadata(tag.body)),
            _ => None,
        })
    }

    fn error(e: FlvClientError) -> RelayError {
        match e {
            FlvClientError::Response(e) => RelayError::Http(e),
            FlvClientError::Status(status) => RelayError::Status {
                what: Peer::Origin.to_string(),
                status,
            },
            FlvClientError::Flv(e) => RelayError::BadMedia(e),
            FlvClientError::Ended => RelayError::BodyEnded,
            FlvClientError::Datagram => RelayError::Closed(Peer::Origin),
        }
    }

    fn received(&self) -> u64 {
        self.bytes_received()
    }
}

fn silent() -> RelayError {
    RelayError::Silent {
        peer: Peer::Origin,
        after: SILENCE,
    }
}

/// Plays the origin over `session` until the pull stops or the origin fails.
pub(super) async fn play<S: Played>(
    opened: Opened,
    protocol: &'static str,
    session: S,
    sink: &mut PullSink<'_>,
) -> Stop {
    let Opened {
        ctx,
        sock,
        peer,
        timeout,
    } = opened;
    // An origin that takes nothing of what we say must not hold the pull.
    let mut conn = connection(&ctx, protocol, sock, peer, session).bound_writes(SILENCE);
    let mut adapter = Pull {
        sink,
        timeout,
        stop: None,
        counted: 0,
        tick: pull_tick(),
    };
    let result = crate::driver::run(&mut conn, &mut adapter).await;
    adapter.count(&conn);
    pull_ended(adapter.stop, result, Peer::Origin, S::error)
}

/// A pull's adapter: the origin's media and a tick go to the pull's sink.
struct Pull<'s, 'a> {
    sink: &'s mut PullSink<'a>,
    /// The pull's connect timeout (the session's start timeout).
    timeout: Duration,
    /// Why the pull stops, when not because the origin failed.
    stop: Option<Stop>,
    /// The session's bytes counted so far.
    counted: u64,
    tick: tokio::time::Interval,
}

impl Pull<'_, '_> {
    /// Counts what the session read since the last count.
    fn count<S: Played>(&mut self, conn: &Conn<S>) {
        let read = conn.session.received();
        self.sink.count_bytes(read - self.counted);
        self.counted = read;
    }

    fn step<E: std::error::Error>(
        &mut self,
        result: Result<(), Stop>,
    ) -> Result<Next, DriveError<E>> {
        step(&mut self.stop, result)
    }
}

/// The `onStatus` codes that end a played stream.
fn ends_stream(code: &str) -> bool {
    matches!(
        code,
        "NetStream.Play.UnpublishNotify"
            | "NetStream.Play.Stop"
            | "NetStream.Play.Complete"
            | "NetStream.Play.StreamNotFound"
    )
}

impl<S: Played> Adapter<S> for Pull<'_, '_> {
    type Wake = ();

    async fn on_event(
        &mut self,
        conn: &mut Conn<S>,
        event: S::Event,
    ) -> Result<Next, DriveError<S::Error>> {
        let media = match S::media(event, self.timeout) {
            Ok(Some(media)) => media,
            Ok(None) => return Ok(Next::Continue),
            Err(why) => return Err(DriveError::Relay(why)),
        };
        self.count(conn);
        let result = self.sink.media(media).and_then(|()| self.sink.tick());
        self.step(result)
    }

    async fn wait(&mut self) {
        self.tick.tick().await;
    }

    fn on_wake(&mut self, conn: &mut Conn<S>, (): ()) -> Result<Next, DriveError<S::Error>> {
        self.count(conn);
        let result = self.sink.tick();
        self.step(result)
    }
}
