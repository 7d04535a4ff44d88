//! The server session against hand-written client bytes: protocol errors, limits and
//! hostile input. Each case is an error or an `Ignored` event, never a panic.

use bytes::BytesMut;
use proptest::prelude::*;
use sluice_media::amf0::Amf0Value;
use sluice_rtmp::chunk::msg_type;
use sluice_rtmp::command::{self, Command};
use sluice_rtmp::message::{Message, UserControl};
use sluice_rtmp::{
    write_message_chunks, ChunkReader, Event, Media, Output, RtmpError, ServerConfig, ServerEvent,
    ServerNotice, ServerSession, Transmit,
};

const HANDSHAKE: usize = 1536;

/// A server session and a reader for what it writes, past the handshake.
struct Server {
    session: ServerSession,
    written: BytesMut,
    reader: ChunkReader,
    events: Vec<ServerEvent>,
}

impl Server {
    fn after_handshake(config: ServerConfig) -> Self {
        let mut session = ServerSession::new(config);
        let mut c0c1 = vec![3u8];
        c0c1.extend_from_slice(&[0u8; HANDSHAKE]);
        session.handle_input(&c0c1).expect("C0C1");
        session.handle_input(&[0u8; HANDSHAKE]).expect("C2");
        let mut s = Server {
            session,
            written: BytesMut::new(),
            reader: ChunkReader::new(1 << 24),
            events: vec![],
        };
        s.drain();
        assert_eq!(s.written.len(), 1 + 2 * HANDSHAKE);
        s.written.clear();
        s
    }

    fn connected() -> Self {
        let mut s = Self::after_handshake(ServerConfig::default());
        s.command(0, &command::connect(1.0, "live", "rtmp://h/live"))
            .expect("connect");
        s
    }

    fn publishing() -> Self {
        let mut s = Self::connected();
        s.command(0, &command::create_stream(2.0))
            .expect("createStream");
        s.command(1, &command::publish(3.0, "cam1"))
            .expect("publish");
        s.session.accept_publish();
        s.drain();
        s
    }

    fn drain(&mut self) {
        while let Some(o) = self.session.poll_output() {
            match o {
                Output::Transmit(Transmit { data: b, .. }) => self.written.extend_from_slice(&b),
                Output::Event(e) => self.events.push(e),
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), RtmpError> {
        let r = self.session.handle_input(bytes);
        self.drain();
        r
    }

    fn message(
        &mut self,
        csid: u32,
        msg_type: u8,
        stream_id: u32,
        body: &[u8],
    ) -> Result<(), RtmpError> {
        let mut out = BytesMut::new();
        write_message_chunks(&mut out, csid, 0, msg_type, stream_id, body, 128);
        self.send(&out)
    }

    fn command(&mut self, stream_id: u32, cmd: &Command) -> Result<(), RtmpError> {
        let mut body = BytesMut::new();
        cmd.encode(&mut body);
        self.message(3, msg_type::COMMAND_AMF0, stream_id, &body)
    }

    /// Messages the server wrote since the handshake.
    fn replies(&mut self) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some(raw) = self
            .reader
            .read(&mut self.written)
            .expect("server output is well-formed")
        {
            out.push(Message::decode(&raw).expect("server output decodes"));
        }
        out
    }

    fn reply_names(&mut self) -> Vec<String> {
        self.replies()
            .into_iter()
            .filter_map(|m| match m {
                Message::Command(v) => Command::from_values(v)
                    .ok()
                    .map(|c| format!("{} {}", c.name, c.status_code().unwrap_or(""))),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn connect_is_answered_with_control_messages_and_result() {
    let mut s = Server::connected();
    let replies = s.replies();
    assert_eq!(replies[0], Message::WindowAckSize(2_500_000));
    assert_eq!(
        replies[1],
        Message::SetPeerBandwidth {
            size: 2_500_000,
            limit_type: 2
        }
    );
    assert_eq!(replies[2], Message::SetChunkSize(4096));
    let Message::Command(values) = &replies[3] else {
        panic!("expected _result, got {:?}", replies[3])
    };
    let result = Command::from_values(values.clone()).expect("command");
    assert_eq!(result.name, "_result");
    assert_eq!(result.status_code(), Some("NetConnection.Connect.Success"));
    assert_eq!(
        s.events,
        vec![Event::Other(ServerNotice::Connected {
            app: "live".into(),
            tc_url: Some("rtmp://h/live".into())
        })]
    );
}

#[test]
fn ffmpeg_publish_sequence_gets_its_replies() {
    let mut s = Server::connected();
    s.replies();
    s.command(0, &command::named("releaseStream", 2.0, "cam1"))
        .expect("releaseStream");
    s.command(0, &command::named("FCPublish", 3.0, "cam1"))
        .expect("FCPublish");
    s.command(0, &command::create_stream(4.0))
        .expect("createStream");
    let replies = s.replies();
    let results: Vec<(f64, Vec<Amf0Value>)> = replies
        .into_iter()
        .filter_map(|m| match m {
            Message::Command(v) => Command::from_values(v)
                .ok()
                .map(|c| (c.transaction_id, c.args)),
            _ => None,
        })
        .collect();
    assert_eq!(results[0].0, 2.0);
    assert_eq!(results[1].0, 3.0);
    assert_eq!(results[2], (4.0, vec![Amf0Value::Number(1.0)]));
    s.command(1, &command::publish(5.0, "cam1"))
        .expect("publish");
    s.session.accept_publish();
    s.drain();
    assert!(s
        .reply_names()
        .contains(&"onStatus NetStream.Publish.Start".to_owned()));
}

#[test]
fn ping_is_answered_and_acks_follow_the_peer_window() {
    let mut s = Server::connected();
    s.replies();
    let mut body = BytesMut::new();
    UserControl::PingRequest(1234).encode(&mut body);
    s.message(2, msg_type::USER_CONTROL, 0, &body)
        .expect("ping");
    s.message(2, msg_type::WINDOW_ACK_SIZE, 0, &1000u32.to_be_bytes())
        .expect("window");
    s.command(0, &command::named("FCPublish", 0.0, &"x".repeat(1200)))
        .expect("filler");
    let replies = s.replies();
    assert!(replies.contains(&Message::UserControl(UserControl::PingResponse(1234))));
    let received = s.session.bytes_received() as u32;
    assert!(
        replies.contains(&Message::Acknowledgement { sequence: received }),
        "{replies:?}"
    );
}

#[test]
fn chunk_size_zero_is_rejected() {
    let mut s = Server::connected();
    let set_chunk_size_0 = [0x02, 0, 0, 0, 0, 0, 4, 0x01, 0, 0, 0, 0, 0, 0, 0, 0];
    assert!(matches!(
        s.send(&set_chunk_size_0),
        Err(RtmpError::Malformed { .. })
    ));
    assert!(matches!(s.send(&[0]), Err(RtmpError::Closed)));
}

#[test]
fn chunk_size_over_16_mib_is_rejected() {
    let mut s = Server::connected();
    let r = s.message(
        2,
        msg_type::SET_CHUNK_SIZE,
        0,
        &((16u32 << 20) + 1).to_be_bytes(),
    );
    assert!(matches!(r, Err(RtmpError::Malformed { .. })));
}

#[test]
fn message_over_cap_is_too_large() {
    let mut s = Server::after_handshake(ServerConfig {
        max_message_len: 1000,
        ..ServerConfig::default()
    });
    let r = s.message(6, msg_type::VIDEO, 1, &[0u8; 1001]);
    assert!(matches!(
        r,
        Err(RtmpError::TooLarge {
            what: "message",
            len: 1001,
            limit: 1000
        })
    ));
}

#[test]
fn amf_nesting_bomb_is_an_error() {
    let mut s = Server::connected();
    let mut body = BytesMut::new();
    Amf0Value::from("connect").encode(&mut body);
    Amf0Value::Number(1.0).encode(&mut body);
    for _ in 0..1000 {
        body.extend_from_slice(&[0x0A, 0, 0, 0, 1]);
    }
    body.extend_from_slice(&[5]);
    let r = s.message(3, msg_type::COMMAND_AMF0, 0, &body);
    assert!(matches!(r, Err(RtmpError::Amf0 { .. })), "{r:?}");
}

#[test]
fn unknown_command_is_ignored_and_answered_with_error() {
    let mut s = Server::connected();
    s.replies();
    s.command(0, &command::named("fooBar", 7.0, "x"))
        .expect("not fatal");
    assert_eq!(
        s.events.last(),
        Some(&Event::Other(ServerNotice::Ignored {
            what: "command \"fooBar\"".into()
        }))
    );
    assert_eq!(s.reply_names(), ["_error NetConnection.Call.Failed"]);
    // Without a transaction id, no answer.
    s.command(0, &command::named("fooBar", 0.0, "x"))
        .expect("not fatal");
    assert!(s.reply_names().is_empty());
}

#[test]
fn unknown_message_type_is_ignored() {
    let mut s = Server::connected();
    s.message(3, 0x30, 0, b"whatever").expect("not fatal");
    assert_eq!(
        s.events.last(),
        Some(&Event::Other(ServerNotice::Ignored {
            what: "message type 48".into()
        }))
    );
}

#[test]
fn malformed_handshake_is_an_error() {
    let mut s = ServerSession::new(ServerConfig::default());
    assert!(matches!(
        s.handle_input(b"\x06rtmpe"),
        Err(RtmpError::Handshake { .. })
    ));
}

#[test]
fn publish_before_connect_is_unexpected() {
    let mut s = Server::after_handshake(ServerConfig::default());
    let r = s.command(1, &command::publish(5.0, "cam1"));
    assert!(
        matches!(
            r,
            Err(RtmpError::Unexpected {
                got: "publish",
                state: "ExpectConnect"
            })
        ),
        "{r:?}"
    );
}

#[test]
fn play_while_publishing_is_unexpected() {
    let mut s = Server::publishing();
    let r = s.command(1, &command::play(0.0, "other"));
    assert!(
        matches!(
            r,
            Err(RtmpError::Unexpected {
                got: "play",
                state: "Publishing"
            })
        ),
        "{r:?}"
    );
}

#[test]
fn media_from_a_non_publisher_is_unexpected() {
    let mut s = Server::connected();
    let r = s.message(6, msg_type::VIDEO, 1, &[0x17, 0]);
    assert!(
        matches!(r, Err(RtmpError::Unexpected { got: "video", .. })),
        "{r:?}"
    );
}

#[test]
fn set_data_frame_is_stripped_from_metadata() {
    let mut s = Server::publishing();
    let mut meta = BytesMut::new();
    Amf0Value::from("onMetaData").encode(&mut meta);
    Amf0Value::EcmaArray(vec![("duration".into(), 0.0.into())]).encode(&mut meta);
    let mut body = BytesMut::new();
    Amf0Value::from("@setDataFrame").encode(&mut body);
    body.extend_from_slice(&meta);
    s.message(4, msg_type::DATA_AMF0, 1, &body)
        .expect("metadata");
    assert_eq!(
        s.events.last(),
        Some(&Event::Media(Media::Metadata {
            payload: meta.freeze()
        }))
    );
}

#[test]
fn aggregate_messages_become_media_events() {
    let mut s = Server::publishing();
    let mut body = BytesMut::new();
    for (t, ts, data) in [(9u8, 100u32, &[0x17u8, 1][..]), (8, 120, &[0xAF, 1][..])] {
        body.extend_from_slice(&[t, 0, 0, data.len() as u8, 0, 0, ts as u8, 0, 0, 0, 0]);
        body.extend_from_slice(data);
        body.extend_from_slice(&(11 + data.len() as u32).to_be_bytes());
    }
    let mut out = BytesMut::new();
    write_message_chunks(&mut out, 6, 5000, msg_type::AGGREGATE, 1, &body, 128);
    s.send(&out).expect("aggregate");
    let media: Vec<_> = s
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Media(Media::Video { timestamp_ms, .. }) => Some(("video", *timestamp_ms)),
            Event::Media(Media::Audio { timestamp_ms, .. }) => Some(("audio", *timestamp_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(media, [("video", 5000), ("audio", 5020)]);
}

#[test]
fn pause_is_reported_while_playing() {
    let mut s = Server::connected();
    s.command(0, &command::create_stream(2.0))
        .expect("createStream");
    s.command(1, &command::play(0.0, "cam1")).expect("play");
    s.session.accept_play();
    s.drain();
    let cmd = Command::new(
        "pause",
        0.0,
        Amf0Value::Null,
        vec![true.into(), 1000.0.into()],
    );
    s.command(1, &cmd).expect("pause");
    assert_eq!(
        s.events.last(),
        Some(&Event::Other(ServerNotice::Pause { paused: true }))
    );
    s.command(1, &command::delete_stream(0.0, 1))
        .expect("deleteStream");
    assert_eq!(s.events.last(), Some(&Event::Stop));
}

fn feed_chunks(session: &mut ServerSession, bytes: &[u8], splits: &[usize]) {
    let mut rest = bytes;
    let mut i = 0;
    while !rest.is_empty() {
        let n = splits
            .get(i % splits.len().max(1))
            .copied()
            .unwrap_or(rest.len())
            .clamp(1, rest.len());
        i += 1;
        let (part, tail) = rest.split_at(n);
        rest = tail;
        if session.handle_input(part).is_err() {
            return;
        }
        while session.poll_output().is_some() {}
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_without_handshake_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..4000),
        splits in prop::collection::vec(1usize..700, 1..8),
    ) {
        let mut session = ServerSession::new(ServerConfig::default());
        feed_chunks(&mut session, &bytes, &splits);
    }

    #[test]
    fn arbitrary_bytes_after_handshake_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..4000),
        splits in prop::collection::vec(1usize..700, 1..8),
        connect_first in any::<bool>(),
    ) {
        let mut s = Server::after_handshake(ServerConfig::default());
        if connect_first {
            s.command(0, &command::connect(1.0, "live", "rtmp://h/live")).expect("connect");
        }
        feed_chunks(&mut s.session, &bytes, &splits);
    }

    /// Structured garbage: valid chunk headers around random bodies and types, so the
    /// message and command layers see hostile input too.
    #[test]
    fn random_messages_after_connect_never_panic(
        msgs in prop::collection::vec((2u32..10, any::<u8>(), 0u32..3, prop::collection::vec(any::<u8>(), 0..300)), 0..20),
    ) {
        let mut s = Server::connected();
        for (csid, t, sid, body) in msgs {
            let t = if t % 3 == 0 { [8u8, 9, 18, 20, 22, 4, 1, 2][usize::from(t) % 8] } else { t };
            if s.message(csid, t, sid, &body).is_err() {
                break;
            }
        }
    }
}
