//! Push relays: a stream published here is sent on to other servers (a video
//! platform's RTMP or RTMPS ingest, or an edge's origin), as an RTMP publisher; or, to
//! a `udp://` or `rtp://` target, as MPEG-TS in datagrams (`super::udp_push`).
//!
//! A push reads the stream's ring like a player does (a cursor, woken by the
//! stream's notifier), starting at its newest keyframe with the current decoder
//! configurations, and turns each packet into the message an RTMP publisher sends
//! (`core::format::flv::message_of`). A target that does not keep up is moved to the
//! ring's newest keyframe, as a slow player is, after the decoder configurations it
//! lacks (`core::cursor`); a target that fails is connected again, with backoff,
//! while the stream lives. A publisher returning within the grace window keeps the
//! same push.

use super::client::rtmp_session;
use super::error::{PushUrlError, RelayError};
use crate::core::cursor::{Cursor, Moved};
use crate::core::format::flv::message_of;
use crate::core::format::{Format, FormatId};
use crate::core::hub::Stream;
use crate::core::packet::{Packet, Payload};
use sluice_media::flv::{TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_media::ts::TsOutUrl;
use sluice_rtmp::{ClientSession, ClientTimeouts};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How long a target has to accept the publish, and to take one write.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where a push goes: an RTMP(S) server, or MPEG-TS over UDP or RTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushTarget {
    Rtmp(RtmpTarget),
    /// `udp://` or `rtp://`: the stream's TS form, paced (`super::udp_push`). The same
    /// address for every stream of the rule: one stream at a time holds it.
    Ts(TsOutUrl),
}

impl PushTarget {
    /// Parses a push URL: `rtmp(s)://HOST[:PORT]/APP/STREAM[?QUERY]`, or
    /// `udp://HOST:PORT[?OPTIONS]` / `rtp://HOST:PORT[?OPTIONS]` (`TsOutUrl`).
    pub fn parse(url: &str) -> Result<PushTarget, PushUrlError> {
        if url.starts_with("udp://") || url.starts_with("rtp://") {
            return Ok(PushTarget::Ts(TsOutUrl::parse(url)?));
        }
        RtmpTarget::parse(url).map(PushTarget::Rtmp)
    }

    /// The target for stream `key` (RTMP's `{name}` and `{key}` replaced).
    pub fn for_stream(&self, key: &str) -> PushTarget {
        match self {
            PushTarget::Rtmp(t) => PushTarget::Rtmp(t.for_stream(key)),
            PushTarget::Ts(u) => PushTarget::Ts(u.clone()),
        }
    }

    /// The URL as logs and the API show it (no secrets).
    pub fn display(&self) -> String {
        match self {
            PushTarget::Rtmp(t) => t.display(),
            PushTarget::Ts(u) => u.to_string(),
        }
    }

    /// The whole URL: what tells two targets apart.
    pub fn key(&self) -> String {
        match self {
            PushTarget::Rtmp(t) => t.key(),
            PushTarget::Ts(u) => u.to_string(),
        }
    }

    /// Whether one stream at a time may use it: datagrams of two streams to one
    /// address would be one broken stream.
    pub fn exclusive(&self) -> bool {
        matches!(self, PushTarget::Ts(_))
    }
}

/// An RTMP(S) push target: `rtmp(s)://HOST[:PORT]/APP/STREAM[?QUERY]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtmpTarget {
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

impl RtmpTarget {
    pub fn parse(url: &str) -> Result<RtmpTarget, PushUrlError> {
        // The URL may hold a platform's key: errors name its scheme only.
        let scheme = url
            .split("://")
            .next()
            .unwrap_or_default()
            .chars()
            .take(10)
            .collect::<String>();
        let bad = |why| PushUrlError::Rtmp {
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
        Ok(RtmpTarget {
            tls,
            host: origin.host,
            port: origin.port,
            app: app.to_string(),
            stream: stream.to_string(),
            named: stream.contains("{name}") || stream.contains("{key}"),
        })
    }

    /// The target for stream `key`: `{key}` becomes `app/stream`, `{name}` its name.
    pub fn for_stream(&self, key: &str) -> RtmpTarget {
        let name = key.split_once('/').map_or(key, |(_, n)| n);
        // A stream key is a path: no `?`, `#` or `%` that could rewrite the URL.
        let clean = |s: &str| s.replace(['?', '#', '%', '&'], "_");
        RtmpTarget {
            stream: self
                .stream
                .replace("{key}", &clean(key))
                .replace("{name}", &clean(name)),
            ..self.clone()
        }
    }

    pub fn authority(&self) -> String {
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
pub(super) struct Subscribed<'a>(pub(super) &'a Stream, pub(super) Arc<Notify>);

impl Drop for Subscribed<'_> {
    fn drop(&mut self) {
        self.0.unsubscribe(&self.1);
    }
}

/// Pushes `stream` to `target` until the stream ends.
pub(super) async fn run(relays: Arc<super::Relays>, stream: Arc<Stream>, target: PushTarget) {
    match &target {
        PushTarget::Rtmp(rtmp) => run_rtmp(&relays, &stream, &target, rtmp).await,
        PushTarget::Ts(url) => super::udp_push::run(&relays, &stream, &target, url).await,
    }
    relays.push_ended(stream.id, &target);
}

/// Pushes `stream` to an RTMP(S) target, connecting again with backoff, until the
/// stream ends or the push is no longer wanted.
async fn run_rtmp(
    relays: &Arc<super::Relays>,
    stream: &Arc<Stream>,
    target: &PushTarget,
    rtmp: &RtmpTarget,
) {
    let config = relays.config.clone();
    let mut wait = config.retry_min;
    let url = target.display();
    tracing::info!(stream = %stream.key, target = %url, "push");
    let notify = Arc::new(Notify::new());
    stream.subscribe(notify.clone());
    let _subscribed = Subscribed(stream, notify.clone());
    let mut attempts = 0u64;
    loop {
        if stream.lock().closed || !relays.push_wanted(&stream.key, target) {
            break;
        }
        if attempts > 0 {
            relays
                .counters
                .push_reconnects
                .fetch_add(1, Ordering::Relaxed);
        }
        attempts += 1;
        match once(relays, stream, target, rtmp, &notify).await {
            Ok(()) => break,
            // The API or the shutdown ended its connection: the push ends with it.
            Err(Failed {
                why: RelayError::Kicked,
                ..
            }) => break,
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
}

/// Why one connection to the target failed, and whether media went out first.
struct Failed {
    why: RelayError,
    delivered: bool,
}

/// One connection to the target, run in the connection driver: `Ok` when the stream
/// ended, else why it failed.
async fn once(
    relays: &super::Relays,
    stream: &Stream,
    target: &PushTarget,
    rtmp: &RtmpTarget,
    notify: &Arc<Notify>,
) -> Result<(), Failed> {
    let link = super::link::current().map_err(|why| Failed {
        why,
        delivered: false,
    })?;
    let mut feed = PushFeed {
        relays,
        stream,
        target,
        rtmp,
        notify,
        cursor: Cursor::default(),
        batch: VecDeque::new(),
        fed: false,
        delivered: false,
    };
    link.push(&mut feed).await.map_err(|why| Failed {
        why,
        delivered: feed.delivered,
    })
}

/// What the stream's ring gives one connection of a push: a cursor in the ring that
/// starts at the newest keyframe, and skips a target that does not keep up to the
/// newest one, each time after the decoder configurations it lacks.
pub struct PushFeed<'a> {
    relays: &'a super::Relays,
    stream: &'a Stream,
    target: &'a PushTarget,
    rtmp: &'a RtmpTarget,
    notify: &'a Arc<Notify>,
    cursor: Cursor,
    batch: VecDeque<Arc<Packet>>,
    /// Media was given to the session since the last write.
    fed: bool,
    /// Media went out to the target.
    delivered: bool,
}

impl<'a> PushFeed<'a> {
    pub fn target(&self) -> &RtmpTarget {
        self.rtmp
    }

    /// TLS towards targets (the web PKI's roots and `edge.tls_ca`'s).
    pub fn tls(&self) -> &Arc<rustls::ClientConfig> {
        &self.relays.tls
    }

    /// How long the target has to connect and accept the publish, and to take what
    /// is written to it.
    pub fn timeout(&self) -> Duration {
        TIMEOUT
    }

    /// The session that publishes to the target, its waits counted from `now`.
    pub fn session(&self, now: std::time::Instant) -> ClientSession {
        let target = self.rtmp;
        let timeouts = ClientTimeouts {
            start: TIMEOUT,
            silence: TIMEOUT,
        };
        let mut session =
            rtmp_session(target.tls, &target.authority(), &target.app).with_timeouts(now, timeouts);
        session.publish(&target.stream);
        session
    }

    /// Until the stream has something new (or ended).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'a> {
        self.notify.notified()
    }

    /// What was fed went out: the driver waits again only once it is written.
    pub fn written(&mut self) {
        self.delivered |= self.fed;
    }

    /// Gives `session` what the ring has for the target now; `false` once the push is
    /// no longer wanted (the stream ended, its rule went).
    pub fn feed(&mut self, session: &mut ClientSession) -> bool {
        let (relays, stream) = (self.relays, self.stream);
        if !relays.push_wanted(&stream.key, self.target) {
            return false;
        }
        {
            let state = stream.lock();
            if state.closed {
                return false;
            }
            let read = self
                .cursor
                .read(&state.ring, state.configs(), &mut self.batch);
            if read == Moved::Skipped {
                tracing::debug!(stream = %stream.key, "push: too slow a target skipped to the newest keyframe");
            }
        }
        // The stream's own tracks, as its RTMP players get them: not the audio the
        // server transcodes for other players (Opus made from AAC, or AAC from Opus
        // beside the Opus it came from), which would reach the target as a second
        // audio track.
        let own = Format::all(FormatId::RTMP);
        for packet in self.batch.drain(..).filter(|p| own.wants(p)) {
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
                _ => continue,
            }
            self.fed = true;
            relays
                .counters
                .push_bytes
                .fetch_add(body.len() as u64, Ordering::Relaxed);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_urls() {
        let t = RtmpTarget::parse("rtmp://127.0.0.1:1935/live2/{name}?key=secret").unwrap();
        assert_eq!((t.tls, t.port, t.app.as_str()), (false, 1935, "live2"));
        let s = t.for_stream("live/cam");
        assert_eq!(s.stream, "cam?key=secret");
        assert_eq!(s.display(), "rtmp://127.0.0.1:1935/live2/cam");
        // A platform's key is the stream name: never shown.
        let yt = RtmpTarget::parse("rtmp://a.rtmp.youtube.com/live2/abcd-efgh").unwrap();
        assert_eq!(yt.display(), "rtmp://a.rtmp.youtube.com:1935/live2/(key)");
        assert!(!PushTarget::parse("ftp://x/secret-key")
            .unwrap_err()
            .to_string()
            .contains("secret"));
        assert_eq!(t.for_stream("live/a?b").stream, "a_b?key=secret");
        let t = RtmpTarget::parse("rtmps://ingest.example/app/{key}").unwrap();
        assert_eq!((t.tls, t.port), (true, 443));
        assert_eq!(t.for_stream("a/b").stream, "a/b");
        for bad in ["http://o/app/s", "rtmp://o/app", "rtmp://o", "o/app/s"] {
            assert!(PushTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn udp_and_rtp_push_urls() {
        let t = PushTarget::parse("udp://239.1.1.1:1234?ttl=4&bitrate=4000000").unwrap();
        assert!(t.exclusive());
        // The same address whatever the stream: no `{name}` in a UDP target.
        assert_eq!(t.for_stream("live/a"), t);
        assert_eq!(t.display(), "udp://239.1.1.1:1234?ttl=4&bitrate=4000000");
        let r = PushTarget::parse("rtp://127.0.0.1:5004").unwrap();
        assert!(matches!(&r, PushTarget::Ts(u) if u.is_rtp()));
        let e = PushTarget::parse("udp://127.0.0.1:5000?pkts=9").unwrap_err();
        assert!(matches!(e, PushUrlError::Ts(_)), "{e}");
        assert!(e.to_string().contains("pkts"), "{e}");
        assert!(!PushTarget::parse("rtmp://o/a/s").unwrap().exclusive());
    }
}
