//! `/metrics` in the Prometheus text format, made at scrape time from the hub's
//! streams and the workers' snapshots.
//!
//! Why at scrape time: the figures live where they are cheapest to keep (atomics on
//! the stream, per-worker cells); a registry built per scrape has no series left over
//! from streams that ended, and no hot path pays for a label lookup.

use crate::core::hub::Hub;
use crate::core::protocol::Protocol;
use crate::ops::ingest::{IngestCounters, IngestInfo};
use crate::ops::{Ops, Role, Snapshot, PANICS};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Labels = Vec<(&'static str, String)>;

/// The stream's app (its key up to the last `/`) and name.
fn stream_labels(key: &str) -> Labels {
    let (app, name) = key.rsplit_once('/').unwrap_or(("", key));
    vec![("app", app.to_owned()), ("stream", name.to_owned())]
}

fn with(mut labels: Labels, name: &'static str, value: impl Into<String>) -> Labels {
    labels.push((name, value.into()));
    labels
}

/// A counter holding what `v` counted so far.
fn counter(v: &AtomicU64) -> Counter {
    let c: Counter = Counter::default();
    c.inc_by(v.load(Ordering::Relaxed));
    c
}

/// An edge's pulls from its origins.
fn relay_metrics(reg: &mut Registry, r: &crate::relay::Relays) {
    let c = &r.counters;
    reg.register(
        "relay_pulls",
        "Pulls from origins started",
        counter(&c.pulls),
    );
    reg.register(
        "relay_received_bytes",
        "Bytes read from origins",
        counter(&c.bytes),
    );
    reg.register(
        "relay_reconnects",
        "Connections to an origin after a pull's first (any cause)",
        counter(&c.reconnects),
    );
    reg.register(
        "relay_failovers",
        "Moves of a pull to the next origin after one failed",
        counter(&c.failovers),
    );
    reg.register(
        "relay_pushes",
        "Pushes to other servers started",
        counter(&c.pushes),
    );
    reg.register(
        "relay_pushed_bytes",
        "Media bytes pushed to other servers",
        counter(&c.push_bytes),
    );
    reg.register(
        "relay_push_reconnects",
        "Connections of a push after its first (any cause)",
        counter(&c.push_reconnects),
    );
    let active: Gauge = Gauge::default();
    active.set(r.pulls().len() as i64);
    reg.register("relay_active_pulls", "Pulls running now", active);
    udp_push_metrics(reg, &r.udp_pushes());
}

/// The UDP pushes (MPEG-TS to udp:// and rtp://), by stream and target.
fn udp_push_metrics(reg: &mut Registry, pushes: &[Arc<crate::relay::udp_push::UdpPushInfo>]) {
    type Field = fn(&crate::relay::udp_push::UdpPushCounters) -> &AtomicU64;
    let families: [(&str, &str, Field); 6] = [
        ("udp_push_datagrams", "Datagrams a UDP push sent", |c| {
            &c.datagrams
        }),
        (
            "udp_push_bytes",
            "Bytes a UDP push sent (with RTP headers)",
            |c| &c.bytes,
        ),
        (
            "udp_push_null_packets",
            "Null TS packets a constant-rate UDP push sent to fill its rate",
            |c| &c.null_packets,
        ),
        (
            "udp_push_overflow_packets",
            "TS packets a constant-rate UDP push sent beyond its rate",
            |c| &c.overflow_packets,
        ),
        (
            "udp_push_send_errors",
            "Sends of a UDP push that failed (the push goes on)",
            |c| &c.send_errors,
        ),
        (
            "udp_push_reanchors",
            "Times a UDP push's pacing clock was re-anchored because output ran late",
            |c| &c.reanchors,
        ),
    ];
    for (name, help, field) in families {
        let family = Family::<Labels, Counter>::default();
        for p in pushes {
            family
                .get_or_create(&with(stream_labels(&p.stream), "target", p.target.clone()))
                .inc_by(field(&p.counters).load(Ordering::Relaxed));
        }
        reg.register(name, help, family);
    }
}

/// This node's directory: whether it answers, its operations, what they decided.
fn cluster_metrics(reg: &mut Registry, c: &crate::cluster::Cluster) {
    let counters = &c.counters;
    let up: Gauge = Gauge::default();
    up.set(i64::from(counters.up.load(Ordering::Relaxed)));
    reg.register(
        "cluster_directory_up",
        "Whether the cluster's directory answered this node's last operation",
        up,
    );
    let ops = Family::<Labels, Counter>::default();
    for op in crate::cluster::Op::ALL {
        let (ok, failed) = counters.ops(op);
        for (result, n) in [("ok", ok), ("error", failed)] {
            ops.get_or_create(&vec![
                ("op", op.name().to_owned()),
                ("result", result.to_owned()),
            ])
            .inc_by(n);
        }
    }
    reg.register(
        "cluster_directory_operations",
        "Operations on the cluster's directory (refresh, claim, release, away, locate, nodes, leave), by result",
        ops,
    );
    let lookups = Family::<Labels, Counter>::default();
    lookups
        .get_or_create(&vec![("result", "found".to_owned())])
        .inc_by(counters.located.load(Ordering::Relaxed));
    lookups
        .get_or_create(&vec![("result", "none".to_owned())])
        .inc_by(counters.not_located.load(Ordering::Relaxed));
    reg.register(
        "cluster_lookups",
        "Lookups of a stream's node by players here, by whether a node had it",
        lookups,
    );
    reg.register(
        "cluster_takeovers",
        "Streams this node claimed from another node",
        counter(&counters.takeovers),
    );
    reg.register(
        "cluster_refused_publishers",
        "Publishers refused here because another node owns their stream",
        counter(&counters.refused),
    );
    reg.register(
        "cluster_redirects",
        "New sessions sent to another node (HTTP 307) while this one drained or was over its load",
        counter(&counters.redirects),
    );
    reg.register(
        "cluster_lost_streams",
        "Streams another node took from this one (their publishers here were disconnected)",
        counter(&counters.lost),
    );
}

/// The datagram protocols' UDP endpoints, by protocol.
fn udp_metrics(reg: &mut Registry, udp: &crate::ops::UdpEndpoints) {
    type Field = fn(&crate::io::endpoint::Counters) -> &AtomicU64;
    let families: [(&str, &str, Field); 5] = [
        ("udp_datagrams", "Datagrams received", |c| &c.datagrams),
        (
            "udp_receive_calls",
            "Receive system calls that returned datagrams (each takes a batch)",
            |c| &c.receive_calls,
        ),
        (
            "udp_unclaimed_datagrams",
            "Datagrams received that no session claimed (dropped)",
            |c| &c.unclaimed,
        ),
        (
            "udp_oversized_datagrams",
            "Datagrams dropped for being longer than the protocol takes",
            |c| &c.oversized,
        ),
        (
            "udp_send_calls",
            "Send system calls that sent datagrams (each takes a batch)",
            |c| &c.send_calls,
        ),
    ];
    for (name, help, field) in families {
        let family = Family::<Labels, Counter>::default();
        for (protocol, counters) in udp.all() {
            family
                .get_or_create(&vec![("protocol", protocol.to_owned())])
                .inc_by(field(counters).load(Ordering::Relaxed));
        }
        reg.register(name, help, family);
    }
}

/// The UDP ingests, by stream: what each received and lost.
fn ingest_metrics(reg: &mut Registry, ingests: &[Arc<IngestInfo>]) {
    type Field = fn(&IngestCounters) -> &AtomicU64;
    let families: [(&str, &str, Field); 11] = [
        (
            "ingest_datagrams",
            "Datagrams received by a UDP ingest",
            |c| &c.datagrams,
        ),
        ("ingest_bytes", "Bytes received by a UDP ingest", |c| {
            &c.bytes
        }),
        ("ingest_ts_packets", "TS packets a UDP ingest read", |c| {
            &c.ts_packets
        }),
        (
            "ingest_scte35_cues",
            "SCTE-35 cues a UDP ingest read from its TS",
            |c| &c.scte35_cues,
        ),
        (
            "ingest_cc_errors",
            "Continuity counter gaps (TS packets lost) on a UDP ingest",
            |c| &c.cc_errors,
        ),
        (
            "ingest_rtp_lost",
            "RTP packets never received by an RTP ingest",
            |c| &c.rtp_lost,
        ),
        (
            "ingest_rtp_reordered",
            "RTP packets an RTP ingest put back in order",
            |c| &c.rtp_reordered,
        ),
        (
            "ingest_rtp_dropped",
            "RTP packets an RTP ingest dropped as late or duplicate",
            |c| &c.rtp_dropped,
        ),
        (
            "ingest_bad_datagrams",
            "Datagrams an RTP ingest dropped for not being RTP or TS",
            |c| &c.bad_datagrams,
        ),
        (
            "ingest_skipped_bytes",
            "Bytes a UDP ingest skipped to find TS packets again",
            |c| &c.skipped_bytes,
        ),
        (
            "ingest_starts",
            "Times a UDP ingest started publishing (its first datagram after silence)",
            |c| &c.starts,
        ),
    ];
    for (name, help, field) in families {
        let family = Family::<Labels, Counter>::default();
        for i in ingests {
            family
                .get_or_create(&stream_labels(&i.stream))
                .inc_by(field(&i.counters).load(Ordering::Relaxed));
        }
        reg.register(name, help, family);
    }
    let live = Family::<Labels, Gauge>::default();
    for i in ingests {
        live.get_or_create(&stream_labels(&i.stream))
            .set(i64::from(i.live.load(Ordering::Relaxed)));
    }
    reg.register(
        "ingest_live",
        "1 while a UDP ingest publishes its stream",
        live,
    );
}

/// Renders every metric.
pub fn render(
    hub: &Hub,
    ops: &Ops,
    auth: &crate::auth::Auth,
    workers: &[Snapshot],
    uptime_s: f64,
    per_connection: bool,
    relays: Option<&crate::relay::Relays>,
) -> String {
    let mut reg = Registry::with_prefix("sluice");
    ingest_metrics(&mut reg, &ops.ingests.all());
    if let Some(r) = relays {
        relay_metrics(&mut reg, r);
        if let Some(c) = r.cluster() {
            cluster_metrics(&mut reg, c);
        }
    }

    let up: Gauge<f64, AtomicU64> = Gauge::default();
    up.set(uptime_s);
    reg.register("uptime_seconds", "Seconds since the server started", up);

    let streams = hub.streams();
    let count: Gauge = Gauge::default();
    count.set(streams.len() as i64);
    reg.register(
        "streams",
        "Live streams (including those in their grace window)",
        count,
    );

    let viewers = Family::<Labels, Gauge>::default();
    let bytes_in = Family::<Labels, Counter>::default();
    let bytes_out = Family::<Labels, Counter>::default();
    let frames_in = Family::<Labels, Counter>::default();
    let skips = Family::<Labels, Counter>::default();
    let ring = Family::<Labels, Gauge>::default();
    let hls = Family::<Labels, Gauge>::default();
    for s in &streams {
        let labels = stream_labels(&s.key);
        for p in Protocol::ALL {
            viewers
                .get_or_create(&with(labels.clone(), "protocol", p.name()))
                .set(s.viewers_of(p) as i64);
        }
        bytes_in
            .get_or_create(&labels)
            .inc_by(s.bytes_in.load(Ordering::Relaxed));
        frames_in
            .get_or_create(&labels)
            .inc_by(s.frames_in.load(Ordering::Relaxed));
        bytes_out
            .get_or_create(&labels)
            .inc_by(s.bytes_out.load(Ordering::Relaxed));
        skips
            .get_or_create(&labels)
            .inc_by(s.skips.load(Ordering::Relaxed));
        ring.get_or_create(&labels)
            .set(s.lock().ring.bytes() as i64);
        let bytes = s.tap::<crate::hls::HlsStream>().map_or(0, |h| h.memory());
        hls.get_or_create(&labels).set(bytes as i64);
    }
    reg.register(
        "stream_viewers",
        "Players of a stream, by protocol",
        viewers,
    );
    reg.register(
        "stream_received_bytes",
        "Media bytes received from the publisher",
        bytes_in,
    );
    reg.register(
        "stream_received_frames",
        "Frames received from the publisher",
        frames_in,
    );
    reg.register(
        "stream_sent_bytes",
        "Bytes written to the stream's players (HTTP-FLV, WS-FLV, RTMP, RTSP)",
        bytes_out,
    );
    reg.register(
        "stream_skips",
        "Players moved to a newer keyframe because they fell behind",
        skips,
    );
    reg.register(
        "stream_ring_bytes",
        "Bytes held by the stream's ring (GOP cache)",
        ring,
    );
    reg.register(
        "stream_hls_bytes",
        "Bytes held by the stream's HLS segments",
        hls,
    );

    let busy = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let cpu = Family::<Labels, Counter<f64, AtomicU64>>::default();
    let conns = Family::<Labels, Gauge>::default();
    let delay = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for w in workers {
        let labels = vec![("worker", w.worker.worker.to_string())];
        busy.get_or_create(&labels).set(w.worker.busy);
        cpu.get_or_create(&labels).inc_by(w.worker.cpu_seconds);
        conns
            .get_or_create(&labels)
            .set(w.worker.connections as i64);
        delay
            .get_or_create(&labels)
            .set(w.worker.worst_delay_ms / 1e3);
    }
    reg.register(
        "worker_busy_ratio",
        "CPU time of the worker's thread over the last second",
        busy,
    );
    reg.register(
        "worker_cpu_seconds",
        "CPU seconds of the worker's thread",
        cpu,
    );
    reg.register("worker_connections", "Connections the worker holds", conns);
    reg.register(
        "worker_scheduling_delay_worst_seconds",
        "Latest wake-up of the worker's delay probe since start",
        delay,
    );

    udp_metrics(&mut reg, &ops.udp);

    let ended = Family::<Labels, Counter>::default();
    for w in workers {
        for ((protocol, reason), n) in &w.ended {
            ended
                .get_or_create(&vec![
                    ("protocol", (*protocol).to_owned()),
                    ("reason", (*reason).to_owned()),
                ])
                .inc_by(*n);
        }
    }
    reg.register(
        "disconnects",
        "Connections ended, by protocol and reason",
        ended,
    );
    reg.register(
        "time_to_first_frame_seconds",
        "From a player's start to its first keyframe",
        ops.first_frame.clone(),
    );

    let denials = Family::<Labels, Counter>::default();
    for (reason, n) in auth.denials() {
        denials
            .get_or_create(&vec![("reason", reason.to_owned())])
            .inc_by(n);
    }
    reg.register(
        "auth_denials",
        "Requests refused by the authorization, by reason",
        denials,
    );

    let hits = Family::<Labels, Counter>::default();
    for (limit, n) in hub.limits.hits() {
        hits.get_or_create(&vec![("limit", limit.to_owned())])
            .inc_by(n);
    }
    reg.register(
        "limit_hits",
        "Connections, publishers and streams refused by a limit of [limits]",
        hits,
    );
    let panics: Counter = Counter::default();
    panics.inc_by(PANICS.load(std::sync::atomic::Ordering::Relaxed));
    reg.register(
        "panics",
        "Panics caught; each ended one session, never a worker",
        panics,
    );
    let admitted: Gauge = Gauge::default();
    admitted.set(hub.limits.connections() as i64);
    reg.register(
        "connections",
        "Connections admitted and not ended, every protocol",
        admitted,
    );
    let udp: Gauge = Gauge::default();
    udp.set(hub.limits.udp_sessions() as i64);
    reg.register(
        "udp_sessions",
        "Sessions with media over UDP (RTSP with RTP over UDP, WebRTC)",
        udp,
    );

    let webrtc = Family::<Labels, Gauge>::default();
    for (state, n) in ["str0m", "settled"]
        .into_iter()
        .zip(&crate::webrtc::SESSIONS)
    {
        let labels = vec![("state", state.to_string())];
        webrtc.get_or_create(&labels).set(n.load(Ordering::Relaxed));
    }
    reg.register(
        "webrtc_sessions",
        "WebRTC sessions: state str0m while str0m runs their ICE and DTLS (and a WHIP \
         publisher's media), settled once a viewer's str0m is dropped",
        webrtc,
    );

    for (name, help, n) in [
        (
            "webrtc_retransmissions",
            "Video packets sent again to WebRTC viewers on their NACKs",
            &crate::webrtc::RESENT,
        ),
        (
            "webrtc_retransmission_misses",
            "NACKed packets no longer in the worker's history",
            &crate::webrtc::RESEND_MISSES,
        ),
        (
            "webrtc_task_wakes",
            "Times WebRTC sessions' tasks were woken (timers, peer events); a WHIP \
             publisher's media is ingested without waking its task",
            &crate::webrtc::TASK_WAKES,
        ),
    ] {
        let c: Counter = Counter::default();
        c.inc_by(n.load(Ordering::Relaxed));
        reg.register(name, help, c);
    }

    if let Some(stats) = hub.attached::<crate::record::Recorder>().map(|r| r.stats()) {
        let count = |n: &AtomicU64| {
            let c: Counter = Counter::default();
            c.inc_by(n.load(Ordering::Relaxed));
            c
        };
        reg.register("record_files", "Recordings completed", count(&stats.files));
        reg.register(
            "record_failures",
            "Recordings abandoned on a write error (a full disk, say) or never created",
            count(&stats.failures),
        );
        reg.register(
            "record_bytes",
            "Bytes written to recordings",
            count(&stats.bytes),
        );
        let removed = Family::<Labels, Counter>::default();
        let removed_bytes = Family::<Labels, Counter>::default();
        for reason in crate::record::Reason::ALL {
            let labels = vec![("reason", reason.name().to_string())];
            let i = reason.index();
            removed
                .get_or_create(&labels)
                .inc_by(stats.removed[i].load(Ordering::Relaxed));
            removed_bytes
                .get_or_create(&labels)
                .inc_by(stats.removed_bytes[i].load(Ordering::Relaxed));
        }
        reg.register(
            "record_removed",
            "Recordings removed, by reason: age (keep_days), bytes (keep_bytes), disk \
             (min_free_bytes), api (DELETE)",
            removed,
        );
        reg.register(
            "record_removed_bytes",
            "Bytes of the recordings removed, by reason",
            removed_bytes,
        );
    }
    if let Some(recorder) = hub.attached::<crate::record::Recorder>() {
        let read: Gauge = Gauge::default();
        read.set(i64::try_from(recorder.files_read()).unwrap_or(i64::MAX));
        reg.register(
            "files_read",
            "Files of the media root being read now (players on demand, downloads): \
             recordings retention leaves them for a later pass",
            read,
        );
    }

    if per_connection {
        connections(&mut reg, workers);
    }

    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// One series per connection (`api.metrics_per_connection`): as many as there are
/// connections, so off by default.
fn connections(reg: &mut Registry, workers: &[Snapshot]) {
    let bytes_in = Family::<Labels, Counter>::default();
    let bytes_out = Family::<Labels, Counter>::default();
    let lag = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let skips = Family::<Labels, Counter>::default();
    for c in workers.iter().flat_map(|w| &w.clients) {
        let labels = vec![
            ("id", c.id.to_string()),
            ("protocol", c.protocol.to_owned()),
            ("peer", c.peer.clone()),
            (
                "role",
                match c.role {
                    Role::Idle => "idle",
                    Role::Publish => "publish",
                    Role::Play => "play",
                }
                .to_owned(),
            ),
            ("stream", c.stream.clone().unwrap_or_default()),
        ];
        bytes_in.get_or_create(&labels).inc_by(c.bytes_in);
        bytes_out.get_or_create(&labels).inc_by(c.bytes_out);
        skips.get_or_create(&labels).inc_by(u64::from(c.skips));
        if let Some(ms) = c.lag_ms {
            lag.get_or_create(&labels).set(ms as f64 / 1e3);
        }
    }
    reg.register(
        "connection_received_bytes",
        "Bytes the connection sent us",
        bytes_in,
    );
    reg.register(
        "connection_sent_bytes",
        "Bytes sent to the connection's player",
        bytes_out,
    );
    reg.register(
        "connection_lag_seconds",
        "How far the player is behind the newest frame its worker holds",
        lag,
    );
    reg.register(
        "connection_skips",
        "Times the player was moved to a newer keyframe",
        skips,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_split_the_key_at_its_last_slash() {
        assert_eq!(
            stream_labels("live/cam"),
            vec![("app", "live".to_owned()), ("stream", "cam".to_owned())]
        );
        assert_eq!(stream_labels("a/b/c")[0].1, "a/b");
    }
}
