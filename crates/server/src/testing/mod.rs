//! A harness for the server's own layers, after quinn's `Pair`: one worker's [`Ctx`]
//! (hub, fan-out, ops, clients, built as `server.rs` builds them) on a current-thread
//! runtime with a `LocalSet` and a paused clock, and connections over an in-memory
//! transport ([`wire`]) into a protocol's real accept path, driven from the test side
//! by the protocol crate's sans-IO client session ([`rtmp::RtmpClient`]) or raw
//! bytes ([`http::FlvPlayer`]).
//!
//! Why: the lifecycle of connections and streams (attach, skip, grace window, kick,
//! shutdown) is the driver's, the adapters' and the fan-out's, not the kernel's; in
//! process it is tested without ports or processes, and tokio's paused clock makes
//! every timeout happen at its exact virtual time, however loaded the machine is.
//!
//! # How to use it
//! [`run`] a test's body; make a [`Worker`] from a [`Config`]; connect clients with
//! [`Worker::rtmp`] or [`Worker::http`]. Bound every wait with `tokio::time::timeout`: on the paused clock
//! the runtime jumps to the next timer whenever every task waits, so a wait that would
//! hang fails at its virtual deadline instead, at once.

pub mod http;
pub mod rtmp;
pub mod rtsp;
pub mod wire;

mod lifecycle;
mod relay;
mod tasks;

use crate::config::Config;
use crate::core::fanout::Fanout;
use crate::core::hub::Hub;
use crate::core::limits::Limits;
use crate::ctx::{Ctx, Parts};
use crate::ops::{Clients, Ops};
use bytes::{Bytes, BytesMut};
use sluice_media::codec::AvcConfig;
use sluice_media::{flv, Track, TrackConfig};
use std::cell::Cell;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;

/// Runs `body` as a worker runs its connections: a current-thread runtime, a local
/// task set, and tokio's clock paused from the start.
pub fn run<F: Future<Output = ()>>(body: impl FnOnce() -> F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    tokio::task::LocalSet::new().block_on(&runtime, body());
}

/// One worker of a server, in process.
pub struct Worker {
    pub ctx: Rc<Ctx>,
    /// The worker's HTTP side (routes, files).
    http: Rc<crate::http::Worker>,
    /// The worker's RTSP side (RTP interleaved only: no UDP ports).
    rtsp: Rc<crate::rtsp::Worker>,
    /// The next peer's port (each connection comes from its own).
    port: Cell<u16>,
}

/// The address test connections come from.
pub const PEER_IP: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

impl Worker {
    /// A worker with `config`, answering the ops commands (snapshots, kicks) as a
    /// server's worker 0 does. Call it inside [`run`].
    pub fn new(config: Config) -> Worker {
        let config = Arc::new(config);
        let apps = Arc::new(config.apps());
        let limits = Limits::new(config.limit_settings());
        let hub = Hub::new(crate::server::hub_config(&config, &apps)).with_limits(limits.clone());
        // HLS as the server attaches it (it segments only once asked).
        let hls = crate::hls::HlsTaps {
            settings: apps.hls(),
        };
        let hub = Arc::new(hub.with_taps(vec![Arc::new(hls)]));
        let auth = crate::auth::Auth::new(&config.auth_config()).expect("the authorization");
        let (ops, mut commands) = Ops::new(1, None, auth, hub.clone());
        let fanout = Fanout::new(
            crate::server::player_policy(&config, hub.config.shape),
            ops.first_frame_of(0),
        );
        let clients = Rc::new(Clients::new(None));
        // The server's relays, as `server.rs` makes them (they pull nothing unless told).
        let relays = crate::relay::Relays::new(
            &config.relay_config(),
            hub.clone(),
            crate::ctx::admit::pulled,
            None,
        );
        tokio::task::spawn_local(crate::ops::serve_commands(
            commands.remove(0),
            0,
            clients.clone(),
            Rc::default(),
            Rc::default(),
            Some(relays.clone()),
        ));
        let ctx = Rc::new(Ctx::new(Parts {
            worker: 0,
            config,
            hub,
            fanout,
            files: Arc::default(),
            vods: Arc::default(),
            clients,
            ops,
            relays: Some(relays),
            read_buf: vec![0; crate::driver::READ_CHUNK].into_boxed_slice(),
        }));
        crate::driver::relay::install(&ctx);
        Worker {
            http: crate::http::Worker::new(&ctx, None),
            rtsp: crate::rtsp::Worker::tcp_only(&ctx),
            ctx,
            port: Cell::new(40_000),
        }
    }

    /// A new peer's address.
    fn peer(&self) -> SocketAddr {
        let port = self.port.get();
        self.port.set(port.wrapping_add(1));
        SocketAddr::new(PEER_IP, port)
    }

    /// An RTMP connection, through the limits as the listener admits it (`None`: a
    /// limit closed it at once). The server may write it `window` bytes it has not
    /// read (`usize::MAX`: a peer that reads everything at once).
    pub fn rtmp(&self, window: usize) -> Option<rtmp::RtmpClient> {
        let peer = self.peer();
        let admission = self.ctx.hub().limits.admit(peer.ip()).ok()?;
        let (sock, end) = wire::pair(window);
        let id = crate::rtmp::start(&self.ctx, sock, peer, admission);
        Some(rtmp::RtmpClient::new(id, end))
    }

    /// An RTSP connection to `rtsp://sluice/<key>` (see [`Worker::rtmp`]).
    pub fn rtsp(&self, key: &str, window: usize) -> Option<rtsp::RtspClient> {
        let peer = self.peer();
        let admission = self.ctx.hub().limits.admit(peer.ip()).ok()?;
        let (sock, end) = wire::pair(window);
        crate::rtsp::start(&self.rtsp, sock, peer, admission);
        Some(rtsp::RtspClient::new(end, key))
    }

    /// A plain HTTP/1.1 connection (see [`Worker::rtmp`]), its bytes raw.
    pub fn http(&self, window: usize) -> Option<wire::Peer> {
        let peer = self.peer();
        let admission = self.ctx.hub().limits.admit(peer.ip()).ok()?;
        let (sock, end) = wire::pair(window);
        crate::http::start_plain(&self.http, sock, peer, admission, false);
        Some(end)
    }

    /// The bytes of a connection's task (its future), by protocol: what every
    /// connection holds for its whole life, a player's included. The futures are made,
    /// measured and dropped, never run.
    pub fn task_sizes(&self) -> Vec<(&'static str, usize)> {
        let admit = || self.ctx.hub().limits.admit(PEER_IP).expect("admitted");
        let sock = || wire::pair(usize::MAX).0;
        let rtmp = crate::rtmp::task(&self.ctx, sock(), self.peer(), 0, admit());
        let rtsp = crate::rtsp::task(&self.rtsp, sock(), self.peer(), 0, admit());
        let http = crate::http::task(&self.http, sock(), self.peer(), 0, admit(), false);
        vec![
            ("rtmp", std::mem::size_of_val(&rtmp)),
            ("rtsp", std::mem::size_of_val(&rtsp)),
            ("http", std::mem::size_of_val(&http)),
        ]
    }

    /// Connections ended so far with `reason` (`/metrics`' disconnects).
    pub fn ended(&self, protocol: &str, reason: &str) -> u64 {
        let ended = self.ctx.clients().ended();
        let found = ended
            .iter()
            .find(|((p, r), _)| *p == protocol && *r == reason);
        found.map_or(0, |(_, n)| *n)
    }
}

/// An H.264 track (its configuration is all a test's frames need).
pub fn avc() -> Track {
    let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47]);
    let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
    let config = AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("an avcC");
    Track::new(TrackConfig::H264(config))
}

/// The FLV video tag body of [`avc`]'s sequence header.
pub fn avc_config() -> Bytes {
    let mut out = BytesMut::new();
    flv::write_video_config(&mut out, &avc()).expect("a sequence header");
    out.freeze()
}

/// The FLV video tag body of one frame of `len` payload bytes.
pub fn avc_frame(keyframe: bool, len: usize) -> Bytes {
    let mut out = BytesMut::new();
    flv::video_frame_header(&mut out, &avc(), keyframe, 0).expect("a frame header");
    let len = len.max(2);
    let nal = u32::try_from(len).expect("a small frame");
    out.extend_from_slice(&nal.to_be_bytes());
    out.extend_from_slice(&[if keyframe { 0x65 } else { 0x41 }, 0x88]);
    out.resize(out.len() + len - 2, 0);
    out.freeze()
}
