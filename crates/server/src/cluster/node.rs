//! This node as the directory shows it: its id, the URLs it is reached at, and its
//! load, sampled at each refresh.

use super::store::{NodeLoad, NodeRecord};
use crate::core::hub::Hub;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// A node id when none is configured: the host's name and a random suffix, so that a
/// process restarted on the same host is a new node (the old one's entries lapse at
/// their TTL instead of being taken for the new one's).
pub fn default_id() -> String {
    let host = hostname().unwrap_or_else(|| "sluice".into());
    format!("{host}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// The host's name, which Kubernetes sets to the pod's name.
pub fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// The URLs of this node's listeners, as others reach them: `host` (a name or an
/// address; an IPv6 address without brackets) with each listener's port.
pub fn urls(host: &str, listeners: &[(&str, u16)]) -> BTreeMap<String, String> {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    listeners
        .iter()
        .map(|(scheme, port)| ((*scheme).to_string(), format!("{scheme}://{host}:{port}")))
        .collect()
}

/// Samples this process's load between two refreshes.
#[derive(Debug)]
pub struct LoadMeter {
    hub: Arc<OnceLock<Arc<Hub>>>,
    last: Option<(Instant, Duration, u64)>,
}

impl LoadMeter {
    pub fn new(hub: Arc<OnceLock<Arc<Hub>>>) -> LoadMeter {
        LoadMeter { hub, last: None }
    }

    /// The load now: connections and streams as they are, CPU and egress since the
    /// last sample.
    pub fn sample(&mut self) -> NodeLoad {
        let Some(hub) = self.hub.get() else {
            return NodeLoad::default();
        };
        let streams = hub.streams();
        let sent: u64 = streams
            .iter()
            .map(|s| s.bytes_out.load(Ordering::Relaxed))
            .sum();
        let (now, cpu) = (Instant::now(), process_cpu());
        let mut load = NodeLoad {
            connections: hub.limits.connections() as u64,
            streams: streams.len() as u64,
            ..NodeLoad::default()
        };
        if let Some((then, cpu_then, sent_then)) = self.last {
            let wall = now.duration_since(then).as_secs_f64();
            if wall > 0.0 {
                load.cpu = cpu.saturating_sub(cpu_then).as_secs_f64() / wall;
                // Streams that ended took their counts with them: never below zero.
                load.egress_bps = (sent.saturating_sub(sent_then) as f64 * 8.0 / wall) as u64;
            }
        }
        self.last = Some((now, cpu, sent));
        load
    }
}

/// CPU time of the whole process (every thread's, user and system).
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Unix time in ms.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This node's record with `load`.
pub fn record(
    id: &str,
    started: SystemTime,
    urls: &BTreeMap<String, String>,
    load: NodeLoad,
    draining: bool,
) -> NodeRecord {
    NodeRecord {
        id: id.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_ms: unix_ms(started),
        urls: urls.clone(),
        load,
        draining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_bracket_ipv6_hosts() {
        let u = urls("10.0.0.5", &[("rtmp", 1935), ("http", 8080)]);
        assert_eq!(u["rtmp"], "rtmp://10.0.0.5:1935");
        assert_eq!(u["http"], "http://10.0.0.5:8080");
        let u = urls("fd00::5", &[("rtmp", 1935)]);
        assert_eq!(u["rtmp"], "rtmp://[fd00::5]:1935");
    }

    #[test]
    fn default_ids_differ_between_processes_of_one_host() {
        assert_ne!(default_id(), default_id());
    }
}
