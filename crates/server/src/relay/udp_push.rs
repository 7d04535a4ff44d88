//! A push of a stream's MPEG-TS to a `udp://` or `rtp://` target (an IPTV encoder, a
//! multicast group, a set-top box): the stream's TS form, paced by its PCR or at a
//! constant rate (`sluice_media::ts::Pacer`), in datagrams of whole TS packets, in RTP
//! (RFC 2250) for `rtp://`.
//!
//! It reads the ring as an RTMP push does (a cursor, woken by the stream's notifier,
//! starting at the newest keyframe, moved to the newest one if it falls out of the
//! ring), and takes the TS form the stream makes in stream order while claimed (the
//! one HTTP-TS and SRT players play), so it muxes nothing itself. It runs on the
//! worker the stream was published on, with a socket of its own
//! (`io::udp_out`); a send that fails (a unicast receiver not listening answers with
//! ICMP, so the next send fails with `ECONNREFUSED`) is counted and the push goes on.
//!
//! # Invariants
//! - Memory is bounded: the pacer holds at most [`FEED_LIMIT`] packets; the ring is read
//!   again only once what was read before went into the pacer.
//! - One stream at a time sends to a target (`Relays::on_publish`), so two streams of a
//!   rule never mix in one address.

use super::push::{PushTarget, Subscribed};
use crate::core::cursor::{Cursor, Moved};
use crate::core::format::FormatId;
use crate::core::hub::Stream;
use crate::core::packet::Packet;
use sluice_media::rtp::{Mp2tSender, RTP_HEADER_LEN};
use sluice_media::ts::{PaceConfig, PaceStats, Pacer, TsOutUrl, MAX_UNSTAMPED};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Packets the pacer may hold before the ring is read again: more than it holds while
/// waiting for a PCR (so a stream without PCRs still moves), some 4 MB.
const FEED_LIMIT: usize = MAX_UNSTAMPED + 4096;
/// How long the end of a stream may keep its push sending what the pacer held.
const FINISH_LIMIT: Duration = Duration::from_secs(2);

/// One running UDP push, as the API and the metrics show it.
#[derive(Debug)]
pub struct UdpPushInfo {
    /// The stream's key.
    pub stream: String,
    /// The target URL (it holds no secret).
    pub target: String,
    pub counters: UdpPushCounters,
}

/// What a UDP push sent; the pacer's figures are its current run's.
#[derive(Debug, Default)]
pub struct UdpPushCounters {
    /// Datagrams the kernel took.
    pub datagrams: AtomicU64,
    /// Their bytes (with RTP's headers).
    pub bytes: AtomicU64,
    /// Null packets sent to hold a constant rate.
    pub null_packets: AtomicU64,
    /// Stream packets sent beyond the constant rate.
    pub overflow_packets: AtomicU64,
    /// Sends that failed (and were not retried): `ECONNREFUSED` from a unicast
    /// receiver that is not listening, a full buffer, no route.
    pub send_errors: AtomicU64,
    /// Times the pacer's clock was re-anchored because output ran late.
    pub reanchors: AtomicU64,
    /// PCR discontinuities (a new publisher, a jump).
    pub discontinuities: AtomicU64,
    /// Times the push fell out of the ring and skipped to the newest keyframe.
    pub skips: AtomicU64,
}

impl UdpPushCounters {
    fn set_pacer(&self, s: PaceStats) {
        self.null_packets.store(s.null_packets, Ordering::Relaxed);
        self.overflow_packets
            .store(s.overflow_packets, Ordering::Relaxed);
        self.reanchors.store(s.reanchors, Ordering::Relaxed);
        self.discontinuities
            .store(s.discontinuities, Ordering::Relaxed);
    }
}

/// Pushes `stream`'s TS to `url` until the stream ends or the push is no longer wanted;
/// a socket that cannot be made is tried again with backoff.
pub(super) async fn run(
    relays: &Arc<super::Relays>,
    stream: &Arc<Stream>,
    target: &PushTarget,
    url: &TsOutUrl,
) {
    let info = Arc::new(UdpPushInfo {
        stream: stream.key.clone(),
        target: url.to_string(),
        counters: UdpPushCounters::default(),
    });
    relays.udp_push_started(&info);
    let mode = url
        .bitrate
        .map_or("vbr".to_string(), |b| format!("cbr {b} bit/s"));
    tracing::info!(stream = %stream.key, target = %info.target, mode, "udp push started");
    let notify = Arc::new(Notify::new());
    stream.subscribe(notify.clone());
    let _subscribed = Subscribed(stream, notify.clone());
    let mut wait = relays.config.retry_min;
    loop {
        if stream.lock().closed || !relays.push_wanted(&stream.key, target) {
            break;
        }
        let socket = crate::io::udp_out::open(url)
            .map_err(|e| e.to_string())
            .and_then(|s| tokio::net::UdpSocket::from_std(s).map_err(|e| e.to_string()));
        match socket {
            Ok(socket) => {
                let mut out = Out {
                    relays,
                    stream,
                    target,
                    notify: &notify,
                    info: &info,
                    socket,
                };
                out.send(url).await;
                break;
            }
            Err(why) => {
                tracing::warn!(stream = %stream.key, target = %info.target, "udp push: {why}");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(relays.config.retry_max);
            }
        }
    }
    let c = &info.counters;
    tracing::info!(
        stream = %stream.key,
        target = %info.target,
        datagrams = c.datagrams.load(Ordering::Relaxed),
        bytes = c.bytes.load(Ordering::Relaxed),
        null_packets = c.null_packets.load(Ordering::Relaxed),
        overflow_packets = c.overflow_packets.load(Ordering::Relaxed),
        send_errors = c.send_errors.load(Ordering::Relaxed),
        "udp push ended"
    );
    relays.udp_push_ended(&info);
}

/// One push's socket and what it reads from.
struct Out<'a> {
    relays: &'a super::Relays,
    stream: &'a Arc<Stream>,
    target: &'a PushTarget,
    notify: &'a Arc<Notify>,
    info: &'a UdpPushInfo,
    socket: tokio::net::UdpSocket,
}

impl Out<'_> {
    /// Reads the ring into the pacer and sends what it says is due, until the stream
    /// ends or the push is no longer wanted.
    async fn send(&mut self, url: &TsOutUrl) {
        let stream = self.stream;
        let format = stream.format_for(FormatId::TS);
        // The stream makes its TS form while claimed (from the start keyframe on), and
        // the AAC of an Opus stream while a consumer takes it.
        let _form = stream.want_form(FormatId::TS);
        let _transcoded = format
            .transcoded
            .then(|| stream.want_transcoded())
            .flatten();
        let mut cursor = Cursor::default();
        let mut batch: VecDeque<Arc<Packet>> = VecDeque::new();
        // Bytes of the batch's first packet already in the pacer.
        let mut offset = 0;
        let mut pacer = Pacer::new(PaceConfig {
            packets: url.packets,
            bitrate: url.bitrate,
        });
        let rtp = url
            .is_rtp()
            .then(|| Mp2tSender::new(rand::random(), rand::random(), rand::random()));
        let mut datagrams = Datagrams {
            rtp,
            buf: Vec::with_capacity(RTP_HEADER_LEN + url.packets * 188),
        };
        loop {
            let now = tokio::time::Instant::now().into_std();
            if batch.is_empty() {
                if !self.relays.push_wanted(&stream.key, self.target) {
                    return;
                }
                let (closed, moved) = {
                    let state = stream.lock();
                    match state.closed {
                        true => (true, Moved::Stayed),
                        false => (false, cursor.read(&state.ring, state.configs(), &mut batch)),
                    }
                };
                if closed {
                    return self.finish(&mut pacer, &mut datagrams).await;
                }
                if moved == Moved::Skipped {
                    self.info.counters.skips.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(stream = %stream.key, "udp push: fell out of the ring, skipped to the newest keyframe");
                }
            }
            while pacer.queued() < FEED_LIMIT {
                let Some(packet) = batch.front() else {
                    break;
                };
                let ts = packet
                    .form(FormatId::TS)
                    .filter(|b| format.wants(packet) && offset < b.len());
                let Some(ts) = ts else {
                    batch.pop_front();
                    offset = 0;
                    continue;
                };
                offset += pacer.push(now, &ts[offset..]);
                if offset >= ts.len() {
                    batch.pop_front();
                    offset = 0;
                }
            }
            self.send_due(&mut pacer, &mut datagrams, now).await;
            let due = pacer.poll_timeout().map(tokio::time::Instant::from_std);
            tokio::select! {
                () = self.notify.notified() => {}
                () = sleep_until(due) => {}
            }
        }
    }

    /// Sends every datagram the pacer has due at `now`.
    async fn send_due(&self, pacer: &mut Pacer, datagrams: &mut Datagrams, now: Instant) {
        while let Some(datagram) = datagrams.next(pacer, now) {
            self.transmit(datagram).await;
        }
        self.info.counters.set_pacer(pacer.stats());
    }

    /// The stream ended: what the pacer holds goes out at its times (the last PCR gap
    /// at the rate before it), for at most [`FINISH_LIMIT`].
    async fn finish(&self, pacer: &mut Pacer, datagrams: &mut Datagrams) {
        pacer.finish();
        let deadline = tokio::time::Instant::now() + FINISH_LIMIT;
        while pacer.queued() > 0 {
            self.send_due(pacer, datagrams, tokio::time::Instant::now().into_std())
                .await;
            let Some(due) = pacer.poll_timeout().map(tokio::time::Instant::from_std) else {
                return;
            };
            if due > deadline {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    }

    /// Sends one datagram; a failure is counted (the first of a run logged) and the
    /// push goes on.
    async fn transmit(&self, datagram: &[u8]) {
        let c = &self.info.counters;
        match self.socket.send(datagram).await {
            Ok(n) => {
                c.datagrams.fetch_add(1, Ordering::Relaxed);
                c.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => {
                if c.send_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        stream = %self.stream.key,
                        target = %self.info.target,
                        "udp push: send failed: {e} (further failures are counted, not logged)"
                    );
                }
            }
        }
    }
}

/// The datagrams of one push: the pacer's TS packets, behind an RTP header for
/// `rtp://`, in one buffer reused for each.
struct Datagrams {
    rtp: Option<Mp2tSender>,
    buf: Vec<u8>,
}

impl Datagrams {
    /// The next datagram due at `now`, if any.
    fn next(&mut self, pacer: &mut Pacer, now: Instant) -> Option<&[u8]> {
        let header = if self.rtp.is_some() {
            RTP_HEADER_LEN
        } else {
            0
        };
        self.buf.clear();
        self.buf.resize(header, 0);
        let paced = pacer.poll_datagram(now, &mut self.buf)?;
        if let (Some(rtp), Some(head)) = (&mut self.rtp, self.buf.get_mut(..header)) {
            head.copy_from_slice(&rtp.header(paced.time_90k));
        }
        Some(&self.buf)
    }
}

/// Until `due`, or forever.
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}
