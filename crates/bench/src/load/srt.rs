//! SRT players: each a caller on its own UDP socket, over `sluice_srt` (the
//! handshake, then a connection that orders, acknowledges and reports loss as
//! libsrt's receiver does). The TS it delivers is scanned for frames
//! (`crate::ts_scan`), not kept.
//!
//! Datagrams are read in batches (`recvmmsg`) into the thread's buffer. `bytes`
//! counts the datagrams' bytes (SRT headers included). `connect_ms` is from the
//! first handshake datagram to the listener's conclusion. A slow player is not
//! slowed: SRT has no backpressure to show (a receiver that falls behind loses
//! packets, which the sender then drops), so every SRT player reads at line rate.

use super::udp::{recv_batch, recv_gro, set_gro, udp_socket, BATCH, GRO_BATCH};
use super::{io_failure, Ctx, Failure};
use crate::figures::{ms, ErrorKind, PlayerRow};
use crate::target::Target;
use crate::ts_scan::{TsEvent, TsScanner};
use sluice_srt::{CallConfig, CallSeed, Caller, Closed, Connection};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::{sleep_until, Instant};

/// Receive buffer asked for each player's socket: a GOP cache arrives at connect
/// as fast as the server's pacing allows.
const UDP_RECV_BUFFER: usize = 2 << 20;
/// A server silent this long is gone (libsrt's peer idle timeout).
const PEER_IDLE: Duration = Duration::from_secs(5);
/// Batches read per wake-up before timers and transmits get their turn.
/// Set (to anything) in the environment, players take the server's GSO trains whole
/// (UDP GRO): over loopback the kernel then no longer cuts them into datagrams and
/// queues each on the player's socket on the server's CPU, a cost a server pays on
/// loopback only. Off by default: libsrt players do not ask for GRO.
const GRO_ENV: &str = "SLUICE_BENCH_SRT_GRO";
const BATCHES_PER_WAKE: usize = 8;

/// The caller's settings from an `srt://` target, for client `i` (`{i}` in the
/// stream id becomes it; `None` keeps the pattern).
pub(crate) fn call_config(target: &Target, i: Option<usize>) -> Option<(SocketAddr, CallConfig)> {
    let Target::Srt {
        addr,
        stream_id,
        passphrase,
        key_len,
        latency_ms,
    } = target
    else {
        return None;
    };
    Some((
        *addr,
        CallConfig {
            stream_id: stream_id.as_ref().map(|s| match i {
                Some(i) => s.replace("{i}", &i.to_string()),
                None => s.clone(),
            }),
            latency: Duration::from_millis(u64::from(*latency_ms)),
            passphrase: passphrase.as_ref().map(|p| p.as_bytes().to_vec()),
            key_len: *key_len,
            ..CallConfig::default()
        },
    ))
}

/// A UDP socket connected to `addr`, with room for bursts; on loopback when `addr`
/// is (the bench's usual case), so the kernel picks a loopback source.
pub(crate) fn socket(addr: SocketAddr) -> Result<UdpSocket, Failure> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let ip: IpAddr = match (addr.is_ipv4(), addr.ip().is_loopback()) {
        (true, true) => Ipv4Addr::LOCALHOST.into(),
        (true, false) => Ipv4Addr::UNSPECIFIED.into(),
        (false, true) => Ipv6Addr::LOCALHOST.into(),
        (false, false) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let std = udp_socket(SocketAddr::new(ip, 0), Some(UDP_RECV_BUFFER)).map_err(io_failure)?;
    std.connect(addr).map_err(io_failure)?;
    UdpSocket::from_std(std).map_err(io_failure)
}

fn seed() -> CallSeed {
    CallSeed {
        socket_id: rand::random::<u32>().max(1),
        isn: rand::random::<u32>() & 0x7fff_ffff,
        salt: rand::random(),
        key: rand::random(),
    }
}

/// Runs the handshake; the connection, or `None` when the run ended first.
pub(crate) async fn connect(
    sock: &UdpSocket,
    config: CallConfig,
    end: Instant,
) -> Result<Option<Connection>, Failure> {
    let mut caller = Caller::new(config, seed(), Instant::now().into_std())
        .map_err(|e| (ErrorKind::Protocol, e.to_string()))?;
    let mut buf = [0u8; 1500];
    loop {
        if let Some(out) = caller.poll_transmit() {
            sock.send(&out).await.map_err(io_failure)?;
        }
        if let Some(outcome) = caller.poll_outcome() {
            return match outcome {
                Ok(c) => Ok(Some(Connection::accepted(
                    c,
                    PEER_IDLE,
                    Instant::now().into_std(),
                ))),
                Err(sluice_srt::CallError::TimedOut) => {
                    Err((ErrorKind::Timeout, "no answer to the SRT handshake".into()))
                }
                Err(e) => Err((ErrorKind::Protocol, e.to_string())),
            };
        }
        let wake = caller
            .poll_timeout()
            .map_or(end, |t| Instant::from_std(t).min(end));
        tokio::select! {
            r = sock.recv(&mut buf) => {
                let n = r.map_err(io_failure)?;
                caller.handle_datagram(Instant::now().into_std(), &buf[..n]);
            }
            () = sleep_until(wake) => {
                if Instant::now() >= end {
                    return Ok(None);
                }
                caller.handle_timeout(Instant::now().into_std());
            }
        }
    }
}

/// Sends what the connection has to send (a player's are control packets; a
/// publisher's data too, header and payload gathered into one datagram).
pub(crate) fn flush(sock: &UdpSocket, conn: &mut Connection, scratch: &mut Vec<u8>) {
    let (mut control, mut data) = (Vec::new(), Vec::new());
    conn.take_transmits(&mut control, &mut data);
    // A full socket buffer loses the datagram, as a lossy path would: SRT recovers.
    for c in &control {
        let _ = sock.try_send(c);
    }
    for d in &data {
        scratch.clear();
        scratch.extend_from_slice(&d.header);
        scratch.extend_from_slice(&d.payload);
        let _ = sock.try_send(scratch);
    }
}

pub(crate) async fn play(ctx: &Ctx, row: &mut PlayerRow) -> Result<(), Failure> {
    let (addr, config) = call_config(&ctx.target, Some(row.id))
        .ok_or((ErrorKind::Protocol, "SRT needs an srt:// URL".to_string()))?;
    let sock = socket(addr)?;
    let start = Instant::now();
    let Some(mut conn) = connect(&sock, config, ctx.end).await? else {
        return Ok(());
    };
    row.connect_ms = Some(ms(start.elapsed()));
    ctx.live.connected.fetch_add(1, Ordering::Relaxed);
    let gro = std::env::var_os(GRO_ENV).is_some() && set_gro(&sock);
    let mut scan = TsScanner::new();
    let mut scratch = Vec::new();
    let result = loop {
        flush(&sock, &mut conn, &mut scratch);
        let now = Instant::now();
        if now >= ctx.end {
            break Ok(());
        }
        if let Some(closed) = conn.closed() {
            break Err(match closed {
                Closed::Idle => (ErrorKind::Timeout, "the server went silent".into()),
                _ => (ErrorKind::Closed, format!("closed: {closed:?}")),
            });
        }
        let wake = conn
            .poll_timeout(now.into_std())
            .map_or(ctx.end, |t| Instant::from_std(t).min(ctx.end));
        tokio::select! {
            r = sock.readable() => {
                if let Err(e) = r {
                    break Err(io_failure(e));
                }
            }
            () = sleep_until(wake) => {}
        }
        let now = Instant::now().into_std();
        let mut bad = None;
        for _ in 0..BATCHES_PER_WAKE {
            let on = |d: &[u8]| {
                row.bytes += d.len() as u64;
                ctx.live.add_bytes(d.len());
                if let Err(e) = conn.handle_datagram(now, d) {
                    bad.get_or_insert(e.to_string());
                }
            };
            let got = if gro {
                recv_gro(&sock, on).map(|n| n < GRO_BATCH)
            } else {
                recv_batch(&sock, on).map(|n| n < BATCH)
            };
            match got {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return Err(io_failure(e)),
            }
        }
        if let Some(e) = bad {
            break Err((ErrorKind::Protocol, e));
        }
        conn.handle_timeout(now);
        let arrived = Instant::from_std(now);
        while let Some(payload) = conn.poll_data() {
            let scanned = scan.feed(&payload, |e| match e {
                TsEvent::Video {
                    pts_ms,
                    keyframe,
                    stamp,
                } => {
                    let ts_ms = pts_ms.unwrap_or(0);
                    row.on_video_frame(ts_ms, keyframe, stamp, arrived, start);
                }
                TsEvent::Audio => row.audio_frames += 1,
            });
            if let Err(e) = scanned {
                return Err((ErrorKind::Protocol, e.to_string()));
            }
        }
    };
    conn.close(Instant::now().into_std());
    flush(&sock, &mut conn, &mut scratch);
    result
}
