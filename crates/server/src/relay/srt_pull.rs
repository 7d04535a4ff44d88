//! Reading a stream from an SRT listener as a caller: `sluice_srt`'s handshake and
//! connection on a UDP socket of its own, and the MPEG-TS it delivers demuxed into
//! tracks and frames (`sluice_media::ts::TsDemuxer`), as an SRT publisher's are.

use super::client::Media;
use super::error::{Peer, RelayError};
use super::origin::Origin;
use sluice_media::ts::{Demuxed, TsDemuxer};
use sluice_srt::{CallConfig, CallSeed, Caller, Closed, Connection};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// A listener silent this long is gone (libsrt's default peer idle timeout).
const PEER_IDLE: Duration = Duration::from_secs(5);

pub struct SrtReader {
    sock: UdpSocket,
    conn: Connection,
    demux: TsDemuxer,
    queue: VecDeque<Media>,
    bytes: u64,
    buf: Box<[u8]>,
}

impl SrtReader {
    /// Calls the listener of `origin` and asks for `key` (the URL's stream id, or
    /// `#!::r=app/stream,m=request`).
    pub async fn open(origin: &Origin, key: &str) -> Result<SrtReader, RelayError> {
        let addr: SocketAddr = tokio::net::lookup_host((origin.host.as_str(), origin.port))
            .await
            .map_err(|source| RelayError::Resolve {
                host: origin.host.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| RelayError::NoAddress(origin.host.clone()))?;
        let bind: SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind).await?;
        sock.connect(addr).await?;
        let config = CallConfig {
            stream_id: Some(origin.srt_stream_id(key)),
            latency: Duration::from_millis(
                origin
                    .option("latency")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(120),
            ),
            passphrase: origin.option("passphrase").map(|p| p.as_bytes().to_vec()),
            key_len: origin
                .option("pbkeylen")
                .and_then(|n| n.parse().ok())
                .unwrap_or(16),
            ..CallConfig::default()
        };
        let seed = CallSeed {
            socket_id: rand::random::<u32>() & 0x3fff_ffff | 1,
            isn: rand::random::<u32>() & 0x7fff_ffff,
            salt: rand::random(),
            key: rand::random(),
        };
        let mut caller = Caller::new(config, seed, Instant::now().into_std())?;
        let mut buf = vec![0u8; 2048].into_boxed_slice();
        let conclusion = loop {
            if let Some(out) = caller.poll_transmit() {
                sock.send(&out).await.map_err(RelayError::Send)?;
            }
            if let Some(outcome) = caller.poll_outcome() {
                break outcome?;
            }
            let wake = caller
                .poll_timeout()
                .map_or_else(|| Instant::now() + PEER_IDLE, Instant::from_std);
            tokio::select! {
                r = sock.recv(&mut buf) => {
                    let n = r.map_err(RelayError::Receive)?;
                    caller.handle_datagram(Instant::now().into_std(), &buf[..n]);
                }
                () = tokio::time::sleep_until(wake) => caller.handle_timeout(Instant::now().into_std()),
            }
        };
        let conn = Connection::accepted(conclusion, PEER_IDLE, Instant::now().into_std());
        Ok(SrtReader {
            sock,
            conn,
            demux: TsDemuxer::new(),
            queue: VecDeque::new(),
            bytes: 0,
            buf,
        })
    }

    pub fn take_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }

    /// Sends what the connection has to send (acknowledgements, loss reports).
    fn flush(&mut self) {
        let (mut control, mut data) = (Vec::new(), Vec::new());
        self.conn.take_transmits(&mut control, &mut data);
        // A full socket buffer loses the datagram, as a lossy path would.
        for c in &control {
            let _ = self.sock.try_send(c);
        }
    }

    pub async fn next(&mut self, wait: Duration) -> Result<Option<Media>, RelayError> {
        let until = Instant::now() + wait;
        loop {
            if let Some(m) = self.queue.pop_front() {
                return Ok(Some(m));
            }
            self.flush();
            if let Some(closed) = self.conn.closed() {
                return Err(match closed {
                    Closed::Idle => RelayError::Silent {
                        peer: Peer::Listener,
                        after: PEER_IDLE,
                    },
                    c => RelayError::SrtClosed(c),
                });
            }
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            let wake = self
                .conn
                .poll_timeout(now.into_std())
                .map_or(until, |t| Instant::from_std(t).min(until));
            tokio::select! {
                r = self.sock.recv(&mut self.buf) => {
                    let n = r.map_err(RelayError::Receive)?;
                    self.bytes += n as u64;
                    self.conn
                        .handle_datagram(Instant::now().into_std(), &self.buf[..n])?;
                }
                () = tokio::time::sleep_until(wake) => {}
            }
            self.conn.handle_timeout(Instant::now().into_std());
            while let Some(payload) = self.conn.poll_data() {
                self.demux.push(&payload);
            }
            while let Some(out) = self.demux.poll() {
                self.queue.push_back(match out {
                    Demuxed::Track(at, track) => Media::Track(at, track),
                    Demuxed::Frame(frame) => Media::Frame(frame),
                    Demuxed::Cue(cue) => Media::Cue(cue),
                });
            }
        }
    }
}
