//! Push relays: a stream published here is sent on to other servers (a video
//! platform's RTMP or RTMPS ingest, or an edge's origin), as an RTMP publisher.
//!
//! A push reads the stream's ring like a player does (a cursor, woken by the
//! stream's notifier), starting at its newest keyframe with the current decoder
//! configurations, and turns each packet into the message an RTMP publisher sends
//! (`core::format::flv::message_of`). A target that does not keep up is moved to the
//! ring's newest keyframe, as a slow player is, after the decoder configurations it
//! lacks (`core::cursor`); a target that fails is connected again, with backoff,
//! while the stream lives. A publisher returning within the grace window keeps the
//! same push.

use super::client::{connect_to, rtmp_session};
use super::error::{Peer, PushUrlError, RelayError};
use crate::core::cursor::{Cursor, Moved};
use crate::core::format::flv::message_of;
use crate::core::format::{Format, FormatId};
use crate::core::hub::Stream;
use crate::core::packet::{Packet, Payload};
use bytes::BytesMut;
use sluice_media::flv::{TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_rtmp::{ClientEvent, ClientOutput, ClientSession};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// How long a target has to accept the publish, and to take one write.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where a push goes: `rtmp(s)://HOST[:PORT]/APP/STREAM[?QUERY]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTarget {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub app: String,
    /// The stream name with its query; `{name}` and `{key}` are replaced per stream.
    pub stream: String,
    /// The name came from `{name}` or `{key}`, so it is no secret (a platform's stream
    /// key is): logs and the API may show it.
    named: bool,
}

impl PushTarget {
    pub fn parse(url: &str) -> Result<PushTarget, PushUrlError> {
        // The URL may hold a platform's key: errors name its scheme only.
        let scheme = url
            .split("://")
            .next()
            .unwrap_or_default()
            .chars()
            .take(10)
            .collect::<String>();
        let bad = |why| PushUrlError {
            scheme: scheme.clone(),
            why,
        };
        let origin_part = url.find("://").map_or(url, |i| {
            let rest = &url[i + 3..];
            &url[..i + 3 + rest.find('/').unwrap_or(rest.len())]
        });
        let origin = super::Origin::parse(origin_part)
            .map_err(|_| bad("expected rtmp(s)://host[:port]/app/stream"))?;
        let tls = match origin.scheme {
            super::origin::Scheme::Rtmp => false,
            super::origin::Scheme::Rtmps => true,
            super::origin::Scheme::Flv { .. }
            | super::origin::Scheme::Srt
            | super::origin::Scheme::Rtsp { .. }
            | super::origin::Scheme::Hls { .. } => {
                return Err(bad("pushes go over rtmp:// or rtmps://"))
            }
        };
        let path = &url[origin_part.len()..];
        let (app, stream) = path
            .trim_start_matches('/')
            .split_once('/')
            .filter(|(a, s)| !a.is_empty() && !s.is_empty())
            .ok_or_else(|| bad("expected rtmp://host[:port]/app/stream"))?;
        Ok(PushTarget {
            tls,
            host: origin.host,
            port: origin.port,
            app: app.to_string(),
            stream: stream.to_string(),
            named: stream.contains("{name}") || stream.contains("{key}"),
        })
    }

    /// The target for stream `key`: `{key}` becomes `app/stream`, `{name}` its name.
    pub fn for_stream(&self, key: &str) -> PushTarget {
        let name = key.split_once('/').map_or(key, |(_, n)| n);
        // A stream key is a path: no `?`, `#` or `%` that could rewrite the URL.
        let clean = |s: &str| s.replace(['?', '#', '%', '&'], "_");
        PushTarget {
            stream: self
                .stream
                .replace("{key}", &clean(key))
                .replace("{name}", &clean(name)),
            ..self.clone()
        }
    }

    fn authority(&self) -> String {
        super::origin::authority(&self.host, self.port)
    }

    fn scheme(&self) -> &'static str {
        if self.tls {
            "rtmps"
        } else {
            "rtmp"
        }
    }

    /// The URL as logs and the API show it: without the query, and without the stream
    /// name unless it is the stream's own (a platform's stream key is a secret).
    pub fn display(&self) -> String {
        let scheme = self.scheme();
        let stream = match self.named {
            true => self.stream.split('?').next().unwrap_or_default(),
            false => "(key)",
        };
        format!("{scheme}://{}/{}/{stream}", self.authority(), self.app)
    }

    /// The whole URL: what tells two targets apart.
    pub fn key(&self) -> String {
        let scheme = self.scheme();
        format!(
            "{scheme}://{}/{}/{}",
            self.authority(),
            self.app,
            self.stream
        )
    }
}

/// Removes the notifier from the stream when the push ends.
struct Subscribed<'a>(&'a Stream, Arc<Notify>);

impl Drop for Subscribed<'_> {
    fn drop(&mut self) {
        self.0.unsubscribe(&self.1);
    }
}

/// Pushes `stream` to `target` until the stream ends.
pub(super) async fn run(relays: Arc<super::Relays>, stream: Arc<Stream>, target: PushTarget) {
    let config = relays.config.clone();
    let mut wait = config.retry_min;
    let url = target.display();
    tracing::info!(stream = %stream.key, target = %url, "push");
    let notify = Arc::new(Notify::new());
    stream.subscribe(notify.clone());
    let _subscribed = Subscribed(&stream, notify.clone());
    let mut attempts = 0u64;
    loop {
        if stream.lock().closed || !relays.push_wanted(&stream.key, &target) {
            break;
        }
        if attempts > 0 {
            relays
                .counters
                .push_reconnects
                .fetch_add(1, Ordering::Relaxed);
        }
        attempts += 1;
        match once(&relays, &stream, &target, &notify).await {
            Ok(()) => break,
            Err(Failed { why, delivered }) => {
                tracing::warn!(stream = %stream.key, target = %url, "push: {why}");
                if delivered {
                    wait = config.retry_min;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(config.retry_max);
            }
        }
    }
    tracing::info!(stream = %stream.key, target = %url, "push ended");
    relays.push_ended(stream.id, &target);
}

/// Why one connection to the target failed, and whether media went out first.
struct Failed {
    why: RelayError,
    delivered: bool,
}

/// One connection to the target: `Ok` when the stream ended, else why it failed.
async fn once(
    relays: &super::Relays,
    stream: &Stream,
    target: &PushTarget,
    notify: &Notify,
) -> Result<(), Failed> {
    let failed = |why: RelayError, delivered: bool| Failed { why, delivered };
    let fail = |why| failed(why, false);
    let mut io = tokio::time::timeout(
        TIMEOUT,
        connect_to(&target.host, target.port, target.tls.then_some(&relays.tls)),
    )
    .await
    .map_err(|_| fail(RelayError::ConnectTimeout(TIMEOUT)))?
    .map_err(fail)?;
    let mut session = rtmp_session(target.tls, &target.authority(), &target.app);
    session.publish(&target.stream);
    let mut out = BytesMut::new();
    let mut input = BytesMut::with_capacity(16 << 10);
    // Handshake, connect, publish.
    let started = tokio::time::timeout(TIMEOUT, async {
        loop {
            if drain(&mut session, &mut out)? {
                return Ok(());
            }
            write(&mut io, &mut out).await?;
            input.clear();
            if io.read_buf(&mut input).await.map_err(RelayError::Read)? == 0 {
                return Err(RelayError::Closed(Peer::Target));
            }
            session.handle_input(&input)?;
        }
    })
    .await
    .map_err(|_| fail(RelayError::NotAccepted(TIMEOUT)))?;
    started.map_err(fail)?;
    let mut delivered = false;
    // A cursor in the stream's ring: it starts at the newest keyframe, and a target
    // that does not keep up skips to the newest one, each time after the decoder
    // configurations it lacks.
    let mut batch: VecDeque<Arc<Packet>> = VecDeque::new();
    let mut cursor = Cursor::default();
    loop {
        let notified = notify.notified();
        if !relays.push_wanted(&stream.key, target) {
            return Ok(());
        }
        {
            let state = stream.lock();
            if state.closed {
                return Ok(());
            }
            if cursor.read(&state.ring, state.configs(), &mut batch) == Moved::Skipped {
                tracing::debug!(stream = %stream.key, "push: too slow a target skipped to the newest keyframe");
            }
        }
        // The stream's own tracks, as its RTMP players get them: not the audio the
        // server transcodes for other players (Opus made from AAC, or AAC from Opus
        // beside the Opus it came from), which would reach the target as a second
        // audio track.
        let own = Format::all(FormatId::RTMP);
        for packet in batch.drain(..).filter(|p| own.wants(p)) {
            let Some((tag_type, body)) = message_of(&packet) else {
                continue;
            };
            let ts = packet.ts_ms as u32;
            match tag_type {
                TAG_VIDEO => session.send_video(ts, &body),
                TAG_AUDIO => session.send_audio(ts, &body),
                TAG_SCRIPT if matches!(packet.payload, Payload::Metadata(_)) => {
                    session.send_metadata(&body)
                }
                _ => {}
            }
            relays
                .counters
                .push_bytes
                .fetch_add(body.len() as u64, Ordering::Relaxed);
        }
        drain(&mut session, &mut out).map_err(|e| failed(e, delivered))?;
        if !out.is_empty() {
            tokio::time::timeout(TIMEOUT, write(&mut io, &mut out))
                .await
                .map_err(|_| {
                    let stalled = RelayError::Stalled {
                        peer: Peer::Target,
                        after: TIMEOUT,
                    };
                    failed(stalled, delivered)
                })?
                .map_err(|e| failed(e, delivered))?;
            delivered = true;
        }
        // Wait for media, and read what the target says meanwhile (acks, pings).
        input.clear();
        tokio::select! {
            () = notified => {}
            r = io.read_buf(&mut input) => match r {
                Ok(0) => return Err(failed(RelayError::Closed(Peer::Target), delivered)),
                Ok(_) => session.handle_input(&input).map_err(|e| failed(e.into(), delivered))?,
                Err(e) => return Err(failed(RelayError::Read(e), delivered)),
            },
        }
    }
}

/// Moves the session's output to `out`; `true` once the target accepted the publish.
fn drain(session: &mut ClientSession, out: &mut BytesMut) -> Result<bool, RelayError> {
    let mut started = false;
    while let Some(o) = session.poll_output() {
        match o {
            ClientOutput::Write(b) => out.extend_from_slice(&b),
            ClientOutput::Event(ClientEvent::PublishStarted) => started = true,
            ClientOutput::Event(ClientEvent::Rejected { code, description }) => {
                return Err(RelayError::Refused {
                    peer: Peer::Target,
                    code,
                    description,
                })
            }
            ClientOutput::Event(_) => {}
        }
    }
    Ok(started)
}

async fn write(io: &mut Box<dyn super::client::Io>, out: &mut BytesMut) -> Result<(), RelayError> {
    io.write_all(out).await.map_err(RelayError::Write)?;
    out.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_urls() {
        let t = PushTarget::parse("rtmp://127.0.0.1:1935/live2/{name}?key=secret").unwrap();
        assert_eq!((t.tls, t.port, t.app.as_str()), (false, 1935, "live2"));
        let s = t.for_stream("live/cam");
        assert_eq!(s.stream, "cam?key=secret");
        assert_eq!(s.display(), "rtmp://127.0.0.1:1935/live2/cam");
        // A platform's key is the stream name: never shown.
        let yt = PushTarget::parse("rtmp://a.rtmp.youtube.com/live2/abcd-efgh").unwrap();
        assert_eq!(yt.display(), "rtmp://a.rtmp.youtube.com:1935/live2/(key)");
        assert!(!PushTarget::parse("ftp://x/secret-key")
            .unwrap_err()
            .to_string()
            .contains("secret"));
        assert_eq!(t.for_stream("live/a?b").stream, "a_b?key=secret");
        let t = PushTarget::parse("rtmps://ingest.example/app/{key}").unwrap();
        assert_eq!((t.tls, t.port), (true, 443));
        assert_eq!(t.for_stream("a/b").stream, "a/b");
        for bad in ["http://o/app/s", "rtmp://o/app", "rtmp://o", "o/app/s"] {
            assert!(PushTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
