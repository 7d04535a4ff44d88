//! HLS viewer sessions: who is watching which stream over HLS, where each request is
//! a new, short connection.
//!
//! Why per worker: a viewer is known by a cookie (`sluice_hls`) or, for players that
//! drop cookies, a `session` query parameter. Requests carrying the same id reach
//! every worker; a table shared by all workers would serialize them on one lock (the
//! lesson of a shared cookie mutex capping a server at 6-8K viewers). So each worker
//! keeps its own table, touched without any lock, and publishes only its per-stream
//! counts to the stream (an atomic add of the change, every few seconds). A viewer
//! whose requests land on two workers is counted by both: the count is an upper
//! bound, exact with one worker.
//!
//! # Invariants
//! - A session is forgotten `IDLE` after its last request.
//! - `Stream::hls_viewers` is the sum of what each worker last published for it.

use crate::core::hub::Stream;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A viewer that made no request this long has left.
pub const IDLE: Duration = Duration::from_secs(30);

/// How often a worker publishes its per-stream counts.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// Most sessions one worker tracks; past this, new ids are not tracked (and not
/// counted) until old ones expire, so a client minting ids cannot grow memory.
const MAX_SESSIONS: usize = 200_000;

#[derive(Debug)]
struct Session {
    stream: u64,
    last_seen: Instant,
}

/// One worker's HLS sessions.
#[derive(Debug, Default)]
pub struct Viewers {
    sessions: HashMap<u64, Session>,
    /// What this worker last added to each stream's count, by stream id.
    published: HashMap<u64, (Weak<Stream>, usize)>,
}

impl Viewers {
    /// A request of session `id` for `stream` at `now`.
    pub fn touch(&mut self, id: u64, stream: &Arc<Stream>, now: Instant) {
        if self.sessions.len() >= MAX_SESSIONS && !self.sessions.contains_key(&id) {
            return;
        }
        self.sessions.insert(
            id,
            Session {
                stream: stream.id,
                last_seen: now,
            },
        );
        self.published
            .entry(stream.id)
            .or_insert_with(|| (Arc::downgrade(stream), 0));
    }

    /// Forgets idle sessions and publishes this worker's count per stream.
    pub fn publish(&mut self, now: Instant) {
        self.sessions
            .retain(|_, s| now.saturating_duration_since(s.last_seen) < IDLE);
        let mut counts: HashMap<u64, usize> = HashMap::new();
        for s in self.sessions.values() {
            *counts.entry(s.stream).or_default() += 1;
        }
        self.published.retain(|id, (stream, last)| {
            let Some(stream) = stream.upgrade() else {
                return false;
            };
            let now_count = counts.get(id).copied().unwrap_or(0);
            if now_count >= *last {
                stream
                    .hls_viewers
                    .fetch_add(now_count - *last, Ordering::Relaxed);
            } else {
                stream
                    .hls_viewers
                    .fetch_sub(*last - now_count, Ordering::Relaxed);
            }
            *last = now_count;
            now_count > 0
        });
    }
}

/// The session id of a request: the `session` query parameter, else the
/// `sluice_hls` cookie. Ids are 1 to 16 hex digits.
pub fn session_id(query: &str, cookie: Option<&str>) -> Option<u64> {
    let hex = |v: &str| {
        (!v.is_empty() && v.len() <= 16)
            .then(|| u64::from_str_radix(v, 16).ok())
            .flatten()
    };
    let from_query = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("session="))
        .and_then(hex);
    from_query.or_else(|| {
        cookie?
            .split(';')
            .find_map(|c| c.trim().strip_prefix("sluice_hls="))
            .and_then(hex)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hub::{Hub, HubConfig};
    use crate::core::ring::RingLimits;

    fn stream(hub: &Hub, key: &str) -> Arc<Stream> {
        hub.publish(key, 1).unwrap()
    }

    fn hub() -> Hub {
        Hub::new(HubConfig {
            ring: RingLimits {
                max_ms: 1000,
                max_bytes: 1 << 20,
            },
            publish_grace: Duration::from_secs(1),
            apps: Arc::new(crate::config::Config::default().apps()),
            rtp: false,
            shape: crate::core::packet::Shape {
                rtmp_chunk_size: 4096,
            },
        })
    }

    #[test]
    fn two_workers_count_their_own_sessions_and_forget_idle_ones() {
        let hub = hub();
        let a = stream(&hub, "live/a");
        let (mut w0, mut w1) = (Viewers::default(), Viewers::default());
        let t0 = Instant::now();
        for id in 1..=3 {
            w0.touch(id, &a, t0);
        }
        w0.touch(1, &a, t0); // the same viewer again
        w1.touch(9, &a, t0);
        w0.publish(t0);
        w1.publish(t0);
        assert_eq!(a.hls_viewers.load(Ordering::Relaxed), 4);
        // Viewer 2 and 3 keep watching; 1 and 9 leave.
        let t1 = t0 + IDLE / 2;
        w0.touch(2, &a, t1);
        w0.touch(3, &a, t1);
        let t2 = t0 + IDLE + Duration::from_secs(1);
        w0.publish(t2);
        w1.publish(t2);
        assert_eq!(a.hls_viewers.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn ids_come_from_the_query_or_the_cookie() {
        assert_eq!(session_id("a=1&session=ff", None), Some(255));
        assert_eq!(session_id("", Some("x=1; sluice_hls=10")), Some(16));
        assert_eq!(session_id("session=zz", Some("sluice_hls=1")), Some(1));
        assert_eq!(session_id("session=12345678901234567", None), None);
        assert_eq!(session_id("", None), None);
    }
}
