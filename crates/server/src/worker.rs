//! Worker threads (Envoy's model): each runs its own current-thread event loop and
//! accepts on its own `SO_REUSEPORT` sockets, so a connection never leaves the thread
//! that accepted it. Threads share only the hub and the streams' rings.

use crate::config::Config;
use crate::fanout::{Fanout, Policy};
use crate::hub::{Hub, HubConfig};
use crate::packet::Shape;
use crate::ring::RingLimits;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What a connection task can reach: shared settings and hub, and its worker's fan-out.
#[derive(Debug)]
pub struct Ctx {
    pub config: Arc<Config>,
    pub hub: Arc<Hub>,
    pub fanout: Rc<Fanout>,
    pub worker: usize,
    /// This worker's HLS viewer sessions (no lock: only this thread touches them).
    pub viewers: std::cell::RefCell<crate::viewers::Viewers>,
    /// Mappings of media-root files, shared by every worker.
    pub files: Arc<crate::filemap::FileMaps>,
    /// Files played on demand, shared by every worker.
    pub vods: Arc<crate::vod::Vods>,
    /// This worker's RTP/RTCP sockets for RTSP over UDP, when on.
    pub udp: Option<Rc<crate::udp::RtpUdp>>,
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    /// Where RTMP listens, if on.
    pub rtmp: Option<SocketAddr>,
    /// Where RTSP listens, if on.
    pub rtsp: Option<SocketAddr>,
    /// Where HTTP listens, if on.
    pub http: Option<SocketAddr>,
    /// Where HTTPS listens, if on (it needs a certificate).
    pub https: Option<SocketAddr>,
    pub hub: Arc<Hub>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    /// The recording thread, when a stream is to be recorded.
    recorder: Option<crate::record::Writer>,
}

#[derive(Clone)]
enum Proto {
    Rtmp,
    Rtsp,
    Http,
    Https(tokio_rustls::TlsAcceptor),
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
/// bind, so every worker shares the port the kernel chose.
fn listeners(value: &str, workers: usize) -> io::Result<(Option<SocketAddr>, Vec<StdListener>)> {
    let Some(addr) = Config::listener(value) else {
        return Ok((None, Vec::new()));
    };
    // SO_REUSEPORT would let us share a port with another server left running (of
    // the same user) and silently split the connections; a plain bind refuses.
    if addr.port() != 0 {
        drop(StdListener::bind(addr)?);
    }
    let first = listener(addr)?;
    let bound = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(listener(bound)?);
    }
    Ok((Some(bound), all))
}

/// One RTP/RTCP port pair per worker for RTSP over UDP, on the RTSP listener's
/// address; workers without one offer TCP only.
fn rtp_pairs(
    config: &Config,
    rtsp: Option<SocketAddr>,
    workers: usize,
) -> Vec<Option<(std::net::UdpSocket, std::net::UdpSocket)>> {
    let range = match (rtsp, config.rtp_port_range()) {
        (Some(addr), Ok(Some(range))) => Some((addr.ip(), range)),
        _ => None,
    };
    (0..workers)
        .map(|_| {
            let (ip, range) = range?;
            match crate::udp::bind_pair(ip, range) {
                Ok(pair) => Some(pair),
                Err(e) => {
                    tracing::warn!("RTP over UDP: {e}");
                    None
                }
            }
        })
        .collect()
}

impl Server {
    /// Binds every listener, then starts the workers.
    pub fn start(config: Config) -> io::Result<Server> {
        let workers = config.worker_count();
        let config = Arc::new(config);
        let recording = crate::record::RecordConfig::from_config(&config).map(crate::record::start);
        let (recorder, record_writer) = recording.transpose()?.unzip();
        let hub = Hub::new(HubConfig {
            ring: RingLimits {
                max_ms: i64::try_from(config.ring_ms).unwrap_or(i64::MAX),
                max_bytes: config.ring_bytes,
            },
            publish_grace: Duration::from_millis(config.publish_grace_ms),
            hls: config.hls_config(),
            rtp: Config::listener(&config.rtsp).is_some(),
        });
        let hub = Arc::new(hub.with_recorder(recorder));
        let (rtmp, mut rtmp_listeners) = listeners(&config.rtmp, workers)?;
        let (rtsp, mut rtsp_listeners) = listeners(&config.rtsp, workers)?;
        let (http, mut http_listeners) = listeners(&config.http, workers)?;
        let tls = crate::tls::server_config(&config).map_err(io::Error::other)?;
        let https_addr = if tls.is_some() {
            config.https.as_str()
        } else {
            "off"
        };
        let (https, mut https_listeners) = listeners(https_addr, workers)?;
        let mut udp_pairs = rtp_pairs(&config, rtsp, workers);
        let files = Arc::new(crate::filemap::FileMaps::default());
        let vods = Arc::new(crate::vod::Vods::default());
        let (shutdown, _) = watch::channel(false);
        let mut threads = Vec::with_capacity(workers);
        for worker in 0..workers {
            let mut mine = Vec::new();
            if !rtmp_listeners.is_empty() {
                mine.push((Proto::Rtmp, rtmp_listeners.remove(0)));
            }
            if !rtsp_listeners.is_empty() {
                mine.push((Proto::Rtsp, rtsp_listeners.remove(0)));
            }
            if !http_listeners.is_empty() {
                mine.push((Proto::Http, http_listeners.remove(0)));
            }
            if let (false, Some(tls)) = (https_listeners.is_empty(), &tls) {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
                mine.push((Proto::Https(acceptor), https_listeners.remove(0)));
            }
            let config = config.clone();
            let hub = hub.clone();
            let files = Files {
                maps: files.clone(),
                vods: vods.clone(),
            };
            let udp = udp_pairs.pop().flatten();
            let stop = shutdown.subscribe();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("sluice-w{worker}"))
                    .spawn(move || run_worker(worker, config, hub, files, udp, mine, stop))?,
            );
        }
        Ok(Server {
            rtmp,
            rtsp,
            http,
            https,
            hub,
            shutdown,
            threads,
            recorder: record_writer,
        })
    }

    /// Stops accepting, ends every connection, joins the workers, then completes
    /// every recording.
    pub fn stop(mut self) {
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

/// What every worker shares of the media root.
struct Files {
    maps: Arc<crate::filemap::FileMaps>,
    vods: Arc<crate::vod::Vods>,
}

fn run_worker(
    worker: usize,
    config: Arc<Config>,
    hub: Arc<Hub>,
    files: Files,
    udp: Option<(std::net::UdpSocket, std::net::UdpSocket)>,
    listeners: Vec<(Proto, StdListener)>,
    mut stop: watch::Receiver<bool>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker, "cannot start event loop: {e}");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let fanout = Fanout::new(Policy {
            merge: Duration::from_millis(config.merge_ms),
            max_lag_ms: i64::try_from(config.player_max_lag_ms).unwrap_or(i64::MAX),
            max_skips: config.player_max_skips,
            shape: Shape {
                rtmp_chunk_size: config.rtmp_chunk_size as usize,
            },
        });
        let ctx = Rc::new(Ctx {
            config,
            hub,
            fanout,
            worker,
            viewers: Default::default(),
            files: files.maps,
            vods: files.vods,
            udp: udp.and_then(|(rtp, rtcp)| match crate::udp::RtpUdp::new(rtp, rtcp) {
                Ok(u) => Some(u),
                Err(e) => {
                    tracing::warn!(worker, "RTP over UDP off: {e}");
                    None
                }
            }),
        });
        tokio::task::spawn_local({
            let ctx = ctx.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(5));
                loop {
                    tick.tick().await;
                    let now = std::time::Instant::now();
                    ctx.viewers.borrow_mut().publish(now);
                    if ctx.worker == 0 {
                        ctx.vods.sweep(now);
                    }
                }
            }
        });
        for (proto, std_listener) in listeners {
            match TcpListener::from_std(std_listener) {
                Ok(l) => {
                    tokio::task::spawn_local(accept_loop(ctx.clone(), proto.clone(), l));
                }
                Err(e) => tracing::error!(worker, "cannot register listener: {e}"),
            }
        }
        let _ = stop.wait_for(|s| *s).await;
    });
}

async fn accept_loop(ctx: Rc<Ctx>, proto: Proto, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((sock, peer)) => {
                let _ = sock.set_nodelay(true);
                spawn_session(ctx.clone(), &proto, sock, peer);
            }
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!(worker = ctx.worker, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn spawn_session(ctx: Rc<Ctx>, proto: &Proto, sock: TcpStream, peer: SocketAddr) {
    match proto {
        Proto::Rtmp => tokio::task::spawn_local(crate::rtmp::serve(ctx, sock, peer)),
        Proto::Rtsp => tokio::task::spawn_local(crate::rtsp::serve(ctx, sock, peer)),
        Proto::Http => tokio::task::spawn_local(crate::http::serve(ctx, sock, peer)),
        Proto::Https(acceptor) => {
            tokio::task::spawn_local(crate::http::serve_tls(ctx, acceptor.clone(), sock, peer))
        }
    };
}
