//! WHEP players: each a str0m peer in RTP mode on its own UDP socket. Packets are
//! counted, not depacketized (a client must cost less than the server it measures);
//! a video frame ends at a packet with the marker bit, and is a keyframe when one of
//! its packets starts an IDR picture. `connect_ms` is from the POST to ICE and DTLS
//! done; the session is DELETEd at the end.

use super::{io_failure, Ctx, Failure};
use crate::figures::{ms, ErrorKind, PlayerRow};
use crate::target::Target;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use str0m::change::SdpAnswer;
use str0m::crypto::CryptoProvider;
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc, RtcConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;

/// Largest datagram read.
const MAX_DATAGRAM: usize = 2048;

fn crypto() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(str0m::crypto::from_feature_flags()))
        .clone()
}

/// One DTLS certificate for every player of the process: a key generation per player
/// would load the client's core at the ramp and slow the handshakes being measured.
fn certificate() -> Option<str0m::config::DtlsCert> {
    static CERT: OnceLock<Option<str0m::config::DtlsCert>> = OnceLock::new();
    CERT.get_or_init(|| crypto().dtls_provider.generate_certificate())
        .clone()
}

/// An HTTP/1.1 request with a body on a connection of its own: status, head, body.
async fn request(
    addr: SocketAddr,
    host: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String, String), Failure> {
    let mut sock = TcpStream::connect(addr).await.map_err(io_failure)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/sdp\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.map_err(io_failure)?;
    sock.write_all(body.as_bytes()).await.map_err(io_failure)?;
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).await.map_err(io_failure)?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or((ErrorKind::Protocol, format!("bad answer: {head}")))?;
    Ok((status, head.to_owned(), body.to_owned()))
}

/// Whether an H.264 RTP payload (RFC 6184) starts an IDR picture or carries one.
fn starts_keyframe(payload: &[u8]) -> bool {
    match payload.first().map(|b| b & 0x1f) {
        Some(5) => true,
        // STAP-A: NAL units behind 16-bit sizes.
        Some(24) => {
            let mut rest = payload.get(1..).unwrap_or_default();
            while let [a, b, tail @ ..] = rest {
                let len = usize::from(u16::from_be_bytes([*a, *b]));
                if tail.first().is_some_and(|n| n & 0x1f == 5) {
                    return true;
                }
                rest = tail.get(len..).unwrap_or_default();
            }
            false
        }
        // FU-A: the start fragment of an IDR slice.
        Some(28) => payload
            .get(1)
            .is_some_and(|h| h & 0x80 != 0 && h & 0x1f == 5),
        _ => false,
    }
}

pub(crate) async fn play(ctx: &Ctx, row: &mut PlayerRow) -> Result<(), Failure> {
    let Target::Http {
        addr, host, path, ..
    } = &ctx.target
    else {
        return Err((ErrorKind::Protocol, "WHEP needs an http:// URL".into()));
    };
    let bind: SocketAddr = if addr.is_ipv4() {
        "127.0.0.1:0".parse().expect("an address")
    } else {
        "[::1]:0".parse().expect("an address")
    };
    let sock = UdpSocket::bind(bind).await.map_err(io_failure)?;
    let local = sock.local_addr().map_err(io_failure)?;
    let start = Instant::now();
    let mut config = RtcConfig::new().set_crypto_provider(crypto());
    if let Some(cert) = certificate() {
        config = config.set_dtls_cert(cert);
    }
    let mut rtc: Rtc = config
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_h264(true)
        .enable_opus(true, false)
        .build(start.into_std());
    let candidate =
        Candidate::host(local, "udp").map_err(|e| (ErrorKind::Protocol, e.to_string()))?;
    rtc.add_local_candidate(candidate);
    let mut api = rtc.sdp_api();
    api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
    let (offer, pending) = api
        .apply()
        .ok_or((ErrorKind::Protocol, "no offer".to_string()))?;
    let (status, head, body) = request(*addr, host, "POST", path, &offer.to_sdp_string()).await?;
    if status != 201 {
        return Err((
            ErrorKind::Protocol,
            format!("WHEP answered {status}: {body}"),
        ));
    }
    let location = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("location")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    let answer =
        SdpAnswer::from_sdp_string(&body).map_err(|e| (ErrorKind::Protocol, e.to_string()))?;
    rtc.sdp_api()
        .accept_answer(pending, answer)
        .map_err(|e| (ErrorKind::Protocol, e.to_string()))?;

    let h264: Vec<_> = rtc
        .codec_config()
        .params()
        .iter()
        .filter(|p| p.spec().codec == Codec::H264)
        .map(|p| p.pt())
        .collect();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut keyframe = false;
    // The publisher's wall-clock stamp in the frame, when it carries one.
    let mut stamp = None;
    let result = loop {
        if Instant::now() >= ctx.end {
            break Ok(());
        }
        let timeout = match rtc.poll_output() {
            Ok(Output::Timeout(t)) => t,
            Ok(Output::Transmit(t)) => {
                let _ = sock.send_to(&t.contents, t.destination).await;
                continue;
            }
            Ok(Output::Event(Event::Connected)) => {
                row.connect_ms = Some(ms(start.elapsed()));
                ctx.live.connected.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(Output::Event(Event::RtpPacket(p))) => {
                let now = Instant::now();
                let n = p.header.header_len + p.payload.len();
                row.bytes += n as u64;
                ctx.live.add_bytes(n);
                if h264.contains(&p.header.payload_type) {
                    keyframe |= starts_keyframe(&p.payload);
                    if stamp.is_none() {
                        stamp = crate::stamp::find_in_rtp(&p.payload);
                    }
                    if p.header.marker {
                        let ts_ms = p.header.timestamp / 90;
                        row.on_video_frame(ts_ms, keyframe, stamp.take(), now, start);
                        keyframe = false;
                    }
                } else {
                    row.audio_frames += 1;
                }
                continue;
            }
            Ok(Output::Event(Event::IceConnectionStateChange(
                str0m::IceConnectionState::Disconnected,
            ))) => break Err((ErrorKind::Closed, "ICE disconnected".to_string())),
            Ok(Output::Event(_)) => continue,
            Err(e) => break Err((ErrorKind::Protocol, e.to_string())),
        };
        let wait = Instant::from_std(timeout).min(ctx.end);
        let input = tokio::select! {
            r = sock.recv_from(&mut buf) => match r {
                Ok((n, from)) => match Receive::new(Protocol::Udp, from, local, &buf[..n]) {
                    Ok(r) => Input::Receive(Instant::now().into_std(), r),
                    Err(_) => continue,
                },
                Err(e) => break Err(io_failure(e)),
            },
            () = tokio::time::sleep_until(wait) => Input::Timeout(Instant::now().into_std()),
        };
        if let Err(e) = rtc.handle_input(input) {
            break Err((ErrorKind::Protocol, e.to_string()));
        }
    };
    if !location.is_empty() {
        let delete = request(*addr, host, "DELETE", &location, "");
        let _ = tokio::time::timeout(Duration::from_secs(1), delete).await;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyframes_are_found_in_every_packetization() {
        assert!(starts_keyframe(&[0x65, 1, 2]));
        assert!(!starts_keyframe(&[0x41, 1, 2]));
        // STAP-A with SPS, PPS, IDR.
        assert!(starts_keyframe(&[
            24, 0, 2, 0x67, 1, 0, 1, 0x68, 0, 2, 0x65, 9
        ]));
        assert!(!starts_keyframe(&[24, 0, 2, 0x67, 1, 0, 1, 0x68]));
        // FU-A start and middle of an IDR slice.
        assert!(starts_keyframe(&[0x7c, 0x85, 1]));
        assert!(!starts_keyframe(&[0x7c, 0x05, 1]));
    }
}
