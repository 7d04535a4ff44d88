//! Admission limits shared by every worker: connections in all and per address, and
//! publishers per address (the hub counts streams itself). A connection is admitted
//! once, at accept, and holds its [`Admission`] until it ends; a publisher holds a
//! [`PublisherSlot`]. Per-address counts live in a few sharded maps, so an accept
//! takes one short lock that other workers rarely contend for.
//!
//! Each limit hit is counted (`sluice_limit_hits_total{limit}`) and logged at its first
//! hit and every power of two after, so a flood cannot flood the log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SHARDS: usize = 16;

/// Which limit refused something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Connections,
    ConnectionsPerIp,
    Streams,
    PublishersPerIp,
    UdpSessions,
    /// The server drains: it takes no new publishers or players.
    Draining,
}

impl Limit {
    pub const ALL: [Limit; 6] = [
        Limit::Connections,
        Limit::ConnectionsPerIp,
        Limit::Streams,
        Limit::PublishersPerIp,
        Limit::UdpSessions,
        Limit::Draining,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Limit::Connections => "connections",
            Limit::ConnectionsPerIp => "connections_per_ip",
            Limit::Streams => "streams",
            Limit::PublishersPerIp => "publishers_per_ip",
            Limit::UdpSessions => "udp_sessions",
            Limit::Draining => "draining",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The limits' settings; 0 is no limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimitSettings {
    pub connections: usize,
    pub connections_per_ip: usize,
    pub streams: usize,
    pub publishers_per_ip: usize,
    pub udp_sessions: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct PerIp {
    connections: u32,
    publishers: u32,
}

/// The server's admission limits and their counts.
#[derive(Debug)]
pub struct Limits {
    /// Replaced whole by a reload; what is admitted keeps its place.
    settings: arc_swap::ArcSwap<LimitSettings>,
    connections: AtomicUsize,
    udp_sessions: AtomicUsize,
    per_ip: [Mutex<HashMap<IpAddr, PerIp>>; SHARDS],
    hits: [AtomicU64; 6],
    /// See [`Limits::drain`].
    draining: std::sync::atomic::AtomicBool,
}

/// A connection admitted; dropping it gives its place back.
#[derive(Debug)]
pub struct Admission {
    limits: Arc<Limits>,
    ip: IpAddr,
}

/// A session with media over UDP (RTSP's RTP over UDP, WebRTC); dropping it gives
/// its place back.
#[derive(Debug)]
pub struct UdpSlot {
    limits: Arc<Limits>,
}

impl Drop for UdpSlot {
    fn drop(&mut self) {
        self.limits.udp_sessions.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A publisher admitted; dropping it gives its place back.
#[derive(Debug)]
pub struct PublisherSlot {
    limits: Arc<Limits>,
    ip: IpAddr,
}

impl Limits {
    pub fn new(settings: LimitSettings) -> Arc<Limits> {
        Arc::new(Limits {
            settings: arc_swap::ArcSwap::from_pointee(settings),
            connections: AtomicUsize::new(0),
            udp_sessions: AtomicUsize::new(0),
            per_ip: Default::default(),
            hits: Default::default(),
            draining: Default::default(),
        })
    }

    /// From now on no new publisher or player is admitted (the server drains before
    /// it stops); those in go on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether the server drains.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Refuses a new publisher or player while the server drains.
    pub fn not_draining(&self) -> Result<(), Limit> {
        if self.draining() {
            return Err(self.hit(Limit::Draining, None));
        }
        Ok(())
    }

    /// The limits in force.
    pub fn settings(&self) -> LimitSettings {
        **self.settings.load()
    }

    /// New limits for what comes next (a reload): connections, streams and publishers
    /// already in keep their places, even past a lowered limit.
    pub fn set(&self, settings: LimitSettings) {
        self.settings.store(Arc::new(settings));
    }

    fn shard(&self, ip: &IpAddr) -> &Mutex<HashMap<IpAddr, PerIp>> {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        ip.hash(&mut h);
        &self.per_ip[(h.finish() as usize) % SHARDS]
    }

    /// Lets a connection from `ip` in, or says which limit keeps it out.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admission, Limit> {
        let settings = self.settings();
        let max = settings.connections;
        let total = self.connections.fetch_add(1, Ordering::AcqRel);
        if max > 0 && total >= max {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return Err(self.hit(Limit::Connections, Some(ip)));
        }
        let per_ip = settings.connections_per_ip;
        let mut map = self.shard(&ip).lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(ip).or_default();
        if per_ip > 0 && entry.connections as usize >= per_ip {
            drop(map);
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return Err(self.hit(Limit::ConnectionsPerIp, Some(ip)));
        }
        entry.connections += 1;
        Ok(Admission {
            limits: self.clone(),
            ip,
        })
    }

    /// Lets `ip` publish one more stream, or says it publishes enough.
    pub fn publisher(self: &Arc<Self>, ip: IpAddr) -> Result<PublisherSlot, Limit> {
        let max = self.settings().publishers_per_ip;
        let mut map = self.shard(&ip).lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(ip).or_default();
        if max > 0 && entry.publishers as usize >= max {
            drop(map);
            return Err(self.hit(Limit::PublishersPerIp, Some(ip)));
        }
        entry.publishers += 1;
        Ok(PublisherSlot {
            limits: self.clone(),
            ip,
        })
    }

    /// Whether `ip` may publish one more stream now, without taking the place: for a
    /// refusal before a costly handshake (WHIP answers its offer before it publishes;
    /// the place is taken at [`Limits::publisher`], which can still refuse a race).
    pub fn has_publisher_room(&self, ip: IpAddr) -> Result<(), Limit> {
        let max = self.settings().publishers_per_ip;
        let map = self.shard(&ip).lock().unwrap_or_else(|e| e.into_inner());
        let publishing = map.get(&ip).map_or(0, |e| e.publishers as usize);
        if max > 0 && publishing >= max {
            drop(map);
            return Err(self.hit(Limit::PublishersPerIp, Some(ip)));
        }
        Ok(())
    }

    /// Lets one more session carry media over UDP (its state lives past any one
    /// datagram, so floods of new ones must be bounded), or says there are enough.
    pub fn udp_session(self: &Arc<Self>, ip: IpAddr) -> Result<UdpSlot, Limit> {
        let max = self.settings().udp_sessions;
        let n = self.udp_sessions.fetch_add(1, Ordering::AcqRel);
        if max > 0 && n >= max {
            self.udp_sessions.fetch_sub(1, Ordering::AcqRel);
            return Err(self.hit(Limit::UdpSessions, Some(ip)));
        }
        Ok(UdpSlot {
            limits: self.clone(),
        })
    }

    /// Sessions with media over UDP now.
    pub fn udp_sessions(&self) -> usize {
        self.udp_sessions.load(Ordering::Relaxed)
    }

    /// Counts a hit of `limit` (by `ip`, when one address hit it) and logs it when the
    /// count is a power of two.
    pub fn hit(&self, limit: Limit, ip: Option<IpAddr>) -> Limit {
        let n = self.hits[limit as usize].fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            let ip = ip.map(|ip| ip.to_string()).unwrap_or_default();
            tracing::warn!(limit = limit.name(), ip, hits = n, "limit reached: refused");
        }
        limit
    }

    /// Hits so far, by limit.
    pub fn hits(&self) -> Vec<(&'static str, u64)> {
        Limit::ALL
            .iter()
            .map(|l| (l.name(), self.hits[*l as usize].load(Ordering::Relaxed)))
            .collect()
    }

    /// Connections admitted and not ended.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    fn release(&self, ip: IpAddr, connection: bool) {
        let mut map = self.shard(&ip).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.get_mut(&ip) {
            if connection {
                e.connections = e.connections.saturating_sub(1);
            } else {
                e.publishers = e.publishers.saturating_sub(1);
            }
            if e.connections == 0 && e.publishers == 0 {
                map.remove(&ip);
            }
        }
        drop(map);
        if connection {
            self.connections.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.limits.release(self.ip, true);
    }
}

impl Drop for PublisherSlot {
    fn drop(&mut self) {
        self.limits.release(self.ip, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn connections_in_all_and_per_address() {
        let limits = Limits::new(LimitSettings {
            connections: 3,
            connections_per_ip: 2,
            ..Default::default()
        });
        let a1 = limits.admit(ip("10.0.0.1")).unwrap();
        let _a2 = limits.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(
            limits.admit(ip("10.0.0.1")).unwrap_err(),
            Limit::ConnectionsPerIp
        );
        let _b = limits.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(
            limits.admit(ip("10.0.0.3")).unwrap_err(),
            Limit::Connections
        );
        assert_eq!(limits.connections(), 3);
        drop(a1);
        let _a3 = limits.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(
            limits.hits(),
            vec![
                ("connections", 1),
                ("connections_per_ip", 1),
                ("streams", 0),
                ("publishers_per_ip", 0),
                ("udp_sessions", 0),
                ("draining", 0)
            ]
        );
    }

    #[test]
    fn udp_sessions_are_bounded_and_a_reload_changes_the_bound() {
        let limits = Limits::new(LimitSettings {
            udp_sessions: 1,
            ..Default::default()
        });
        let a = limits.udp_session(ip("10.0.0.1")).unwrap();
        assert_eq!(
            limits.udp_session(ip("10.0.0.2")).unwrap_err(),
            Limit::UdpSessions
        );
        limits.set(LimitSettings {
            udp_sessions: 2,
            ..Default::default()
        });
        let b = limits.udp_session(ip("10.0.0.2")).unwrap();
        assert_eq!(limits.udp_sessions(), 2);
        drop((a, b));
        assert_eq!(limits.udp_sessions(), 0);
    }

    #[test]
    fn places_come_back_and_empty_addresses_are_forgotten() {
        let limits = Limits::new(LimitSettings {
            publishers_per_ip: 1,
            ..Default::default()
        });
        let slot = limits.publisher(ip("::1")).unwrap();
        assert_eq!(
            limits.publisher(ip("::1")).unwrap_err(),
            Limit::PublishersPerIp
        );
        let conn = limits.admit(ip("::1")).unwrap();
        drop(slot);
        let _again = limits.publisher(ip("::1")).unwrap();
        drop(conn);
        drop(_again);
        let known: usize = limits.per_ip.iter().map(|m| m.lock().unwrap().len()).sum();
        assert_eq!(known, 0);
        assert_eq!(limits.connections(), 0);
    }

    #[test]
    fn zero_is_no_limit() {
        let limits = Limits::new(LimitSettings::default());
        let held: Vec<_> = (0..1000)
            .map(|_| limits.admit(ip("10.0.0.9")).unwrap())
            .collect();
        assert_eq!(limits.connections(), 1000);
        drop(held);
        assert_eq!(limits.connections(), 0);
    }
}
