//! HTTP: HTTP/1.1 connections (`sluice_http::ServerSession` run by the common driver)
//! and HTTP/2 ones (`h2`, hyper) share one route table (`router`): HTTP-FLV and
//! WebSocket-FLV players, HLS, file downloads and WebDAV, WHEP and WHIP, the API and
//! the web console, CORS, and clear errors. This file is HTTP/1.1's serializer.
//!
//! Streaming routes take the socket over: after the response head, the socket belongs
//! to the worker's fan-out like an RTMP player's. Keep-alive holds for the short
//! answers (HEAD, 404, OPTIONS), HLS and file downloads; a stream response ends the
//! connection when the stream does. Bodies the kernel can send from a file (a memfd
//! segment, a media-root file) go out with `sendfile` on plain HTTP.

pub(crate) mod access;
mod api;
mod console;
mod files;
mod h2;
pub(crate) mod hls;
mod metrics;
mod playback;
mod recordings;
pub(crate) mod reply;
mod router;
mod snapshot;
mod vod;
mod whep;
mod whip;

use crate::core::fanout::Player;
use crate::core::limits::Admission;
use crate::ctx::{Accept, Ctx};
use crate::driver::{self, Adapter, Conn, DriveError, Next};
use crate::io::sock::{write_all, IntoSock, Sock};
use crate::vod::VodPlay;
use bytes::Bytes;
use reply::Reply;
use router::{Action, Listener};
use sluice_http::{Event, HttpEvent, Method, Request, ServerConfig, ServerEvent, ServerSession};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

type Error = DriveError<sluice_http::SessionError>;

impl From<sluice_http::SessionError> for Error {
    fn from(e: sluice_http::SessionError) -> Self {
        DriveError::Session(e)
    }
}

/// The CORS headers of every response, for HTTP/2 (name, value).
pub(crate) const CORS_HEADERS: [(&str, &str); 3] = [
    ("access-control-allow-origin", "*"),
    (
        "access-control-allow-methods",
        "GET, HEAD, OPTIONS, POST, DELETE",
    ),
    ("access-control-allow-headers", "*"),
];

pub(crate) const CORS: &str = "Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: GET, HEAD, OPTIONS, POST, DELETE\r\nAccess-Control-Allow-Headers: *\r\n";

/// One worker's HTTP and HTTPS: the worker's [`Ctx`] and what only this thread touches.
#[derive(Debug)]
pub struct Worker {
    ctx: Rc<Ctx>,
    /// Files of `/vod/` HLS this worker knows.
    vod_files: crate::vod::WorkerFiles,
    /// WebRTC's sessions (WHEP and WHIP are HTTP routes), when WebRTC is on.
    webrtc: Option<Arc<crate::webrtc::Registry>>,
}

/// Starts this worker's HTTP: what runs for each connection of the plain listener
/// and of the TLS one, and the task that lets go of files of `/vod/` HLS unused.
pub fn start(
    ctx: &Rc<Ctx>,
    webrtc: Option<Arc<crate::webrtc::Registry>>,
    http: Option<StdListener>,
    https: Option<(StdListener, Arc<rustls::ServerConfig>)>,
    api: Option<StdListener>,
) -> Vec<(StdListener, Accept)> {
    let worker = Worker::new(ctx, webrtc);
    let mut accepts = Vec::new();
    for (l, api_only) in [(http, false), (api, true)] {
        let Some(l) = l else { continue };
        let worker = worker.clone();
        let accept: Accept = Rc::new(move |sock, peer, admission| {
            start_plain(&worker, sock.into_sock(), peer, admission, api_only);
        });
        accepts.push((l, accept));
    }
    if let Some((l, tls)) = https {
        let acceptor = TlsAcceptor::from(tls);
        let accept: Accept = Rc::new(move |sock, peer, admission| {
            let id = worker.ctx.hub().next_id();
            let span = tracing::info_span!("https", id, %peer);
            let served = serve_tls(worker.clone(), acceptor.clone(), sock, peer, id, admission);
            tokio::task::spawn_local(served.instrument(span));
        });
        accepts.push((l, accept));
    }
    accepts
}

impl Worker {
    /// This worker's HTTP state, and the task that lets go of files of `/vod/` HLS
    /// unused.
    pub fn new(ctx: &Rc<Ctx>, webrtc: Option<Arc<crate::webrtc::Registry>>) -> Rc<Worker> {
        let worker = Rc::new(Worker {
            ctx: ctx.clone(),
            vod_files: crate::vod::WorkerFiles::default(),
            webrtc,
        });
        tokio::task::spawn_local({
            let worker = worker.clone();
            async move {
                let mut tick = tokio::time::interval(crate::vod::SWEEP_EVERY);
                loop {
                    tick.tick().await;
                    worker.vod_files.sweep(std::time::Instant::now());
                }
            }
        });
        worker
    }
}

/// Runs one plain HTTP/1.1 connection over `sock` on this worker's event loop,
/// holding its place within the limits until it ends: what the listener does with
/// each connection, and the harness (`testing`) with an in-memory one.
pub fn start_plain(
    worker: &Rc<Worker>,
    sock: Sock,
    peer: SocketAddr,
    admission: Admission,
    api_only: bool,
) {
    let id = worker.ctx.hub().next_id();
    tokio::task::spawn_local(task(worker, sock, peer, id, admission, api_only));
}

/// Plain connection `id`'s task, in its span. Spawned as it is: awaited inside
/// another future, it would be held there twice (the captured future and the one
/// being polled), doubling the task.
pub(crate) fn task(
    worker: &Rc<Worker>,
    sock: Sock,
    peer: SocketAddr,
    id: u64,
    admission: Admission,
    api_only: bool,
) -> impl std::future::Future<Output = ()> {
    let protocol = if api_only { "api" } else { "http" };
    let span = tracing::info_span!("http", id, %peer);
    connection(worker, id, peer, protocol, sock, admission).instrument(span)
}

/// HTTPS: the TLS handshake (bounded in time), then the same routes as HTTP, or HTTP/2.
async fn serve_tls(
    worker: Rc<Worker>,
    acceptor: TlsAcceptor,
    sock: TcpStream,
    peer: SocketAddr,
    id: u64,
    admission: Admission,
) {
    let bound = worker.ctx.config().limits.handshake_bound();
    let Some(tls) = crate::io::tls::accept(&acceptor, sock, bound).await else {
        return;
    };
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        match h2::serve(worker, peer, tls).await {
            Ok(()) => tracing::debug!("closed"),
            Err(e) => tracing::info!("closed: {e}"),
        }
        drop(admission);
        return;
    }
    connection(&worker, id, peer, "https", tls.into_sock(), admission).await;
}

/// One HTTP/1.1 connection, plain or TLS, on the common driver, holding its place
/// within the limits (`admission`) until it ends. The connection and its adapter are
/// made before its future and moved in, so that the future holds them once: an `async
/// fn` would also keep the locals they were made from for the connection's whole life,
/// and a player's task is most of the memory it costs.
fn connection(
    worker: &Rc<Worker>,
    id: u64,
    peer: SocketAddr,
    protocol: &'static str,
    sock: Sock,
    admission: Admission,
) -> impl std::future::Future<Output = ()> {
    let ctx = &worker.ctx;
    let idle = Duration::from_millis(ctx.config().limits.idle_timeout_ms);
    let session = ServerSession::new(
        ServerConfig {
            head_timeout: idle,
            server: "sluice".into(),
            extra_headers: CORS.into(),
        },
        crate::driver::now(),
    );
    // The session times out slow heads and silent kept-alive connections itself.
    let client = ctx.clients().add(id, protocol, peer);
    let mut conn = Conn::new(ctx.clone(), client, Rc::new(sock), session)
        .without_idle_timeout()
        .without_start_deadline();
    let mut http = Http {
        worker: worker.clone(),
        peer,
        idle,
        vod: None,
        api_only: protocol == "api",
    };
    async move {
        match driver::run(&mut conn, &mut http).await {
            Ok(()) => tracing::debug!("closed"),
            Err(e) => tracing::info!("closed: {e}"),
        }
        drop(admission);
    }
}

/// The HTTP adapter: routes each request; keeps a played file going.
struct Http {
    worker: Rc<Worker>,
    peer: SocketAddr,
    /// How long a peer may take nothing of an answer.
    idle: Duration,
    /// Feeds the private stream of a file on demand while it is played.
    vod: Option<VodPlay>,
    /// The API's own listener: the API, `/metrics` and the console only.
    api_only: bool,
}

impl Adapter<ServerSession> for Http {
    type Wake = ();

    async fn on_event(
        &mut self,
        conn: &mut Conn<ServerSession>,
        event: ServerEvent,
    ) -> Result<Next, Error> {
        match event {
            // Boxed: routing awaits the largest futures of the server (the API, HLS,
            // files, WHEP), and unboxed they would size every connection's task, a
            // player's included, for its whole life.
            Event::Other(HttpEvent::Request(req)) => Box::pin(self.request(conn, req)).await?,
            Event::Other(HttpEvent::Message { opcode, .. }) => {
                tracing::debug!(?opcode, "websocket message ignored");
            }
            Event::Close => return Ok(Next::Close),
            Event::Publish(_) | Event::Play(_) | Event::Media(()) | Event::Stop => {}
        }
        Ok(Next::Continue)
    }
}

impl Http {
    /// Serializes what the router decides for `req` onto this HTTP/1.1 connection.
    async fn request(&mut self, conn: &mut Conn<ServerSession>, req: Request) -> Result<(), Error> {
        let worker = self.worker.clone();
        tracing::debug!(path = %req.path, method = ?req.method, "request");
        let listener = if self.api_only {
            Listener::ApiOnly
        } else {
            Listener::Media
        };
        match router::handle(&worker, &req, self.peer, conn.id, listener).await {
            Action::Reply(reply) => self.reply(conn, &req, reply).await,
            Action::Live(key, live) => self.play(conn, &req, key, live).await,
            Action::StreamHead(headers) => {
                conn.session
                    .respond_head(200, &reply::header_refs(&headers), None);
                conn.session.body_sent();
                Ok(())
            }
            Action::File(opened) => files::serve(&worker.ctx, conn, &req, opened, self.idle).await,
        }
    }

    /// Sends a complete answer; an in-memory file (an HLS segment, or a range of it)
    /// goes out with `sendfile` on plain HTTP.
    async fn reply(
        &mut self,
        conn: &mut Conn<ServerSession>,
        req: &Request,
        reply: Reply,
    ) -> Result<(), Error> {
        let headers = reply::header_refs(&reply.headers);
        let plain = conn.sock.plain_tcp().is_some();
        if let (Some((file, range)), true, Method::Get, 200 | 206) =
            (&reply.file, plain, req.method, reply.status)
        {
            conn.session
                .respond_head(reply.status, &headers, Some(range.end - range.start));
            files::send_file_body(
                conn,
                file.file(),
                range.start,
                range.end,
                self.idle,
                !req.keep_alive(),
            )
            .await?;
            conn.session.body_sent();
            return Ok(());
        }
        if reply.status == 405 {
            // A body may follow an unknown method; it is not read.
            conn.session.close_after_answer();
        }
        conn.session.respond(reply.status, &headers, reply.body);
        Ok(())
    }

    /// Plays `key` (a live stream, or a file on demand under `vod/`) as the byte
    /// stream `live` asks for; FLV and fMP4 over WebSocket when the request upgrades.
    async fn play(
        &mut self,
        conn: &mut Conn<ServerSession>,
        req: &Request,
        key: &str,
        live: router::Live,
    ) -> Result<(), Error> {
        let peer = conn.client.peer();
        let found = router::flv_source(&self.worker.ctx, key, conn.id, peer).await;
        let (stream, vod) = match found {
            Ok(found) => found,
            Err(reply) => {
                let headers: Vec<(&str, &str)> = reply
                    .headers
                    .iter()
                    .map(|(n, v)| (*n, v.as_str()))
                    .collect();
                conn.session.respond(reply.status, &headers, reply.body);
                return Ok(());
            }
        };
        let websocket = live.websocket().filter(|_| req.is_websocket_upgrade());
        let (format, protocol) = if let Some((id, protocol)) = websocket {
            conn.session.accept_websocket(req, &[]);
            if conn.session.is_closed() {
                // No Sec-WebSocket-Key: answered 400.
                return Ok(());
            }
            (stream.format_for(id), protocol)
        } else {
            conn.session.stream(200, live.headers());
            let (id, protocol) = live.output();
            (stream.format_for(id), protocol)
        };
        tracing::info!(stream = %stream.key, ?format, "play");
        let player = Player::new(conn.id, conn.sock.clone(), format);
        conn.play(&stream, player, protocol);
        self.vod = vod;
        Ok(())
    }
}

/// Writes `out` to `sock`, failing when the peer takes nothing of it for `idle`.
pub(crate) async fn write_bounded(
    sock: &Sock,
    out: &mut VecDeque<Bytes>,
    idle: Duration,
) -> Result<(), Error> {
    loop {
        let before: usize = out.iter().map(Bytes::len).sum();
        match tokio::time::timeout(idle, write_all(sock, out)).await {
            Ok(r) => return Ok(r?),
            Err(_) if out.iter().map(Bytes::len).sum::<usize>() == before => {
                return Err(DriveError::Stalled(idle));
            }
            Err(_) => {}
        }
    }
}
