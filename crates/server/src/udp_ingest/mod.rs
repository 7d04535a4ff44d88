//! UDP ingest: MPEG-TS sent to a UDP address (unicast, or a multicast group joined with
//! any source or specific ones), plain or in RTP (RFC 2250), published as a stream
//! (`[[ingest]]` entries).
//!
//! Why: encoders, IRDs and IPTV head-ends push TS over UDP or RTP with no handshake
//! and no stream id: the server is told where to listen and what to call the stream.
//!
//! - [`bind`]: every entry's socket, bound (and joined) on the main thread at start so
//!   that a port in use or a failed join stops the server with the entry's name.
//! - `input`: one entry's task on its worker (entries are spread over the workers):
//!   silent until a datagram comes, then publishing through the one admission
//!   (`Ctx::admit_publish`, as an operator-configured source: no credentials) until
//!   `idle_ms` of silence, a kick, or a refusal; then silent again, and the next
//!   datagram publishes again. A stream whose ingest went silent waits
//!   `limits.publish_grace_ms` for it, as for any publisher, then ends.
//! - `session`: one publishing spell: RTP reordering (`sluice_media::rtp::Mp2tReceiver`),
//!   the TS demuxer SRT uses (`sluice_media::ts::TsDemuxer`, the program chosen), and
//!   the counts the API and `/metrics` show (`ops::ingest`).
//!
//! # Invariants
//! - Nothing blocks a worker: sockets are non-blocking, read in bounded batches.
//! - Bad input (garbage, huge datagrams, another sender's packets) affects only its
//!   input: the demuxer skips and counts what is not TS, and memory is bounded by the
//!   demuxer's and the reorder buffer's limits.

mod input;
mod session;

use crate::config::IngestConfig;
use crate::ctx::Ctx;
use crate::io::ingest_socket::{self, IngestSocketError};
use crate::ops::ingest::IngestInfo;
use sluice_media::ts::{Carriage, UdpUrl, UdpUrlError};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Largest datagram read: the most UDP over IPv4 carries. Plain TS senders send seven
/// packets (1316 bytes); a larger one is still read whole and demuxed.
pub const MAX_DATAGRAM: usize = 65_536;

/// Why an `[[ingest]]` entry could not start.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("ingest of {stream}: {source}")]
    Url { stream: String, source: UdpUrlError },
    #[error("ingest of {stream}: {source}")]
    Socket {
        stream: String,
        source: IngestSocketError,
    },
}

/// One entry, its socket bound: what a worker's task runs.
#[derive(Debug)]
pub struct Bound {
    pub entry: Entry,
    pub socket: std::net::UdpSocket,
}

/// One entry, parsed.
#[derive(Debug)]
pub struct Entry {
    pub key: String,
    pub url: UdpUrl,
    pub program: Option<u16>,
    pub idle: Duration,
    pub info: Arc<IngestInfo>,
}

impl Entry {
    fn protocol(&self) -> &'static str {
        match self.url.carriage {
            Carriage::Plain => "udp",
            Carriage::Rtp => "rtp",
        }
    }
}

/// Binds every entry's socket; entry `i` goes to worker `i % workers`.
pub fn bind(entries: &[IngestConfig], workers: usize) -> Result<Vec<Bound>, IngestError> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| bind_one(e, i % workers.max(1)))
        .collect()
}

/// Binds one entry's socket, for `worker`.
pub fn bind_one(e: &IngestConfig, worker: usize) -> Result<Bound, IngestError> {
    let url = UdpUrl::parse(&e.url).map_err(|source| IngestError::Url {
        stream: e.stream.clone(),
        source,
    })?;
    let socket = ingest_socket::bind(&url).map_err(|source| IngestError::Socket {
        stream: e.stream.clone(),
        source,
    })?;
    let bound = socket.local_addr().unwrap_or(url.addr);
    let info = IngestInfo::new(&e.stream, &e.url, e.program, bound, worker);
    let entry = Entry {
        key: e.stream.clone(),
        url,
        program: e.program,
        idle: e.idle(),
        info: Arc::new(info),
    };
    Ok(Bound { entry, socket })
}

/// Runs `bound` on this worker until the worker stops or the API removes it (its
/// publisher then leaves, and its socket closes).
pub fn start(ctx: &Rc<Ctx>, bound: Bound) {
    let info = bound.entry.info.clone();
    ctx.ops().ingests.add(info.clone());
    let span = tracing::info_span!("ingest", stream = %bound.entry.key, url = %bound.entry.url);
    let run = input::run(ctx.clone(), bound);
    let task = async move {
        tokio::select! {
            () = run => {}
            () = info.stopped() => tracing::info!("ingest removed"),
        }
    };
    tokio::task::spawn_local(tracing::Instrument::instrument(task, span));
}
