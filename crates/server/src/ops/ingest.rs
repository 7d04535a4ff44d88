//! What the API and `/metrics` show of each UDP ingest (`[[ingest]]`): its address,
//! its stream, whether it is live, and what it counted (datagrams, continuity errors,
//! RTP packets lost and reordered), all workers' ingests in one list.
//!
//! Why apart from the ingest's task: the task lives on one worker; the API may run on
//! any. The counters are atomics its task adds to, read here without a lock.

use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One ingest, as its task reports it.
#[derive(Debug)]
pub struct IngestInfo {
    pub stream: String,
    /// Its URL as configured (`udp://...`, `rtp://...`).
    pub url: String,
    /// The program demuxed from a multi-program TS, if one was named.
    pub program: Option<u16>,
    /// The address the socket is bound to.
    pub bound: SocketAddr,
    pub worker: usize,
    /// Whether it publishes now (datagrams came within its idle time).
    pub live: AtomicBool,
    /// Who sent the last datagram.
    sender: Mutex<Option<SocketAddr>>,
    pub counters: IngestCounters,
    /// Set when the API removed it: its task ends, its publisher leaves.
    removed: AtomicBool,
    remove: tokio::sync::Notify,
}

/// What one ingest counted since the server started (over all its publishing spells).
#[derive(Debug, Default)]
pub struct IngestCounters {
    pub datagrams: AtomicU64,
    pub bytes: AtomicU64,
    /// TS packets read.
    pub ts_packets: AtomicU64,
    /// Continuity counter gaps on the PIDs read: TS packets lost (or reordered) on the way.
    pub cc_errors: AtomicU64,
    /// RTP sequence numbers never received (or later than the reorder window).
    pub rtp_lost: AtomicU64,
    /// RTP packets that arrived out of order and were put back in place.
    pub rtp_reordered: AtomicU64,
    /// RTP packets dropped as late or duplicate.
    pub rtp_dropped: AtomicU64,
    /// RTP datagrams that were not RTP, or carried no TS.
    pub bad_datagrams: AtomicU64,
    /// Bytes skipped to find TS packets again (garbage, cut packets).
    pub skipped_bytes: AtomicU64,
    pub sync_losses: AtomicU64,
    /// SCTE-35 cues read from the TS.
    pub scte35_cues: AtomicU64,
    /// Publishing spells started (the first datagram after silence).
    pub starts: AtomicU64,
    /// Publishing refused (the stream in use, a limit, a drain).
    pub refused: AtomicU64,
}

/// The API's view of one ingest.
#[derive(Debug, Serialize)]
pub struct IngestSnapshot {
    pub stream: String,
    pub url: String,
    pub program: Option<u16>,
    pub bound: String,
    pub worker: usize,
    pub live: bool,
    pub sender: Option<String>,
    pub datagrams: u64,
    pub bytes: u64,
    pub ts_packets: u64,
    pub cc_errors: u64,
    pub rtp_lost: u64,
    pub rtp_reordered: u64,
    pub rtp_dropped: u64,
    pub bad_datagrams: u64,
    pub skipped_bytes: u64,
    pub sync_losses: u64,
    pub scte35_cues: u64,
    pub starts: u64,
    pub refused: u64,
}

impl IngestInfo {
    pub fn new(
        stream: &str,
        url: &str,
        program: Option<u16>,
        bound: SocketAddr,
        worker: usize,
    ) -> IngestInfo {
        IngestInfo {
            stream: stream.to_string(),
            url: url.to_string(),
            program,
            bound,
            worker,
            live: AtomicBool::new(false),
            sender: Mutex::new(None),
            counters: IngestCounters::default(),
            removed: AtomicBool::new(false),
            remove: tokio::sync::Notify::new(),
        }
    }

    /// Ends its task (on whichever worker it runs).
    pub fn stop(&self) {
        self.removed.store(true, Ordering::Relaxed);
        self.remove.notify_one();
    }

    /// Until [`IngestInfo::stop`].
    pub async fn stopped(&self) {
        let removed = self.remove.notified();
        if !self.removed.load(Ordering::Relaxed) {
            removed.await;
        }
    }

    pub fn set_sender(&self, from: SocketAddr) {
        *self.sender.lock().unwrap_or_else(|e| e.into_inner()) = Some(from);
    }

    pub fn snapshot(&self) -> IngestSnapshot {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let sender = *self.sender.lock().unwrap_or_else(|e| e.into_inner());
        IngestSnapshot {
            stream: self.stream.clone(),
            url: self.url.clone(),
            program: self.program,
            bound: self.bound.to_string(),
            worker: self.worker,
            live: self.live.load(Ordering::Relaxed),
            sender: sender.map(|s| s.to_string()),
            datagrams: get(&c.datagrams),
            bytes: get(&c.bytes),
            ts_packets: get(&c.ts_packets),
            cc_errors: get(&c.cc_errors),
            rtp_lost: get(&c.rtp_lost),
            rtp_reordered: get(&c.rtp_reordered),
            rtp_dropped: get(&c.rtp_dropped),
            bad_datagrams: get(&c.bad_datagrams),
            skipped_bytes: get(&c.skipped_bytes),
            sync_losses: get(&c.sync_losses),
            scte35_cues: get(&c.scte35_cues),
            starts: get(&c.starts),
            refused: get(&c.refused),
        }
    }
}

/// Every ingest of the server.
#[derive(Debug, Default)]
pub struct Ingests(Mutex<Vec<Arc<IngestInfo>>>);

impl Ingests {
    pub fn add(&self, info: Arc<IngestInfo>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(info);
    }

    pub fn all(&self) -> Vec<Arc<IngestInfo>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether stream `key` has an ingest.
    pub fn has(&self, key: &str) -> bool {
        self.all().iter().any(|i| i.stream == key)
    }

    /// Removes the ingest of `key` and stops it; whether there was one.
    pub fn remove(&self, key: &str) -> bool {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = all.iter().position(|i| i.stream == key) else {
            return false;
        };
        all.remove(at).stop();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_ingest_is_stopped_whenever_its_task_looks() {
        let ingests = Ingests::default();
        let info = Arc::new(IngestInfo::new(
            "live/a",
            "udp://127.0.0.1:0",
            None,
            "127.0.0.1:5000".parse().unwrap(),
            0,
        ));
        ingests.add(info.clone());
        assert!(ingests.has("live/a"));
        assert!(!ingests.remove("live/b"));
        assert!(ingests.remove("live/a"));
        assert!(!ingests.has("live/a"));
        // Stopped before the task waits: the wait ends at once.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), info.stopped())
                .await
                .expect("stopped");
        });
        info.counters.cc_errors.fetch_add(3, Ordering::Relaxed);
        let s = info.snapshot();
        assert_eq!(
            (s.cc_errors, s.live, s.bound.as_str()),
            (3, false, "127.0.0.1:5000")
        );
    }
}
