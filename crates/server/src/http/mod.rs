//! HTTP/1.1 connections: `sluice_http::ServerSession` run by the common driver, and
//! the routes: HTTP-FLV and WebSocket-FLV players, HLS, file downloads, the API and
//! the web console, CORS, and clear errors. HTTPS connections that negotiate `h2` go
//! to `h2` (hyper) instead.
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
mod viewers;
mod vod;

use crate::core::fanout::Player;
use crate::core::format::FormatId;
use crate::ctx::{Accept, Ctx};
use crate::driver::{self, Adapter, Conn, DriveError, Next};
use crate::io::sock::{write_all, IntoSock, Sock};
use crate::vod::VodPlay;
use bytes::Bytes;
use sluice_http::{Event, HttpEvent, Method, Request, ServerConfig, ServerEvent, ServerSession};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;
use viewers::Viewers;

type Error = DriveError<sluice_http::SessionError>;

impl From<sluice_http::SessionError> for Error {
    fn from(e: sluice_http::SessionError) -> Self {
        DriveError::Session(e)
    }
}

/// Longest stream key (`app/name`) accepted in a path.
const MAX_KEY_LEN: usize = 256;

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

/// One worker's HTTP and HTTPS: the worker's [`Ctx`] and its HLS viewer sessions (no
/// lock: only this thread touches them).
#[derive(Debug)]
pub struct Worker {
    ctx: Rc<Ctx>,
    viewers: RefCell<Viewers>,
    /// Files of `/vod/` HLS this worker knows.
    vod_files: crate::vod::WorkerFiles,
}

impl std::ops::Deref for Worker {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

/// Starts this worker's HTTP: what runs for each connection of the plain listener
/// and of the TLS one, and the task that publishes its HLS viewer counts.
pub fn start(
    ctx: &Rc<Ctx>,
    http: Option<StdListener>,
    https: Option<(StdListener, Arc<rustls::ServerConfig>)>,
    api: Option<StdListener>,
) -> Vec<(StdListener, Accept)> {
    let worker = Rc::new(Worker {
        ctx: ctx.clone(),
        viewers: RefCell::default(),
        vod_files: crate::vod::WorkerFiles::default(),
    });
    tokio::task::spawn_local({
        let worker = worker.clone();
        async move {
            let mut tick = tokio::time::interval(viewers::PUBLISH_EVERY);
            loop {
                tick.tick().await;
                let now = std::time::Instant::now();
                worker.viewers.borrow_mut().publish(now);
                worker.vod_files.sweep(now);
            }
        }
    });
    let mut accepts = Vec::new();
    for (l, api_only) in [(http, false), (api, true)] {
        let Some(l) = l else { continue };
        let worker = worker.clone();
        let accept: Accept = Rc::new(move |sock, peer, admission| {
            let served = serve(worker.clone(), sock, peer, api_only);
            tokio::task::spawn_local(async move {
                served.await;
                drop(admission);
            });
        });
        accepts.push((l, accept));
    }
    if let Some((l, tls)) = https {
        let acceptor = TlsAcceptor::from(tls);
        let accept: Accept = Rc::new(move |sock, peer, admission| {
            let served = serve_tls(worker.clone(), acceptor.clone(), sock, peer);
            tokio::task::spawn_local(async move {
                served.await;
                drop(admission);
            });
        });
        accepts.push((l, accept));
    }
    accepts
}

async fn serve(ctx: Rc<Worker>, sock: TcpStream, peer: SocketAddr, api_only: bool) {
    let id = ctx.hub.next_id();
    let protocol = if api_only { "api" } else { "http" };
    let span = tracing::info_span!("http", id, %peer);
    async move {
        match connection(&ctx, id, peer, protocol, sock.into_sock()).await {
            Ok(()) => tracing::debug!("closed"),
            Err(e) => tracing::info!("closed: {e}"),
        }
    }
    .instrument(span)
    .await
}

/// HTTPS: the TLS handshake (bounded in time), then the same routes as HTTP, or HTTP/2.
async fn serve_tls(ctx: Rc<Worker>, acceptor: TlsAcceptor, sock: TcpStream, peer: SocketAddr) {
    let id = ctx.hub.next_id();
    let span = tracing::info_span!("https", id, %peer);
    async move {
        let bound = ctx.config.limits.handshake_bound();
        let Some(tls) = crate::io::tls::accept(&acceptor, sock, bound).await else {
            return;
        };
        if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
            return match h2::serve(ctx, peer, tls).await {
                Ok(()) => tracing::debug!("closed"),
                Err(e) => tracing::info!("closed: {e}"),
            };
        }
        match connection(&ctx, id, peer, "https", tls.into_sock()).await {
            Ok(()) => tracing::debug!("closed"),
            Err(e) => tracing::info!("closed: {e}"),
        }
    }
    .instrument(span)
    .await
}

/// One HTTP/1.1 connection, plain or TLS, on the common driver.
async fn connection(
    ctx: &Rc<Worker>,
    id: u64,
    peer: SocketAddr,
    protocol: &'static str,
    sock: Sock,
) -> Result<(), Error> {
    let idle = Duration::from_millis(ctx.config.limits.idle_timeout_ms);
    let session = ServerSession::new(
        ServerConfig {
            head_timeout: idle,
            server: "sluice".into(),
            extra_headers: CORS.into(),
        },
        Instant::now(),
    );
    // The session times out slow heads and silent kept-alive connections itself.
    let client = ctx.clients.add(id, protocol, peer);
    let mut conn = Conn::new(ctx.ctx.clone(), client, Rc::new(sock), session)
        .without_idle_timeout()
        .without_start_deadline();
    let mut http = Http {
        worker: ctx.clone(),
        peer,
        idle,
        vod: None,
        api_only: protocol == "api",
    };
    driver::run(&mut conn, &mut http).await
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
            Event::Other(HttpEvent::Request(req)) => self.request(conn, req).await?,
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
    async fn request(&mut self, conn: &mut Conn<ServerSession>, req: Request) -> Result<(), Error> {
        let ctx = self.worker.clone();
        tracing::debug!(path = %req.path, method = ?req.method, "request");
        if let (Some(what), false) = (api::route(&req.path), req.method == Method::Options) {
            let reply = api::reply(&ctx, &req, self.peer, what).await;
            respond(conn, reply);
            return Ok(());
        }
        if let Some(asset) = console::route(&req.path) {
            let reply = console::reply(req.method, asset);
            if reply.status == 405 {
                // A body may follow an unknown method; it is not read.
                conn.session.close_after_answer();
            }
            respond(conn, reply);
            return Ok(());
        }
        if self.api_only {
            conn.session.respond(
                404,
                &[("Content-Type", "text/plain")],
                vec![Bytes::from_static(
                    b"the API's listener serves /api/v1, /metrics and /console only\n",
                )],
            );
            return Ok(());
        }
        let text =
            |status: u16, body: &'static str| (status, vec![Bytes::from_static(body.as_bytes())]);
        let route = route(&req.path);
        if let Some(reply) = access::route_denied(&ctx, &req, &route, self.peer.ip(), conn.id).await
        {
            respond(conn, reply);
            return Ok(());
        }
        let (status, body) = match (req.method, route) {
            (Method::Options, Route::Files(_)) => {
                // A WebDAV client's first question; also a CORS preflight.
                conn.session.respond(200, &files::DAV_HEADERS, Vec::new());
                return Ok(());
            }
            (Method::Propfind, Route::Files(rest)) => {
                let (status, content_type, body) = files::propfind(&ctx, &req, rest).await;
                let mut headers = vec![("Content-Type", content_type)];
                headers.extend(files::DAV_HEADERS);
                conn.session.respond(status, &headers, vec![body]);
                return Ok(());
            }
            (Method::Post, Route::Whep(key)) => {
                let reply = match &ctx.webrtc {
                    Some(registry) => {
                        crate::webrtc::whep::post(&ctx, registry, &req, key, self.peer).await
                    }
                    None => whep_off(),
                };
                respond(conn, reply);
                return Ok(());
            }
            (Method::Post, Route::Whip(key)) => {
                let reply = match &ctx.webrtc {
                    Some(registry) => {
                        crate::webrtc::whip::post(&ctx, registry, &req, key, self.peer).await
                    }
                    None => whep_off(),
                };
                respond(conn, reply);
                return Ok(());
            }
            (Method::Delete, Route::WhepSession(resource)) => {
                let reply = match &ctx.webrtc {
                    Some(registry) => crate::webrtc::whep::delete(&ctx, registry, resource).await,
                    None => whep_off(),
                };
                respond(conn, reply);
                return Ok(());
            }
            (Method::Options, Route::Whep(_) | Route::Whip(_) | Route::WhepSession(_)) => {
                conn.session.respond(204, &WHEP_OPTIONS, Vec::new());
                return Ok(());
            }
            (Method::Options, _) => (204, Vec::new()),
            (Method::Get | Method::Head, Route::Root) => {
                text(200, concat!("Sluice ", env!("CARGO_PKG_VERSION"), "\n"))
            }
            (Method::Head, Route::Flv(key)) => {
                if ctx.exists(key).await {
                    let headers = [
                        ("Content-Type", "video/x-flv"),
                        ("Cache-Control", "no-cache"),
                    ];
                    conn.session.respond_head(200, &headers, None);
                    conn.session.body_sent();
                    return Ok(());
                }
                (404, Vec::new())
            }
            (Method::Get, Route::Flv(key)) => return self.play(conn, &req, key).await,
            (Method::Get | Method::Head, Route::Hls(key, what)) => {
                return hls::serve(&ctx, conn, &req, key, what, self.peer.ip(), self.idle).await;
            }
            (Method::Get | Method::Head, Route::Files(rest)) => {
                return files::serve(&ctx, conn, &req, rest, self.idle).await;
            }
            (Method::Get | Method::Head, Route::NotFound) => text(404, "not found\n"),
            _ => {
                conn.session.close_after_answer();
                (405, Vec::new())
            }
        };
        let content_type: &[(&str, &str)] = if body.is_empty() {
            &[]
        } else {
            &[("Content-Type", "text/plain")]
        };
        conn.session.respond(status, content_type, body);
        Ok(())
    }

    /// Plays `key` (a live stream, or a file on demand under `vod/`) over HTTP-FLV, or
    /// WebSocket-FLV when the request upgrades.
    async fn play(
        &mut self,
        conn: &mut Conn<ServerSession>,
        req: &Request,
        key: &str,
    ) -> Result<(), Error> {
        let found = self
            .worker
            .stream_or_file(key, key.strip_prefix("vod/"), conn.id)
            .await;
        let Some((stream, vod)) = found else {
            let body = Bytes::from(format!("stream {key} is not live\n"));
            conn.session
                .respond(404, &[("Content-Type", "text/plain")], vec![body]);
            return Ok(());
        };
        let format = if req.is_websocket_upgrade() {
            conn.session.accept_websocket(req, &[]);
            if conn.session.is_closed() {
                // No Sec-WebSocket-Key: answered 400.
                return Ok(());
            }
            stream.format_for(FormatId::WS_FLV)
        } else {
            conn.session.stream(
                200,
                &[
                    ("Content-Type", "video/x-flv"),
                    ("Cache-Control", "no-cache, no-store"),
                    ("Pragma", "no-cache"),
                ],
            );
            stream.format_for(FormatId::FLV)
        };
        tracing::info!(stream = %stream.key, ?format, "play");
        let player = Player::new(conn.id, conn.sock.clone(), format);
        conn.play(&stream, player);
        self.vod = vod;
        Ok(())
    }
}

/// What WHEP's OPTIONS says (CORS preflights ask it too).
const WHEP_OPTIONS: [(&str, &str); 2] = [
    ("Accept-Post", "application/sdp"),
    ("Access-Control-Expose-Headers", "Location"),
];

/// 404 when WebRTC is off (`webrtc.udp = "off"`).
fn whep_off() -> hls::Reply {
    crate::webrtc::whep::text(404, "WebRTC is off on this server")
}

/// Answers with a complete [`hls::Reply`] (its body from memory).
fn respond(conn: &mut Conn<ServerSession>, reply: hls::Reply) {
    let headers = hls::header_refs(&reply.headers);
    conn.session.respond(reply.status, &headers, reply.body);
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

/// What a path names.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    /// `/app/stream.flv`: the live stream `app/stream`.
    Flv(&'a str),
    /// `/app/stream.m3u8`, `/app/stream/index.m3u8` and their segments.
    Hls(&'a str, hls::HlsPath<'a>),
    /// `/files/<path>`: a file of the media root (the path below `/files/`, encoded).
    Files(&'a str),
    /// `/app/stream/whep`: WebRTC players' offers (WHEP).
    Whep(&'a str),
    /// `/app/stream/whip`: WebRTC publishers' offers (WHIP).
    Whip(&'a str),
    /// `/app/stream/whep/<resource>` or `.../whip/<resource>`: one WebRTC session.
    WhepSession(&'a str),
    Root,
    NotFound,
}

/// A stream key (`app/name`) from a path: at least two segments, none empty, `.` or `..`.
fn stream_key(key: &str) -> Option<&str> {
    let valid = !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key.contains('/')
        && key
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    valid.then_some(key)
}

fn route(path: &str) -> Route<'_> {
    if path == "/" {
        return Route::Root;
    }
    if let Some(rest) = path.strip_prefix("/files/") {
        return Route::Files(rest);
    }
    if path == "/files" {
        return Route::Files("");
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Route::NotFound;
    };
    if let Some(key) = rest.strip_suffix(".flv").and_then(stream_key) {
        return Route::Flv(key);
    }
    if let Some(key) = rest.strip_suffix("/whep").and_then(stream_key) {
        return Route::Whep(key);
    }
    if let Some(key) = rest.strip_suffix("/whip").and_then(stream_key) {
        return Route::Whip(key);
    }
    for marker in ["/whep/", "/whip/"] {
        if let Some((key, resource)) = rest.rsplit_once(marker) {
            if stream_key(key).is_some() && !resource.is_empty() && !resource.contains('/') {
                return Route::WhepSession(resource);
            }
        }
    }
    if let Some(key) = rest.strip_suffix("/index.m3u8").and_then(stream_key) {
        return Route::Hls(key, hls::HlsPath::Fmp4Playlist);
    }
    if let Some(key) = rest.strip_suffix(".m3u8").and_then(stream_key) {
        return Route::Hls(key, hls::HlsPath::TsPlaylist);
    }
    if let Some((dir, file)) = rest.rsplit_once('/') {
        if let (Some(key), Some(file)) = (stream_key(dir), hls::HlsPath::file(file)) {
            return Route::Hls(key, file);
        }
    }
    Route::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        use hls::HlsPath;
        assert_eq!(route("/live/cam.flv"), Route::Flv("live/cam"));
        assert_eq!(
            route("/live/cam.m3u8"),
            Route::Hls("live/cam", HlsPath::TsPlaylist)
        );
        assert_eq!(
            route("/live/cam/index.m3u8"),
            Route::Hls("live/cam", HlsPath::Fmp4Playlist)
        );
        assert_eq!(
            route("/live/cam/ab-7.ts"),
            Route::Hls("live/cam", HlsPath::Ts("ab", 7))
        );
        assert_eq!(
            route("/live/cam/ab-init.mp4"),
            Route::Hls("live/cam", HlsPath::Init("ab", None))
        );
        assert_eq!(
            route("/live/cam/ab-init-f00d.mp4"),
            Route::Hls("live/cam", HlsPath::Init("ab", Some(0xf00d)))
        );
        assert_eq!(route("/live/cam/ab-init-.mp4"), Route::NotFound);
        assert_eq!(route("/live/cam/ab-init-xyz.mp4"), Route::NotFound);
        assert_eq!(
            route("/live/cam/ab-7.m4s"),
            Route::Hls("live/cam", HlsPath::Segment("ab", 7))
        );
        assert_eq!(
            route("/live/cam/ab-7.3.m4s"),
            Route::Hls("live/cam", HlsPath::Part("ab", 7, 3))
        );
        assert_eq!(route("/live/cam/ab-x.m4s"), Route::NotFound);
        assert_eq!(route("/live/../cam.m3u8"), Route::NotFound);
        assert_eq!(route("/a/b/c.flv"), Route::Flv("a/b/c"));
        assert_eq!(route("/"), Route::Root);
        assert_eq!(route("/files/a/b.flv"), Route::Files("a/b.flv"));
        assert_eq!(route("/files/live/x.m3u8"), Route::Files("live/x.m3u8"));
        assert_eq!(route("/files"), Route::Files(""));
        assert_eq!(route("/filesx/a.flv"), Route::Flv("filesx/a"));
        for bad in [
            "/cam.flv",
            "/../x.flv",
            "/live/../x.flv",
            "//x.flv",
            "/live/x",
            "/.flv",
        ] {
            assert_eq!(route(bad), Route::NotFound, "{bad}");
        }
    }
}
