//! RTSP players: RTP interleaved on the RTSP connection (`--protocol rtsp`), or over
//! UDP (`rtsp-udp`: per track a port pair from the kernel, RTP on an even port and RTCP
//! on the next), driven by `crate::rtsp::Player` over `sluice_rtsp::ClientSession`.
//!
//! Per player: the connection, the session's few strings, a depacketizer per track and,
//! over UDP, two sockets per track. TCP bytes are read into the thread's buffer and
//! read in place (`ClientSession::handle_input_in_place`: packets go to the
//! depacketizer where they lie); UDP datagrams are read in batches (`recvmmsg`) into
//! the same buffer. Keep-alives go at half the session timeout after the last
//! request, whatever the media does (the session's timer). `bytes` counts what the
//! sockets returned: with the 4-byte `$` headers over TCP, RTP and RTCP datagrams over
//! UDP.
//!
//! A slow player is paced like the others; over UDP that means the kernel drops what
//! it has no room for, which shows as `rtp.lost`.

use super::udp::{recv_batch, udp_socket, BATCH};
use super::{io_failure, Conn, Ctx, Failure, Woke};
use crate::figures::{ms, ErrorKind, PlayerRow};
use crate::rtsp::{drain, Lower, PlayError, Player, Rtp, RtspClient, Seen};
use crate::target::Target;
use bytes::BytesMut;
use sluice_bench::player::Protocol;
use sluice_rtsp::PortPair;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::task::Poll;
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// Receive buffer asked for each RTP socket: the burst of a GOP cache at PLAY (a
/// second or two of a 2 Mbit/s stream) must fit while thousands of players take their
/// turn; the kernel caps it at `net.core.rmem_max` and charges only what is queued.
const UDP_RECV_BUFFER: usize = 2 << 20;
/// Attempts at an even/odd port pair from the kernel (each finds an even port with
/// its successor free about half the time).
const PAIR_ATTEMPTS: usize = 64;
/// Batches read from one socket per wake-up before the other sockets get their turn.
const BATCHES_PER_WAKE: usize = 4;
/// Largest RTCP datagram kept whole (only counted: sender reports are 52 bytes).
const RTCP_LEN: usize = 1500;

pub(crate) fn play_failure(e: PlayError) -> Failure {
    match e {
        PlayError::Io(e) => io_failure(e),
        e => (ErrorKind::Protocol, e.to_string()),
    }
}

/// The sockets of one track over UDP.
struct UdpTrack {
    rtp: UdpSocket,
    rtcp: UdpSocket,
    track: usize,
}

/// What woke a player besides its connection.
enum Wake {
    /// The session's timer (a keep-alive is due).
    Timer,
    Udp(io::Result<()>),
}

/// Everything of a player but its connection.
struct State<'a> {
    ctx: &'a Ctx,
    /// When connecting began.
    start: Instant,
    local_ip: IpAddr,
    player: Player,
    /// Requests to write.
    out: BytesMut,
    /// Set once PLAY is answered.
    rtp: Option<Rtp>,
    /// The RTP channel of each track (TCP).
    channels: Vec<Option<u8>>,
    /// Bound when the session asks for ports; read once playing.
    udp: Vec<UdpTrack>,
}

/// Plays until the run ends.
pub(crate) async fn play(ctx: &Ctx, row: &mut PlayerRow) -> Result<(), Failure> {
    let Target::Rtsp { addr, url } = &ctx.target else {
        unreachable!("dispatched on Target::Rtsp");
    };
    let lower = if ctx.protocol == Protocol::RtspUdp {
        Lower::Udp
    } else {
        Lower::Tcp
    };
    let start = Instant::now();
    let slow = row.slow.then_some(ctx.slow_rate);
    let Some(mut conn) = Conn::open(*addr, slow, ctx.end, None).await? else {
        return Ok(());
    };
    let player = Player::new(url, lower, Instant::now().into_std()).map_err(play_failure)?;
    let mut s = State {
        ctx,
        start,
        local_ip: conn.local_ip()?,
        player,
        out: BytesMut::with_capacity(512),
        rtp: None,
        channels: Vec::new(),
        udp: Vec::new(),
    };
    s.drain(row, Instant::now()).map_err(play_failure)?;
    let result = run(&mut s, &mut conn, row).await;
    if let Some(rtp) = &s.rtp {
        row.rtp = Some(rtp.counts());
    }
    result
}

async fn run(s: &mut State<'_>, conn: &mut Conn, row: &mut PlayerRow) -> Result<(), Failure> {
    loop {
        if !s.out.is_empty() {
            if !conn.write(&s.out).await? {
                return Ok(());
            }
            s.out.clear();
        }
        let timer = s.player.session().poll_timeout().map(Instant::from_std);
        // UDP is read once playing: datagrams that come before the PLAY answer is read
        // wait in the kernel.
        let udp: &[UdpTrack] = if s.rtp.is_some() { &s.udp } else { &[] };
        let woke = conn
            .readable_or(async move {
                tokio::select! {
                    r = udp_ready(udp) => Wake::Udp(r),
                    _ = sleep_until(timer) => Wake::Timer,
                }
            })
            .await?;
        match woke {
            Woke::Ended => return Ok(()),
            Woke::Readable => {
                let got = conn.try_read(&s.ctx.live, |data, now| {
                    row.bytes += data.len() as u64;
                    s.feed(data, row, now)
                })?;
                if let Some(r) = got {
                    r.map_err(play_failure)?;
                }
            }
            Woke::Other(Wake::Timer) => {
                let now = Instant::now();
                s.player.session().handle_timeout(now.into_std());
                s.drain(row, now).map_err(play_failure)?;
            }
            Woke::Other(Wake::Udp(r)) => {
                r.map_err(io_failure)?;
                s.read_udp(row)?;
            }
        }
        if !conn.pace_counts(row.bytes, row.media_ms).await {
            return Ok(());
        }
    }
}

impl State<'_> {
    /// Reads what came on the connection: RTP packets go to the depacketizers where
    /// they lie in `data`; after each answer the session's outputs are drained before
    /// the packets behind it.
    fn feed(
        &mut self,
        mut data: &[u8],
        row: &mut PlayerRow,
        now: Instant,
    ) -> Result<(), PlayError> {
        while !data.is_empty() {
            let used = {
                let State {
                    player,
                    rtp,
                    channels,
                    start,
                    ..
                } = self;
                let start = *start;
                player.session().handle_input_in_place(
                    now.into_std(),
                    data,
                    &mut |channel, packet| {
                        let track = channels.iter().position(|&c| c == Some(channel));
                        // RTCP, a channel not set up, or media before PLAY's answer.
                        if let (Some(rtp), Some(track)) = (rtp.as_mut(), track) {
                            rtp.packet(track, packet, &mut |seen| on_seen(row, seen, now, start));
                        }
                    },
                )?
            };
            self.drain(row, now)?;
            data = data.get(used..).unwrap_or_default();
        }
        Ok(())
    }

    /// Drains the session: requests to `out`, events to the player; binds UDP ports
    /// when asked; gets ready for media when PLAY is answered.
    fn drain(&mut self, row: &mut PlayerRow, now: Instant) -> Result<(), PlayError> {
        let (local_ip, udp) = (self.local_ip, &mut self.udp);
        let started = drain(&mut self.player, &mut self.out, &mut |n| {
            let mut ports = Vec::with_capacity(n);
            for track in 0..n {
                let (rtp, rtcp) = bind_pair(local_ip)?;
                ports.push(PortPair {
                    rtp: rtp.local_addr()?.port(),
                    rtcp: rtcp.local_addr()?.port(),
                });
                udp.push(UdpTrack { rtp, rtcp, track });
            }
            Ok(ports)
        })?;
        if started && self.rtp.is_none() {
            self.channels = self.player.channels();
            self.rtp = Some(Rtp::new(self.player.tracks())?);
            row.connect_ms = Some(ms(now - self.start));
            self.ctx.live.connected.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Reads what waits on every UDP socket.
    fn read_udp(&mut self, row: &mut PlayerRow) -> Result<(), Failure> {
        let Some(rtp) = &mut self.rtp else {
            return Ok(());
        };
        let (live, start) = (&self.ctx.live, self.start);
        for u in &self.udp {
            let mut rtcp = [0u8; RTCP_LEN];
            loop {
                match u.rtcp.try_recv(&mut rtcp) {
                    Ok(n) => {
                        row.bytes += n as u64;
                        live.add_bytes(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(io_failure(e)),
                }
            }
            for _ in 0..BATCHES_PER_WAKE {
                let now = Instant::now();
                let n = recv_batch(&u.rtp, |datagram| {
                    row.bytes += datagram.len() as u64;
                    live.add_bytes(datagram.len());
                    rtp.packet(u.track, datagram, &mut |seen| {
                        on_seen(row, seen, now, start)
                    });
                })
                .map_err(io_failure)?;
                if n < BATCH {
                    break;
                }
            }
        }
        Ok(())
    }
}

fn on_seen(row: &mut PlayerRow, seen: Seen, now: Instant, start: Instant) {
    match seen {
        Seen::Video {
            ts_ms,
            keyframe,
            stamp,
        } => row.on_video_frame(ts_ms, keyframe, stamp, now, start),
        Seen::Audio => row.audio_frames += 1,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Until one of the sockets has datagrams waiting; never with none.
async fn udp_ready(tracks: &[UdpTrack]) -> io::Result<()> {
    std::future::poll_fn(|cx| {
        for t in tracks {
            for sock in [&t.rtp, &t.rtcp] {
                if let Poll::Ready(r) = sock.poll_recv_ready(cx) {
                    return Poll::Ready(r);
                }
            }
        }
        Poll::Pending
    })
    .await
}

/// An RTP socket on an even port of `ip` and an RTCP socket on the next.
pub(crate) fn bind_pair(ip: IpAddr) -> io::Result<(UdpSocket, UdpSocket)> {
    for _ in 0..PAIR_ATTEMPTS {
        let rtp = udp_socket(SocketAddr::new(ip, 0), Some(UDP_RECV_BUFFER))?;
        let port = rtp.local_addr()?.port();
        if !port.is_multiple_of(2) {
            continue;
        }
        if let Ok(rtcp) = udp_socket(SocketAddr::new(ip, port + 1), None) {
            return Ok((UdpSocket::from_std(rtp)?, UdpSocket::from_std(rtcp)?));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no even/odd UDP port pair on {ip} in {PAIR_ATTEMPTS} tries"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::udp::SLOT;

    #[tokio::test]
    async fn pairs_are_even_then_odd_and_batches_read_every_datagram() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let (rtp, rtcp) = bind_pair(ip).unwrap();
        let (a, b) = (
            rtp.local_addr().unwrap().port(),
            rtcp.local_addr().unwrap().port(),
        );
        assert_eq!(a % 2, 0);
        assert_eq!(b, a + 1);
        let tx = std::net::UdpSocket::bind((ip, 0)).unwrap();
        for i in 0..(BATCH + 3) {
            tx.send_to(&vec![i as u8; 100 + i], (ip, a)).unwrap();
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), rtp.readable())
            .await
            .unwrap()
            .unwrap();
        let mut got = Vec::new();
        while got.len() < BATCH + 3 {
            let n = recv_batch(&rtp, |d| got.push((d[0], d.len()))).unwrap();
            if n == 0 {
                rtp.readable().await.unwrap();
            }
        }
        let want: Vec<(u8, usize)> = (0..(BATCH + 3)).map(|i| (i as u8, 100 + i)).collect();
        assert_eq!(got, want);
        // Too long for a slot: an error, not a cut packet.
        tx.send_to(&vec![0u8; SLOT + 1], (ip, a)).unwrap();
        rtp.readable().await.unwrap();
        assert!(recv_batch(&rtp, |_| {}).is_err());
    }
}
