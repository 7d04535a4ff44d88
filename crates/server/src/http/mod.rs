//! HTTP/1.1 connections: HTTP-FLV and WebSocket-FLV players, HLS, file downloads,
//! CORS, and clear errors.
//!
//! The request head is read here (bounded, with a timeout), and streaming routes take
//! the socket over: after the response head, the socket belongs to the worker's
//! fan-out like an RTMP player's. Keep-alive holds for the short answers (HEAD, 404,
//! OPTIONS), HLS and file downloads; a stream response ends the connection when the
//! stream does.

mod files;
mod h2;
mod hls;
mod viewers;
mod vod;

use crate::core::fanout::Player;
use crate::core::packet::Format;
use crate::core::play::{PlayEnd, Playing};
use crate::ctx::{Accept, Ctx};
use crate::io::sock::{IntoSock, SharedTcp};
use bytes::{BufMut, BytesMut};
use sluice_http::ws::{self, Opcode};
use sluice_http::{parse_request, HttpError, Method, Request};
use std::cell::RefCell;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;
use viewers::Viewers;

/// Ciphertext rustls may hold per TLS connection beyond what the socket took.
const TLS_BUFFER: usize = 16 << 10;

/// Longest stream key (`app/name`) accepted in a path.
const MAX_KEY_LEN: usize = 256;

/// The CORS headers of every response, for HTTP/2 (name, value).
pub(crate) const CORS_HEADERS: [(&str, &str); 3] = [
    ("access-control-allow-origin", "*"),
    ("access-control-allow-methods", "GET, HEAD, OPTIONS"),
    ("access-control-allow-headers", "*"),
];

pub(crate) const CORS: &str = "Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: GET, HEAD, OPTIONS\r\nAccess-Control-Allow-Headers: *\r\n";

/// One worker's HTTP and HTTPS: the worker's [`Ctx`] and its HLS viewer sessions (no
/// lock: only this thread touches them).
#[derive(Debug)]
pub struct Worker {
    ctx: Rc<Ctx>,
    viewers: RefCell<Viewers>,
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
) -> Vec<(StdListener, Accept)> {
    let worker = Rc::new(Worker {
        ctx: ctx.clone(),
        viewers: RefCell::default(),
    });
    tokio::task::spawn_local({
        let worker = worker.clone();
        async move {
            let mut tick = tokio::time::interval(viewers::PUBLISH_EVERY);
            loop {
                tick.tick().await;
                worker
                    .viewers
                    .borrow_mut()
                    .publish(std::time::Instant::now());
            }
        }
    });
    let mut accepts = Vec::new();
    if let Some(l) = http {
        let worker = worker.clone();
        let accept: Accept = Rc::new(move |sock, peer| {
            tokio::task::spawn_local(serve(worker.clone(), sock, peer));
        });
        accepts.push((l, accept));
    }
    if let Some((l, tls)) = https {
        let acceptor = TlsAcceptor::from(tls);
        let accept: Accept = Rc::new(move |sock, peer| {
            tokio::task::spawn_local(serve_tls(worker.clone(), acceptor.clone(), sock, peer));
        });
        accepts.push((l, accept));
    }
    accepts
}

async fn serve(ctx: Rc<Worker>, sock: TcpStream, peer: SocketAddr) {
    let id = ctx.hub.next_id();
    let span = tracing::info_span!("http", id, %peer);
    async move {
        match connection(&ctx, id, sock).await {
            Ok(()) => tracing::debug!("closed"),
            Err(e) => tracing::info!("closed: {e}"),
        }
    }
    .instrument(span)
    .await
}

/// HTTPS: the TLS handshake (bounded in time), then the same routes as HTTP.
async fn serve_tls(ctx: Rc<Worker>, acceptor: TlsAcceptor, sock: TcpStream, peer: SocketAddr) {
    let id = ctx.hub.next_id();
    let span = tracing::info_span!("https", id, %peer);
    async move {
        let idle = Duration::from_millis(ctx.config.limits.idle_timeout_ms);
        let tls = match tokio::time::timeout(idle, acceptor.accept(SharedTcp(Rc::new(sock)))).await
        {
            Ok(Ok(mut tls)) => {
                // rustls buffers up to this much ciphertext a socket has not taken yet;
                // its default (64 KiB) times thousands of players is most of their memory.
                tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER));
                tls
            }
            Ok(Err(e)) => return tracing::info!("TLS handshake failed: {e}"),
            Err(_) => return tracing::info!("TLS handshake timed out"),
        };
        if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
            return match h2::serve(ctx, tls).await {
                Ok(()) => tracing::debug!("closed"),
                Err(e) => tracing::info!("closed: {e}"),
            };
        }
        match connection(&ctx, id, tls).await {
            Ok(()) => tracing::debug!("closed"),
            Err(e) => tracing::info!("closed: {e}"),
        }
    }
    .instrument(span)
    .await
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error("bad request: {0}")]
    Request(#[from] HttpError),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("websocket: {0}")]
    Ws(#[from] ws::WsError),
    #[error("no complete request within {0:?}")]
    Timeout(Duration),
    #[error("peer took nothing of its response for {0:?}")]
    Stalled(Duration),
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

/// One HTTP/1.1 connection, plain or TLS.
async fn connection<S>(ctx: &Rc<Worker>, id: u64, sock: S) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + IntoSock + files::FileSink,
{
    let idle = Duration::from_millis(ctx.config.limits.idle_timeout_ms);
    let mut buf = BytesMut::new();
    let mut sock = sock;
    loop {
        let Some(req) = read_head(&mut sock, &mut buf, idle).await? else {
            return Ok(());
        };
        let _ = buf.split_to(req.head_len);
        tracing::debug!(path = %req.path, method = ?req.method, "request");
        match (req.method, route(&req.path)) {
            (Method::Options, _) => {
                respond(&mut sock, &req, "204 No Content", "", "").await?;
            }
            (Method::Get | Method::Head, Route::Root) => {
                let body = concat!("Sluice ", env!("CARGO_PKG_VERSION"), "\n");
                respond(&mut sock, &req, "200 OK", "text/plain", body).await?;
            }
            (Method::Head, Route::Flv(key)) => {
                if ctx.exists(key).await {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nServer: sluice\r\nContent-Type: video/x-flv\r\nCache-Control: no-cache\r\n{CORS}Connection: {}\r\n\r\n",
                        if req.keep_alive() { "keep-alive" } else { "close" }
                    );
                    sock.write_all(head.as_bytes()).await?;
                    sock.flush().await?;
                } else {
                    respond(&mut sock, &req, "404 Not Found", "text/plain", "").await?;
                }
            }
            (Method::Get, Route::Flv(key)) => {
                // A file on demand plays as a private stream, kept alive by `_vod`.
                let found = ctx.stream_or_file(key, key.strip_prefix("vod/"), id).await;
                let Some((stream, _vod)) = found else {
                    let body = format!("stream {key} is not live\n");
                    respond(&mut sock, &req, "404 Not Found", "text/plain", &body).await?;
                    if req.keep_alive() {
                        continue;
                    }
                    return Ok(());
                };
                let format = if req.is_websocket_upgrade() {
                    let Some(key) = req.header("sec-websocket-key") else {
                        respond(
                            &mut sock,
                            &req,
                            "400 Bad Request",
                            "text/plain",
                            "no Sec-WebSocket-Key\n",
                        )
                        .await?;
                        return Ok(());
                    };
                    let head = format!(
                        "HTTP/1.1 101 Switching Protocols\r\nServer: sluice\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{CORS}\r\n",
                        ws::accept_key(key)
                    );
                    sock.write_all(head.as_bytes()).await?;
                    Format::WsFlv
                } else {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nServer: sluice\r\nContent-Type: video/x-flv\r\nCache-Control: no-cache, no-store\r\nPragma: no-cache\r\n{CORS}Connection: close\r\n\r\n"
                    );
                    sock.write_all(head.as_bytes()).await?;
                    Format::Flv
                };
                tracing::info!(stream = %stream.key, ?format, "play");
                return play_flv(ctx, id, sock, stream, format, buf).await;
            }
            (Method::Get | Method::Head, Route::Hls(key, what)) => {
                hls::serve(ctx, &mut sock, &req, key, what).await?;
            }
            (Method::Get | Method::Head, Route::Files(rest)) => {
                files::serve(ctx, &mut sock, &req, rest).await?;
            }
            (Method::Get | Method::Head, Route::NotFound) => {
                respond(
                    &mut sock,
                    &req,
                    "404 Not Found",
                    "text/plain",
                    "not found\n",
                )
                .await?;
            }
            _ => {
                respond(&mut sock, &req, "405 Method Not Allowed", "text/plain", "").await?;
                return Ok(());
            }
        }
        if !req.keep_alive() {
            return Ok(());
        }
    }
}

/// Reads one request head into `buf`. `Ok(None)` is a clean close between requests.
async fn read_head<S: AsyncRead + Unpin>(
    sock: &mut S,
    buf: &mut BytesMut,
    idle: Duration,
) -> Result<Option<Request>, ConnError> {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + idle;
    loop {
        if !buf.is_empty() {
            if let Some(req) = parse_request(buf)? {
                return Ok(Some(req));
            }
        }
        buf.reserve(2048);
        let n = tokio::time::timeout_at(deadline, sock.read_buf(buf))
            .await
            .map_err(|_| ConnError::Timeout(idle))??;
        if n == 0 {
            return Ok(None);
        }
    }
}

pub(crate) async fn respond<S: AsyncWrite + Unpin>(
    sock: &mut S,
    req: &Request,
    status: &str,
    content_type: &str,
    body: &str,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nServer: sluice\r\n{CORS}Content-Length: {}\r\nConnection: {}\r\n",
        body.len(),
        if req.keep_alive() {
            "keep-alive"
        } else {
            "close"
        }
    );
    if !content_type.is_empty() {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    head.push_str("\r\n");
    if req.method != Method::Head {
        head.push_str(body);
    }
    sock.write_all(head.as_bytes()).await?;
    // TLS may still hold the last records: a kept-alive client would wait for them.
    sock.flush().await
}

async fn play_flv(
    ctx: &Rc<Worker>,
    id: u64,
    sock: impl IntoSock,
    stream: std::sync::Arc<crate::core::hub::Stream>,
    format: Format,
    mut input: BytesMut,
) -> Result<(), ConnError> {
    let player = Player::new(id, Rc::new(sock.into_sock()), format);
    let playing = Playing::start(&ctx.fanout, &stream, player.clone());
    let end = playing
        .run(|bytes| {
            if format != Format::WsFlv {
                // An HTTP-FLV player has nothing more to say; ignore what it sends.
                return Ok(true);
            }
            input.extend_from_slice(bytes);
            while let Some(frame) = ws::read_client_frame(&mut input)? {
                match frame.opcode {
                    Opcode::Close => {
                        let mut out = BytesMut::with_capacity(4);
                        ws::write_frame_header(&mut out, Opcode::Close, 0);
                        player.queue(out.freeze());
                        return Ok(false);
                    }
                    Opcode::Ping => {
                        let mut out = BytesMut::with_capacity(frame.payload.len() + 2);
                        ws::write_frame_header(&mut out, Opcode::Pong, frame.payload.len());
                        out.put_slice(&frame.payload);
                        player.queue(out.freeze());
                    }
                    _ => {}
                }
            }
            Ok::<bool, ConnError>(true)
        })
        .await;
    if matches!(end, Ok(PlayEnd::Stopped) | Ok(PlayEnd::Closed(_))) {
        playing.drain().await;
    }
    end.map(|_| ())
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
            Route::Hls("live/cam", HlsPath::Init("ab"))
        );
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
