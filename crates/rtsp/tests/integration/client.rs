//! The client session against this crate's own server session, byte for byte and on
//! a fake clock: play over TCP and UDP, record, Digest and Basic authentication,
//! keep-alives, TEARDOWN; then answers no client can go on from, refusals, and bytes
//! of every kind and split.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_rtsp::{
    interleaved_header, AuthConfig, ChannelPair, ClientConfig, ClientEvent, ClientOutput,
    ClientSession, ClientTransport, Credentials, LowerTransport, Method, Mode, NptRange, PortPair,
    RtspError, ServerConfig, ServerEvent, ServerOutput, ServerSession, SetupAnswer, TrackStart,
};

const SDP: &str = "v=0\r\no=- 0 0 IN IP4 0.0.0.0\r\ns=Sluice\r\nt=0 0\r\na=control:*\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:trackID=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/2\r\na=control:trackID=1\r\n";

const URL: &str = "rtsp://127.0.0.1:8554/live/cam";

/// A client and a server wired back to back, with a server application that accepts
/// everything, and the clock both share.
struct Link {
    client: ClientSession,
    server: ServerSession,
    now: Instant,
    events: Vec<ClientEvent>,
    server_events: Vec<ServerEvent>,
    /// Every byte the client wrote.
    sent: Vec<u8>,
}

impl Link {
    fn new(url: &str, server_config: ServerConfig) -> Link {
        let now = Instant::now();
        let mut config = ClientConfig::new(url).expect("url");
        config.user_agent = "test".into();
        Link {
            client: ClientSession::new(config, [5; 32], now),
            server: ServerSession::new(server_config, [7; 32], now),
            now,
            events: Vec::new(),
            server_events: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// Moves bytes both ways until both sides are quiet, answering the server's events.
    fn pump(&mut self) -> Result<(), RtspError> {
        loop {
            let mut moved = false;
            while let Some(out) = self.client.poll_output() {
                match out {
                    ClientOutput::Write(b) => {
                        self.sent.extend_from_slice(&b);
                        self.server
                            .handle_input(self.now, &b)
                            .expect("server reads");
                        moved = true;
                    }
                    ClientOutput::Event(e) => self.events.push(e),
                }
            }
            let mut to_client = Vec::new();
            let mut answers = Vec::new();
            while let Some(out) = self.server.poll_output() {
                match out {
                    ServerOutput::Write(b) => to_client.extend_from_slice(&b),
                    ServerOutput::Event(e) => answers.push(e),
                }
            }
            for e in answers {
                self.answer(&e);
                self.server_events.push(e);
                moved = true;
            }
            if !to_client.is_empty() {
                self.client.handle_input(self.now, &to_client)?;
                moved = true;
            }
            if !moved {
                return Ok(());
            }
        }
    }

    fn answer(&mut self, e: &ServerEvent) {
        let s = &mut self.server;
        let r = match e {
            ServerEvent::Describe { .. } => s.answer_describe(Bytes::from_static(SDP.as_bytes())),
            ServerEvent::Announce { .. } => s.accept_announce(),
            ServerEvent::Setup {
                track, transport, ..
            } => s.answer_setup(match transport.interleaved {
                Some(channels) => SetupAnswer::Interleaved {
                    channels,
                    ssrc: None,
                },
                None => SetupAnswer::Udp {
                    server_port: PortPair {
                        rtp: 6000 + 2 * *track as u16,
                        rtcp: 6001 + 2 * *track as u16,
                    },
                    ssrc: Some(9),
                },
            }),
            ServerEvent::Play { .. } => {
                let starts: Vec<TrackStart> = s
                    .setups()
                    .iter()
                    .map(|t| TrackStart {
                        track: t.track,
                        seq: 100 + t.track as u16,
                        rtptime: 9000,
                    })
                    .collect();
                s.answer_play(&starts, Some(NptRange::FROM_ZERO))
            }
            ServerEvent::Record { .. } => s.accept_record(),
            _ => Ok(()),
        };
        r.expect("the app's answer fits");
    }

    /// The client's events since the last call.
    fn take(&mut self) -> Vec<ClientEvent> {
        std::mem::take(&mut self.events)
    }

    /// The one event since the last call.
    fn one(&mut self) -> ClientEvent {
        let e = self.take();
        assert_eq!(e.len(), 1, "{e:?}");
        e.into_iter().next().expect("one")
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.pump().expect("pump");
    }

    /// What the client wrote since the last call, as text.
    fn sent_text(&mut self) -> String {
        String::from_utf8(std::mem::take(&mut self.sent)).expect("text")
    }
}

/// OPTIONS, DESCRIBE and SETUP of both tracks over `transport`.
fn set_up(l: &mut Link, udp: bool) {
    l.client.options().expect("options");
    l.pump().expect("pump");
    let ClientEvent::Options { public } = l.one() else {
        panic!("options")
    };
    assert!(public.contains(&Method::GetParameter));
    assert_eq!(l.client.keepalive_method(), &Method::GetParameter);
    l.client.describe().expect("describe");
    l.pump().expect("pump");
    let ClientEvent::Described { sdp, content_base } = l.one() else {
        panic!("described")
    };
    assert_eq!(sdp, SDP.as_bytes());
    assert_eq!(content_base, format!("{URL}/"));
    assert_eq!(l.client.aggregate_url(), URL);
    for (i, control) in ["trackID=0", "trackID=1"].into_iter().enumerate() {
        let transport = if udp {
            ClientTransport::Udp {
                client_port: PortPair {
                    rtp: 40000 + 2 * i as u16,
                    rtcp: 40001 + 2 * i as u16,
                },
            }
        } else {
            ClientTransport::Interleaved
        };
        assert_eq!(l.client.setup(control, transport), Ok(i));
        // One request of ours at a time.
        assert!(matches!(l.client.play(None), Err(RtspError::NotNow { .. })));
        l.pump().expect("pump");
        let ClientEvent::SetUp { track, transport } = l.one() else {
            panic!("set up")
        };
        assert_eq!(track, i);
        if udp {
            assert_eq!(transport.lower, LowerTransport::Udp);
            let server_port = transport.server_port.expect("server ports");
            assert_eq!(server_port.rtp, 6000 + 2 * i as u16);
        } else {
            let ch = transport.interleaved.expect("channels");
            assert_eq!(ch.rtp, 2 * i as u8);
        }
    }
    assert_eq!(l.client.session_id(), l.server.session_id());
    assert_eq!(l.client.session_timeout(), Duration::from_secs(60));
}

#[test]
fn plays_over_tcp_with_keep_alives_and_teardown() {
    let mut l = Link::new(URL, ServerConfig::default());
    assert_eq!(
        l.client.poll_timeout(),
        None,
        "no session, nothing in flight"
    );
    set_up(&mut l, false);
    let text = l.sent_text();
    assert!(
        text.starts_with(
            "OPTIONS rtsp://127.0.0.1:8554/live/cam RTSP/1.0\r\nCSeq: 1\r\nUser-Agent: test\r\n"
        ),
        "{text}"
    );
    assert!(text.contains("SETUP rtsp://127.0.0.1:8554/live/cam/trackID=1 RTSP/1.0\r\nCSeq: 4\r\n"));
    l.client.play(Some(NptRange::FROM_ZERO)).expect("play");
    l.pump().expect("pump");
    assert_eq!(
        l.one(),
        ClientEvent::Playing {
            range: Some(NptRange::FROM_ZERO)
        }
    );
    assert!(l.sent_text().contains("Range: npt=0.000-\r\n"));
    assert_eq!(l.client.state_name(), "Playing");
    let tracks = l.client.tracks();
    assert_eq!(
        (tracks[0].start_seq, tracks[1].start_seq),
        (Some(100), Some(101))
    );
    assert_eq!(tracks[1].start_rtptime, Some(9000));
    assert_eq!(tracks[1].url, format!("{URL}/trackID=1"));

    // Media from the server: a frame per track, then RTCP.
    let mut media = Vec::new();
    for (ch, payload) in [(0u8, &b"video"[..]), (2, b"audio"), (3, b"rtcp")] {
        media.extend_from_slice(&interleaved_header(ch, payload.len() as u16));
        media.extend_from_slice(payload);
    }
    l.client.handle_input(l.now, &media).expect("frames");
    l.pump().expect("pump");
    let frames: Vec<(u8, Option<usize>, Bytes)> = l
        .take()
        .into_iter()
        .map(|e| match e {
            ClientEvent::Interleaved { channel, payload } => {
                (channel, l.client.track_of_channel(channel), payload)
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        frames,
        vec![
            (0, Some(0), Bytes::from_static(b"video")),
            (2, Some(1), Bytes::from_static(b"audio")),
            (3, Some(1), Bytes::from_static(b"rtcp")),
        ]
    );

    // Keep-alives: half the 60 s timeout after the last request, then again.
    let played = l.now;
    assert_eq!(
        l.client.poll_timeout(),
        Some(played + Duration::from_secs(30))
    );
    l.advance(Duration::from_secs(29));
    assert!(l.sent_text().is_empty());
    l.advance(Duration::from_secs(1));
    let ka = l.sent_text();
    assert!(
        ka.starts_with("GET_PARAMETER rtsp://127.0.0.1:8554/live/cam RTSP/1.0\r\nCSeq: 6\r\n"),
        "{ka}"
    );
    assert!(ka.contains(&format!(
        "Session: {}\r\n",
        l.client.session_id().expect("id")
    )));
    assert!(l.take().is_empty(), "keep-alive answers raise nothing");
    assert_eq!(
        l.server_events
            .iter()
            .filter(|e| **e == ServerEvent::KeepAlive)
            .count(),
        1
    );
    assert_eq!(
        l.client.poll_timeout(),
        Some(played + Duration::from_secs(60))
    );
    for _ in 0..4 {
        l.advance(Duration::from_secs(30));
    }
    assert!(!l.server.is_closed(), "keep-alives hold the session");
    assert_eq!(
        l.server_events
            .iter()
            .filter(|e| **e == ServerEvent::KeepAlive)
            .count(),
        5
    );

    assert!(l.client.teardown());
    assert!(!l.client.teardown(), "once");
    assert_eq!(l.client.session_id(), None);
    assert_eq!(
        l.client.poll_timeout(),
        Some(l.now + Duration::from_secs(30))
    );
    l.pump().expect("pump");
    assert_eq!(l.one(), ClientEvent::TornDown);
    assert_eq!(l.server.session_id(), None);
    assert_eq!(l.client.poll_timeout(), None);
    assert_eq!(l.client.state_name(), "Init");
}

#[test]
fn plays_over_udp_and_gets_the_server_ports() {
    let mut l = Link::new(URL, ServerConfig::default());
    set_up(&mut l, true);
    let text = l.sent_text();
    assert!(
        text.contains("Transport: RTP/AVP;unicast;client_port=40002-40003\r\n"),
        "{text}"
    );
    let t = &l.client.tracks()[1].transport;
    assert_eq!(
        (t.client_port, t.server_port, t.ssrc),
        (
            Some(PortPair {
                rtp: 40002,
                rtcp: 40003
            }),
            Some(PortPair {
                rtp: 6002,
                rtcp: 6003
            }),
            Some(9)
        )
    );
    l.client.play(None).expect("play");
    l.pump().expect("pump");
    assert!(matches!(l.one(), ClientEvent::Playing { .. }));
    assert!(!l.sent_text().contains("Range"));
}

#[test]
fn records_over_tcp_and_frames_reach_the_server() {
    let mut l = Link::new(URL, ServerConfig::default());
    l.client.options().expect("options");
    l.pump().expect("pump");
    l.take();
    // SETUP before ANNOUNCE is the caller's mistake.
    assert!(matches!(
        l.client.setup("trackID=0", ClientTransport::Interleaved),
        Err(RtspError::NotNow { .. })
    ));
    l.client
        .announce(Bytes::from_static(SDP.as_bytes()))
        .expect("announce");
    l.pump().expect("pump");
    assert_eq!(l.one(), ClientEvent::Announced);
    let text = l.sent_text();
    assert!(text.contains("Content-Type: application/sdp\r\n"), "{text}");
    assert!(text.contains(&format!("Content-Length: {}\r\n", SDP.len())));
    assert!(matches!(l.client.play(None), Err(RtspError::NotNow { .. })));
    for (i, control) in ["trackID=0", "trackID=1"].into_iter().enumerate() {
        l.client
            .setup(control, ClientTransport::Interleaved)
            .expect("setup");
        l.pump().expect("pump");
        let ClientEvent::SetUp { transport, .. } = l.one() else {
            panic!("set up")
        };
        assert_eq!(transport.mode, Mode::Record);
        assert_eq!(
            transport.interleaved,
            Some(ChannelPair {
                rtp: 2 * i as u8,
                rtcp: 2 * i as u8 + 1
            })
        );
    }
    assert!(l.sent_text().contains("interleaved=2-3;mode=record\r\n"));
    l.client.record(Some(NptRange::FROM_ZERO)).expect("record");
    l.pump().expect("pump");
    assert_eq!(l.one(), ClientEvent::Recording);
    assert!(matches!(
        l.server_events.last(),
        Some(ServerEvent::Record { .. })
    ));
    let mut rtp = BytesMut::new();
    l.client
        .encode_interleaved(1, false, b"aac", &mut rtp)
        .expect("framed");
    l.client
        .encode_interleaved(0, true, b"sr", &mut rtp)
        .expect("framed");
    assert!(l
        .client
        .encode_interleaved(2, false, b"x", &mut rtp)
        .is_err());
    l.server.handle_input(l.now, &rtp).expect("server reads");
    l.pump().expect("pump");
    let got: Vec<_> = l
        .server_events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Interleaved {
                channel,
                track,
                payload,
                ..
            } => Some((*channel, *track, payload.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (2, 1, Bytes::from_static(b"aac")),
            (1, 0, Bytes::from_static(b"sr"))
        ]
    );
    // Keep-alives go while recording too (OPTIONS was answered: GET_PARAMETER).
    l.sent_text();
    l.advance(Duration::from_secs(30));
    assert!(l.sent_text().starts_with("GET_PARAMETER "));
    l.client.pause().expect("pause");
    l.pump().expect("pump");
    assert_eq!(l.one(), ClientEvent::Paused);
    l.client.record(None).expect("again");
    l.pump().expect("pump");
    assert_eq!(l.one(), ClientEvent::Recording);
}

fn users() -> HashMap<String, String> {
    HashMap::from([("alice".to_string(), "s3cr:t@".to_string())])
}

fn auth_server() -> ServerConfig {
    ServerConfig {
        auth: Some(AuthConfig::new("Sluice", users())),
        ..ServerConfig::default()
    }
}

#[test]
fn digest_from_the_url_answers_the_challenge_once_then_goes_first() {
    let mut l = Link::new(
        "rtsp://alice:s3cr%3At%40@127.0.0.1:8554/live/cam",
        auth_server(),
    );
    set_up(&mut l, false);
    l.client.play(None).expect("play");
    l.pump().expect("pump");
    assert!(matches!(l.one(), ClientEvent::Playing { .. }));
    let text = l.sent_text();
    assert!(
        !text.contains("alice:"),
        "credentials never in a URL: {text}"
    );
    let requests: Vec<&str> = text
        .split("\r\n\r\n")
        .filter_map(|r| r.lines().next())
        .filter(|l| l.contains("RTSP/1.0"))
        .collect();
    // OPTIONS needs nothing; DESCRIBE is refused once and sent again; the rest carry
    // credentials from the start.
    assert_eq!(
        requests
            .iter()
            .map(|r| r.split(' ').next().unwrap_or(""))
            .collect::<Vec<_>>(),
        ["OPTIONS", "DESCRIBE", "DESCRIBE", "SETUP", "SETUP", "PLAY"]
    );
    assert_eq!(text.matches("Authorization: Digest ").count(), 4);
    assert!(text.contains("qop=auth, nc=00000001"));
    assert!(text.contains("qop=auth, nc=00000004"));
    assert_eq!(l.server.user(), Some("alice"));
    // Keep-alives carry them too.
    l.advance(Duration::from_secs(30));
    assert!(l.sent_text().contains("Authorization: Digest "));
    assert!(!l.server.is_closed());
    assert!(l.take().is_empty());
}

#[test]
fn credentials_refused_or_missing_are_refusals() {
    // A wrong password: one retry, then a refusal that says the credentials failed.
    let mut l = Link::new("rtsp://alice:wrong@127.0.0.1:8554/live/cam", auth_server());
    l.client.describe().expect("describe");
    l.pump().expect("pump");
    let ClientEvent::Refused(r) = l.one() else {
        panic!("refused")
    };
    assert_eq!(
        (r.method.clone(), r.status, r.sent_credentials),
        (Method::Describe, 401, true)
    );
    assert_eq!(
        r.to_string(),
        "DESCRIBE answered 401 Unauthorized: the credentials were refused"
    );
    assert_eq!(l.sent_text().matches("DESCRIBE ").count(), 2);
    // The session goes on: the caller may try again (and is refused again).
    l.client.describe().expect("describe again");
    l.pump().expect("pump");
    assert!(matches!(l.one(), ClientEvent::Refused(_)));

    // No credentials: the challenge is in the refusal.
    let mut l = Link::new(URL, auth_server());
    l.client.describe().expect("describe");
    l.pump().expect("pump");
    let ClientEvent::Refused(r) = l.one() else {
        panic!("refused")
    };
    assert!(!r.sent_credentials);
    assert!(
        r.challenges[0].starts_with("Digest realm=\"Sluice\""),
        "{r:?}"
    );
    assert!(
        r.challenges[1].starts_with("Basic realm=\"Sluice\""),
        "{r:?}"
    );
    assert_eq!(l.sent_text().matches("DESCRIBE ").count(), 1);
}

/// A scripted server: whatever the client writes, `answers` are read back in order.
fn scripted(url: &str) -> (ClientSession, Instant) {
    let now = Instant::now();
    let mut c = ClientConfig::new(url).expect("url");
    c.response_timeout = Some(Duration::from_secs(10));
    (ClientSession::new(c, [1; 32], now), now)
}

fn drain(c: &mut ClientSession) -> (String, Vec<ClientEvent>) {
    let (mut text, mut events) = (String::new(), Vec::new());
    while let Some(o) = c.poll_output() {
        match o {
            ClientOutput::Write(b) => text.push_str(&String::from_utf8_lossy(&b)),
            ClientOutput::Event(e) => events.push(e),
        }
    }
    (text, events)
}

#[test]
fn basic_when_only_basic_is_offered() {
    let (mut c, now) = scripted("rtsp://bob:pw@h/s");
    c.options().expect("options");
    drain(&mut c);
    c.handle_input(
        now,
        b"RTSP/1.0 401 Unauthorized\r\nCSeq: 1\r\nWWW-Authenticate: Basic realm=\"cam\"\r\n\r\n",
    )
    .expect("ok");
    let (text, events) = drain(&mut c);
    assert!(events.is_empty(), "{events:?}");
    // base64("bob:pw")
    assert!(
        text.starts_with("OPTIONS rtsp://h/s RTSP/1.0\r\nCSeq: 2\r\n")
            && text.contains("Authorization: Basic Ym9iOnB3\r\n"),
        "{text}"
    );
    c.handle_input(now, b"RTSP/1.0 200 OK\r\nCSeq: 2\r\n\r\n")
        .expect("ok");
    assert_eq!(
        drain(&mut c).1,
        vec![ClientEvent::Options { public: vec![] }]
    );
    // A challenge we cannot answer is a refusal at once.
    let (mut c, now) = scripted("rtsp://bob:pw@h/s");
    c.options().expect("options");
    drain(&mut c);
    c.handle_input(
        now,
        b"RTSP/1.0 401 Unauthorized\r\nCSeq: 1\r\nWWW-Authenticate: Bearer x\r\n\r\n",
    )
    .expect("ok");
    let (text, events) = drain(&mut c);
    assert!(text.is_empty());
    assert!(
        matches!(&events[..], [ClientEvent::Refused(r)] if r.status == 401 && !r.sent_credentials)
    );
}

#[test]
fn answers_no_client_can_go_on_from_are_final_errors() {
    let cases: [(&[u8], &str); 6] = [
        (b"RTSP/1.0 200 OK\r\nCSeq: 7\r\n\r\n", "CSeq"),
        (b"RTSP/1.0 200 OK\r\n\r\n", "CSeq"),
        (b"HTTP/1.1 200 OK\r\n\r\n", "malformed"),
        (b"\x00\x01\x02\r\n\r\n", "malformed"),
        (
            b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Length: 99999999\r\n\r\n",
            "body",
        ),
        (b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n", "no SDP body"),
    ];
    for (bytes, what) in cases {
        let (mut c, now) = scripted(URL);
        c.describe().expect("describe");
        drain(&mut c);
        match c.handle_input(now, bytes) {
            Err(e) => {
                assert!(e.to_string().contains(what), "{e} / {what}");
                assert!(c.is_closed());
                assert_eq!(c.handle_input(now, b"x"), Err(RtspError::Closed));
                assert_eq!(c.options(), Err(RtspError::Closed));
                assert_eq!(c.poll_timeout(), None);
            }
            Ok(()) => panic!("{:?} was taken", String::from_utf8_lossy(bytes)),
        }
    }
    // A response to nothing.
    let (mut c, now) = scripted(URL);
    assert!(matches!(
        c.handle_input(now, b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n"),
        Err(RtspError::Unexpected { .. })
    ));

    // SETUP answers: no Session, another session, another lower transport.
    let described = || {
        let (mut c, now) = scripted(URL);
        c.describe().expect("describe");
        let answer = format!(
            "RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Length: {}\r\n\r\n{SDP}",
            SDP.len()
        );
        c.handle_input(now, answer.as_bytes()).expect("described");
        drain(&mut c);
        c.setup("trackID=0", ClientTransport::Interleaved)
            .expect("setup");
        drain(&mut c);
        (c, now)
    };
    for (answer, what) in [
        ("RTSP/1.0 200 OK\r\nCSeq: 2\r\n\r\n", "no Session"),
        (
            "RTSP/1.0 200 OK\r\nCSeq: 2\r\nSession: abcdefgh\r\nTransport: RTP/AVP;unicast;client_port=1-2;server_port=3-4\r\n\r\n",
            "asked for RTP/AVP/TCP",
        ),
        (
            "RTSP/1.0 200 OK\r\nCSeq: 2\r\nSession: abcdefgh\r\nTransport: RAW/RAW\r\n\r\n",
            "Transport",
        ),
    ] {
        let (mut c, now) = described();
        let e = c.handle_input(now, answer.as_bytes()).expect_err(what);
        assert!(e.to_string().contains(what), "{e}");
    }
    let (mut c, now) = described();
    c.handle_input(
        now,
        b"RTSP/1.0 200 OK\r\nCSeq: 2\r\nSession: abcdefgh;timeout=10\r\n\r\n",
    )
    .expect("no Transport: ours stands");
    assert_eq!(c.session_timeout(), Duration::from_secs(10));
    assert_eq!(c.keepalive_interval(), Duration::from_secs(5));
    assert_eq!(
        c.tracks()[0].transport.interleaved,
        Some(ChannelPair { rtp: 0, rtcp: 1 })
    );
    drain(&mut c);
    c.setup("trackID=1", ClientTransport::Interleaved)
        .expect("setup");
    drain(&mut c);
    let e = c
        .handle_input(
            now,
            b"RTSP/1.0 200 OK\r\nCSeq: 3\r\nSession: zzzzzzzz\r\n\r\n",
        )
        .expect_err("another session");
    assert!(e.to_string().contains("after abcdefgh"), "{e}");
}

#[test]
fn refusals_leave_the_session_as_it_was() {
    let (mut c, now) = scripted(URL);
    c.describe().expect("describe");
    drain(&mut c);
    c.handle_input(now, b"RTSP/1.0 404 Not Found\r\nCSeq: 1\r\n\r\n")
        .expect("a refusal is no error");
    let (_, events) = drain(&mut c);
    let [ClientEvent::Refused(r)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(r.to_string(), "DESCRIBE answered 404 Not Found");
    assert_eq!(c.state_name(), "Init");
    c.describe().expect("may try again");
}

#[test]
fn an_unanswered_request_times_out() {
    let (mut c, now) = scripted(URL);
    c.options().expect("options");
    drain(&mut c);
    assert_eq!(c.poll_timeout(), Some(now + Duration::from_secs(10)));
    c.handle_timeout(now + Duration::from_secs(9));
    assert!(drain(&mut c).1.is_empty());
    c.handle_timeout(now + Duration::from_secs(10));
    assert_eq!(
        drain(&mut c).1,
        vec![ClientEvent::Timeout {
            method: Method::Options
        }]
    );
    assert!(c.is_closed());
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn requests_of_the_server_are_answered() {
    let (mut c, now) = scripted(URL);
    c.handle_input(
        now,
        b"GET_PARAMETER rtsp://h/s RTSP/1.0\r\nCSeq: 41\r\n\r\nREDIRECT rtsp://h/s RTSP/1.0\r\nCSeq: 42\r\nLocation: rtsp://o/s\r\n\r\nOPTIONS * RTSP/1.0\r\n\r\n",
    )
    .expect("requests");
    let (text, events) = drain(&mut c);
    assert_eq!(
        text,
        "RTSP/1.0 200 OK\r\nCSeq: 41\r\n\r\nRTSP/1.0 501 Not Implemented\r\nCSeq: 42\r\n\r\nRTSP/1.0 400 Bad Request\r\n\r\n"
    );
    assert_eq!(
        events,
        vec![ClientEvent::ServerRequest {
            method: Method::Other("REDIRECT".into()),
            uri: "rtsp://h/s".into()
        }]
    );
}

#[test]
fn teardown_goes_behind_a_keep_alive_and_old_answers_change_nothing() {
    let mut l = Link::new(URL, ServerConfig::default());
    set_up(&mut l, false);
    l.client.play(None).expect("play");
    l.pump().expect("pump");
    l.take();
    l.now += Duration::from_secs(30);
    l.client.handle_timeout(l.now);
    // The keep-alive is in flight (not pumped): TEARDOWN goes behind it.
    assert!(l.client.teardown());
    assert!(matches!(l.client.play(None), Err(RtspError::NotNow { .. })));
    l.pump().expect("pump");
    assert_eq!(l.take(), vec![ClientEvent::TornDown]);
    let text = l.sent_text();
    let ka = text.find("GET_PARAMETER").expect("keep-alive");
    let td = text.find("TEARDOWN").expect("teardown");
    assert!(ka < td);
}

/// Answers and frames a player reads, in one stream.
fn player_stream() -> (ClientSession, Instant, Vec<u8>) {
    let (mut c, now) = scripted(URL);
    c.options().expect("options");
    drain(&mut c);
    let mut s = Vec::new();
    s.extend_from_slice(b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nPublic: OPTIONS, GET_PARAMETER\r\n\r\n");
    s.extend_from_slice(&[b'$', 0, 0, 3, 1, 2, 3]);
    s.extend_from_slice(&[b'$', 2, 0, 0]);
    s.extend_from_slice(b"\r\n");
    s.extend_from_slice(b"GET_PARAMETER * RTSP/1.0\r\nCSeq: 9\r\nContent-Length: 4\r\n\r\nbody");
    let big: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    s.extend_from_slice(&[b'$', 1, 0x03, 0xe8]);
    s.extend_from_slice(&big);
    (c, now, s)
}

/// What a player sees of `chunks` read in place: frames and events in order, and
/// what it wrote.
fn read_in_place(chunks: &[&[u8]]) -> (Vec<String>, String) {
    let (mut c, now, _) = player_stream();
    let mut seen = Vec::new();
    let mut written = String::new();
    for chunk in chunks {
        let mut data: &[u8] = chunk;
        loop {
            let used = c
                .handle_input_in_place(now, data, &mut |ch, p| {
                    seen.push(format!("frame {ch} {} {:?}", p.len(), p.get(..3)))
                })
                .expect("valid");
            let (text, events) = drain(&mut c);
            written.push_str(&text);
            seen.extend(events.iter().map(|e| format!("{e:?}")));
            data = &data[used..];
            if data.is_empty() {
                break;
            }
        }
    }
    (seen, written)
}

#[test]
fn in_place_reading_gives_the_same_for_every_split() {
    let (_, _, s) = player_stream();
    let (whole, written) = read_in_place(&[&s]);
    assert_eq!(whole.len(), 4, "{whole:?}");
    assert!(whole[0].starts_with("Options"), "{whole:?}");
    assert_eq!(whole[1], "frame 0 3 Some([1, 2, 3])");
    assert_eq!(whole[2], "frame 2 0 None");
    assert_eq!(whole[3], "frame 1 1000 Some([0, 1, 2])");
    assert_eq!(written, "RTSP/1.0 200 OK\r\nCSeq: 9\r\n\r\n");
    for at in 0..s.len() {
        assert_eq!(
            read_in_place(&[&s[..at], &s[at..]]).0,
            whole,
            "split at {at}"
        );
    }
    let bytes: Vec<&[u8]> = s.chunks(1).collect();
    assert_eq!(read_in_place(&bytes).0, whole);

    // The buffered way gives the same frames as events.
    let (mut c, now, s) = player_stream();
    for b in s.chunks(7) {
        c.handle_input(now, b).expect("valid");
    }
    let events = drain(&mut c).1;
    let frames: Vec<(u8, usize)> = events
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Interleaved { channel, payload } => Some((*channel, payload.len())),
            _ => None,
        })
        .collect();
    assert_eq!(frames, vec![(0, 3), (2, 0), (1, 1000)]);
    assert_eq!(c.keepalive_method(), &Method::GetParameter);
}

#[test]
fn in_place_reading_stops_after_an_event() {
    let (mut c, now, s) = player_stream();
    let mut frames = 0;
    let used = c
        .handle_input_in_place(now, &s, &mut |_, _| frames += 1)
        .expect("valid");
    let head = b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nPublic: OPTIONS, GET_PARAMETER\r\n\r\n".len();
    assert_eq!((used, frames), (head, 0));
    assert!(matches!(drain(&mut c).1[..], [ClientEvent::Options { .. }]));
}

#[test]
fn credentials_are_not_in_debug_output() {
    let c = ClientConfig::new("rtsp://u:topsecret@h/s").expect("url");
    assert_eq!(c.credentials, Some(Credentials::new("u", "topsecret")));
    assert!(!format!("{c:?}").contains("topsecret"));
}

proptest! {
    #[test]
    fn any_bytes_any_split_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        cut in 1usize..64,
        lead in prop_oneof![Just(&b""[..]), Just(&b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n"[..]), Just(&b"$\x00"[..])],
    ) {
        let mut bytes = lead.to_vec();
        bytes.extend_from_slice(&data);
        let (mut a, now, _) = player_stream();
        for chunk in bytes.chunks(cut) {
            if a.handle_input(now, chunk).is_err() {
                break;
            }
        }
        drain(&mut a);
        let (mut b, now, _) = player_stream();
        'outer: for chunk in bytes.chunks(cut) {
            let mut rest = chunk;
            while !rest.is_empty() {
                match b.handle_input_in_place(now, rest, &mut |_, _| {}) {
                    Ok(used) => rest = &rest[used..],
                    Err(_) => break 'outer,
                }
                drain(&mut b);
            }
        }
        b.handle_timeout(now + Duration::from_secs(3600));
        drain(&mut b);
    }
}
