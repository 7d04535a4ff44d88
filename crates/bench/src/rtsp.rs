//! The RTSP players' and publishers' side of `sluice_rtsp::ClientSession`: what the
//! bench asks for and what it makes of the media.
//!
//! Why here and not in `sluice_rtsp`: the dialog (CSeq, the request in flight, the
//! session id and timeout, keep-alives, reading answers and `$` frames off the TCP
//! stream in place) is the client session's. What is the bench's own is policy and
//! counting: a player plays every media section `sluice_media`'s SDP parser can
//! depacketize, over TCP or UDP, from `npt=0.000-`; a publisher (`crate::rtsp_record`)
//! announces its clip's tracks; and a player counts what a figure needs (sequence
//! gaps, frames, keyframes, the publisher's wall-clock stamps) from `sluice_media`'s
//! depacketizer.
//!
//! - [`RtspClient`] and [`drain`]: a client session and the bench's reaction to its
//!   events, driven the same way by both drivers (`crate::load::rtsp`,
//!   `crate::load::publish_rtsp`).
//! - [`Player`]: OPTIONS → DESCRIBE → (UDP: the driver's ports) → SETUP each track →
//!   PLAY; keep-alives go by themselves.
//! - [`Rtp`]: packets of each track → [`Seen`] frames and [`RtpCounts`].
//!
//! # Invariants
//! - Peer bytes never panic, and what is kept of them is bounded (the client session's
//!   limits; a frame being reassembled, `sluice_media::rtp::MAX_FRAME_LEN`).
//! - A refusal, an answer the session cannot go on from, or an SDP without media ends
//!   the player or publisher with an error that says which.

use crate::figures::RtpCounts;
use bytes::BytesMut;
use sluice_media::rtp::{RtpCodec, RtpDepacketizer, RTP_HEADER_LEN};
use sluice_media::sdp::{parse_sdp, SdpMedia};
use sluice_rtsp::{
    ClientConfig, ClientEvent, ClientOutput, ClientSession, ClientTransport, NptRange, PortPair,
    Refusal, RtspError,
};
use std::time::Instant;

/// Why a player (or an RTSP publisher, `crate::rtsp_record`) gave up on the server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlayError {
    /// A request was answered with an error status.
    #[error("{method} answered {status} {reason}")]
    Refused {
        method: String,
        status: u16,
        reason: String,
    },
    /// The server said something out of turn or left out what it must say.
    #[error("{0}")]
    Unexpected(String),
    /// The server's bytes break RTSP or SDP.
    #[error("{0}")]
    Malformed(String),
    /// A socket of ours (UDP ports) could not be had.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl From<RtspError> for PlayError {
    fn from(e: RtspError) -> Self {
        PlayError::Malformed(format!("rtsp: {e}"))
    }
}

impl From<Refusal> for PlayError {
    fn from(r: Refusal) -> Self {
        PlayError::Refused {
            method: r.method.as_str().to_string(),
            status: r.status,
            reason: r.reason,
        }
    }
}

/// How RTP reaches the player, or leaves the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lower {
    /// Interleaved on the RTSP connection.
    Tcp,
    /// Datagrams to a port pair per track.
    Udp,
}

/// What the driver does after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    /// Bind this many RTP/RTCP port pairs and call [`RtspClient::set_ports`].
    NeedPorts(usize),
    /// PLAY or RECORD was answered: media flows.
    Started,
}

/// A client session and what the bench does with its events.
pub(crate) trait RtspClient {
    /// The session.
    fn session(&mut self) -> &mut ClientSession;
    /// Reacts to one event of the session (sending the next request, if any).
    fn on_event(&mut self, e: ClientEvent) -> Result<Next, PlayError>;
    /// The client ports of each track (RTP over UDP), after [`Next::NeedPorts`]; sends
    /// the first SETUP.
    fn set_ports(&mut self, ports: Vec<PortPair>) -> Result<(), PlayError>;
}

/// A client session for `url` as the bench runs it: `User-Agent: sluice-bench`, and
/// answers waited for as long as the run lasts (the run's end bounds every wait; a
/// slow server under load is measured, not cut off).
pub(crate) fn client_session(url: &str, now: Instant) -> Result<ClientSession, PlayError> {
    let mut config = ClientConfig::new(url)?;
    config.user_agent = "sluice-bench".to_string();
    config.response_timeout = None;
    Ok(ClientSession::new(config, rand::random(), now))
}

/// Drains `client`'s session: writes go to `out`, events to the client, and ports are
/// bound with `bind` when asked for. Returns whether media started.
pub(crate) fn drain(
    client: &mut impl RtspClient,
    out: &mut BytesMut,
    bind: &mut impl FnMut(usize) -> Result<Vec<PortPair>, PlayError>,
) -> Result<bool, PlayError> {
    let mut started = false;
    while let Some(output) = client.session().poll_output() {
        match output {
            ClientOutput::Write(b) => out.extend_from_slice(&b),
            ClientOutput::Event(e) => match client.on_event(e)? {
                Next::Continue => {}
                Next::NeedPorts(n) => {
                    let ports = bind(n)?;
                    client.set_ports(ports)?;
                }
                Next::Started => started = true,
            },
        }
    }
    Ok(started)
}

/// What ends a player or publisher among the events every client may see.
pub(crate) fn common_event(e: ClientEvent) -> Result<Next, PlayError> {
    match e {
        ClientEvent::Refused(r) => Err(r.into()),
        ClientEvent::Timeout { method } => {
            Err(PlayError::Unexpected(format!("no answer to {method}")))
        }
        _ => Ok(Next::Continue),
    }
}

/// One player's RTSP session: the client session and the media it sets up.
#[derive(Debug)]
pub(crate) struct Player {
    session: ClientSession,
    lower: Lower,
    /// The media sections of the DESCRIBE answer that are set up, in SDP order (which
    /// is the order of the session's tracks).
    media: Vec<SdpMedia>,
    ports: Vec<PortPair>,
}

impl Player {
    /// A player of `url` (`rtsp://host:port/path`) at `now`; OPTIONS is the first
    /// output.
    pub(crate) fn new(url: &str, lower: Lower, now: Instant) -> Result<Self, PlayError> {
        let mut session = client_session(url, now)?;
        session.options()?;
        Ok(Player {
            session,
            lower,
            media: Vec::new(),
            ports: Vec::new(),
        })
    }

    /// The media set up, with the sequence number each starts at.
    pub(crate) fn tracks(&self) -> impl Iterator<Item = (&SdpMedia, Option<u16>)> {
        self.media
            .iter()
            .zip(self.session.tracks())
            .map(|(m, t)| (m, t.start_seq))
    }

    /// The interleaved RTP channel of each track (TCP).
    pub(crate) fn channels(&self) -> Vec<Option<u8>> {
        self.session
            .tracks()
            .iter()
            .map(|t| t.transport.interleaved.map(|c| c.rtp))
            .collect()
    }

    fn setup(&mut self, i: usize) -> Result<(), PlayError> {
        let Some(control) = self.media.get(i).map(|m| m.control.clone()) else {
            return Ok(());
        };
        let transport = match (self.lower, self.ports.get(i)) {
            (Lower::Tcp, _) => ClientTransport::Interleaved,
            (Lower::Udp, Some(&client_port)) => ClientTransport::Udp { client_port },
            (Lower::Udp, None) => return Ok(()),
        };
        self.session.setup(&control, transport)?;
        Ok(())
    }

    fn on_describe(&mut self, sdp: &[u8]) -> Result<Next, PlayError> {
        let sdp = parse_sdp(sdp)
            .map_err(|e| PlayError::Malformed(format!("DESCRIBE answer's SDP: {e}")))?;
        if sdp.media.is_empty() {
            let skipped: Vec<String> = sdp
                .skipped
                .iter()
                .map(|s| format!("{} {} ({})", s.media, s.encoding, s.reason))
                .collect();
            return Err(PlayError::Unexpected(format!(
                "no media to play in the SDP (skipped: {})",
                skipped.join(", ")
            )));
        }
        self.media = sdp.media;
        match self.lower {
            Lower::Tcp => {
                self.setup(0)?;
                Ok(Next::Continue)
            }
            Lower::Udp => Ok(Next::NeedPorts(self.media.len())),
        }
    }
}

impl RtspClient for Player {
    fn session(&mut self) -> &mut ClientSession {
        &mut self.session
    }

    fn on_event(&mut self, e: ClientEvent) -> Result<Next, PlayError> {
        match e {
            ClientEvent::Options { .. } => {
                self.session.describe()?;
                Ok(Next::Continue)
            }
            ClientEvent::Described { sdp, .. } => self.on_describe(&sdp),
            ClientEvent::SetUp { track, .. } => {
                if track + 1 < self.media.len() {
                    self.setup(track + 1)?;
                } else {
                    self.session.play(Some(NptRange::FROM_ZERO))?;
                }
                Ok(Next::Continue)
            }
            ClientEvent::Playing { .. } => Ok(Next::Started),
            e => common_event(e),
        }
    }

    fn set_ports(&mut self, ports: Vec<PortPair>) -> Result<(), PlayError> {
        if ports.len() != self.media.len() {
            return Err(PlayError::Unexpected(
                "UDP ports for another number of tracks".into(),
            ));
        }
        self.ports = ports;
        self.setup(0)
    }
}

/// A video or audio frame as a figure needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    Video {
        /// Media time in ms on the track's clock (any origin; wraps).
        ts_ms: u32,
        keyframe: bool,
        /// The bench publisher's wall-clock stamp (`crate::stamp`), if it carried one.
        stamp: Option<u64>,
    },
    Audio,
}

/// One track's RTP state.
#[derive(Debug)]
struct TrackRtp {
    depacketizer: RtpDepacketizer,
    video: bool,
    h264: bool,
    clock_rate: i64,
    expected_seq: Option<u16>,
}

/// The tracks' RTP: sequence checks, depacketizing, what each frame is.
#[derive(Debug)]
pub(crate) struct Rtp {
    tracks: Vec<TrackRtp>,
    counts: RtpCounts,
}

impl Rtp {
    /// Depacketizers for the tracks set up (each media with the sequence number of
    /// its first packet, from `RTP-Info`, against which that packet is checked).
    pub(crate) fn new<'a>(
        tracks: impl IntoIterator<Item = (&'a SdpMedia, Option<u16>)>,
    ) -> Result<Self, PlayError> {
        let tracks = tracks
            .into_iter()
            .map(|(media, start_seq)| {
                let depacketizer = media.depacketizer().map_err(|e| {
                    PlayError::Unexpected(format!(
                        "cannot depacketize track {:?}: {e}",
                        media.control
                    ))
                })?;
                Ok(TrackRtp {
                    depacketizer,
                    video: media.codec.is_video(),
                    h264: media.codec == RtpCodec::H264,
                    clock_rate: i64::from(media.clock_rate.max(1)),
                    expected_seq: start_seq,
                })
            })
            .collect::<Result<Vec<_>, PlayError>>()?;
        Ok(Rtp {
            tracks,
            counts: RtpCounts::default(),
        })
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> RtpCounts {
        let mut c = self.counts;
        c.frames_dropped = self
            .tracks
            .iter()
            .map(|t| t.depacketizer.stats().frames_dropped)
            .sum();
        c
    }

    /// One RTP packet of track `track`; `on` sees each frame it completes.
    pub(crate) fn packet(&mut self, track: usize, packet: &[u8], on: &mut impl FnMut(Seen)) {
        let Some(t) = self.tracks.get_mut(track) else {
            return;
        };
        let Some(&[b0, _, s0, s1]) = packet.get(..4) else {
            self.counts.bad_packets += 1;
            return;
        };
        if packet.len() < RTP_HEADER_LEN || b0 >> 6 != 2 {
            self.counts.bad_packets += 1;
            return;
        }
        self.counts.packets += 1;
        let seq = u16::from_be_bytes([s0, s1]);
        if let Some(expected) = t.expected_seq {
            let ahead = seq.wrapping_sub(expected);
            if ahead >= 0x8000 {
                // Behind what came already: the depacketizer drops it too.
                self.counts.late += 1;
                return;
            }
            self.counts.lost += u64::from(ahead);
        }
        t.expected_seq = Some(seq.wrapping_add(1));
        if t.depacketizer.push(packet).is_err() {
            self.counts.bad_packets += 1;
        }
        while let Some(f) = t.depacketizer.poll() {
            if t.video {
                let ms = f.extended_timestamp.saturating_mul(1000) / t.clock_rate;
                on(Seen::Video {
                    // The lag clock works on wrapping u32 ms, as FLV timestamps.
                    ts_ms: ms as u32,
                    keyframe: f.keyframe,
                    stamp: if t.h264 {
                        crate::stamp::find_in_nals(&f.payload)
                    } else {
                        None
                    },
                });
            } else {
                on(Seen::Audio);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::Bytes;
    use sluice_rtsp::{
        ServerConfig, ServerEvent, ServerOutput, ServerSession, SetupAnswer, TrackStart,
    };

    pub(crate) const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=live/x\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
a=control:*\r\na=range:npt=now-\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1;profile-level-id=42C01E;sprop-parameter-sets=Z0LAHtkAoEf+yA==,aM48gA==\r\n\
a=control:trackID=0\r\n\
m=application 0 RTP/AVP 107\r\na=control:trackID=9\r\n\
m=audio 0 RTP/AVP 98\r\na=rtpmap:98 MPEG4-GENERIC/48000/2\r\n\
a=fmtp:98 streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190\r\n\
a=control:trackID=1\r\n";

    /// A client against a `ServerSession` whose application accepts everything
    /// (answering DESCRIBE with `sdp`), until both are quiet. Returns what the client
    /// wrote, and whether media started.
    pub(crate) fn converse(
        client: &mut impl RtspClient,
        server: &mut ServerSession,
        sdp: &'static str,
    ) -> Result<(String, bool), PlayError> {
        let mut written = String::new();
        let mut started = false;
        let mut next_port = 40000;
        let mut bind = |n| {
            Ok((0..n)
                .map(|_| {
                    next_port += 2;
                    PortPair {
                        rtp: next_port,
                        rtcp: next_port + 1,
                    }
                })
                .collect())
        };
        loop {
            let mut out = BytesMut::new();
            started |= drain(client, &mut out, &mut bind)?;
            written.push_str(std::str::from_utf8(&out).unwrap());
            server.handle_input(Instant::now(), &out).unwrap();
            let sent = !out.is_empty();
            out.clear();
            let mut back = Vec::new();
            let mut events = Vec::new();
            while let Some(o) = server.poll_output() {
                match o {
                    ServerOutput::Write(b) => back.extend_from_slice(&b),
                    ServerOutput::Event(e) => events.push(e),
                }
            }
            for e in events {
                match e {
                    ServerEvent::Describe { .. } => {
                        server.answer_describe(Bytes::from_static(sdp.as_bytes()))
                    }
                    ServerEvent::Announce { .. } => server.accept_announce(),
                    ServerEvent::Setup {
                        transport, track, ..
                    } => {
                        server.answer_setup(match transport.interleaved {
                            // The SDP's third section (trackID=1, the second set
                            // up) is moved to other channels: the answer wins.
                            Some(_) if track == 2 => SetupAnswer::Interleaved {
                                channels: sluice_rtsp::ChannelPair { rtp: 6, rtcp: 7 },
                                ssrc: None,
                            },
                            Some(channels) => SetupAnswer::Interleaved {
                                channels,
                                ssrc: None,
                            },
                            None => SetupAnswer::Udp {
                                server_port: PortPair {
                                    rtp: 5000,
                                    rtcp: 5001,
                                },
                                ssrc: None,
                            },
                        })
                    }
                    ServerEvent::Play { .. } => server.answer_play(
                        &[TrackStart {
                            track: 0,
                            seq: 100,
                            rtptime: 0,
                        }],
                        None,
                    ),
                    ServerEvent::Record { .. } => server.accept_record(),
                    _ => Ok(()),
                }
                .unwrap();
                while let Some(o) = server.poll_output() {
                    if let ServerOutput::Write(b) = o {
                        back.extend_from_slice(&b);
                    }
                }
            }
            if back.is_empty() && !sent {
                return Ok((written, started));
            }
            let mut rest: &[u8] = &back;
            while !rest.is_empty() {
                let used =
                    client
                        .session()
                        .handle_input_in_place(Instant::now(), rest, &mut |_, _| {})?;
                rest = &rest[used..];
                started |= drain(client, &mut out, &mut bind)?;
                written.push_str(std::str::from_utf8(&out).unwrap());
                server.handle_input(Instant::now(), &out).unwrap();
                out.clear();
            }
        }
    }

    #[test]
    fn tcp_player_sets_up_each_playable_track_and_plays() {
        let mut p = Player::new("rtsp://h:8554/live/x", Lower::Tcp, Instant::now()).unwrap();
        let mut server = ServerSession::new(ServerConfig::default(), [1; 32], Instant::now());
        let (written, started) = converse(&mut p, &mut server, SDP).unwrap();
        assert!(started, "{written}");
        let requests: Vec<&str> = written
            .lines()
            .filter(|l| l.ends_with(" RTSP/1.0"))
            .collect();
        assert_eq!(
            requests,
            [
                "OPTIONS rtsp://h:8554/live/x RTSP/1.0",
                "DESCRIBE rtsp://h:8554/live/x RTSP/1.0",
                "SETUP rtsp://h:8554/live/x/trackID=0 RTSP/1.0",
                "SETUP rtsp://h:8554/live/x/trackID=1 RTSP/1.0",
                "PLAY rtsp://h:8554/live/x RTSP/1.0",
            ],
            "the application track is left out: {written}"
        );
        assert!(written.contains("User-Agent: sluice-bench\r\n"));
        assert!(written.contains("Transport: RTP/AVP/TCP;unicast;interleaved=2-3\r\n"));
        assert!(written.contains("Range: npt=0.000-\r\n"));
        assert_eq!(p.channels(), vec![Some(0), Some(6)]);
        let starts: Vec<Option<u16>> = p.tracks().map(|(_, s)| s).collect();
        assert_eq!(starts, vec![Some(100), None]);
        assert!(Rtp::new(p.tracks()).is_ok());
    }

    #[test]
    fn udp_player_asks_for_ports() {
        let mut p = Player::new("rtsp://h/live/x", Lower::Udp, Instant::now()).unwrap();
        let mut server = ServerSession::new(ServerConfig::default(), [1; 32], Instant::now());
        let (written, started) = converse(&mut p, &mut server, SDP).unwrap();
        assert!(started, "{written}");
        assert!(
            written.contains("Transport: RTP/AVP;unicast;client_port=40002-40003\r\n"),
            "{written}"
        );
        assert!(written.contains("client_port=40004-40005\r\n"), "{written}");
        assert!(p.set_ports(vec![]).is_err());
    }

    #[test]
    fn refusals_and_sdp_without_media_are_errors() {
        let mut p = Player::new("rtsp://h/live/x", Lower::Tcp, Instant::now()).unwrap();
        let mut server = ServerSession::new(ServerConfig::default(), [1; 32], Instant::now());
        let no_media = "v=0\r\ns=x\r\nm=application 0 RTP/AVP 107\r\n";
        let e = converse(&mut p, &mut server, no_media).unwrap_err();
        assert!(
            e.to_string().starts_with("no media to play in the SDP"),
            "{e}"
        );
        let mut p = Player::new("rtsp://h/live/x", Lower::Tcp, Instant::now()).unwrap();
        let mut out = BytesMut::new();
        drain(&mut p, &mut out, &mut |_| Ok(vec![])).unwrap();
        p.session()
            .handle_input(Instant::now(), b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n")
            .unwrap();
        drain(&mut p, &mut out, &mut |_| Ok(vec![])).unwrap();
        p.session()
            .handle_input(Instant::now(), b"RTSP/1.0 404 Not Found\r\nCSeq: 2\r\n\r\n")
            .unwrap();
        let e = drain(&mut p, &mut out, &mut |_| Ok(vec![])).unwrap_err();
        assert_eq!(e.to_string(), "DESCRIBE answered 404 Not Found");
        assert!(Player::new("rtsp://u:p@h:x/live", Lower::Tcp, Instant::now()).is_err());
    }

    fn rtp(seq: u16, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, if marker { 0x80 | 96 } else { 96 }];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ts.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 1]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn rtp_frames_gaps_and_stamps() {
        let sdp = parse_sdp(SDP.as_bytes()).unwrap();
        let mut rtp_state = Rtp::new([(&sdp.media[0], Some(10))]).unwrap();
        let mut seen = Vec::new();
        let mut on = |s| seen.push(s);
        // The first packet is 2 after RTP-Info's: 2 lost.
        let mut sei = Vec::new();
        crate::stamp::push_sei(&mut sei, 42);
        rtp_state.packet(0, &rtp(12, 90_000, false, &sei), &mut on);
        rtp_state.packet(0, &rtp(13, 90_000, true, &[0x65, 0x88]), &mut on);
        // A late duplicate, then a frame split by a loss (dropped).
        rtp_state.packet(0, &rtp(13, 90_000, true, &[0x65, 0x88]), &mut on);
        rtp_state.packet(0, &rtp(14, 93_600, false, &[0x7c, 0x81, 1]), &mut on);
        rtp_state.packet(0, &rtp(16, 93_600, true, &[0x7c, 0x41, 2]), &mut on);
        rtp_state.packet(0, &rtp(17, 97_200, true, &[0x41, 0x9a]), &mut on);
        rtp_state.packet(0, &[0x80, 96], &mut on);
        assert_eq!(
            seen,
            vec![
                Seen::Video {
                    ts_ms: 1000,
                    keyframe: true,
                    stamp: Some(42)
                },
                Seen::Video {
                    ts_ms: 1080,
                    keyframe: false,
                    stamp: None
                },
            ]
        );
        let c = rtp_state.counts();
        assert_eq!(
            (c.packets, c.lost, c.late, c.bad_packets),
            (6, 3, 1, 1),
            "{c:?}"
        );
        assert_eq!(c.frames_dropped, 1, "{c:?}");
    }
}
