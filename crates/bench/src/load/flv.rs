//! HTTP-FLV and WebSocket-FLV players: one GET (upgraded for WebSocket), then FLV tags;
//! over TLS for `https://` and `wss://`. HTTP-fMP4 and WebSocket-fMP4 players are the
//! same but for what they scan: an init segment, then fragments
//! ([`sluice_bench::fmp4_scan`]).

use super::{Conn, Ctx, Failure};
use crate::figures::{ms, ErrorKind, PlayerRow};
use crate::scan::{FlvScanner, ScanError, WsDeframer};
use crate::target::Target;
use base64::Engine;
use sluice_bench::fmp4_scan::{Fmp4Sample, Fmp4Scanner, ScanError as Fmp4ScanError};
use sluice_bench::player::Protocol;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// Largest response head accepted.
const MAX_HEAD: usize = 16 << 10;

fn scan_failure(e: ScanError) -> Failure {
    match e {
        ScanError::Closed => (ErrorKind::Closed, e.to_string()),
        ScanError::Malformed(_) => (ErrorKind::Protocol, e.to_string()),
    }
}

/// Plays until the run ends.
pub(crate) async fn play(ctx: &Ctx, row: &mut PlayerRow) -> Result<(), Failure> {
    let Target::Http {
        addr,
        host,
        path,
        websocket,
        ..
    } = &ctx.target
    else {
        unreachable!("dispatched on Target::Http");
    };
    let start = Instant::now();
    let slow = row.slow.then_some(ctx.slow_rate);
    let Some(mut conn) = Conn::open(*addr, slow, ctx.end, ctx.tls.as_ref()).await? else {
        return Ok(());
    };
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: sluice-bench\r\nAccept: */*\r\n"
    );
    if *websocket {
        let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
        req.push_str(&format!(
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n"
        ));
    }
    req.push_str("\r\n");
    if !conn.write(req.as_bytes()).await? {
        return Ok(());
    }
    let want = if *websocket { 101 } else { 200 };
    let mut head: Option<Vec<u8>> = Some(Vec::with_capacity(512));
    let mut ws = WsDeframer::new();
    let mut flv = FlvScanner::new();
    let mut fmp4 = matches!(ctx.protocol, Protocol::Fmp4 | Protocol::WsFmp4).then(Fmp4Scanner::new);
    loop {
        let step = conn
            .read(&ctx.live, |data, now| -> Result<(), Failure> {
                row.bytes += data.len() as u64;
                let mut body = data;
                if let Some(h) = &mut head {
                    let from = h.len().saturating_sub(3);
                    h.extend_from_slice(data);
                    let Some(i) = h[from..].windows(4).position(|w| w == b"\r\n\r\n") else {
                        if h.len() > MAX_HEAD {
                            return Err((ErrorKind::Protocol, "response head too large".into()));
                        }
                        return Ok(());
                    };
                    let end = from + i + 4;
                    body = &data[data.len() - (h.len() - end)..];
                    check_status(&h[..end], want)?;
                    head = None;
                    row.connect_ms = Some(ms(now - start));
                    ctx.live.connected.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(scanner) = fmp4.as_mut() {
                    let mut on = |s: Fmp4Sample| row.on_fmp4_sample(&s, now, start);
                    let mut scan = |p: &[u8]| {
                        scanner
                            .feed(p, &mut on)
                            .map_err(|e| ScanError::Malformed(fmp4_what(&e)))
                    };
                    return if *websocket {
                        ws.feed(body, &mut scan)
                    } else {
                        scan(body)
                    }
                    .map_err(scan_failure);
                }
                let mut on = |m: crate::scan::Media| row.on_media(&m, now, start);
                if *websocket {
                    ws.feed(body, &mut |p| flv.feed(p, &mut on))
                } else {
                    flv.feed(body, &mut on)
                }
                .map_err(scan_failure)
            })
            .await?;
        match step {
            None => return Ok(()),
            Some(r) => r?,
        }
        if !conn.pace(row).await {
            return Ok(());
        }
    }
}

/// What an fMP4 scan error says, for the player's failure.
fn fmp4_what(e: &Fmp4ScanError) -> &'static str {
    let Fmp4ScanError::Malformed(what) = e;
    what
}

/// Accepts a status line with the wanted code.
fn check_status(head: &[u8], want: u16) -> Result<(), Failure> {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok());
    if line.starts_with("HTTP/1.") && code == Some(want) {
        Ok(())
    } else {
        Err((ErrorKind::Protocol, format!("answered {line:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert!(check_status(b"HTTP/1.1 200 OK\r\n\r\n", 200).is_ok());
        assert!(check_status(b"HTTP/1.0 200 OK\r\n\r\n", 200).is_ok());
        assert!(check_status(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", 101).is_ok());
        assert!(check_status(b"HTTP/1.1 404 Not Found\r\n\r\n", 200).is_err());
        assert!(check_status(b"RTSP/1.0 200 OK\r\n\r\n", 200).is_err());
    }
}
