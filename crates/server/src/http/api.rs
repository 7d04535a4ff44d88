//! The HTTP API (`/api/v1/...`, JSON) and `/metrics` (Prometheus text).
//!
//! Access: with `api.token` set (or `[[users]]` with `api`), a request must carry the
//! bearer token or credentials granted the `api` action, from any address; without
//! one there is no secret at all, and only loopback clients are answered. There is
//! never a default token.
//!
//! Per-connection figures come from each worker through its command channel
//! (`crate::ops`); per-stream figures from the hub's lock-free directory and the
//! streams' atomics. A request takes each stream's lock once, briefly, for its ring.

use super::reply::Reply;
use crate::auth::{Action, Credentials, Denial};
use crate::core::hub::Stream;
use crate::core::protocol::Protocol;
use crate::ctx::admit::Ask;
use crate::ctx::Ctx;
use crate::ops::{ClientInfo, Role};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use sluice_http::{Method, Request};
use sluice_media::{MediaKind, TrackConfig};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

/// What an API path names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ApiPath<'a> {
    Server,
    Streams,
    Stream(&'a str),
    Clients,
    Client(u64),
    Workers,
    Config,
    Reload,
    OpenApi,
    Metrics,
    /// Running pulls and pushes, and the rules the API added.
    Relays,
    /// The UDP ingests (`[[ingest]]`) and their counts; `POST` adds one.
    Ingests,
    /// `DELETE`: removes the ingest of a stream.
    Ingest(&'a str),
    /// The cluster's nodes, their load and streams, from the directory.
    Cluster,
    /// `POST`: drain, then stop.
    Drain,
    /// `/healthz`: the process serves (liveness), no credentials needed.
    Health,
    /// `/readyz`: it takes new sessions (readiness: 503 while draining), no credentials.
    Ready,
    RelayPulls,
    RelayPull(&'a str),
    RelayPushes,
    RelayPush(u64),
    /// Recorded streams and their spans (`super::recordings`).
    Recordings,
    Recording(&'a str),
    Unknown,
}

/// The API's OpenAPI document, served at `/api/v1/openapi.json`; tests hold it against
/// [`route`] and the live server.
pub(crate) const OPENAPI: &str = include_str!("openapi.json");

/// Whether `path` is the API's, and which resource.
pub(crate) fn route(path: &str) -> Option<ApiPath<'_>> {
    match path {
        "/metrics" => return Some(ApiPath::Metrics),
        "/healthz" => return Some(ApiPath::Health),
        "/readyz" => return Some(ApiPath::Ready),
        _ => {}
    }
    let rest = path
        .strip_prefix("/api/v1")
        .filter(|r| r.is_empty() || r.starts_with('/'))?;
    let rest = rest.trim_end_matches('/');
    Some(match rest {
        "/server" => ApiPath::Server,
        "/streams" => ApiPath::Streams,
        "/clients" => ApiPath::Clients,
        "/workers" => ApiPath::Workers,
        "/config" => ApiPath::Config,
        "/openapi.json" => ApiPath::OpenApi,
        "/reload" => ApiPath::Reload,
        "/relays" => ApiPath::Relays,
        "/ingests" => ApiPath::Ingests,
        "/cluster" => ApiPath::Cluster,
        "/drain" => ApiPath::Drain,
        "/relays/pulls" => ApiPath::RelayPulls,
        "/relays/pushes" => ApiPath::RelayPushes,
        "/recordings" => ApiPath::Recordings,
        _ => {
            if let Some(key) = rest.strip_prefix("/ingests/") {
                if super::router::stream_key(key).is_some() {
                    return Some(ApiPath::Ingest(key));
                }
            } else if let Some(key) = rest.strip_prefix("/relays/pulls/") {
                if super::router::stream_key(key).is_some() {
                    return Some(ApiPath::RelayPull(key));
                }
            } else if let Some(id) = rest.strip_prefix("/relays/pushes/") {
                if let Some(id) = id
                    .parse()
                    .ok()
                    .filter(|_| id.bytes().all(|b| b.is_ascii_digit()))
                {
                    return Some(ApiPath::RelayPush(id));
                }
            } else if let Some(key) = rest.strip_prefix("/streams/") {
                if super::router::stream_key(key).is_some() {
                    return Some(ApiPath::Stream(key));
                }
            } else if let Some(key) = rest.strip_prefix("/recordings/") {
                if super::router::stream_key(key).is_some() {
                    return Some(ApiPath::Recording(key));
                }
            } else if let Some(id) = rest.strip_prefix("/clients/") {
                if let Some(id) = id
                    .parse()
                    .ok()
                    .filter(|_| id.bytes().all(|b| b.is_ascii_digit()))
                {
                    return Some(ApiPath::Client(id));
                }
            }
            ApiPath::Unknown
        }
    })
}

/// Whether the request may use the API. Until it has a credential (`api.token`, or
/// `[[users]]` with `api`), loopback peers only; then, from anywhere, the bearer token,
/// or credentials the authorization grants the `api` action (a user with `api`, a JWT
/// permitting `api`, the auth hook).
async fn allowed(
    auth: &crate::auth::Auth,
    req: &Request,
    peer: SocketAddr,
) -> Result<(), (u16, &'static str)> {
    if !auth.api_secured() {
        return if peer.ip().is_loopback() {
            Ok(())
        } else {
            Err((
                403,
                "the API answers loopback clients only until api.token (or a user with api) is set",
            ))
        };
    }
    let creds = Credentials::from_http(req.header("authorization"), "");
    if creds.user.is_none() && creds.token.is_none() {
        return Err((
            401,
            "credentials are required (a bearer token, or HTTP Basic)",
        ));
    }
    // Judged quietly: a refused API request is logged by the caller.
    let ask = Ask::new("api", "api", 0, peer.ip()).credentials(creds);
    let Some(asked) = ask.request(Action::Api) else {
        return Err((403, "wrong credentials"));
    };
    match auth.authorize(&asked).await {
        Ok(_) => Ok(()),
        Err(Denial::NotPermitted | Denial::AddressNotAllowed) => Err((403, "not permitted")),
        Err(_) => Err((403, "wrong credentials")),
    }
}

fn json_reply(status: u16, value: &impl Serialize) -> Reply {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    Reply {
        status,
        headers: vec![
            ("Content-Type", "application/json".into()),
            ("Cache-Control", "no-store".into()),
        ],
        body: vec![Bytes::from(body)],
        file: None,
    }
}

fn error(status: u16, message: &str) -> Reply {
    let mut r = json_reply(status, &json!({ "error": message }));
    if status == 401 {
        r.headers
            .push(("WWW-Authenticate", "Bearer realm=\"sluice\"".into()));
    }
    r
}

/// Answers an API or metrics request.
pub(crate) async fn reply(
    ctx: &Rc<Ctx>,
    req: &Request,
    peer: SocketAddr,
    what: ApiPath<'_>,
) -> Reply {
    // Probes (a load balancer's, the kubelet's) come from anywhere without credentials,
    // and learn nothing but these two answers.
    match what {
        ApiPath::Health => return Reply::text(200, "ok\n"),
        ApiPath::Ready if ctx.hub().limits.draining() => return Reply::text(503, "draining\n"),
        ApiPath::Ready => return Reply::text(200, "ready\n"),
        _ => {}
    }
    if let Err((status, why)) = allowed(&ctx.auth().load(), req, peer).await {
        tracing::info!(%peer, path = %req.path, "API request denied: {why}");
        return error(status, why);
    }
    let get = matches!(req.method, Method::Get | Method::Head);
    match (what, get, req.method) {
        (ApiPath::Metrics, true, _) => {
            let workers = ctx.ops().snapshots().await;
            let text = super::metrics::render(
                ctx.hub(),
                ctx.ops(),
                &ctx.auth().load(),
                &workers,
                ctx.ops().started_at.elapsed().as_secs_f64(),
                ctx.config().api.metrics_per_connection,
                ctx.relays().map(|r| &**r),
            );
            Reply {
                status: 200,
                headers: vec![(
                    "Content-Type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8".into(),
                )],
                body: vec![Bytes::from(text)],
                file: None,
            }
        }
        (ApiPath::Server, true, _) => json_reply(200, &server(ctx)),
        (ApiPath::OpenApi, true, _) => Reply {
            status: 200,
            headers: vec![("Content-Type", "application/json".into())],
            body: vec![Bytes::from_static(OPENAPI.as_bytes())],
            file: None,
        },
        (ApiPath::Streams, true, _) => {
            let clients = clients(ctx).await;
            let list: Vec<Value> = ctx
                .hub()
                .streams()
                .iter()
                .map(|s| stream(s, &clients, &ctx.auth().load(), pull(ctx, &s.key)))
                .collect();
            json_reply(200, &json!({ "streams": list }))
        }
        (ApiPath::Stream(key), true, _) => match ctx.hub().find(key) {
            Some(s) => {
                let clients = clients(ctx).await;
                json_reply(
                    200,
                    &stream(&s, &clients, &ctx.auth().load(), pull(ctx, key)),
                )
            }
            None => error(404, "no such stream"),
        },
        (ApiPath::Stream(key), false, Method::Delete) => match ctx.hub().find(key) {
            Some(s) => {
                let publishers = ctx.ops().kick_publishers(key).await;
                let ended = ctx.hub().end(&s);
                tracing::info!(stream = %key, publishers, "stream closed by the API");
                json_reply(
                    200,
                    &json!({ "closed": ended, "publishers_kicked": publishers }),
                )
            }
            None => error(404, "no such stream"),
        },
        (ApiPath::Clients, true, _) => json_reply(200, &json!({ "clients": clients(ctx).await })),
        (ApiPath::Client(id), true, _) => {
            match clients(ctx).await.into_iter().find(|c| c.id == id) {
                Some(c) => json_reply(200, &c),
                None => error(404, "no such client"),
            }
        }
        (ApiPath::Client(id), false, Method::Delete) => {
            if ctx.ops().kick(id).await {
                tracing::info!(client = id, "client kicked by the API");
                json_reply(200, &json!({ "kicked": id }))
            } else {
                error(404, "no such client")
            }
        }
        (ApiPath::Workers, true, _) => {
            let workers: Vec<_> = ctx
                .ops()
                .snapshots()
                .await
                .into_iter()
                .map(|s| s.worker)
                .collect();
            json_reply(200, &json!({ "workers": workers }))
        }
        (ApiPath::Config, true, _) => {
            // Secrets are shown as set or not, never as they are.
            let mut config = ctx.config().as_ref().clone();
            for secret in [
                &mut config.api.token,
                &mut config.auth.signing_key,
                &mut config.auth.jwt_key,
            ] {
                if !secret.is_empty() {
                    *secret = "(set)".into();
                }
            }
            for user in &mut config.users {
                user.password = "(set)".into();
            }
            json_reply(200, &config)
        }
        (ApiPath::Reload, false, Method::Post) => match ctx.ops().reload(ctx.config()) {
            Ok(r) => json_reply(
                200,
                &json!({ "reloaded": r.done, "restart_needed": r.restart }),
            ),
            Err(e) => error(500, &format!("reload failed, nothing changed: {e}")),
        },
        (ApiPath::Relays, true, _) => json_reply(200, &relays(ctx)),
        (ApiPath::Ingests, true, _) => {
            let list: Vec<_> = ctx
                .ops()
                .ingests
                .all()
                .iter()
                .map(|i| i.snapshot())
                .collect();
            json_reply(200, &json!({ "ingests": list }))
        }
        (ApiPath::Ingests, false, Method::Post) => add_ingest(ctx, &req.body),
        (ApiPath::Ingest(key), false, Method::Delete) => {
            if ctx.ops().ingests.remove(key) {
                tracing::info!(stream = %key, "ingest removed by the API");
                json_reply(200, &json!({ "removed": key }))
            } else {
                error(404, "no such ingest")
            }
        }
        (ApiPath::Cluster, true, _) => cluster(ctx).await,
        (ApiPath::Drain, false, Method::Post) => {
            ctx.ops().request_drain();
            json_reply(
                202,
                &json!({
                    "draining": true,
                    "connections": ctx.hub().limits.connections(),
                    "udp_sessions": ctx.hub().limits.udp_sessions(),
                    "drain_ms": ctx.config().limits.drain_ms,
                }),
            )
        }
        (ApiPath::RelayPulls, false, Method::Post) => add_pull(ctx, &req.body),
        (ApiPath::RelayPull(key), false, Method::Delete) => {
            match ctx.relays().map(|r| r.remove_pull(key)) {
                Some(true) => json_reply(200, &json!({ "removed": key })),
                _ => error(404, "no such pull"),
            }
        }
        (ApiPath::RelayPushes, false, Method::Post) => add_push(ctx, &req.body),
        (ApiPath::RelayPush(id), false, Method::Delete) => {
            match ctx.relays().map(|r| r.remove_push(id)) {
                Some(true) => json_reply(200, &json!({ "removed": id })),
                _ => error(404, "no such push"),
            }
        }
        (ApiPath::Recordings, true, _) => {
            let (status, body) = super::recordings::list(ctx.hub());
            json_reply(status, &body)
        }
        (ApiPath::Recording(key), true, _) => {
            let (status, body) = super::recordings::stream(ctx.hub(), key, &req.query);
            json_reply(status, &body)
        }
        (ApiPath::Recording(key), false, Method::Delete) => {
            let (status, body) = super::recordings::delete(ctx.hub(), key, &req.query).await;
            if status == 200 {
                tracing::info!(stream = %key, query = %req.query, "recordings removed by the API");
            }
            json_reply(status, &body)
        }
        (ApiPath::Unknown, _, _) => error(404, "no such API route"),
        _ => error(405, "method not allowed"),
    }
}

/// `/api/v1/cluster`: this node's id and the directory's nodes with their load and
/// streams (none on a server that is not a node); 503 while the directory is away.
async fn cluster(ctx: &Ctx) -> Reply {
    let Some(cluster) = ctx.relays().and_then(|r| r.cluster()) else {
        return json_reply(
            200,
            &json!({ "node": null, "directory_up": false, "nodes": [] }),
        );
    };
    match cluster.nodes().await {
        Ok(nodes) => json_reply(
            200,
            &json!({
                "node": cluster.id(),
                "directory_up": cluster.counters.up.load(std::sync::atomic::Ordering::Relaxed),
                "nodes": nodes,
            }),
        ),
        Err(e) => error(503, &format!("{e}")),
    }
}

/// Running pulls and UDP pushes, and the pull and push rules the API added.
fn relays(ctx: &Ctx) -> Value {
    let Some(r) = ctx.relays() else {
        return json!({ "pulls": [], "pull_rules": [], "push_rules": [], "udp_pushes": [] });
    };
    let pulls: Vec<Value> = r
        .pulls()
        .iter()
        .map(|p| json!({ "stream": p.key, "pull": pull(ctx, &p.key) }))
        .collect();
    let pull_rules: Vec<Value> = r
        .pull_rules()
        .iter()
        .map(|p| json!({ "stream": p.key, "url": p.source.url_of(&p.key), "always": p.always }))
        .collect();
    let push_rules: Vec<Value> = r
        .push_rules()
        .iter()
        .map(|p| json!({ "id": p.id, "streams": p.streams, "url": p.target.display() }))
        .collect();
    let udp_pushes: Vec<Value> = r
        .udp_pushes()
        .iter()
        .map(|p| {
            let c = &p.counters;
            let n = |v: &std::sync::atomic::AtomicU64| v.load(std::sync::atomic::Ordering::Relaxed);
            json!({
                "stream": p.stream,
                "url": p.target,
                "datagrams": n(&c.datagrams),
                "bytes": n(&c.bytes),
                "null_packets": n(&c.null_packets),
                "overflow_packets": n(&c.overflow_packets),
                "send_errors": n(&c.send_errors),
                "reanchors": n(&c.reanchors),
                "discontinuities": n(&c.discontinuities),
                "skips": n(&c.skips),
            })
        })
        .collect();
    json!({
        "pulls": pulls,
        "pull_rules": pull_rules,
        "push_rules": push_rules,
        "udp_pushes": udp_pushes,
    })
}

/// `POST /api/v1/relays/pulls` `{"stream": "app/name", "url": "...", "always": false,
/// "transport": "tcp"}`.
fn add_pull(ctx: &Ctx, body: &[u8]) -> Reply {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Add {
        stream: String,
        url: String,
        #[serde(default)]
        always: bool,
        #[serde(default)]
        transport: Option<String>,
    }
    let add: Add = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => return error(400, &format!("bad pull: {e}")),
    };
    if super::router::stream_key(&add.stream).is_none() || !add.stream.contains('/') {
        return error(400, "stream is app/name");
    }
    let udp = match add.transport.as_deref() {
        None | Some("tcp") => false,
        Some("udp") => true,
        Some(_) => return error(400, "transport is tcp or udp"),
    };
    let Some(relays) = ctx.relays() else {
        return error(503, "relays are off");
    };
    match relays.add_pull(&add.stream, &add.url, add.always, udp) {
        Ok(()) => {
            tracing::info!(stream = %add.stream, always = add.always, "pull added by the API");
            json_reply(201, &json!({ "stream": add.stream }))
        }
        Err(e) => error(400, &e.to_string()),
    }
}

/// `POST /api/v1/ingests` `{"stream": "app/name", "url": "udp://...", "program": 1,
/// "idle_ms": 3000}`: bound now, run on this worker, until removed or the server stops
/// (it is not written to the configuration file).
fn add_ingest(ctx: &Rc<Ctx>, body: &[u8]) -> Reply {
    let entry: crate::config::IngestConfig = match serde_json::from_slice(body) {
        Ok(e) => e,
        Err(e) => return error(400, &format!("bad ingest: {e}")),
    };
    if let Err(e) = entry.check() {
        return error(400, &e.to_string());
    }
    if ctx.ops().ingests.has(&entry.stream) {
        return error(409, "the stream has an ingest");
    }
    match crate::udp_ingest::bind_one(&entry, ctx.worker()) {
        Ok(bound) => {
            let addr = bound.entry.info.bound;
            crate::udp_ingest::start(ctx, bound);
            tracing::info!(stream = %entry.stream, url = %entry.url, "ingest added by the API");
            json_reply(
                201,
                &json!({ "stream": entry.stream, "bound": addr.to_string() }),
            )
        }
        Err(e) => error(400, &e.to_string()),
    }
}

/// `POST /api/v1/relays/pushes` `{"streams": "live/*", "url": "rtmp://..."}`.
fn add_push(ctx: &Ctx, body: &[u8]) -> Reply {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Add {
        streams: String,
        url: String,
    }
    let add: Add = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => return error(400, &format!("bad push: {e}")),
    };
    let Some(relays) = ctx.relays() else {
        return error(503, "relays are off");
    };
    match relays.add_push(&add.streams, &add.url, &ctx.hub().streams()) {
        Ok(id) => {
            tracing::info!(streams = %add.streams, id, "push added by the API");
            json_reply(201, &json!({ "id": id }))
        }
        Err(e) => error(400, &e.to_string()),
    }
}

fn server(ctx: &Ctx) -> Value {
    json!({
        "name": "sluice",
        "version": env!("CARGO_PKG_VERSION"),
        "started_unix_ms": crate::ops::unix_ms(ctx.ops().started),
        "uptime_s": ctx.ops().started_at.elapsed().as_secs_f64(),
        "workers": ctx.ops().workers(),
        "streams": ctx.hub().streams().len(),
    })
}

/// Every worker's connections.
async fn clients(ctx: &Ctx) -> Vec<ClientInfo> {
    let mut all: Vec<ClientInfo> = ctx
        .ops()
        .snapshots()
        .await
        .into_iter()
        .flat_map(|s| s.clients)
        .collect();
    all.sort_by_key(|c| c.id);
    all
}

fn track(track: &TrackConfig) -> Value {
    match track {
        TrackConfig::H264(c) => json!({ "codec": "h264", "width": c.width, "height": c.height }),
        TrackConfig::H265(c) => json!({ "codec": "h265", "width": c.width, "height": c.height }),
        TrackConfig::Av1 { .. } => json!({ "codec": "av1" }),
        TrackConfig::Vp9 { .. } => json!({ "codec": "vp9" }),
        TrackConfig::Vp8 { .. } => json!({ "codec": "vp8" }),
        TrackConfig::Aac(c) => {
            json!({ "codec": "aac", "sample_rate": c.sample_rate, "channels": c.channels })
        }
        TrackConfig::Opus(c) => json!({ "codec": "opus", "channels": c.channels }),
        TrackConfig::Mp3 {
            sample_rate,
            channels,
        } => json!({ "codec": "mp3", "sample_rate": sample_rate, "channels": channels }),
        TrackConfig::Pcma { channels } => json!({ "codec": "pcma", "channels": channels }),
        TrackConfig::Pcmu { channels } => json!({ "codec": "pcmu", "channels": channels }),
    }
}

/// Where an edge pulls stream `key` from, as the API shows it (`null`: not pulled).
fn pull(ctx: &crate::ctx::Ctx, key: &str) -> Value {
    let Some(p) = ctx.relays().and_then(|r| r.pull_of(key)) else {
        return Value::Null;
    };
    let since = p
        .since
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({
        "origin": p.origin(),
        "since": since,
        "bytes": p.bytes.load(Ordering::Relaxed),
        "reconnects": p.reconnects.load(Ordering::Relaxed),
        "failovers": p.failovers.load(Ordering::Relaxed),
        "always": p.always,
    })
}

/// An SCTE-35 cue of a stream as the API shows it: where it splices on the stream's
/// timeline (ms, the clock of `ring`'s packets), when it came, and what it says.
fn cue(c: &crate::core::cue::StreamCue) -> Value {
    json!({
        "at_ms": c.at_ms(),
        "received_ms": c.received_ms,
        "command": c.command(),
        "direction": c.direction(),
        "event_id": c.event_id(),
        "duration_ms": c.info.duration().map(|d| d / 90),
    })
}

/// One stream as the API shows it; its publisher from `clients`, its pull from an
/// origin (on an edge) as [`pull`] gives it.
fn stream(s: &Stream, clients: &[ClientInfo], auth: &crate::auth::Auth, pull: Value) -> Value {
    let (tracks, ring_bytes, ring_frames, span_ms, live, cues) = {
        let state = s.lock();
        let cues: Vec<Value> = state.cues.iter().map(|c| cue(c)).collect();
        let ring = &state.ring;
        let first = ring.get(ring.first()).map(|p| p.ts_ms);
        let last = ring
            .next()
            .checked_sub(1)
            .and_then(|p| ring.get(p))
            .map(|p| p.ts_ms);
        let span = first.zip(last).map_or(0, |(a, b)| b - a);
        (
            state.tracks(),
            ring.bytes(),
            ring.len(),
            span,
            state.publisher.is_some(),
            cues,
        )
    };
    let mut video = Value::Null;
    let mut audio = Value::Null;
    for t in tracks.iter().flatten() {
        match t.kind() {
            MediaKind::Video => video = track(&t.config),
            MediaKind::Audio => audio = track(&t.config),
        }
    }
    let viewers: serde_json::Map<String, Value> = Protocol::ALL
        .iter()
        .map(|&p| (p.name().into(), s.viewers_of(p).into()))
        .collect();
    let (app, name) = s.key.rsplit_once('/').unwrap_or(("", &s.key));
    let publisher = clients
        .iter()
        .find(|c| c.role == Role::Publish && c.stream.as_deref() == Some(&s.key))
        .map(|c| json!({ "client": c.id, "protocol": c.protocol, "peer": c.peer }));
    let bitrate_in = if span_ms > 0 {
        ring_bytes as f64 * 8.0 / span_ms as f64
    } else {
        0.0
    };
    json!({
        "key": s.key,
        "app": app,
        "name": name,
        "live": live,
        "publisher": publisher,
        "pull": pull,
        "video": video,
        "audio": audio,
        "bitrate_in_kbps": (bitrate_in * 10.0).round() / 10.0,
        "bytes_in": s.bytes_in.load(Ordering::Relaxed),
        "frames_in": s.frames_in.load(Ordering::Relaxed),
        // Frames out of order: WebRTC players may stall (docs/webrtc.md).
        "b_frames": s.b_frames.load(Ordering::Relaxed),
        // AAC to Opus for WebRTC players, while they play.
        "transcoding": s.transcoding(),
        "bytes_out": s.bytes_out.load(Ordering::Relaxed),
        "viewers": viewers,
        "players": s.players.load(Ordering::Relaxed),
        "skips": s.skips.load(Ordering::Relaxed),
        "ring": { "bytes": ring_bytes, "frames": ring_frames, "span_ms": span_ms },
        "hls_bytes": s.tap::<crate::hls::HlsStream>().map_or(0, |h| h.memory()),
        "cues": cues,
        // What a player adds to its URL's query to play when reading needs
        // authorization (the console's players): a viewer token for this stream.
        "play_query": auth
            .required(Action::Read, &s.key)
            .then(|| format!("sluice_auth={}", auth.viewer_token(&s.key))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/metrics"), Some(ApiPath::Metrics));
        assert_eq!(route("/api/v1/server"), Some(ApiPath::Server));
        assert_eq!(route("/api/v1/streams/"), Some(ApiPath::Streams));
        assert_eq!(
            route("/api/v1/streams/live/cam"),
            Some(ApiPath::Stream("live/cam"))
        );
        assert_eq!(route("/api/v1/clients/42"), Some(ApiPath::Client(42)));
        assert_eq!(route("/api/v1/recordings"), Some(ApiPath::Recordings));
        assert_eq!(
            route("/api/v1/recordings/live/cam"),
            Some(ApiPath::Recording("live/cam"))
        );
        assert_eq!(route("/api/v1/recordings/cam"), Some(ApiPath::Unknown));
        assert_eq!(route("/api/v1/clients/+4"), Some(ApiPath::Unknown));
        assert_eq!(route("/api/v1/streams/../x"), Some(ApiPath::Unknown));
        assert_eq!(route("/api/v1/nope"), Some(ApiPath::Unknown));
        assert_eq!(route("/api/v10/server"), None);
        assert_eq!(route("/live/cam.flv"), None);
    }

    fn get(headers: &[(&str, &str)]) -> Request {
        Request {
            method: Method::Get,
            path: "/api/v1/server".into(),
            query: String::new(),
            http11: true,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            head_len: 0,
            body: Bytes::new(),
        }
    }

    fn auth(token: &str, api_user: bool) -> crate::auth::Auth {
        let mut c = crate::config::Config::default();
        c.api.token = token.into();
        c.users = vec![crate::config::UserConfig {
            name: "ops".into(),
            // sha256("pw")
            password: "sha256:30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"
                .into(),
            publish: vec![],
            read: vec!["*".into()],
            ips: vec![],
            api: api_user,
        }];
        crate::auth::Auth::new(&c.auth_config()).unwrap()
    }

    fn check(
        auth: &crate::auth::Auth,
        headers: &[(&str, &str)],
        peer: SocketAddr,
    ) -> Result<(), u16> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(allowed(auth, &get(headers), peer))
            .map_err(|e| e.0)
    }

    #[test]
    fn without_a_credential_only_loopback_is_answered() {
        let local: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let local6: SocketAddr = "[::1]:9".parse().unwrap();
        let remote: SocketAddr = "192.0.2.7:9".parse().unwrap();
        let open = auth("", false);
        assert!(check(&open, &[], local).is_ok());
        assert!(check(&open, &[], local6).is_ok());
        assert_eq!(check(&open, &[], remote), Err(403));
        // A token is required from everywhere once set, loopback included.
        let token = auth("t", false);
        assert_eq!(check(&token, &[], local), Err(401));
        assert_eq!(
            check(&token, &[("Authorization", "Bearer x")], remote),
            Err(403)
        );
        // ops:pw, a user without the api permission.
        assert_eq!(
            check(&token, &[("Authorization", "Basic b3BzOnB3")], remote),
            Err(403)
        );
        assert!(check(&token, &[("authorization", "Bearer t")], remote).is_ok());
    }

    #[test]
    fn users_with_the_api_permission_use_it() {
        let remote: SocketAddr = "192.0.2.7:9".parse().unwrap();
        let users = auth("", true);
        assert_eq!(check(&users, &[], "127.0.0.1:9".parse().unwrap()), Err(401));
        assert!(check(&users, &[("Authorization", "Basic b3BzOnB3")], remote).is_ok());
        // ops:px
        assert_eq!(
            check(&users, &[("Authorization", "Basic b3BzOnB4")], remote),
            Err(403)
        );
        assert_eq!(
            check(&users, &[("Authorization", "Bearer t")], remote),
            Err(403)
        );
    }

    /// Every path of the OpenAPI document is a route, with only the methods the API
    /// answers; every route is in the document.
    #[test]
    fn the_openapi_document_matches_the_routes() {
        let doc: Value = serde_json::from_str(OPENAPI).expect("OpenAPI JSON");
        let paths = doc["paths"].as_object().expect("paths");
        let mut seen = Vec::new();
        for (template, item) in paths {
            let path = template
                .replace("{app}", "live")
                .replace("{name}", "cam")
                .replace("{id}", "7");
            let what = route(&path).unwrap_or_else(|| panic!("{template}: not an API path"));
            assert_ne!(what, ApiPath::Unknown, "{template}");
            for method in item.as_object().unwrap().keys() {
                assert!(
                    matches!(method.as_str(), "get" | "delete" | "post" | "parameters"),
                    "{template}: {method}"
                );
            }
            seen.push(format!("{what:?}").split('(').next().unwrap().to_owned());
        }
        for what in [
            ApiPath::Server,
            ApiPath::Streams,
            ApiPath::Stream("a/b"),
            ApiPath::Clients,
            ApiPath::Client(1),
            ApiPath::Workers,
            ApiPath::Config,
            ApiPath::OpenApi,
            ApiPath::Reload,
            ApiPath::Metrics,
            ApiPath::Relays,
            ApiPath::Ingests,
            ApiPath::Ingest("a/b"),
            ApiPath::Cluster,
            ApiPath::Drain,
            ApiPath::Health,
            ApiPath::Ready,
            ApiPath::RelayPulls,
            ApiPath::RelayPull("a/b"),
            ApiPath::RelayPushes,
            ApiPath::RelayPush(1),
            ApiPath::Recordings,
            ApiPath::Recording("a/b"),
        ] {
            assert!(
                seen.contains(&format!("{what:?}").split('(').next().unwrap().to_owned()),
                "{what:?} is not in the OpenAPI document"
            );
        }
    }
}
