//! The server session against hostile or broken clients: each case is a clean error
//! response (and, when framing is lost, an error that ends the connection), never a
//! panic.

use std::time::Duration;

use crate::common::Pair;
use bytes::Bytes;
use proptest::prelude::*;
use sluice_rtsp::{ChannelPair, RtspError, ServerConfig, ServerEvent, SetupAnswer, MAX_HEAD_LEN};

const SDP: &[u8] = b"v=0\r\nm=video 0 RTP/AVP 96\r\na=control:trackID=0\r\nm=audio 0 RTP/AVP 97\r\na=control:trackID=1\r\n";

/// A session that answered DESCRIBE and set up track 0 over TCP on channels 0-1.
fn ready_over_tcp() -> (Pair, String) {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("DESCRIBE rtsp://h/live/s RTSP/1.0\nCSeq: 1\n\n")
        .expect("ok");
    p.server
        .answer_describe(Bytes::from_static(SDP))
        .expect("pending");
    p.send_text("SETUP rtsp://h/live/s/trackID=0 RTSP/1.0\nCSeq: 2\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\n\n")
        .expect("ok");
    p.server
        .answer_setup(SetupAnswer::Interleaved {
            channels: ChannelPair { rtp: 0, rtcp: 1 },
            ssrc: None,
        })
        .expect("pending");
    p.drain();
    p.responses.clear();
    p.events.clear();
    let id = p.server.session_id().expect("session").to_string();
    (p, id)
}

#[test]
fn huge_head_is_400_and_final() {
    let mut p = Pair::new(ServerConfig::default());
    let mut raw = b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nX-Pad: ".to_vec();
    raw.resize(MAX_HEAD_LEN + 100, b'a');
    assert!(matches!(p.send(&raw), Err(RtspError::TooLarge { .. })));
    assert_eq!(p.response().status, 400);
    assert!(p.server.is_closed());
    assert_eq!(p.send(b"OPTIONS"), Err(RtspError::Closed));
}

#[test]
fn huge_content_length_is_413_and_final() {
    let mut p = Pair::new(ServerConfig::default());
    let r = p.send_text("ANNOUNCE rtsp://h/a RTSP/1.0\nCSeq: 1\nContent-Type: application/sdp\nContent-Length: 1000000000\n\n");
    assert!(matches!(r, Err(RtspError::TooLarge { what: "body", .. })));
    assert_eq!(p.response().status, 413);
}

#[test]
fn missing_or_bad_cseq_is_400_and_the_session_goes_on() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("OPTIONS * RTSP/1.0\nUser-Agent: x\n\n")
        .expect("framing is fine");
    let r = p.response();
    assert_eq!((r.status, r.header("CSeq")), (400, None));
    p.send_text("OPTIONS * RTSP/1.0\nCSeq: one\n\n")
        .expect("framing is fine");
    assert_eq!(p.response().status, 400);
    p.send_text("OPTIONS * RTSP/1.0\nCSeq: 2\n\n").expect("ok");
    assert_eq!(p.response().status, 200);
}

#[test]
fn unknown_method_is_501_with_public() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("REDIRECT rtsp://h/a RTSP/1.0\nCSeq: 9\n\n")
        .expect("ok");
    let r = p.response();
    assert_eq!((r.status, r.header("CSeq")), (501, Some("9")));
    assert!(r
        .header("Public")
        .expect("Public")
        .contains("SET_PARAMETER"));
}

#[test]
fn rtsp_2_is_505() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("OPTIONS * RTSP/2.0\nCSeq: 1\n\n").expect("ok");
    assert_eq!(p.response().status, 505);
}

#[test]
fn setup_of_unknown_track_is_404() {
    let (mut p, id) = ready_over_tcp();
    p.send_text(&format!("SETUP rtsp://h/live/s/trackID=7 RTSP/1.0\nCSeq: 3\nSession: {id}\nTransport: RTP/AVP/TCP;interleaved=2-3\n\n"))
        .expect("ok");
    assert_eq!(p.response().status, 404);
    p.send_text(&format!("SETUP rtsp://h/other/trackID=1 RTSP/1.0\nCSeq: 4\nSession: {id}\nTransport: RTP/AVP/TCP;interleaved=2-3\n\n"))
        .expect("ok");
    assert_eq!(p.response().status, 404);
    assert!(p.events.is_empty());
}

#[test]
fn setup_errors() {
    let (mut p, id) = ready_over_tcp();
    for (transport, status) in [
        ("", 400),
        ("Transport: RTP/AVP;multicast;ttl=1\n", 461),
        ("Transport: RTP/SAVP;unicast;client_port=1-2\n", 461),
        ("Transport: RTP/AVP;unicast\n", 461),
        ("Transport: RTP/AVP/TCP;interleaved=2-3;mode=record\n", 461),
    ] {
        p.send_text(&format!(
            "SETUP rtsp://h/live/s/trackID=1 RTSP/1.0\nCSeq: 3\nSession: {id}\n{transport}\n"
        ))
        .expect("ok");
        assert_eq!(p.response().status, status, "{transport}");
    }
    // The same track twice.
    p.send_text(&format!("SETUP rtsp://h/live/s/trackID=0 RTSP/1.0\nCSeq: 4\nSession: {id}\nTransport: RTP/AVP/TCP;interleaved=0-1\n\n"))
        .expect("ok");
    assert_eq!(p.response().status, 455);
}

#[test]
fn requests_wrong_for_the_state_are_455() {
    let mut p = Pair::new(ServerConfig::default());
    for req in [
        "PLAY rtsp://h/live/s RTSP/1.0\nCSeq: 1\n\n",
        "RECORD rtsp://h/live/s RTSP/1.0\nCSeq: 2\n\n",
        "PAUSE rtsp://h/live/s RTSP/1.0\nCSeq: 3\n\n",
        "SETUP rtsp://h/live/s/trackID=0 RTSP/1.0\nCSeq: 4\nTransport: RTP/AVP/TCP;interleaved=0-1\n\n",
    ] {
        p.send_text(req).expect("ok");
        assert_eq!(p.response().status, 455, "{req}");
    }
    let (mut p, id) = ready_over_tcp();
    p.send_text(&format!(
        "RECORD rtsp://h/live/s RTSP/1.0\nCSeq: 5\nSession: {id}\n\n"
    ))
    .expect("ok");
    assert_eq!(p.response().status, 455);
    p.send_text(&format!(
        "DESCRIBE rtsp://h/live/s RTSP/1.0\nCSeq: 6\nSession: {id}\n\n"
    ))
    .expect("ok");
    assert_eq!(p.response().status, 455);
    p.send_text(&format!(
        "ANNOUNCE rtsp://h/live/s RTSP/1.0\nCSeq: 7\nSession: {id}\nContent-Length: 3\n\nv=0"
    ))
    .expect("ok");
    assert_eq!(p.response().status, 455);
    assert!(p.events.is_empty());
}

#[test]
fn wrong_session_is_454() {
    let (mut p, id) = ready_over_tcp();
    p.send_text("PLAY rtsp://h/live/s RTSP/1.0\nCSeq: 3\nSession: DEADBEEFDEADBEEF\n\n")
        .expect("ok");
    assert_eq!(p.response().status, 454);
    p.send_text("GET_PARAMETER rtsp://h/live/s RTSP/1.0\nCSeq: 4\nSession: not valid!\n\n")
        .expect("ok");
    assert_eq!(p.response().status, 454);
    p.send_text(&format!(
        "PLAY rtsp://h/live/s RTSP/1.0\nCSeq: 5\nSession: {id};timeout=60\n\n"
    ))
    .expect("ok");
    assert!(matches!(p.event(), ServerEvent::Play { .. }));
    // A Session header before any SETUP names no session of ours.
    let mut fresh = Pair::new(ServerConfig::default());
    fresh
        .send_text("OPTIONS * RTSP/1.0\nCSeq: 1\nSession: 12345678\n\n")
        .expect("ok");
    assert_eq!(fresh.response().status, 454);
}

#[test]
fn announce_needs_an_sdp_body() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("ANNOUNCE rtsp://h/a RTSP/1.0\nCSeq: 1\nContent-Type: application/sdp\n\n")
        .expect("ok");
    assert_eq!(p.response().status, 400);
    p.send_text(
        "ANNOUNCE rtsp://h/a RTSP/1.0\nCSeq: 2\nContent-Type: text/plain\nContent-Length: 2\n\nhi",
    )
    .expect("ok");
    assert_eq!(p.response().status, 415);
    p.send_text("SET_PARAMETER rtsp://h/a RTSP/1.0\nCSeq: 3\nContent-Length: 7\n\nfoo: 1\n")
        .expect("ok");
    assert_eq!(p.response().status, 451);
}

#[test]
fn interleaved_frame_on_an_unknown_channel_is_final() {
    let (mut p, _) = ready_over_tcp();
    p.send(b"$\x00\x00\x02ok").expect("channel 0 was set up");
    assert!(matches!(
        p.event(),
        ServerEvent::Interleaved { channel: 0, .. }
    ));
    assert!(matches!(
        p.send(b"$\x09\x00\x02no"),
        Err(RtspError::Unexpected { .. })
    ));
    assert!(p.server.is_closed());
}

#[test]
fn lying_interleaved_length_swallows_a_request_then_framing_fails() {
    let (mut p, id) = ready_over_tcp();
    // Claims 16 bytes but carries 2; the next request's bytes become its payload and
    // what is left of that request is not a message.
    let mut wire = b"$\x00\x00\x10ab".to_vec();
    wire.extend_from_slice(
        format!("GET_PARAMETER rtsp://h/live/s RTSP/1.0\r\nCSeq: 3\r\nSession: {id}\r\n\r\n")
            .as_bytes(),
    );
    let r = p.send(&wire);
    assert!(matches!(r, Err(RtspError::Malformed { .. })), "{r:?}");
    assert_eq!(p.response().status, 400);
}

#[test]
fn garbage_is_400_and_final() {
    let mut p = Pair::new(ServerConfig::default());
    assert!(p
        .send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n")
        .is_err());
    assert_eq!(p.response().status, 400);
    let mut p = Pair::new(ServerConfig::default());
    assert!(p.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").is_err());
    assert_eq!(p.response().status, 400);
}

#[test]
fn input_while_an_answer_is_pending_is_bounded() {
    let mut p = Pair::new(ServerConfig::default());
    p.send_text("DESCRIBE rtsp://h/live/s RTSP/1.0\nCSeq: 1\n\n")
        .expect("ok");
    let frame = [b'$', 0, 0xff, 0xff];
    let mut r = Ok(());
    for _ in 0..100 {
        r = p.send(&frame).and_then(|_| p.send(&[0u8; 0xffff]));
        if r.is_err() {
            break;
        }
    }
    assert!(matches!(r, Err(RtspError::TooLarge { .. })), "{r:?}");
}

#[test]
fn answers_that_were_not_asked_for_are_the_callers_error() {
    let mut p = Pair::new(ServerConfig::default());
    assert!(matches!(
        p.server.accept_record(),
        Err(RtspError::NotPending { .. })
    ));
    assert!(p.server.reject(404).is_err());
    p.send_text("DESCRIBE rtsp://h/live/s RTSP/1.0\nCSeq: 1\n\n")
        .expect("ok");
    assert!(p.server.accept_announce().is_err());
    assert!(p.server.answer_play(&[], None).is_err());
    p.server
        .answer_describe(Bytes::from_static(SDP))
        .expect("still pending");
}

#[test]
fn idle_connection_times_out() {
    let mut p = Pair::new(ServerConfig::default());
    let deadline = p.server.poll_timeout().expect("armed");
    assert_eq!(deadline, p.now + Duration::from_secs(60));
    p.advance(Duration::from_secs(59));
    assert!(p.events.is_empty());
    p.send_text("OPTIONS * RTSP/1.0\nCSeq: 1\n\n").expect("ok");
    assert_eq!(
        p.server.poll_timeout(),
        Some(p.now + Duration::from_secs(60))
    );
    p.advance(Duration::from_secs(60));
    assert_eq!(p.event(), ServerEvent::Timeout);
    assert_eq!(p.send(b"OPTIONS"), Err(RtspError::Closed));
}

/// Answers whatever the session asks, so that arbitrary input reaches every state.
fn answer_everything(p: &mut Pair, choice: u8) {
    for _ in 0..64 {
        p.drain();
        let events = std::mem::take(&mut p.events);
        if events.is_empty() {
            return;
        }
        answer_events(p, events, choice);
    }
}

fn answer_events(p: &mut Pair, events: Vec<ServerEvent>, choice: u8) {
    for e in events {
        let _ = match e {
            ServerEvent::Describe { .. } => p.server.answer_describe(Bytes::from_static(SDP)),
            ServerEvent::Announce { .. } => p.server.accept_announce(),
            ServerEvent::Setup { transport, .. } => {
                let answer = match transport.interleaved {
                    Some(channels) => SetupAnswer::Interleaved {
                        channels,
                        ssrc: None,
                    },
                    None => SetupAnswer::Udp {
                        server_port: sluice_rtsp::PortPair {
                            rtp: 6000,
                            rtcp: 6001,
                        },
                        ssrc: Some(5),
                    },
                };
                if choice & 1 == 0 {
                    p.server.answer_setup(answer)
                } else {
                    p.server.reject(453)
                }
            }
            ServerEvent::Play { .. } => p.server.answer_play(
                &[sluice_rtsp::TrackStart {
                    track: 0,
                    seq: 1,
                    rtptime: 2,
                }],
                None,
            ),
            ServerEvent::Record { .. } => p.server.accept_record(),
            _ => Ok(()),
        };
    }
}

/// Requests that get far into the state machine, for the fuzz-like test to splice.
const VALID: &[&str] = &[
    "OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n",
    "DESCRIBE rtsp://h/live/s RTSP/1.0\r\nCSeq: 2\r\n\r\n",
    "ANNOUNCE rtsp://h/live/s RTSP/1.0\r\nCSeq: 2\r\nContent-Length: 3\r\n\r\nv=0",
    "SETUP rtsp://h/live/s/trackID=0 RTSP/1.0\r\nCSeq: 3\r\nTransport: RTP/AVP/TCP;interleaved=0-1\r\n\r\n",
    "SETUP rtsp://h/live/s/trackID=1 RTSP/1.0\r\nCSeq: 4\r\nTransport: RTP/AVP;unicast;client_port=5000-5001\r\n\r\n",
    "PLAY rtsp://h/live/s RTSP/1.0\r\nCSeq: 5\r\nRange: npt=0-\r\n\r\n",
    "RECORD rtsp://h/live/s RTSP/1.0\r\nCSeq: 5\r\n\r\n",
    "PAUSE rtsp://h/live/s RTSP/1.0\r\nCSeq: 6\r\n\r\n",
    "TEARDOWN rtsp://h/live/s RTSP/1.0\r\nCSeq: 7\r\n\r\n",
    "$\x00\x00\x01x",
];

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096), split in 1usize..512, choice: u8) {
        let mut p = Pair::new(ServerConfig::default());
        for part in bytes.chunks(split) {
            if p.send(part).is_err() {
                break;
            }
            answer_everything(&mut p, choice);
        }
    }

    #[test]
    fn spliced_valid_and_broken_requests_never_panic(
        picks in proptest::collection::vec((0usize..VALID.len(), any::<u8>(), any::<u8>()), 0..24),
        split in 1usize..64,
        choice: u8,
    ) {
        let mut wire = Vec::new();
        for (i, mutate, at) in picks {
            let mut msg = VALID[i].as_bytes().to_vec();
            // Now and then flip one byte of an otherwise valid message.
            if mutate < 32 && !msg.is_empty() {
                let at = usize::from(at) % msg.len();
                msg[at] ^= mutate.max(1);
            }
            wire.extend_from_slice(&msg);
        }
        let mut p = Pair::new(ServerConfig::default());
        for part in wire.chunks(split) {
            p.now += Duration::from_millis(10);
            if p.send(part).is_err() {
                break;
            }
            answer_everything(&mut p, choice);
            p.drain();
        }
    }
}
