//! SRT: MPEG-TS in from publishers and out to players over one UDP port.
//!
//! Every worker has its own `SO_REUSEPORT` socket on the port; the kernel keeps a
//! caller's 4-tuple on one of them, so its handshake and its connection live on that
//! worker. A datagram for socket id 0 is a handshake, answered statelessly (SYN
//! cookies, `sluice_srt::accept`) until a conclusion echoes a valid cookie; then the
//! connection's task decides on the stream id (auth, publish or play) and accepts or
//! rejects. Other datagrams go to the connection their destination socket id names, in
//! the worker's map.
//!
//! Files: `socket` (the worker's demux on its `io::endpoint`: handshakes, the map,
//! sends), `conn` (a connection's task: publish through the TS demuxer, or play the
//! stream's TS form through the fan-out with `SrtOut`, the transport that cuts it
//! into datagrams), `payloads` (how a write is cut: full payloads across frames).

mod conn;
mod payloads;
mod socket;

pub use socket::{SrtDemux, MAX_DATAGRAM};

use sluice_srt::{Acceptor, ListenConfig};
use std::sync::Arc;
use std::time::Duration;

/// What every worker's SRT socket shares: the handshake settings and the cookie secret.
#[derive(Debug)]
pub struct Shared {
    pub acceptor: Acceptor,
    /// A peer silent for this long is disconnected.
    pub idle: Duration,
}

impl Shared {
    pub fn new(config: &crate::config::SrtSettings) -> Arc<Shared> {
        let passphrase =
            (!config.passphrase.is_empty()).then(|| config.passphrase.clone().into_bytes());
        let listen = ListenConfig {
            latency: Duration::from_millis(config.latency_ms),
            passphrase,
            key_len: config.pbkeylen,
            ..ListenConfig::default()
        };
        Arc::new(Shared {
            acceptor: Acceptor::new(rand::random(), listen),
            idle: Duration::from_millis(config.peer_idle_timeout_ms.max(1_000)),
        })
    }
}
