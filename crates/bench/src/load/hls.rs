//! HLS players: `hls` polls a media playlist (TS or fMP4) every half target duration
//! and fetches each new segment once, in order, from the live edge (the third-last
//! segment, as players do); `ll-hls` follows a Low-Latency HLS playlist part by part,
//! fetching the preload hint while a blocking reload (`_HLS_msn`/`_HLS_part`) for the
//! same part runs on a second connection, as hls.js does in low-latency mode.
//!
//! Each connection is one HTTP/1.1 keep-alive connection (reopened only if the server
//! closes it), over TLS for `https://` URLs. Bodies are counted, not kept, except playlists (one reused buffer per
//! player). Figures: connect = first playlist's response head; first keyframe = first
//! segment or part received in full; media time = sum of the EXTINF or part durations
//! received, against the wall clock (lag, stalls). Segment and part bodies are
//! scanned for the bench publisher's stamps (`crate::stamp_scan`): publish-to-play
//! delay is a stamp's arrival time, the read that brought its bytes.

use super::{Conn, Ctx, Failure};
use crate::figures::{ms, ErrorKind, Live, PlayerRow, MAX_LATENCY_SAMPLES};
use crate::hls::{push_target, Playlist, Pos, Response};
use crate::stamp_scan::SegmentStamps;
use crate::target::Target;
use crate::tls::TlsClient;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::{sleep_until, Instant};

/// Largest playlist accepted.
const MAX_PLAYLIST: usize = 1 << 20;
/// How often a player asks again for a playlist that is not there yet (404).
const RETRY: Duration = Duration::from_millis(500);

/// One finished response.
#[derive(Debug, Clone, Copy)]
struct Got {
    status: u16,
    /// When its head came.
    head_at: Instant,
    /// When its last byte came.
    done_at: Instant,
}

/// One HTTP/1.1 keep-alive connection of a player.
struct Http<'a> {
    addr: SocketAddr,
    host: &'a str,
    slow: Option<f64>,
    end: Instant,
    live: &'a Live,
    tls: Option<&'a TlsClient>,
    conn: Option<Conn>,
    /// Whether `conn` already carried a response (a close then is not an error).
    reused: bool,
    resp: Response,
    req: String,
    /// Cookies the server set, sent with every later request.
    cookies: Vec<(String, String)>,
    /// Bytes read on this connection (all of them, heads included).
    bytes: u64,
    /// Stamps in the media bodies, as they arrive.
    stamps: SegmentStamps,
    /// Stamps found and when (Unix µs), until the player takes them.
    stamped: Vec<(u64, u64)>,
}

fn malformed(what: &'static str) -> Failure {
    (ErrorKind::Protocol, what.to_string())
}

impl<'a> Http<'a> {
    fn new(ctx: &'a Ctx, addr: SocketAddr, host: &'a str, slow: bool) -> Self {
        Http {
            addr,
            host,
            slow: slow.then_some(ctx.slow_rate),
            end: ctx.end,
            live: &ctx.live,
            tls: ctx.tls.as_ref(),
            conn: None,
            reused: false,
            resp: Response::new(),
            req: String::with_capacity(256),
            cookies: Vec::new(),
            bytes: 0,
            stamps: SegmentStamps::default(),
            stamped: Vec::new(),
        }
    }

    /// Moves the latency samples into `row`.
    fn store(&mut self, row: &mut PlayerRow) {
        for (t, at) in self.stamped.drain(..) {
            row.on_stamp(t, at);
        }
    }

    /// GETs the target `target` writes; the body goes to `body` (cleared first) or is
    /// only counted and scanned for stamps. `media_ms` paces a slow player. `None` when the run ended.
    async fn get(
        &mut self,
        target: impl Fn(&mut String),
        mut body: Option<&mut Vec<u8>>,
        media_ms: u64,
    ) -> Result<Option<Got>, Failure> {
        let mut retried = false;
        loop {
            if self.conn.is_none() {
                match Conn::open(self.addr, self.slow, self.end, self.tls).await? {
                    None => return Ok(None),
                    Some(c) => {
                        self.conn = Some(c);
                        self.reused = false;
                    }
                }
            }
            self.req.clear();
            self.req.push_str("GET ");
            target(&mut self.req);
            let _ = write!(
                self.req,
                " HTTP/1.1\r\nHost: {}\r\nUser-Agent: sluice-bench\r\nAccept: */*\r\n",
                self.host
            );
            for (i, (name, value)) in self.cookies.iter().enumerate() {
                let sep = if i == 0 { "Cookie: " } else { "; " };
                let _ = write!(self.req, "{sep}{name}={value}");
            }
            if !self.cookies.is_empty() {
                self.req.push_str("\r\n");
            }
            self.req.push_str("\r\n");
            if let Some(b) = body.as_deref_mut() {
                b.clear();
            }
            self.resp.reset();
            self.stamps.start();
            match self.exchange(body.as_deref_mut(), media_ms).await {
                // A keep-alive connection the server closed while idle: reconnect once.
                Err((ErrorKind::Closed | ErrorKind::Io, _))
                    if self.reused && !retried && !self.resp.has_head() =>
                {
                    self.conn = None;
                    retried = true;
                }
                other => {
                    // Cookies come back with later requests, as a browser's do (the
                    // server's HLS viewer token, say).
                    for (name, value) in self.resp.set_cookies.drain(..) {
                        match self.cookies.iter_mut().find(|(n, _)| *n == name) {
                            Some(c) => c.1 = value,
                            None => self.cookies.push((name, value)),
                        }
                    }
                    if !matches!(other, Ok(Some(_))) || !self.resp.keep_alive {
                        self.conn = None;
                    } else {
                        self.reused = true;
                    }
                    return other;
                }
            }
        }
    }

    async fn exchange(
        &mut self,
        mut body: Option<&mut Vec<u8>>,
        media_ms: u64,
    ) -> Result<Option<Got>, Failure> {
        let conn = self.conn.as_mut().expect("opened by get");
        if !conn.write(self.req.as_bytes()).await? {
            return Ok(None);
        }
        let mut head_at = None;
        loop {
            let resp = &mut self.resp;
            let body = &mut body;
            let stamps = &mut self.stamps;
            let step = conn
                .read(
                    self.live,
                    |data, now| -> Result<(usize, bool, Instant), Failure> {
                        let mut too_big = false;
                        let used = resp
                            .feed(data, &mut |b| {
                                if let Some(v) = body.as_deref_mut() {
                                    if v.len() + b.len() > MAX_PLAYLIST {
                                        too_big = true;
                                    } else {
                                        v.extend_from_slice(b);
                                    }
                                } else {
                                    stamps.feed(b);
                                }
                            })
                            .map_err(malformed)?;
                        if too_big {
                            return Err(malformed("playlist too large"));
                        }
                        if used < data.len() {
                            return Err(malformed("bytes after the end of a response"));
                        }
                        Ok((data.len(), resp.done(), now))
                    },
                )
                .await?;
            let Some(step) = step else {
                return Ok(None);
            };
            let (n, done, now) = step?;
            self.bytes += n as u64;
            if !self.stamps.found.is_empty() {
                let at = crate::stamp::unix_us();
                let room = MAX_LATENCY_SAMPLES.saturating_sub(self.stamped.len());
                let found = self.stamps.found.drain(..);
                self.stamped.extend(found.take(room).map(|t| (t, at)));
            }
            if head_at.is_none() && self.resp.has_head() {
                head_at = Some(now);
            }
            if done {
                return Ok(Some(Got {
                    status: self.resp.status,
                    head_at: head_at.unwrap_or(now),
                    done_at: now,
                }));
            }
            if !conn.pace_counts(self.bytes, media_ms as i64).await {
                return Ok(None);
            }
        }
    }
}

/// The URL's pieces an HLS player needs.
fn http_target(ctx: &Ctx) -> Result<(SocketAddr, &str, &str), Failure> {
    match &ctx.target {
        Target::Http {
            addr,
            host,
            path,
            websocket: false,
            ..
        } => Ok((*addr, host.as_str(), path.as_str())),
        _ => Err(malformed("HLS needs an http:// or https:// URL")),
    }
}

/// Sleeps until `at`; `false` when the run ends first.
async fn wait(ctx: &Ctx, at: Instant) -> bool {
    sleep_until(at.min(ctx.end)).await;
    Instant::now() < ctx.end
}

fn uri(text: &[u8], r: std::ops::Range<usize>) -> Result<&str, Failure> {
    std::str::from_utf8(&text[r]).map_err(|_| malformed("URI not UTF-8"))
}

/// Per-player HLS counters, copied into the row at the end.
#[derive(Default)]
struct Counts {
    playlists: u64,
    misses: u64,
}

impl Counts {
    fn store(&self, row: &mut PlayerRow) {
        row.playlists = Some(self.playlists);
        row.misses = Some(self.misses);
        row.segments.get_or_insert(0);
    }
}

/// Fetches the first playlist (retrying a 404 until the stream is there) and marks the
/// player connected. `false` when the run ended first.
async fn first_playlist(
    ctx: &Ctx,
    row: &mut PlayerRow,
    lists: &mut Http<'_>,
    path: &str,
    text: &mut Vec<u8>,
    pl: &mut Playlist,
    start: Instant,
) -> Result<bool, Failure> {
    loop {
        let Some(got) = lists.get(|o| o.push_str(path), Some(text), 0).await? else {
            return Ok(false);
        };
        match got.status {
            200 => {
                pl.parse(text).map_err(malformed)?;
                row.connect_ms = Some(ms(got.head_at - start));
                ctx.live.connected.fetch_add(1, Ordering::Relaxed);
                return Ok(true);
            }
            404 => {
                if !wait(ctx, Instant::now() + RETRY).await {
                    return Ok(false);
                }
            }
            s => return Err((ErrorKind::Protocol, format!("playlist answered {s}"))),
        }
    }
}

/// Fetches the init segment (`EXT-X-MAP`) if there is one; `false` when the run ended.
async fn fetch_init(
    media: &mut Http<'_>,
    path: &str,
    text: &[u8],
    pl: &Playlist,
) -> Result<bool, Failure> {
    let Some(map) = pl.map.clone() else {
        return Ok(true);
    };
    let u = uri(text, map)?;
    let Some(got) = media.get(|o| push_target(o, path, u), None, 0).await? else {
        return Ok(false);
    };
    if got.status != 200 {
        return Err((
            ErrorKind::Protocol,
            format!("init segment answered {}", got.status),
        ));
    }
    Ok(true)
}

/// Plays an HLS media playlist (TS or fMP4 segments) until the run ends.
pub(crate) async fn play(ctx: &Ctx, row: &mut PlayerRow) -> Result<(), Failure> {
    let (addr, host, path) = http_target(ctx)?;
    let mut http = Http::new(ctx, addr, host, row.slow);
    let mut counts = Counts::default();
    let r = play_segments(ctx, row, &mut counts, &mut http, path).await;
    counts.store(row);
    http.store(row);
    r
}

async fn play_segments(
    ctx: &Ctx,
    row: &mut PlayerRow,
    counts: &mut Counts,
    http: &mut Http<'_>,
    path: &str,
) -> Result<(), Failure> {
    let start = Instant::now();
    let mut text = Vec::with_capacity(4096);
    let mut pl = Playlist::default();
    let mut polled = Instant::now();
    let ok = first_playlist(ctx, row, http, path, &mut text, &mut pl, start).await;
    row.bytes = http.bytes;
    if !ok? {
        return Ok(());
    }
    counts.playlists += 1;
    let ok = fetch_init(http, path, &text, &pl).await;
    row.bytes = http.bytes;
    if !ok? {
        return Ok(());
    }
    // A segment may come up to one poll interval later than the one before it.
    row.stall_slack_ms = (pl.target_duration_ms / 2) as f64;
    // The live edge: the third-last segment.
    let mut next = pl.next_msn().saturating_sub(3).max(pl.media_sequence);
    let mut media_ms = 0u64;
    loop {
        if next < pl.media_sequence {
            counts.misses += pl.media_sequence - next;
            next = pl.media_sequence;
        }
        for i in 0..pl.segments.len() {
            let (msn, duration, r) = {
                let s = &pl.segments[i];
                (s.msn, s.duration_ms, s.uri.clone())
            };
            if msn < next {
                continue;
            }
            let u = uri(&text, r)?;
            let got = http
                .get(|o| push_target(o, path, u), None, media_ms)
                .await?;
            row.bytes = http.bytes;
            let Some(got) = got else {
                return Ok(());
            };
            if got.status == 200 {
                media_ms += duration;
                row.on_segment(media_ms, got.done_at, start);
            } else {
                counts.misses += 1;
            }
            next = msn + 1;
        }
        if pl.ended {
            return Ok(());
        }
        let every = Duration::from_millis((pl.target_duration_ms / 2).clamp(100, 10_000));
        if !wait(ctx, polled + every).await {
            return Ok(());
        }
        polled = Instant::now();
        let got = http
            .get(|o| o.push_str(path), Some(&mut text), media_ms)
            .await?;
        row.bytes = http.bytes;
        let Some(got) = got else {
            return Ok(());
        };
        if got.status != 200 {
            return Err((
                ErrorKind::Protocol,
                format!("playlist answered {}", got.status),
            ));
        }
        pl.parse(&text).map_err(malformed)?;
        counts.playlists += 1;
    }
}

/// Plays a Low-Latency HLS playlist part by part until the run ends.
pub(crate) async fn play_low_latency(ctx: &Ctx, row: &mut PlayerRow) -> Result<(), Failure> {
    let (addr, host, path) = http_target(ctx)?;
    // Playlists on one connection, media (init, parts) on the other.
    let mut lists = Http::new(ctx, addr, host, row.slow);
    let mut media = Http::new(ctx, addr, host, row.slow);
    let mut counts = Counts::default();
    let r = play_parts(ctx, row, &mut counts, &mut lists, &mut media, path).await;
    counts.store(row);
    media.store(row);
    r
}

/// Appends the blocking reload target for part `pos` of the playlist at `path`.
fn push_reload(o: &mut String, path: &str, pos: Pos) {
    o.push_str(path);
    o.push(if path.contains('?') { '&' } else { '?' });
    let _ = write!(o, "_HLS_msn={}&_HLS_part={}", pos.0, pos.1);
}

async fn play_parts(
    ctx: &Ctx,
    row: &mut PlayerRow,
    counts: &mut Counts,
    lists: &mut Http<'_>,
    media: &mut Http<'_>,
    path: &str,
) -> Result<(), Failure> {
    let start = Instant::now();
    let mut text = Vec::with_capacity(8192);
    let mut pl = Playlist::default();
    let ok = first_playlist(ctx, row, lists, path, &mut text, &mut pl, start).await;
    row.bytes = lists.bytes;
    if !ok? {
        return Ok(());
    }
    counts.playlists += 1;
    let ok = fetch_init(media, path, &text, &pl).await;
    row.bytes = lists.bytes + media.bytes;
    if !ok? {
        return Ok(());
    }
    if pl.hint.is_none() && !pl.ended {
        return Err(malformed(
            "no EXT-X-PRELOAD-HINT: not a Low-Latency HLS playlist",
        ));
    }
    let Some(mut next) = pl.live_edge_part() else {
        return Ok(());
    };
    let mut hint_uri = String::with_capacity(128);
    let mut media_ms = 0u64;
    loop {
        row.bytes = lists.bytes + media.bytes;
        if pl.ended {
            return Ok(());
        }
        let Some((hint, _)) = pl.hint.clone() else {
            return Err(malformed(
                "no EXT-X-PRELOAD-HINT: not a Low-Latency HLS playlist",
            ));
        };
        // A listed part: fetch it.
        if let Some((duration, r)) = pl.part(next).map(|p| (p.duration_ms, p.uri.clone())) {
            let u = uri(&text, r)?;
            let Some(got) = media
                .get(|o| push_target(o, path, u), None, media_ms)
                .await?
            else {
                return Ok(());
            };
            if got.status == 200 {
                media_ms += duration;
                row.on_segment(media_ms, got.done_at, start);
            } else {
                counts.misses += 1;
            }
            next = pl.after(next).unwrap_or(hint);
            continue;
        }
        // Fell out of the listed parts: back to the live edge.
        let first = pl.parts.first().map_or(hint, |p| p.pos);
        if next < first {
            counts.misses += 1;
            next = pl.live_edge_part().unwrap_or(hint);
            continue;
        }
        // A position between listed parts that was never made (a segment ended first).
        if next < hint {
            next = pl.after(next).unwrap_or(hint);
            continue;
        }
        if next > hint {
            // Ahead of the hint: only a blocking reload.
            let got = lists
                .get(|o| push_reload(o, path, next), Some(&mut text), media_ms)
                .await?;
            let Some(got) = got else {
                return Ok(());
            };
            reloaded(got, &text, &mut pl, counts)?;
            continue;
        }
        // The preload hint: fetch it while the blocking reload for it waits.
        hint_uri.clear();
        hint_uri.push_str(uri(&text, pl.hint.as_ref().map_or(0..0, |h| h.1.clone()))?);
        let (part, list) = tokio::join!(
            media.get(|o| push_target(o, path, &hint_uri), None, media_ms),
            lists.get(|o| push_reload(o, path, next), Some(&mut text), media_ms),
        );
        let (Some(part), Some(list)) = (part?, list?) else {
            return Ok(());
        };
        reloaded(list, &text, &mut pl, counts)?;
        if part.status == 200 {
            let duration = pl
                .part(next)
                .map(|p| p.duration_ms)
                .or(pl.part_target_ms)
                .unwrap_or(0);
            media_ms += duration;
            row.on_segment(media_ms, part.done_at, start);
            next = pl.after(next).unwrap_or(next);
        } else {
            counts.misses += 1;
            // Not made: let the playlist say what comes next, without spinning.
            let pause = Duration::from_millis(pl.part_target_ms.unwrap_or(200).clamp(20, 1000) / 4);
            if pl.part(next).is_none() && !wait(ctx, Instant::now() + pause).await {
                return Ok(());
            }
        }
    }
}

/// Takes a reloaded playlist.
fn reloaded(got: Got, text: &[u8], pl: &mut Playlist, counts: &mut Counts) -> Result<(), Failure> {
    if got.status != 200 {
        return Err((
            ErrorKind::Protocol,
            format!("blocking reload answered {}", got.status),
        ));
    }
    pl.parse(text).map_err(malformed)?;
    counts.playlists += 1;
    Ok(())
}
