//! The test's side of an RTSP connection: `sluice_rtsp::ClientSession` over a
//! [`Peer`], RTP interleaved on it, and what a player test needs of it.

use super::wire::Peer;
use bytes::Bytes;
use sluice_media::sdp::parse_sdp;
use sluice_rtsp::{ClientConfig, ClientEvent, ClientOutput, ClientSession, ClientTransport};
use std::collections::VecDeque;

/// One RTSP client connection of a test.
pub struct RtspClient {
    session: ClientSession,
    peer: Peer,
    events: VecDeque<ClientEvent>,
}

/// An RTP packet a player got: its channel, timestamp and marker bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtp {
    pub channel: u8,
    pub timestamp: u32,
    pub marker: bool,
}

impl RtspClient {
    /// A client of `rtsp://sluice/<key>`.
    pub fn new(peer: Peer, key: &str) -> RtspClient {
        let config = ClientConfig::new(&format!("rtsp://sluice/{key}")).expect("a URL");
        let session = ClientSession::new(config, [7; 32], crate::driver::now());
        RtspClient {
            session,
            peer,
            events: VecDeque::new(),
        }
    }

    fn flush(&mut self) {
        while let Some(output) = self.session.poll_output() {
            match output {
                ClientOutput::Write(bytes) => self.peer.send(&bytes),
                ClientOutput::Event(e) => self.events.push_back(e),
            }
        }
    }

    /// The next event; `None` once the server closed the connection.
    pub async fn next(&mut self) -> Option<ClientEvent> {
        loop {
            self.flush();
            if let Some(e) = self.events.pop_front() {
                return Some(e);
            }
            let bytes = self.peer.recv().await?;
            self.session
                .handle_input(crate::driver::now(), &bytes)
                .expect("the server's bytes parse");
        }
    }

    /// Reads until an event `want` takes; `None` if the connection ended first.
    pub async fn until(&mut self, want: impl Fn(&ClientEvent) -> bool) -> Option<ClientEvent> {
        loop {
            let e = self.next().await?;
            if want(&e) {
                return Some(e);
            }
        }
    }

    /// OPTIONS, answered; whether it was.
    pub async fn options(&mut self) -> bool {
        self.session.options().expect("OPTIONS may be sent");
        let answer = self
            .until(|e| matches!(e, ClientEvent::Options { .. }))
            .await;
        answer.is_some()
    }

    /// DESCRIBE, SETUP of every track over TCP and PLAY; whether it plays. The
    /// server's keep-alive timer is not answered for (no keep-alives are sent).
    pub async fn play(&mut self) -> bool {
        self.session.describe().expect("DESCRIBE may be sent");
        let Some(ClientEvent::Described { sdp, .. }) = self
            .until(|e| matches!(e, ClientEvent::Described { .. } | ClientEvent::Refused(_)))
            .await
        else {
            return false;
        };
        let media = parse_sdp(&sdp).expect("the server's SDP parses").media;
        for m in &media {
            self.session
                .setup(&m.control, ClientTransport::Interleaved)
                .expect("SETUP may be sent");
            let set_up = self
                .until(|e| matches!(e, ClientEvent::SetUp { .. } | ClientEvent::Refused(_)))
                .await;
            if !matches!(set_up, Some(ClientEvent::SetUp { .. })) {
                return false;
            }
        }
        self.session.play(None).expect("PLAY may be sent");
        let answer = self
            .until(|e| matches!(e, ClientEvent::Playing { .. } | ClientEvent::Refused(_)))
            .await;
        matches!(answer, Some(ClientEvent::Playing { .. }))
    }

    /// The next RTP packet (RTCP skipped); `None` once the connection ended.
    pub async fn next_rtp(&mut self) -> Option<Rtp> {
        loop {
            if let ClientEvent::Interleaved { channel, payload } = self.next().await? {
                if let Some(rtp) = rtp(channel, &payload) {
                    return Some(rtp);
                }
            }
        }
    }
}

/// The header fields of an RTP packet; `None` for RTCP (payload types 200 to 204).
fn rtp(channel: u8, packet: &Bytes) -> Option<Rtp> {
    let head = packet.get(..12)?;
    if (200..=204).contains(&head[1]) {
        return None;
    }
    Some(Rtp {
        channel,
        timestamp: u32::from_be_bytes([head[4], head[5], head[6], head[7]]),
        marker: head[1] & 0x80 != 0,
    })
}
