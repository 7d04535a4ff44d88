//! The end of a run: the summary table (stdout) and the JSON report (`--json`).

use crate::figures::{ErrorKind, PlayerRow, Spread};
use crate::load::publish::PublisherRow;
use crate::procfs::Sample;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The JSON report; the table prints the same figures.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    /// `play` or `publish`.
    pub mode: &'static str,
    pub protocol: String,
    pub url: String,
    /// Players or publishers asked for.
    pub count: usize,
    pub threads: usize,
    /// Connections started per second; `null` for all at once.
    pub ramp_per_s: Option<f64>,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// The measurement window: from `warmup_s` after the ramp to the end.
    pub window_s: f64,
    pub ok: usize,
    pub failed: usize,
    pub errors: BTreeMap<ErrorKind, usize>,
    /// Bytes received by all players (sent by all publishers) over the whole run.
    pub bytes_total: u64,
    /// The same, during the window.
    pub bytes_window: u64,
    /// `bytes_window` as Mbit/s over the window.
    pub mbit_s: f64,
    pub connect_ms: Spread,
    /// Play only.
    pub first_keyframe_ms: Option<Spread>,
    /// Play only: publish-to-play delay of every video frame that carried the bench
    /// publisher's wall-clock stamp, all players together; absent when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish_latency_ms: Option<Spread>,
    pub stalls: u64,
    pub players_with_stalls: usize,
    pub max_lag_ms: f64,
    pub slow_players: usize,
    /// RTSP players: their RTP, all together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtp: Option<RtpTotals>,
    /// TLS players: the version, cipher suite and ALPN protocol the first handshake
    /// agreed on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    pub server: Option<ServerFigures>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub players: Vec<PlayerRow>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub publishers: Vec<PublisherRow>,
}

/// What RTSP players counted of RTP, summed over players.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct RtpTotals {
    pub packets: u64,
    /// Sequence numbers skipped (UDP loss, or the server skipping a lagging player).
    pub lost: u64,
    pub late: u64,
    pub frames_dropped: u64,
    pub bad_packets: u64,
    /// Players with at least one lost packet.
    pub players_with_loss: usize,
}

impl RtpTotals {
    /// The sums, or `None` when no player counted RTP.
    pub(crate) fn of(rows: &[PlayerRow]) -> Option<RtpTotals> {
        let mut t: Option<RtpTotals> = None;
        for c in rows.iter().filter_map(|p| p.rtp) {
            let t = t.get_or_insert_with(RtpTotals::default);
            t.packets += c.packets;
            t.lost += c.lost;
            t.late += c.late;
            t.frames_dropped += c.frames_dropped;
            t.bad_packets += c.bad_packets;
            t.players_with_loss += usize::from(c.lost > 0);
        }
        t
    }
}

/// The server process over the run (`--server-pid`).
#[derive(Debug, Serialize)]
pub(crate) struct ServerFigures {
    pub pid: u32,
    /// CPU seconds (user + system) used during the window.
    pub cpu_s: f64,
    /// `cpu_s` per 10^9 bytes of `bytes_window`.
    pub cpu_s_per_gb: Option<f64>,
    /// `cpu_s` over the window length: cores busy.
    pub cpu_cores: f64,
    /// Before the first connection.
    pub rss_before_kib: u64,
    /// At the start and end of the window.
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
    pub rss_max_kib: u64,
    /// (`rss_end_kib` − `rss_before_kib`) / count.
    pub rss_per_player_kib: f64,
    /// Once a second from the start of the run, plus the window's start and end.
    pub samples: Vec<Sample>,
}

impl ServerFigures {
    /// Figures from the samples before the run and at the window's start and end.
    pub(crate) fn new(
        pid: u32,
        before: Sample,
        start: Sample,
        end: Sample,
        samples: Vec<Sample>,
        bytes_window: u64,
        count: usize,
    ) -> Self {
        let cpu_s = end.cpu_s - start.cpu_s;
        let window = end.t_s - start.t_s;
        ServerFigures {
            pid,
            cpu_s,
            cpu_s_per_gb: (bytes_window > 0).then(|| cpu_s / (bytes_window as f64 / 1e9)),
            cpu_cores: if window > 0.0 { cpu_s / window } else { 0.0 },
            rss_before_kib: before.rss_kib,
            rss_start_kib: start.rss_kib,
            rss_end_kib: end.rss_kib,
            rss_max_kib: samples
                .iter()
                .chain([&before, &start, &end])
                .map(|s| s.rss_kib)
                .max()
                .unwrap_or(0),
            rss_per_player_kib: (end.rss_kib as f64 - before.rss_kib as f64) / count.max(1) as f64,
            samples,
        }
    }
}

/// Counts of failed rows by kind.
pub(crate) fn error_counts(
    kinds: impl Iterator<Item = Option<ErrorKind>>,
) -> BTreeMap<ErrorKind, usize> {
    let mut m = BTreeMap::new();
    for k in kinds.flatten() {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.1} kB", b / 1e3)
    }
}

fn spread(s: &Spread) -> String {
    if s.n == 0 {
        return "-".into();
    }
    format!(
        "p50 {:.1}   p99 {:.1}   max {:.1}   (n {})",
        s.p50, s.p99, s.max, s.n
    )
}

impl Report {
    /// The human summary.
    pub(crate) fn table(&self) -> String {
        let mut t = String::new();
        let ramp = match self.ramp_per_s {
            Some(r) => format!("ramp {r}/s"),
            None => "all at once".into(),
        };
        let who = if self.mode == "play" {
            "players"
        } else {
            "publishers"
        };
        let _ = writeln!(
            t,
            "sluice-bench {} {} {}: {} {who}, {ramp}, {:.1} s, warmup {:.1} s, {} thread(s)",
            self.mode,
            self.protocol,
            self.url,
            self.count,
            self.duration_s,
            self.warmup_s,
            self.threads
        );
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, n)| format!("{k:?} {n}").to_lowercase())
            .collect();
        let _ = writeln!(
            t,
            "{who:<18} ok {}   failed {}{}{}",
            self.ok,
            self.failed,
            if errors.is_empty() {
                String::new()
            } else {
                format!("   ({})", errors.join(", "))
            },
            if self.slow_players > 0 {
                format!("   slow {}", self.slow_players)
            } else {
                String::new()
            },
        );
        let verb = if self.mode == "play" {
            "received"
        } else {
            "sent"
        };
        let _ = writeln!(
            t,
            "{verb:<18} {} total, {} in the {:.1} s window = {:.1} Mbit/s",
            size(self.bytes_total),
            size(self.bytes_window),
            self.window_s,
            self.mbit_s
        );
        if let Some(tls) = &self.tls {
            let _ = writeln!(t, "{:<18} {tls}", "tls");
        }
        let _ = writeln!(t, "{:<18} {}", "connect ms", spread(&self.connect_ms));
        if let Some(k) = &self.first_keyframe_ms {
            let _ = writeln!(t, "{:<18} {}", "first keyframe ms", spread(k));
            if let Some(l) = &self.publish_latency_ms {
                let _ = writeln!(t, "{:<18} {}", "publish-play ms", spread(l));
            }
            let _ = writeln!(
                t,
                "{:<18} {} ({} players)   max lag {:.0} ms",
                "stalls", self.stalls, self.players_with_stalls, self.max_lag_ms
            );
        }
        if let Some(r) = &self.rtp {
            let _ = writeln!(
                t,
                "{:<18} {} packets, lost {} ({} players), late {}, frames dropped {}, bad {}",
                "rtp",
                r.packets,
                r.lost,
                r.players_with_loss,
                r.late,
                r.frames_dropped,
                r.bad_packets
            );
        }
        if let Some(s) = &self.server {
            let per_gb = s
                .cpu_s_per_gb
                .map_or("-".to_string(), |v| format!("{v:.3}"));
            let _ = writeln!(
                t,
                "{:<18} cpu {:.2} s ({:.2} cores) = {per_gb} cpu-s/GB",
                format!("server {}", s.pid),
                s.cpu_s,
                s.cpu_cores
            );
            let mib = |k: u64| k as f64 / 1024.0;
            let _ = writeln!(
                t,
                "{:<18} rss before {:.1} MiB, window {:.1} -> {:.1} MiB, max {:.1} MiB, {:.1} KiB/{}",
                "",
                mib(s.rss_before_kib),
                mib(s.rss_start_kib),
                mib(s.rss_end_kib),
                mib(s.rss_max_kib),
                s.rss_per_player_kib,
                &who[..who.len() - 1]
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64, cpu_s: f64, rss_kib: u64) -> Sample {
        Sample {
            t_s,
            cpu_s,
            rss_kib,
        }
    }

    #[test]
    fn server_figures() {
        let s = ServerFigures::new(
            7,
            sample(0.0, 1.0, 10_000),
            sample(5.0, 2.0, 19_000),
            sample(15.0, 5.0, 20_000),
            vec![sample(10.0, 3.5, 21_000)],
            6_000_000_000,
            100,
        );
        assert_eq!(s.cpu_s, 3.0);
        assert_eq!(s.cpu_s_per_gb, Some(0.5));
        assert!((s.cpu_cores - 0.3).abs() < 1e-9);
        assert_eq!(s.rss_max_kib, 21_000);
        assert_eq!(s.rss_per_player_kib, 100.0);
        let none = ServerFigures::new(
            7,
            sample(0.0, 0.0, 1),
            sample(0.0, 0.0, 1),
            sample(0.0, 0.0, 1),
            vec![],
            0,
            0,
        );
        assert_eq!(none.cpu_s_per_gb, None);
    }

    #[test]
    fn errors_are_counted_by_kind() {
        let m = error_counts(
            [
                Some(ErrorKind::Closed),
                None,
                Some(ErrorKind::Closed),
                Some(ErrorKind::Connect),
            ]
            .into_iter(),
        );
        assert_eq!(m.get(&ErrorKind::Closed), Some(&2));
        assert_eq!(m.get(&ErrorKind::Connect), Some(&1));
        assert_eq!(m.len(), 2);
    }
}
