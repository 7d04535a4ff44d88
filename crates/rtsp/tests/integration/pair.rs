//! Whole conversations as ffmpeg has them with a server: play over TCP, publish over
//! UDP and over TCP, with authentication, keep-alives and the timeout.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::Pair;
use bytes::Bytes;
use sluice_rtsp::auth::digest_response;
use sluice_rtsp::{
    AuthConfig, AuthPolicy, ChannelPair, ClockRange, LowerTransport, Mode, NptRange, NptTime,
    PlayRange, PortPair, RtpInfo, Scale, ServerConfig, ServerEvent, SessionHeader, SetupAnswer,
    TrackStart,
};

const UA: &str = "Lavf61.7.100";

/// The SDP our server would answer for a stream with H.264 video and AAC audio.
const PLAY_SDP: &str = "v=0\r\no=- 0 0 IN IP4 0.0.0.0\r\ns=Sluice\r\nt=0 0\r\na=control:*\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1;profile-level-id=64001F;sprop-parameter-sets=Z2QAH6zZQFAFuhAAAAMAEAAAAwPI8YMZYA==,aOvjyyLA\r\na=control:trackID=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/2\r\na=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1210\r\na=control:trackID=1\r\n";

/// The SDP `ffmpeg -re -i in.mp4 -c copy -f rtsp rtsp://127.0.0.1:8554/live/pub` announces.
const FFMPEG_ANNOUNCE_SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\na=tool:libavformat 61.7.100\r\nm=video 0 RTP/AVP 96\r\nb=AS:2000\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAH6zZQFAFuhAAAAMAEAAAAwPI8YMZYA==,aOvjyyLA; profile-level-id=64001F\r\na=control:streamid=0\r\nm=audio 0 RTP/AVP 97\r\nb=AS:128\r\na=rtpmap:97 MPEG4-GENERIC/44100/2\r\na=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=121056E500\r\na=control:streamid=1\r\n";

fn session_of(p: &mut Pair) -> String {
    p.server.session_id().expect("a session").to_string()
}

#[test]
fn ffmpeg_plays_over_tcp() {
    let mut p = Pair::new(ServerConfig::default());

    p.send_text(&format!(
        "OPTIONS rtsp://127.0.0.1:8554/live/cam1 RTSP/1.0\nCSeq: 1\nUser-Agent: {UA}\n\n"
    ))
    .expect("ok");
    let r = p.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("CSeq"), Some("1"));
    assert_eq!(r.header("Server"), Some("Sluice"));
    assert!(r.header("Public").expect("Public").contains("DESCRIBE"));
    assert!(p.events.is_empty());

    p.send_text(&format!(
        "DESCRIBE rtsp://127.0.0.1:8554/live/cam1 RTSP/1.0\nAccept: application/sdp\nCSeq: 2\nUser-Agent: {UA}\n\n"
    ))
    .expect("ok");
    assert_eq!(
        p.event(),
        ServerEvent::Describe {
            path: "/live/cam1".into(),
            query: String::new(),
            user: None,
            authorization: None
        }
    );
    p.no_response();
    p.server
        .answer_describe(Bytes::from_static(PLAY_SDP.as_bytes()))
        .expect("pending");
    p.drain();
    let r = p.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("CSeq"), Some("2"));
    assert_eq!(
        r.header("Content-Base"),
        Some("rtsp://127.0.0.1:8554/live/cam1/")
    );
    assert_eq!(r.header("Content-Type"), Some("application/sdp"));
    assert_eq!(r.body, PLAY_SDP.as_bytes());

    p.send_text(&format!(
        "SETUP rtsp://127.0.0.1:8554/live/cam1/trackID=0 RTSP/1.0\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\nCSeq: 3\nUser-Agent: {UA}\n\n"
    ))
    .expect("ok");
    let ServerEvent::Setup {
        path,
        track,
        track_control,
        transport,
    } = p.event()
    else {
        panic!("setup expected")
    };
    assert_eq!(
        (path.as_str(), track, track_control.as_str()),
        ("/live/cam1", 0, "trackID=0")
    );
    assert_eq!(transport.lower, LowerTransport::Tcp);
    let channels = transport.interleaved.expect("client proposed channels");
    p.server
        .answer_setup(SetupAnswer::Interleaved {
            channels,
            ssrc: Some(0x1234_5678),
        })
        .expect("pending");
    p.drain();
    let r = p.response();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Transport"),
        Some("RTP/AVP/TCP;unicast;interleaved=0-1;ssrc=12345678")
    );
    let session = SessionHeader::parse(r.header("Session").expect("Session")).expect("valid");
    assert_eq!(session.timeout, Some(60));
    assert!(session.id.len() >= 8);
    assert_eq!(session.id, session_of(&mut p));

    p.send_text(&format!(
        "SETUP rtsp://127.0.0.1:8554/live/cam1/trackID=1 RTSP/1.0\nTransport: RTP/AVP/TCP;unicast;interleaved=2-3\nCSeq: 4\nUser-Agent: {UA}\nSession: {}\n\n",
        session.id
    ))
    .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Setup { track: 1, .. }));
    // Channels another track uses are the app's mistake.
    assert!(p
        .server
        .answer_setup(SetupAnswer::Interleaved {
            channels: ChannelPair { rtp: 1, rtcp: 2 },
            ssrc: None
        })
        .is_err());
    assert!(p
        .server
        .answer_setup(SetupAnswer::Udp {
            server_port: PortPair { rtp: 1, rtcp: 2 },
            ssrc: None
        })
        .is_err());
    p.server
        .answer_setup(SetupAnswer::Interleaved {
            channels: ChannelPair { rtp: 2, rtcp: 3 },
            ssrc: Some(0x9abc_def0),
        })
        .expect("pending");
    p.drain();
    assert_eq!(p.response().status, 200);

    p.send_text(&format!(
        "PLAY rtsp://127.0.0.1:8554/live/cam1/ RTSP/1.0\nRange: npt=0.000-\nCSeq: 5\nUser-Agent: {UA}\nSession: {}\n\n",
        session.id
    ))
    .expect("ok");
    assert_eq!(
        p.event(),
        ServerEvent::Play {
            range: Some(PlayRange::Npt(NptRange::FROM_ZERO)),
            scale: None
        }
    );
    p.server
        .answer_play(
            &[
                TrackStart {
                    track: 0,
                    seq: 100,
                    rtptime: 9000,
                },
                TrackStart {
                    track: 1,
                    seq: 7,
                    rtptime: 4410,
                },
            ],
            Some(NptRange::FROM_ZERO),
        )
        .expect("pending");
    p.drain();
    let r = p.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Range"), Some("npt=0.000-"));
    assert_eq!(
        RtpInfo::parse_list(r.header("RTP-Info").expect("RTP-Info")).expect("valid"),
        vec![
            RtpInfo {
                url: "rtsp://127.0.0.1:8554/live/cam1/trackID=0".into(),
                seq: Some(100),
                rtptime: Some(9000)
            },
            RtpInfo {
                url: "rtsp://127.0.0.1:8554/live/cam1/trackID=1".into(),
                seq: Some(7),
                rtptime: Some(4410)
            },
        ]
    );
    assert_eq!(p.server.state_name(), "Playing");

    // ffmpeg sends RTCP receiver reports back on the RTCP channels.
    p.send(b"$\x01\x00\x08\x81\xc9\x00\x01\x00\x00\x00\x01")
        .expect("ok");
    assert!(matches!(
        p.event(),
        ServerEvent::Interleaved {
            channel: 1,
            track: 0,
            rtcp: true,
            ..
        }
    ));

    p.send_text(&format!(
        "GET_PARAMETER rtsp://127.0.0.1:8554/live/cam1/ RTSP/1.0\nCSeq: 6\nUser-Agent: {UA}\nSession: {}\n\n",
        session.id
    ))
    .expect("ok");
    assert_eq!(p.response().status, 200);
    assert_eq!(p.event(), ServerEvent::KeepAlive);

    p.send_text(&format!(
        "TEARDOWN rtsp://127.0.0.1:8554/live/cam1/ RTSP/1.0\nCSeq: 7\nUser-Agent: {UA}\nSession: {}\n\n",
        session.id
    ))
    .expect("ok");
    let r = p.response();
    assert_eq!((r.status, r.header("CSeq")), (200, Some("7")));
    assert_eq!(
        r.header("Session").map(|s| s.starts_with(&session.id)),
        Some(true)
    );
    assert_eq!(p.event(), ServerEvent::Teardown);
    assert_eq!(p.server.session_id(), None);
    assert_eq!(p.server.state_name(), "Init");
}

#[test]
fn ffmpeg_publishes_over_udp() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text(&format!(
        "OPTIONS rtsp://127.0.0.1:8554/live/pub RTSP/1.0\nCSeq: 1\nUser-Agent: {UA}\n\n"
    ))
    .expect("ok");
    assert_eq!(p.response().status, 200);

    // The body is sent as is (its own CRLFs), the head converted.
    let head = format!(
        "ANNOUNCE rtsp://127.0.0.1:8554/live/pub?key=s3cret RTSP/1.0\r\nContent-Type: application/sdp\r\nCSeq: 2\r\nUser-Agent: {UA}\r\nContent-Length: {}\r\n\r\n",
        FFMPEG_ANNOUNCE_SDP.len()
    );
    // Split inside the body: the session waits for all of it.
    let whole = format!("{head}{FFMPEG_ANNOUNCE_SDP}");
    let (a, b) = whole.as_bytes().split_at(head.len() + 40);
    p.send(a).expect("ok");
    assert!(p.events.is_empty());
    p.send(b).expect("ok");
    let ServerEvent::Announce {
        path,
        query,
        sdp,
        user,
        ..
    } = p.event()
    else {
        panic!("announce expected")
    };
    assert_eq!(
        (path.as_str(), query.as_str(), user),
        ("/live/pub", "key=s3cret", None)
    );
    assert_eq!(sdp, FFMPEG_ANNOUNCE_SDP.as_bytes());
    p.server.accept_announce().expect("pending");
    p.drain();
    assert_eq!(p.response().status, 200);
    assert_eq!(p.server.stream_query(), Some("key=s3cret"));

    // ffmpeg builds track URLs from the announce URL, query included.
    p.send_text(&format!(
        "SETUP rtsp://127.0.0.1:8554/live/pub?key=s3cret/streamid=0 RTSP/1.0\nTransport: RTP/AVP/UDP;unicast;client_port=21014-21015;mode=record\nCSeq: 3\nUser-Agent: {UA}\n\n"
    ))
    .expect("ok");
    let ServerEvent::Setup {
        track, transport, ..
    } = p.event()
    else {
        panic!("setup expected")
    };
    assert_eq!(track, 0);
    assert_eq!(transport.mode, Mode::Record);
    assert_eq!(
        transport.client_port,
        Some(PortPair {
            rtp: 21014,
            rtcp: 21015
        })
    );
    p.server
        .answer_setup(SetupAnswer::Udp {
            server_port: PortPair {
                rtp: 30000,
                rtcp: 30001,
            },
            ssrc: None,
        })
        .expect("pending");
    p.drain();
    let r = p.response();
    assert_eq!(
        r.header("Transport"),
        Some("RTP/AVP;unicast;client_port=21014-21015;server_port=30000-30001;mode=record")
    );
    let id = session_of(&mut p);

    p.send_text(&format!(
        "SETUP rtsp://127.0.0.1:8554/live/pub?key=s3cret/streamid=1 RTSP/1.0\nTransport: RTP/AVP/UDP;unicast;client_port=21016-21017;mode=record\nCSeq: 4\nUser-Agent: {UA}\nSession: {id}\n\n"
    ))
    .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Setup { track: 1, .. }));
    p.server
        .answer_setup(SetupAnswer::Udp {
            server_port: PortPair {
                rtp: 30002,
                rtcp: 30003,
            },
            ssrc: None,
        })
        .expect("pending");
    p.drain();
    assert_eq!(p.response().status, 200);
    assert_eq!(p.server.setups().len(), 2);

    // A player's PLAY on a publishing session is wrong for the state.
    p.send_text(&format!(
        "PLAY rtsp://127.0.0.1:8554/live/pub RTSP/1.0\nCSeq: 5\nSession: {id}\n\n"
    ))
    .expect("ok");
    assert_eq!(p.response().status, 455);

    p.send_text(&format!(
        "RECORD rtsp://127.0.0.1:8554/live/pub?key=s3cret RTSP/1.0\nRange: npt=0.000-\nCSeq: 6\nUser-Agent: {UA}\nSession: {id}\n\n"
    ))
    .expect("ok");
    assert_eq!(
        p.event(),
        ServerEvent::Record {
            range: Some(NptRange::FROM_ZERO)
        }
    );
    p.server.accept_record().expect("pending");
    p.drain();
    assert_eq!(p.response().status, 200);
    assert_eq!(p.server.state_name(), "Recording");

    // Media comes over UDP: the app reports it, so the quiet TCP connection lives on.
    for _ in 0..5 {
        p.now += Duration::from_secs(30);
        p.server.note_activity(p.now);
        p.advance(Duration::ZERO);
        assert!(p.events.is_empty());
    }
    p.advance(Duration::from_secs(61));
    assert_eq!(p.event(), ServerEvent::Timeout);
    assert!(p.server.is_closed());
    assert_eq!(p.server.poll_timeout(), None);
}

#[test]
fn ffmpeg_publishes_over_tcp_and_media_reaches_the_app() {
    let mut p = Pair::new(ServerConfig::default());
    let head = format!(
        "ANNOUNCE rtsp://127.0.0.1:8554/live/pub RTSP/1.0\r\nContent-Type: application/sdp\r\nCSeq: 1\r\nUser-Agent: {UA}\r\nContent-Length: {}\r\n\r\n",
        FFMPEG_ANNOUNCE_SDP.len()
    );
    p.send(format!("{head}{FFMPEG_ANNOUNCE_SDP}").as_bytes())
        .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Announce { .. }));
    p.server.accept_announce().expect("pending");
    for (cseq, track) in [(2, 0u8), (3, 1)] {
        let session = p
            .server
            .session_id()
            .map(|id| format!("Session: {id}\n"))
            .unwrap_or_default();
        p.send_text(&format!(
            "SETUP rtsp://127.0.0.1:8554/live/pub/streamid={track} RTSP/1.0\nTransport: RTP/AVP/TCP;unicast;interleaved={}-{};mode=record\nCSeq: {cseq}\nUser-Agent: {UA}\n{session}\n",
            2 * track,
            2 * track + 1
        ))
        .expect("ok");
        let ServerEvent::Setup { transport, .. } = p.event() else {
            panic!()
        };
        p.server
            .answer_setup(SetupAnswer::Interleaved {
                channels: transport.interleaved.expect("channels"),
                ssrc: None,
            })
            .expect("pending");
    }
    p.drain();
    p.responses.clear();
    let id = session_of(&mut p);
    // RECORD, then media at once in the same read, as ffmpeg's writes may coalesce.
    let mut wire = format!(
        "RECORD rtsp://127.0.0.1:8554/live/pub RTSP/1.0\r\nRange: npt=0.000-\r\nCSeq: 4\r\nUser-Agent: {UA}\r\nSession: {id}\r\n\r\n"
    )
    .into_bytes();
    let rtp = [0x80u8, 96, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0x65, 0x88];
    wire.extend_from_slice(b"$\x00\x00\x0e");
    wire.extend_from_slice(&rtp);
    wire.extend_from_slice(b"$\x02\x00\x0e");
    wire.extend_from_slice(&rtp);
    p.send(&wire).expect("ok");
    // Nothing past the RECORD is read before the app answers it.
    assert!(matches!(p.event(), ServerEvent::Record { .. }));
    p.server.accept_record().expect("pending");
    p.drain();
    assert_eq!(p.response().status, 200);
    assert_eq!(
        p.events,
        vec![
            ServerEvent::Interleaved {
                channel: 0,
                track: 0,
                rtcp: false,
                payload: Bytes::copy_from_slice(&rtp)
            },
            ServerEvent::Interleaved {
                channel: 2,
                track: 1,
                rtcp: false,
                payload: Bytes::copy_from_slice(&rtp)
            },
        ]
    );
    p.events.clear();

    // The last media, a sender report and the TEARDOWN in one read (ffmpeg closing):
    // the TEARDOWN clears the set-ups before the app sees the frames, so each event
    // says for itself whether it is RTP or RTCP.
    let sr = [
        0x80u8, 200, 0, 6, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let mut wire = b"$\x00\x00\x0e".to_vec();
    wire.extend_from_slice(&rtp);
    wire.extend_from_slice(b"$\x01\x00\x1c");
    wire.extend_from_slice(&sr);
    wire.extend_from_slice(
        format!(
            "TEARDOWN rtsp://127.0.0.1:8554/live/pub RTSP/1.0\r\nCSeq: 5\r\nSession: {id}\r\n\r\n"
        )
        .as_bytes(),
    );
    p.send(&wire).expect("ok");
    p.drain();
    assert_eq!(p.response().status, 200);
    assert!(p.server.setups().is_empty());
    assert_eq!(
        p.events,
        vec![
            ServerEvent::Interleaved {
                channel: 0,
                track: 0,
                rtcp: false,
                payload: Bytes::copy_from_slice(&rtp)
            },
            ServerEvent::Interleaved {
                channel: 1,
                track: 0,
                rtcp: true,
                payload: Bytes::copy_from_slice(&sr)
            },
            ServerEvent::Teardown,
        ]
    );
}

fn users() -> HashMap<String, String> {
    HashMap::from([("admin".to_string(), "pa55".to_string())])
}

/// Pulls `name="value"` out of a challenge.
fn param<'a>(challenge: &'a str, name: &str) -> &'a str {
    let start = challenge.find(&format!("{name}=\"")).expect(name) + name.len() + 2;
    let rest = &challenge[start..];
    &rest[..rest.find('"').expect("closing quote")]
}

#[test]
fn digest_challenge_and_retry_like_ffmpeg() {
    let config = ServerConfig {
        auth: Some(AuthConfig::new("Sluice", users())),
        ..ServerConfig::default()
    };
    let mut p = Pair::new(config);
    let uri = "rtsp://127.0.0.1:8554/live/cam1";

    // OPTIONS never needs credentials.
    p.send_text(&format!("OPTIONS {uri} RTSP/1.0\nCSeq: 1\n\n"))
        .expect("ok");
    assert_eq!(p.response().status, 200);

    p.send_text(&format!(
        "DESCRIBE {uri} RTSP/1.0\nAccept: application/sdp\nCSeq: 2\n\n"
    ))
    .expect("ok");
    let r = p.response();
    assert_eq!(r.status, 401);
    assert!(p.events.is_empty());
    let challenges: Vec<&str> = r.headers.get_all("WWW-Authenticate").collect();
    assert_eq!(challenges.len(), 2);
    assert!(challenges[0].starts_with("Digest "));
    assert!(challenges[1].starts_with("Basic "));
    let nonce = param(challenges[0], "nonce").to_string();
    assert_eq!(param(challenges[0], "realm"), "Sluice");

    // A wrong password: 401 again with a fresh nonce.
    let bad = digest_response(
        "admin",
        "Sluice",
        "nope",
        "DESCRIBE",
        uri,
        &nonce,
        Some(("00000001", "abc")),
    );
    p.send_text(&format!(
        "DESCRIBE {uri} RTSP/1.0\nAccept: application/sdp\nCSeq: 3\nAuthorization: Digest username=\"admin\", realm=\"Sluice\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{bad}\", qop=auth, nc=00000001, cnonce=\"abc\"\n\n"
    ))
    .expect("ok");
    assert_eq!(p.response().status, 401);

    // ffmpeg's retry: qop=auth.
    let good = digest_response(
        "admin",
        "Sluice",
        "pa55",
        "DESCRIBE",
        uri,
        &nonce,
        Some(("00000001", "abc")),
    );
    p.send_text(&format!(
        "DESCRIBE {uri} RTSP/1.0\nAccept: application/sdp\nCSeq: 4\nAuthorization: Digest username=\"admin\", realm=\"Sluice\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{good}\", algorithm=\"MD5\", qop=auth, nc=00000001, cnonce=\"abc\"\n\n"
    ))
    .expect("ok");
    assert_eq!(
        p.event(),
        ServerEvent::Describe {
            path: "/live/cam1".into(),
            query: String::new(),
            user: Some("admin".into()),
            authorization: None
        }
    );
    p.server.not_found().expect("pending");
    p.drain();
    assert_eq!(p.response().status, 404);

    // live555-style legacy Digest (no qop) on a later request.
    let legacy = digest_response("admin", "Sluice", "pa55", "DESCRIBE", uri, &nonce, None);
    p.send_text(&format!(
        "DESCRIBE {uri} RTSP/1.0\nCSeq: 5\nAuthorization: Digest username=\"admin\", realm=\"Sluice\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{legacy}\"\n\n"
    ))
    .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Describe { .. }));
    p.server.reject(403).expect("pending");
    p.drain();
    assert_eq!(p.response().status, 403);

    // After the nonce's lifetime the same good answer is stale.
    p.now += Duration::from_secs(301);
    p.send_text(&format!(
        "DESCRIBE {uri} RTSP/1.0\nCSeq: 6\nAuthorization: Digest username=\"admin\", realm=\"Sluice\", nonce=\"{nonce}\", uri=\"{uri}\", response=\"{legacy}\"\n\n"
    ))
    .expect("ok");
    let r = p.response();
    assert_eq!(r.status, 401);
    assert!(r
        .header("WWW-Authenticate")
        .expect("challenge")
        .contains("stale=TRUE"));
}

#[test]
fn publish_only_policy_lets_players_in() {
    let config = ServerConfig {
        auth: Some(AuthConfig::new("Sluice", users())),
        auth_policy: AuthPolicy::Publish,
        ..ServerConfig::default()
    };
    let mut p = Pair::new(config);
    p.send_text("DESCRIBE rtsp://h/live/a RTSP/1.0\nCSeq: 1\n\n")
        .expect("ok");
    assert!(matches!(
        p.event(),
        ServerEvent::Describe { user: None, .. }
    ));
    p.server.not_found().expect("pending");
    p.drain();
    p.responses.clear();
    p.send_text("ANNOUNCE rtsp://h/live/a RTSP/1.0\nCSeq: 2\nContent-Type: application/sdp\nContent-Length: 5\n\nv=0\r\n")
        .expect("ok");
    assert_eq!(p.response().status, 401);
    let basic = "Basic YWRtaW46cGE1NQ=="; // admin:pa55
    p.send_text(&format!(
        "ANNOUNCE rtsp://h/live/a RTSP/1.0\nCSeq: 3\nAuthorization: {basic}\nContent-Type: application/sdp\nContent-Length: 5\n\nv=0\r\n"
    ))
    .expect("ok");
    assert!(matches!(
        p.event(),
        ServerEvent::Announce { user: Some(_), .. }
    ));
}

#[test]
fn play_range_forms_reach_the_app() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("DESCRIBE rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: 1\n\n")
        .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Describe { .. }));
    p.server
        .answer_describe(Bytes::from_static(b"v=0\r\nm=video 0 RTP/AVP 96\r\n"))
        .expect("pending");
    // A single track without a=control is set up at the stream URL itself.
    p.send_text("SETUP rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: 2\nTransport: RTP/AVP;unicast;client_port=5000-5001\n\n")
        .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Setup { track: 0, .. }));
    p.server
        .answer_setup(SetupAnswer::Udp {
            server_port: PortPair {
                rtp: 6000,
                rtcp: 6001,
            },
            ssrc: Some(1),
        })
        .expect("pending");
    p.drain();
    p.responses.clear();
    let id = session_of(&mut p);
    p.send_text(&format!(
        "PLAY rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: 3\nSession: {id}\nRange: npt=00:00:12.5-20\n\n"
    ))
    .expect("ok");
    assert_eq!(
        p.event(),
        ServerEvent::Play {
            range: Some(PlayRange::Npt(NptRange {
                start: Some(NptTime::At(Duration::from_millis(12_500))),
                end: Some(NptTime::At(Duration::from_secs(20)))
            })),
            scale: None
        }
    );
    p.server.answer_play(&[], None).expect("pending");
    p.drain();
    assert_eq!(p.response().status, 200);
    // PLAY again while playing (a seek): allowed; a smpte range is not understood.
    p.send_text(&format!(
        "PLAY rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: 4\nSession: {id}\nRange: smpte=0:10:00-\n\n"
    ))
    .expect("ok");
    assert_eq!(p.response().status, 457);
    p.send_text(&format!(
        "PLAY rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: 5\nSession: {id}\nRange: npt=now-\n\n"
    ))
    .expect("ok");
    assert_eq!(
        p.event(),
        ServerEvent::Play {
            range: Some(PlayRange::Npt(NptRange {
                start: Some(NptTime::Now),
                end: None
            })),
            scale: None
        }
    );
    p.server.answer_play(&[], None).expect("pending");
    p.drain();
    assert_eq!(p.response().status, 200);
    // An absolute range (NVR clients, ONVIF replay) and a speed, answered as served.
    p.send_text(&format!(
        "PLAY rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: 6\nSession: {id}\nRange: clock=20261127T100000Z-20261127T101500Z\nScale: 2.0\n\n"
    ))
    .expect("ok");
    let clock = ClockRange {
        start: Some(1_795_773_600_000),
        end: Some(1_795_774_500_000),
    };
    assert_eq!(
        p.event(),
        ServerEvent::Play {
            range: Some(PlayRange::Clock(clock)),
            scale: Some(Scale { milli: 2000 })
        }
    );
    p.server
        .answer_play_at(
            &[],
            Some(PlayRange::Clock(clock)),
            Some(Scale { milli: 2000 }),
        )
        .expect("pending");
    p.drain();
    let resp = p.response();
    assert_eq!(resp.status, 200);
    assert_eq!(
        resp.header("Range"),
        Some("clock=20261127T100000.000Z-20261127T101500.000Z")
    );
    assert_eq!(resp.header("Scale"), Some("2"));
    // A malformed clock time is 457, a malformed Scale 400.
    for (n, (header, status)) in [
        ("Range: clock=20261127T250000Z-", 457),
        ("Scale: fast", 400),
    ]
    .into_iter()
    .enumerate()
    {
        p.send_text(&format!(
            "PLAY rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: {}\nSession: {id}\n{header}\n\n",
            7 + n
        ))
        .expect("ok");
        assert_eq!(p.response().status, status, "{header}");
    }
    p.send_text(&format!(
        "PLAY rtsp://h/vod/a.mp4 RTSP/1.0\nCSeq: 9\nSession: {id}\nRange: npt=now-\n\n"
    ))
    .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Play { .. }));
    // RTP-Info for a track never set up is the app's mistake; the PLAY stays pending.
    assert!(p
        .server
        .answer_play(
            &[TrackStart {
                track: 3,
                seq: 0,
                rtptime: 0
            }],
            None
        )
        .is_err());
    p.server.reject(503).expect("still pending");
    p.drain();
    assert_eq!(p.response().status, 503);
}

#[test]
fn a_describe_may_be_sent_to_another_server() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("DESCRIBE rtsp://h/live/a?t=1 RTSP/1.0\nCSeq: 1\n\n")
        .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Describe { .. }));
    // A location that would split the answer's head is refused, the request kept.
    assert!(p
        .server
        .redirect("rtsp://b:8554/live/a\r\nX-Evil: 1")
        .is_err());
    p.server
        .redirect("rtsp://b:8554/live/a?t=1")
        .expect("pending");
    p.drain();
    let r = p.response();
    assert_eq!(r.status, 302);
    assert_eq!(r.header("Location"), Some("rtsp://b:8554/live/a?t=1"));
    // Nothing is pending any more.
    assert!(p.server.redirect("rtsp://b/x").is_err());
}
