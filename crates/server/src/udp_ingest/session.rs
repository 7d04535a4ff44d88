//! One publishing spell of an ingest: from the datagram that ended its silence to the
//! silence (`idle`), kick or socket error that ends it. Datagrams go through the RTP
//! reorder buffer (RTP/MP2T) and the TS demuxer into the stream's [`Publisher`].

use super::input::{read_batch, BATCH};
use super::Entry;
use crate::core::ingest::Publisher;
use crate::ctx::admit::{Ask, Refusal};
use crate::ctx::Ctx;
use crate::ops::ingest::IngestInfo;
use crate::ops::{Client, EndReason};
use bytes::Bytes;
use sluice_media::rtp::{Mp2tReceiver, Mp2tStats};
use sluice_media::ts::{Carriage, DemuxStats, Demuxed, TsDemuxer};
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// How long RTP packets wait for a missing one before it is given up: reordering on
/// a network is a few ms; more is loss, and players should not wait for it.
const REORDER_WAIT: Duration = Duration::from_millis(50);

pub(super) struct Session {
    publisher: Publisher,
    demux: TsDemuxer,
    rtp: Option<Mp2tReceiver>,
    client: Client,
    info: Arc<IngestInfo>,
    idle: Duration,
    sender: SocketAddr,
    /// What was added to the shared counters so far.
    counted_demux: DemuxStats,
    counted_rtp: Mp2tStats,
}

impl Session {
    /// Publishes the entry's stream for `from`'s datagrams, as an operator-configured
    /// source (no credentials; the limits, a drain and a stream in use still refuse).
    pub(super) async fn start(
        ctx: &Rc<Ctx>,
        entry: &Entry,
        from: SocketAddr,
    ) -> Result<Session, Refusal> {
        let id = ctx.hub().next_id();
        let client = ctx.clients().add(id, entry.protocol(), from);
        let ask = Ask::new(entry.protocol(), &entry.key, id, from.ip()).checked();
        let publisher = match ctx.admit_publish(&ask).await {
            Ok(p) => p,
            Err(refused) => {
                client.ended(EndReason::Refused);
                return Err(refused);
            }
        };
        client.publishing(&entry.key);
        tracing::info!(sender = %from, "ingest publishing");
        let info = entry.info.clone();
        info.counters.starts.fetch_add(1, Ordering::Relaxed);
        info.live.store(true, Ordering::Relaxed);
        info.set_sender(from);
        Ok(Session {
            publisher,
            demux: match entry.program {
                Some(n) => TsDemuxer::for_program(n),
                None => TsDemuxer::new(),
            },
            rtp: (entry.url.carriage == Carriage::Rtp).then(Mp2tReceiver::new),
            client,
            info,
            idle: entry.idle,
            sender: from,
            counted_demux: DemuxStats::default(),
            counted_rtp: Mp2tStats::default(),
        })
    }

    /// One datagram from `from`.
    pub(super) fn datagram(&mut self, d: &[u8], from: SocketAddr) {
        self.client.count_in(d.len());
        self.publisher.bytes += d.len() as u64;
        if from != self.sender {
            self.sender = from;
            self.info.set_sender(from);
        }
        match &mut self.rtp {
            Some(rtp) => {
                // Not RTP or not TS: counted by the receiver, dropped.
                let _ = rtp.push(Bytes::copy_from_slice(d));
                self.drain_rtp();
            }
            None => {
                self.demux.push(d);
                self.drain_demux();
            }
        }
    }

    fn drain_rtp(&mut self) {
        while let Some(payload) = self.rtp.as_mut().and_then(Mp2tReceiver::pop) {
            self.demux.push(&payload);
            self.drain_demux();
        }
    }

    fn drain_demux(&mut self) {
        while let Some(out) = self.demux.poll() {
            match out {
                Demuxed::Track(at, track) => self.publisher.set_track(at, track),
                Demuxed::Frame(frame) => self.publisher.frame(frame),
                Demuxed::Cue(cue) => self.publisher.cue(&cue),
            }
        }
    }

    /// Reads datagrams until silence, a kick or a socket error.
    pub(super) async fn serve(&mut self, sock: &UdpSocket) -> EndReason {
        let counters = self.info.clone();
        let counters = &counters.counters;
        let mut last = Instant::now();
        let mut silence = pin!(tokio::time::sleep_until(last + self.idle));
        // When the reorder buffer started waiting for a missing packet.
        let mut reorder_since: Option<Instant> = None;
        loop {
            let reorder_at = reorder_since.map(|t| t + REORDER_WAIT);
            tokio::select! {
                () = self.client.kicked() => return EndReason::Kicked,
                ready = sock.readable() => {
                    if let Err(e) = ready {
                        tracing::warn!("ingest socket: {e}");
                        return EndReason::IoError;
                    }
                    let read = read_batch(sock, BATCH, |d, from| {
                        counters.datagrams.fetch_add(1, Ordering::Relaxed);
                        counters.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
                        self.datagram(d, from);
                    });
                    match read {
                        Ok(0) => {}
                        Ok(_) => last = Instant::now(),
                        // Readiness stays set after an error: end rather than spin.
                        Err(e) => {
                            tracing::warn!("ingest receive: {e}");
                            return EndReason::IoError;
                        }
                    }
                }
                () = &mut silence => {
                    if last.elapsed() >= self.idle {
                        return EndReason::Idle;
                    }
                    silence.as_mut().reset(last + self.idle);
                }
                () = sleep_until(reorder_at) => {
                    if let Some(rtp) = &mut self.rtp {
                        rtp.skip_missing();
                    }
                    self.drain_rtp();
                    reorder_since = None;
                }
            }
            let waiting = self.rtp.as_ref().is_some_and(Mp2tReceiver::waiting);
            reorder_since = match (waiting, reorder_since) {
                (false, _) => None,
                (true, None) => Some(Instant::now()),
                (true, since) => since,
            };
            self.count();
        }
    }

    /// Adds what the demuxer and the reorder buffer counted since the last call to the
    /// shared counters.
    fn count(&mut self) {
        let c = &self.info.counters;
        let add = |a: &AtomicU64, now: u64, before: u64| {
            if now > before {
                a.fetch_add(now - before, Ordering::Relaxed);
            }
        };
        let (d, b) = (self.demux.stats(), self.counted_demux);
        add(&c.ts_packets, d.packets, b.packets);
        add(&c.cc_errors, d.continuity_errors, b.continuity_errors);
        add(&c.sync_losses, d.sync_losses, b.sync_losses);
        add(&c.skipped_bytes, d.skipped_bytes, b.skipped_bytes);
        add(&c.scte35_cues, d.cues, b.cues);
        self.counted_demux = d;
        if let Some(rtp) = &self.rtp {
            let (r, b) = (rtp.stats(), self.counted_rtp);
            add(&c.rtp_lost, r.lost, b.lost);
            add(&c.rtp_reordered, r.reordered, b.reordered);
            add(&c.rtp_dropped, r.late + r.duplicates, b.late + b.duplicates);
            add(&c.bad_datagrams, r.not_rtp + r.not_ts, b.not_rtp + b.not_ts);
            self.counted_rtp = r;
        }
    }

    /// The spell is over: its stream goes to its grace window, and its connection entry
    /// says why.
    pub(super) fn end(mut self, reason: EndReason) {
        self.count();
        self.info.live.store(false, Ordering::Relaxed);
        self.client.ended(reason);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
