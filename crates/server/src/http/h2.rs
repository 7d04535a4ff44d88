//! HTTP/2 on HTTPS connections that negotiate `h2` (ALPN), which browsers do for
//! every request of an HTTPS origin: many parallel requests (blocking playlist reloads
//! beside part fetches) on one connection, as LL-HLS players expect. This is only the
//! serializer: a request's body is read (bounded as on HTTP/1.1) and the one route
//! table (`router`) decides; a file body is its shared mapping, sent in slices as h2's
//! flow control lets it go. WebSocket-FLV is HTTP/1.1's (no extended CONNECT here): an
//! upgrade asked over h2 plays HTTP-FLV.
//!
//! HTTP-FLV over h2 (browsers negotiate h2 for every request of an origin) is a
//! fan-out player whose "socket" is a bounded in-memory pipe to the response body:
//! one copy per player more than on HTTP/1.1, where the fan-out writes the socket
//! itself. Prefer HTTP/1.1 (or plain HTTP) for large FLV audiences.

use super::files;
use super::reply::Reply;
use super::router::{self, Action, Listener};
use super::Worker;
use super::CORS_HEADERS;
use crate::core::fanout::Player;
use crate::core::play::Playing;
use crate::ctx::Ctx;
use crate::io::sock::{Pipe, Sock};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use sluice_http::{Method, Request};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Runs h2 stream tasks on this worker's event loop (they hold `Rc`s).
#[derive(Clone, Copy)]
struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: Future + 'static,
{
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

/// A response body: shared buffers sent without copying, a file's mapped bytes
/// (handed out a slice at a time), or a live stream (HTTP-FLV, HTTP-TS).
enum H2Body {
    Parts(VecDeque<Bytes>),
    Mapped(Bytes),
    Live(LiveBody),
}

/// The reading end of a player's pipe; dropping it (a reset stream) ends the player.
struct LiveBody(Rc<Pipe>);

impl Drop for LiveBody {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            H2Body::Parts(parts) => Poll::Ready(parts.pop_front().map(|b| Ok(Frame::data(b)))),
            H2Body::Mapped(rest) if rest.is_empty() => Poll::Ready(None),
            H2Body::Mapped(rest) => {
                let n = rest.len().min(files::SLICE);
                Poll::Ready(Some(Ok(Frame::data(rest.split_to(n)))))
            }
            H2Body::Live(LiveBody(pipe)) => {
                pipe.poll_read(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            H2Body::Parts(parts) => parts.is_empty(),
            H2Body::Mapped(rest) => rest.is_empty(),
            H2Body::Live(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            H2Body::Parts(parts) => {
                SizeHint::with_exact(parts.iter().map(|b| b.len() as u64).sum())
            }
            H2Body::Mapped(rest) => SizeHint::with_exact(rest.len() as u64),
            H2Body::Live(_) => SizeHint::default(),
        }
    }
}

/// Serves one HTTP/2 connection until it closes.
pub(crate) async fn serve<IO>(
    ctx: Rc<Worker>,
    peer: std::net::SocketAddr,
    io: IO,
) -> Result<(), hyper::Error>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(handle(&ctx, peer, req).await) }
    });
    hyper::server::conn::http2::Builder::new(LocalExec)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await
}

/// Reads the request's body, at most `sluice_http::MAX_BODY` bytes (as on HTTP/1.1),
/// routes it, and serializes the action on this stream.
async fn handle(
    ctx: &Rc<Worker>,
    peer: std::net::SocketAddr,
    req: http::Request<Incoming>,
) -> http::Response<H2Body> {
    let (parts, body) = req.into_parts();
    let method = match parts.method {
        http::Method::GET => Method::Get,
        http::Method::HEAD => Method::Head,
        http::Method::OPTIONS => Method::Options,
        http::Method::DELETE => Method::Delete,
        http::Method::PATCH => Method::Patch,
        http::Method::POST => Method::Post,
        ref m if m.as_str() == "PROPFIND" => Method::Propfind,
        _ => Method::Other,
    };
    let body = match Limited::new(body, sluice_http::MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let status = if e.is::<LengthLimitError>() { 413 } else { 400 };
            tracing::debug!("request body refused: {e}");
            return reply(
                Reply::text(status, "bad or too large a request body\n"),
                method,
            );
        }
    };
    let request = Request {
        method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        http11: true,
        headers: parts
            .headers
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect(),
        head_len: 0,
        body,
    };
    tracing::debug!(path = %request.path, ?method, "request (h2)");
    match router::handle(ctx, &request, peer, 0, Listener::Media).await {
        Action::Reply(r) => reply(r, method),
        Action::Live(key, live) => play(&ctx.ctx, key, live, peer).await,
        Action::StreamHead(headers) => response(200, headers, H2Body::Parts(VecDeque::new())),
        Action::File(opened) => {
            let (status, headers, body) = files::h2_answer(&ctx.ctx, &request, opened);
            response(status, headers, H2Body::Mapped(body))
        }
    }
}

/// A complete answer on an h2 stream (no body for HEAD).
fn reply(reply: Reply, method: Method) -> http::Response<H2Body> {
    let body = if method == Method::Head {
        VecDeque::new()
    } else {
        VecDeque::from(reply.body)
    };
    response(reply.status, reply.headers, H2Body::Parts(body))
}

fn response(
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: H2Body,
) -> http::Response<H2Body> {
    let mut response = http::Response::builder()
        .status(status)
        .header("server", "sluice");
    for (name, value) in CORS_HEADERS
        .iter()
        .map(|(n, v)| (*n, v.to_string()))
        .chain(headers)
    {
        response = response.header(name, value);
    }
    response
        .body(body)
        .unwrap_or_else(|_| http::Response::new(H2Body::Parts(VecDeque::new())))
}

/// An HTTP-FLV or HTTP-TS player on an h2 stream.
async fn play(
    ctx: &Ctx,
    key: &str,
    live: router::Live,
    peer: std::net::SocketAddr,
) -> http::Response<H2Body> {
    let id = ctx.hub().next_id();
    // A file on demand plays as a private stream, kept alive by the player's task.
    let (stream, vod) = match router::flv_source(ctx, key, id, peer).await {
        Ok(found) => found,
        Err(reply) => {
            return response(
                reply.status,
                reply.headers,
                H2Body::Parts(reply.body.into_iter().collect()),
            )
        }
    };
    let pipe = Pipe::new(ctx.config().players.send_buffer);
    let (format, protocol) = live.output();
    let player = Player::new(
        id,
        Rc::new(Sock::new(pipe.clone())),
        stream.format_for(format),
    );
    let playing = Playing::start(ctx.fanout(), &stream, player, protocol);
    tracing::info!(stream = %stream.key, "play (h2)");
    tokio::task::spawn_local(async move {
        let _vod = vod;
        // The body's pipe has no input: the player lives until the fan-out ends it
        // (a reset stream closes the pipe, and the next write fails).
        let _ = playing.wait_end().await;
    });
    let headers = live
        .headers()
        .iter()
        .map(|(name, value)| (*name, value.to_string()))
        .collect();
    response(200, headers, H2Body::Live(LiveBody(pipe)))
}
