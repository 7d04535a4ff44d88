//! The server: binds every listener, then starts the worker threads (Envoy's model).
//! Each worker runs its own current-thread event loop and accepts on its own
//! `SO_REUSEPORT` sockets, so a connection never leaves the thread that accepted it.
//! Threads share only the hub and the streams' rings.
//!
//! A protocol joins by giving each worker an [`Accept`]: its per-worker state (if any)
//! and what to run for a new connection.

use crate::config::{Config, Listen, RtspSettings};
use crate::core::fanout::{Fanout, Policy};
use crate::core::hub::{Hub, HubConfig};
use crate::core::packet::Shape;
use crate::core::ring::RingLimits;
use crate::ctx::{Accept, Ctx};
use crate::io::endpoint::{Counters, Demux, Endpoint};
use crate::{srt, webrtc};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A running server.
#[derive(Debug)]
pub struct Server {
    ops: Arc<crate::ops::Ops>,
    config: Arc<Config>,
    /// Where RTMP listens, if on.
    pub rtmp: Option<SocketAddr>,
    /// The RTMPS listener's address (it needs a certificate).
    pub rtmps: Option<SocketAddr>,
    /// Where RTSP listens, if on.
    pub rtsp: Option<SocketAddr>,
    /// Where HTTP listens, if on.
    pub http: Option<SocketAddr>,
    /// Where HTTPS listens, if on (it needs a certificate).
    pub https: Option<SocketAddr>,
    /// Where the API's own listener is, if on.
    pub api: Option<SocketAddr>,
    /// WebRTC's UDP port, if on.
    pub webrtc: Option<SocketAddr>,
    /// The ICE-TCP listener's address.
    pub webrtc_tcp: Option<SocketAddr>,
    /// SRT's UDP port, if on.
    pub srt: Option<SocketAddr>,
    pub hub: Arc<Hub>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    /// The recording thread, when a stream is to be recorded.
    recorder: Option<crate::record::Writer>,
    /// This node's side of the cluster, when it is one.
    cluster: Option<crate::cluster::Cluster>,
}

/// One protocol's part of a worker: given the worker's [`Ctx`], it sets up the
/// protocol's per-worker state and says what to run for each connection its listeners
/// accept. Made on the main thread, run on the worker's.
type Start = Box<dyn FnOnce(&Rc<Ctx>) -> Vec<(StdListener, Accept)> + Send>;

/// A datagram protocol on a worker: a UDP endpoint on the worker's `sock`, running the
/// one receive loop, which hands each datagram to the demux `make` builds.
fn datagram<D: Demux + 'static>(
    sock: std::net::UdpSocket,
    max_datagram: usize,
    counters: Arc<Counters>,
    make: impl FnOnce(&Rc<Ctx>, &Rc<Endpoint>) -> D + Send + 'static,
) -> Start {
    Box::new(move |ctx| {
        match Endpoint::new(sock, max_datagram, counters) {
            Ok(endpoint) => {
                let demux = make(ctx, &endpoint);
                tokio::task::spawn_local(endpoint.serve(demux));
            }
            Err(e) => tracing::error!("cannot register a UDP socket: {e}"),
        }
        Vec::new()
    })
}

fn listener(addr: SocketAddr) -> io::Result<StdListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// Binds one listener per worker on the same address. Port 0 is resolved by the first
/// bind, so every worker shares the port the kernel chose. An error names the listener.
fn listeners(
    name: &str,
    listen: Listen,
    workers: usize,
) -> io::Result<(Option<SocketAddr>, Vec<StdListener>)> {
    let Some(addr) = listen.addr() else {
        return Ok((None, Vec::new()));
    };
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{name} listener on {addr}: {e}"));
    // SO_REUSEPORT would let us share a port with another server left running (of
    // the same user) and silently split the connections; a plain bind refuses.
    if addr.port() != 0 {
        drop(StdListener::bind(addr).map_err(named)?);
    }
    let first = listener(addr).map_err(named)?;
    let bound = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(listener(bound).map_err(named)?);
    }
    Ok((Some(bound), all))
}

/// One RTP/RTCP port pair per worker for RTSP over UDP, on the RTSP listener's
/// address; workers without one offer TCP only.
fn rtp_pairs(
    config: &RtspSettings,
    rtsp: Option<SocketAddr>,
    workers: usize,
) -> Vec<Option<(std::net::UdpSocket, std::net::UdpSocket)>> {
    let range = match (rtsp, config.rtp_ports.range()) {
        (Some(addr), Some(range)) => Some((addr.ip(), range)),
        _ => None,
    };
    (0..workers)
        .map(|_| {
            let (ip, range) = range?;
            match crate::io::udp_pair::bind_pair(ip, range) {
                Ok(pair) => Some(pair),
                Err(e) => {
                    tracing::warn!("RTP over UDP: {e}");
                    None
                }
            }
        })
        .collect()
}

/// The hub's settings from the configuration (also the harness's: `testing`).
pub fn hub_config(config: &Config, apps: &Arc<crate::config::Apps>) -> HubConfig {
    HubConfig {
        ring: RingLimits {
            max_ms: i64::try_from(config.limits.ring_ms).unwrap_or(i64::MAX),
            max_bytes: config.limits.ring_bytes,
        },
        publish_grace: Duration::from_millis(config.limits.publish_grace_ms),
        policy: apps.policies(),
        // RTSP and WebRTC players share the stream's RTP form.
        rtp: config.rtsp.listen.is_on() || config.webrtc.udp.is_on() || config.webrtc.tcp.is_on(),
        shape: Shape {
            rtmp_chunk_size: config.rtmp.chunk_size as usize,
        },
        derive: crate::transcode::AVAILABLE.then(|| {
            let transcoding = crate::transcode::Transcoding::new(config.webrtc.opus_frame_ms);
            Arc::new(transcoding) as Arc<dyn crate::core::derive::Derive>
        }),
    }
}

/// How a worker's fan-out treats its players, from the configuration.
pub fn player_policy(config: &Config, shape: Shape) -> Policy {
    Policy {
        max_lag_ms: i64::try_from(config.players.max_lag_ms).unwrap_or(i64::MAX),
        max_skips: config.players.max_skips,
        shape,
        send_buffer: config.players.send_buffer,
    }
}

impl Server {
    /// Binds every listener, then starts the workers.
    pub fn start(config: Config) -> io::Result<Server> {
        let workers = config.worker_count();
        descriptors(config.limits.max_connections);
        for place in config.keys_open_to_all() {
            tracing::warn!(
                "{place}: HLS is encrypted but reading needs no authorization, so its keys \
                 go to anyone who asks (set auth.read or the app's auth_read)"
            );
        }
        let config = Arc::new(config);
        let notifier = crate::hooks::Notifier::start(&config.hooks).map_err(io::Error::other)?;
        // Who reads which media-root file: recordings retention leaves those alone.
        let readers = Arc::new(crate::io::readers::Readers::default());
        let recording = config.record_config().map(|mut c| {
            c.notifier = notifier.clone();
            c.readers = readers.clone();
            crate::record::start(c)
        });
        let (recorder, record_writer) = recording.transpose()?.unzip();
        let (rtmp, mut rtmp_listeners) = listeners("RTMP", config.rtmp.listen, workers)?;
        let (rtsp, mut rtsp_listeners) = listeners("RTSP", config.rtsp.listen, workers)?;
        let (http, mut http_listeners) = listeners("HTTP", config.http.listen, workers)?;
        let tls =
            crate::io::tls::server_config(&config.http.cert_source()).map_err(io::Error::other)?;
        let (tls, certificate) = tls.unzip();
        let https_addr = if tls.is_some() {
            config.http.https
        } else {
            Listen::Off
        };
        let (https, mut https_listeners) = listeners("HTTPS", https_addr, workers)?;
        let rtmps_tls = tls.as_deref().map(crate::io::tls::rtmps_config);
        let rtmps_addr = if rtmps_tls.is_some() {
            config.rtmp.rtmps
        } else {
            if config.rtmp.rtmps.is_on() {
                tracing::warn!("RTMPS off: it needs a certificate (--tls-cert and --tls-key)");
            }
            Listen::Off
        };
        let (rtmps, mut rtmps_listeners) = listeners("RTMPS", rtmps_addr, workers)?;
        let (api, mut api_listeners) = listeners("API", config.api.listen, workers)?;
        let mut udp_pairs = rtp_pairs(&config.rtsp, rtsp, workers);
        let (webrtc, mut webrtc_sockets) = match config.webrtc.udp.addr() {
            Some(addr) => {
                let (bound, sockets) = crate::webrtc::bind_sockets(addr, workers)
                    .map_err(|e| io::Error::new(e.kind(), format!("WebRTC UDP on {addr}: {e}")))?;
                (Some(bound), sockets)
            }
            None => (None, Vec::new()),
        };
        let (webrtc_tcp, mut webrtc_tcp_listeners) =
            listeners("WebRTC TCP", config.webrtc.tcp, workers)?;
        let registry = (webrtc.is_some() || webrtc_tcp.is_some()).then(|| {
            // Discovered addresses first: they are the ones NAT lets browsers reach.
            let mut candidates = Vec::new();
            if let Some(bound) = webrtc {
                candidates = crate::webrtc::discover(&webrtc_sockets, &config.webrtc.stun_servers);
                for c in crate::webrtc::candidates(&config.webrtc.candidates, bound) {
                    if !candidates.contains(&c) {
                        candidates.push(c);
                    }
                }
            }
            let tcp_candidates = webrtc_tcp
                .map(|bound| crate::webrtc::candidates(&config.webrtc.candidates, bound))
                .unwrap_or_default();
            tracing::info!(udp = ?candidates, tcp = ?tcp_candidates, "webrtc: ICE candidates");
            Arc::new(crate::webrtc::Registry::new(
                candidates,
                tcp_candidates,
                config.webrtc.max_pending,
                config.limits.handshake_bound(),
            ))
        });
        let (srt, mut srt_sockets) = match config.srt.listen.addr() {
            Some(addr) => {
                let (bound, sockets) = crate::io::udp_send::bind_shared(addr, workers)
                    .map_err(|e| io::Error::new(e.kind(), format!("SRT on {addr}: {e}")))?;
                (Some(bound), sockets)
            }
            None => (None, Vec::new()),
        };
        let srt_shared = srt.map(|_| crate::srt::Shared::new(&config.srt));
        let mut ingests: Vec<Vec<crate::udp_ingest::Bound>> =
            (0..workers).map(|_| Vec::new()).collect();
        for bound in crate::udp_ingest::bind(&config.ingest, workers).map_err(io::Error::other)? {
            if let Some(mine) = ingests.get_mut(bound.entry.info.worker) {
                mine.push(bound);
            }
        }
        let apps = Arc::new(config.apps());
        let hub = Hub::new(hub_config(&config, &apps));
        let limits = crate::core::limits::Limits::new(config.limit_settings());
        let mut taps: Vec<Arc<dyn crate::core::tap::Attach>> =
            vec![Arc::new(crate::hls::HlsTaps {
                settings: apps.hls(),
            })];
        taps.extend(recorder.map(|r| Arc::new(r) as Arc<dyn crate::core::tap::Attach>));
        if config.snapshots.enabled {
            taps.push(Arc::new(crate::snapshot::SnapshotTaps {
                config: Arc::new(crate::snapshot::SnapshotConfig {
                    interval: std::time::Duration::from_secs(config.snapshots.interval_s.max(1)),
                    ffmpeg: config.snapshots.ffmpeg.clone(),
                    jobs: Arc::new(tokio::sync::Semaphore::new(
                        config.snapshots.max_jobs.max(1),
                    )),
                }),
            }));
        }
        // The cluster's tap needs the hub its thread samples: the hub is made whole
        // once the directory starts, which needs the listeners' ports.
        let hub_slot = Arc::new(std::sync::OnceLock::<Arc<Hub>>::new());
        let ops_slot = Arc::new(std::sync::OnceLock::<Arc<crate::ops::Ops>>::new());
        let cluster = if config.cluster.is_on() {
            let ports = [
                ("rtmp", rtmp),
                ("rtmps", rtmps),
                ("rtsp", rtsp),
                ("http", http),
                ("https", https),
                ("srt", srt),
                ("api", api),
            ];
            let ports: Vec<(&str, u16)> = ports
                .iter()
                .filter_map(|(scheme, addr)| Some((*scheme, addr.as_ref()?.port())))
                .collect();
            let host = match config.cluster.advertise.as_str() {
                "" => crate::cluster::node::hostname().unwrap_or_else(|| "localhost".into()),
                host => host.to_string(),
            };
            let urls = crate::cluster::node::urls(&host, &ports);
            let ops_slot = ops_slot.clone();
            // A stream another node took: its publisher here goes, its viewers here
            // follow it there.
            let lost = move |key: String| {
                if let Some(ops) = ops_slot.get().cloned() {
                    tokio::task::spawn_local(async move {
                        ops.kick_publishers(&key).await;
                        ops.follow(&key);
                    });
                }
            };
            let cluster =
                crate::cluster::Cluster::start(&config.cluster, urls, hub_slot.clone(), lost)
                    .map_err(io::Error::other)?;
            taps.push(Arc::new(cluster.clone()));
            Some(cluster)
        } else {
            None
        };
        let hub = Arc::new(hub.with_taps(taps).with_limits(limits.clone()));
        let _ = hub_slot.set(hub.clone());
        let relays = Some(crate::relay::Relays::new(
            &config.relay_config(),
            hub.clone(),
            crate::ctx::admit::pulled,
            cluster.clone(),
        ));
        let files = Arc::new(crate::io::filemap::FileMaps::new(readers));
        let vods = Arc::new(crate::vod::Vods::default());
        let (shutdown, _) = watch::channel(false);
        let auth = crate::auth::Auth::new(&config.auth_config()).map_err(io::Error::other)?;
        let (ops, mut commands) = crate::ops::Ops::new(workers, certificate, auth, hub.clone());
        let _ = ops_slot.set(ops.clone());
        let mut threads = Vec::with_capacity(workers);
        for worker in 0..workers {
            let mut starts: Vec<Start> = Vec::new();
            if let Some(l) = rtmp_listeners.pop() {
                starts.push(Box::new(move |ctx| vec![(l, crate::rtmp::accept(ctx))]));
            }
            if let (Some(l), Some(tls)) = (rtmps_listeners.pop(), rtmps_tls.clone()) {
                starts.push(Box::new(move |ctx| {
                    vec![(l, crate::rtmp::accept_tls(ctx, tls))]
                }));
            }
            if let Some(l) = rtsp_listeners.pop() {
                let udp = udp_pairs.pop().flatten();
                starts.push(Box::new(move |ctx| {
                    vec![(l, crate::rtsp::accept(ctx, udp))]
                }));
            }
            let http = http_listeners.pop();
            let https = https_listeners.pop().zip(tls.clone());
            let api = api_listeners.pop();
            if http.is_some() || https.is_some() || api.is_some() {
                let webrtc = registry.clone();
                starts.push(Box::new(move |ctx| {
                    crate::http::start(ctx, webrtc, http, https, api)
                }));
            }
            if let (Some(registry), Some(sock)) = (&registry, webrtc_sockets.pop()) {
                let registry = registry.clone();
                let counters = ops.udp.webrtc.clone();
                starts.push(datagram(sock, webrtc::MAX_DATAGRAM, counters, |ctx, e| {
                    webrtc::WebrtcDemux::new(ctx, registry, e)
                }));
            }
            if let (Some(registry), Some(l)) = (&registry, webrtc_tcp_listeners.pop()) {
                let registry = registry.clone();
                starts.push(Box::new(move |ctx| {
                    vec![(l, crate::webrtc::tcp::accept(ctx, registry))]
                }));
            }
            if let (Some(shared), Some(sock)) = (&srt_shared, srt_sockets.pop()) {
                let shared = shared.clone();
                let counters = ops.udp.srt.clone();
                starts.push(datagram(sock, srt::MAX_DATAGRAM, counters, |ctx, e| {
                    srt::SrtDemux::new(ctx, shared, e)
                }));
            }
            let mine = ingests
                .get_mut(worker)
                .map(std::mem::take)
                .unwrap_or_default();
            if !mine.is_empty() {
                starts.push(Box::new(move |ctx| {
                    for bound in mine {
                        crate::udp_ingest::start(ctx, bound);
                    }
                    Vec::new()
                }));
            }
            if let Some(registry) = registry.clone().filter(|_| worker == 0) {
                starts.push(Box::new(move |_| {
                    tokio::task::spawn_local(crate::webrtc::sweep(registry));
                    Vec::new()
                }));
            }
            let ctx = WorkerParts {
                worker,
                relays: relays.clone(),
                config: config.clone(),
                hub: hub.clone(),
                files: files.clone(),
                vods: vods.clone(),
                ops: ops.clone(),
                notifier: notifier.clone(),
                commands: commands.remove(0),
            };
            let stop = shutdown.subscribe();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("sluice-w{worker}"))
                    .spawn(move || run_worker(ctx, starts, stop))?,
            );
        }
        Ok(Server {
            ops,
            config,
            rtmp,
            rtmps,
            rtsp,
            http,
            https,
            api,
            webrtc,
            webrtc_tcp,
            srt,
            hub,
            shutdown,
            threads,
            recorder: record_writer,
            cluster,
        })
    }

    /// Where reloads read the configuration again (see [`crate::ops::Ops::reload`]).
    pub fn reload_from(&self, source: crate::ops::ConfigSource) {
        self.ops.set_source(source);
    }

    /// Reloads what can change while sessions go on (the HTTPS certificate, the
    /// authorization settings), as SIGHUP and the API's reload do.
    pub fn reload(&self) {
        match self.ops.reload(&self.config) {
            Ok(r) => tracing::info!(done = ?r.done, "reloaded"),
            Err(e) => tracing::warn!("reload failed, nothing changed: {e}"),
        }
    }

    /// The configuration it started with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Returns once a drain was asked for through the API.
    pub async fn drain_requested(&self) {
        self.ops.drain_requested().await;
    }

    /// Drains: no new publishers or players (refused, `/readyz` 503, the node marked
    /// draining in its cluster), then waits until the connections and UDP sessions
    /// ended or `limits.drain_ms` passed. `stop_early` ends the wait when it completes
    /// (a second signal). The caller stops the server then.
    pub async fn drain(&self, stop_early: impl std::future::Future<Output = ()>) {
        self.ops.request_drain();
        if let Some(cluster) = &self.cluster {
            cluster.drain();
        }
        let limits = &self.hub.limits;
        let started = std::time::Instant::now();
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.limits.drain_ms);
        let wait = async {
            while limits.connections() + limits.udp_sessions() > 0
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = stop_early => tracing::info!("draining cut short"),
        }
        tracing::info!(
            connections = limits.connections(),
            udp_sessions = limits.udp_sessions(),
            waited_ms = started.elapsed().as_millis() as u64,
            "drained"
        );
    }

    /// Stops accepting, ends every connection, joins the workers, then completes
    /// every recording.
    pub fn stop(mut self) {
        // Other nodes stop pulling from this one now, not at the entries' TTL.
        if let Some(cluster) = &self.cluster {
            cluster.leave_blocking();
        }
        let _ = self.shutdown.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(recorder) = self.recorder.take() {
            recorder.stop();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// What a worker's [`Ctx`] is made of, handed to its thread.
struct WorkerParts {
    worker: usize,
    relays: Option<Arc<crate::relay::Relays>>,
    config: Arc<Config>,
    hub: Arc<Hub>,
    files: Arc<crate::io::filemap::FileMaps>,
    vods: Arc<crate::vod::Vods>,
    ops: Arc<crate::ops::Ops>,
    notifier: Option<Arc<crate::hooks::Notifier>>,
    commands: tokio::sync::mpsc::UnboundedReceiver<crate::ops::Command>,
}

fn run_worker(parts: WorkerParts, starts: Vec<Start>, mut stop: watch::Receiver<bool>) {
    let worker = parts.worker;
    let hooks = crate::delay::Hooks::new();
    let mut builder = tokio::runtime::Builder::new_current_thread();
    hooks.install(&mut builder);
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker, "cannot start event loop: {e}");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let delay = crate::delay::DelayProbe::start(worker, hooks);

        let config = parts.config;
        let fanout = Fanout::new(
            player_policy(&config, parts.hub.config.shape),
            parts.ops.first_frame_of(worker),
        );
        let load = crate::ops::Load::start();
        let clients = Rc::new(crate::ops::Clients::new(parts.notifier));
        tokio::task::spawn_local(crate::ops::serve_commands(
            parts.commands,
            worker,
            clients.clone(),
            load,
            delay.clone(),
            parts.relays.clone(),
        ));
        let ctx = Rc::new(Ctx::new(crate::ctx::Parts {
            worker,
            config,
            hub: parts.hub,
            fanout,
            files: parts.files,
            vods: parts.vods,
            clients,
            ops: parts.ops,
            relays: parts.relays,
            read_buf: vec![0; crate::driver::READ_CHUNK].into_boxed_slice(),
        }));
        // Relays started on this worker run their connections in its driver.
        crate::driver::relay::install(&ctx);
        if worker == 0 {
            tokio::task::spawn_local(refresh_jwks(ctx.auth().clone()));
            if let Some(relays) = ctx.relays() {
                relays.start_always();
            }
            tokio::task::spawn_local({
                let vods = ctx.vods().clone();
                async move {
                    let mut tick = tokio::time::interval(Duration::from_secs(5));
                    loop {
                        tick.tick().await;
                        vods.sweep(std::time::Instant::now());
                    }
                }
            });
        }
        let mut accepting = Vec::new();
        for start in starts {
            for (std_listener, accept) in start(&ctx) {
                match TcpListener::from_std(std_listener) {
                    Ok(l) => {
                        let limits = ctx.hub().limits.clone();
                        let task = tokio::task::spawn_local(accept_loop(worker, accept, l, limits));
                        accepting.push(task);
                    }
                    Err(e) => tracing::error!(worker, "cannot register listener: {e}"),
                }
            }
        }
        let _ = stop.wait_for(|s| *s).await;
        for task in &accepting {
            task.abort();
        }
        wind_down(&ctx).await;
        delay.log_total(worker);
    });
}

/// Ends this worker's connections the way each protocol ends them, within
/// `limits.shutdown_grace_ms`: the streams end (players hear it: RTMP `onStatus`,
/// HTTP-FLV and RTSP the end of their media), then every connection is asked to close
/// and writes what it owes. What is still open at the deadline is dropped.
pub async fn wind_down(ctx: &Ctx) {
    let grace = Duration::from_millis(ctx.config().limits.shutdown_grace_ms);
    for stream in ctx.hub().streams() {
        ctx.hub().end(&stream);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while !ctx.fanout().ended_streams_told() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ctx.clients().kick_all();
    while ctx.clients().len() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = ctx.clients().len();
    if left > 0 {
        tracing::info!(
            worker = ctx.worker(),
            left,
            "shutdown: connections still open at the deadline are dropped"
        );
    }
}

/// Raises the descriptor limit to the hard one, and says when it is still below the
/// connections the server is told to take.
fn descriptors(max_connections: usize) {
    match crate::io::fd_limit::raise() {
        Ok((before, now)) => {
            if now.soft != before.soft {
                tracing::info!(from = before.soft, to = now.soft, "descriptor limit raised");
            }
            // Listeners, the UDP endpoint, memfds and log files need some beside.
            if max_connections > 0 && now.soft < max_connections as u64 + 256 {
                tracing::warn!(
                    limit = now.soft,
                    max_connections,
                    "the descriptor limit is below limits.max_connections: connections past \
                     it wait in the backlog until they time out (raise the hard limit: \
                     LimitNOFILE= in systemd, ulimit -Hn, --ulimit in docker)"
                );
            }
        }
        Err(e) => tracing::warn!("descriptor limit: {e}"),
    }
}

async fn accept_loop(
    worker: usize,
    accept: Accept,
    listener: TcpListener,
    limits: Arc<crate::core::limits::Limits>,
) {
    loop {
        match listener.accept().await {
            Ok((sock, peer)) => {
                // Past a limit the socket is closed at once: no task, no buffer.
                let Ok(admission) = limits.admit(peer.ip()) else {
                    continue;
                };
                let _ = sock.set_nodelay(true);
                accept(sock, peer, admission);
            }
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!(worker, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Fetches the JWKS of the authorization in force, at start and every few minutes
/// (sooner again after a failure); a reload's new settings are picked up on the next
/// round.
async fn refresh_jwks(auth: Arc<arc_swap::ArcSwap<crate::auth::Auth>>) {
    loop {
        let jwt = auth.load().jwt().filter(|j| j.jwks().is_some()).cloned();
        let wait = match jwt {
            None => crate::auth::jwt::JWKS_REFRESH,
            Some(jwt) => match jwt.refresh().await {
                Ok(n) => {
                    tracing::debug!(keys = n, "JWKS fetched");
                    crate::auth::jwt::JWKS_REFRESH
                }
                Err(e) => {
                    tracing::warn!(url = ?jwt.jwks().map(ToString::to_string), "JWKS: {e}");
                    Duration::from_secs(10)
                }
            },
        };
        tokio::time::sleep(wait).await;
    }
}
