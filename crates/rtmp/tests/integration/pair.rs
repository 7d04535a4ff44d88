//! A client and a server session wired back to back, no sockets (STYLE.md §6).
//!
//! `Pair::drive` shuttles bytes both ways in pseudo-random splits until both sides are
//! idle, so every test also exercises arbitrary TCP segmentation.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_media::amf0::Amf0Value;
use sluice_rtmp::{
    write_message_chunks, ClientConfig, ClientEvent, ClientOutput, ClientSession, Event, Media,
    Output, RtmpError, ServerConfig, ServerEvent, ServerNotice, ServerSession, StreamRequest,
    Transmit, CSID_AUDIO, CSID_DATA, CSID_VIDEO, MEDIA_STREAM_ID, MSG_AUDIO, MSG_DATA_AMF0,
    MSG_VIDEO,
};

struct Pair {
    client: ClientSession,
    server: ServerSession,
    to_server: Vec<u8>,
    to_client: Vec<u8>,
    client_events: Vec<ClientEvent>,
    server_events: Vec<ServerEvent>,
    rng: u64,
    /// Accept publish/play requests as soon as they arrive.
    auto_accept: bool,
}

fn config(app: &str, digest: bool) -> ClientConfig {
    ClientConfig {
        app: app.into(),
        tc_url: format!("rtmp://127.0.0.1/{app}"),
        chunk_size: 4096,
        digest_handshake: digest,
    }
}

impl Pair {
    fn new() -> Self {
        Self::with(config("live", false), 1)
    }

    fn with(client: ClientConfig, seed: u64) -> Self {
        Pair {
            client: ClientSession::new(client),
            server: ServerSession::new(ServerConfig::default()),
            to_server: Vec::new(),
            to_client: Vec::new(),
            client_events: Vec::new(),
            server_events: Vec::new(),
            rng: seed | 1,
            auto_accept: true,
        }
    }

    fn next_split(&mut self, max: usize) -> usize {
        // xorshift64: reproducible splits between 1 and `max` bytes.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        1 + (self.rng % max.max(1) as u64) as usize
    }

    fn drain(&mut self) {
        while let Some(o) = self.client.poll_output() {
            match o {
                ClientOutput::Write(b) => self.to_server.extend_from_slice(&b),
                ClientOutput::Event(e) => self.client_events.push(e),
            }
        }
        let mut accept = Vec::new();
        while let Some(o) = self.server.poll_output() {
            match o {
                Output::Transmit(Transmit { data: b, .. }) => self.to_client.extend_from_slice(&b),
                Output::Event(e) => {
                    if self.auto_accept {
                        match e {
                            Event::Publish(_) => accept.push(true),
                            Event::Play(_) => accept.push(false),
                            _ => {}
                        }
                    }
                    self.server_events.push(e);
                }
            }
        }
        for publish in accept {
            if publish {
                self.server.accept_publish();
            } else {
                self.server.accept_play();
            }
            while let Some(o) = self.server.poll_output() {
                match o {
                    Output::Transmit(Transmit { data: b, .. }) => {
                        self.to_client.extend_from_slice(&b)
                    }
                    Output::Event(e) => self.server_events.push(e),
                }
            }
        }
    }

    /// Shuttles bytes until neither side has anything to say.
    fn drive(&mut self) -> Result<(), RtmpError> {
        for _ in 0..100_000 {
            self.drain();
            if self.to_server.is_empty() && self.to_client.is_empty() {
                return Ok(());
            }
            if !self.to_server.is_empty() {
                let n = self.next_split(3000).min(self.to_server.len());
                let part: Vec<u8> = self.to_server.drain(..n).collect();
                self.server.handle_input(&part)?;
            }
            if !self.to_client.is_empty() {
                let n = self.next_split(3000).min(self.to_client.len());
                let part: Vec<u8> = self.to_client.drain(..n).collect();
                self.client.handle_input(&part)?;
            }
        }
        panic!("pair did not settle");
    }
}

fn metadata_body() -> Vec<u8> {
    let mut b = BytesMut::new();
    Amf0Value::from("onMetaData").encode(&mut b);
    Amf0Value::EcmaArray(vec![
        ("width".into(), 1280.0.into()),
        ("height".into(), 720.0.into()),
    ])
    .encode(&mut b);
    b.to_vec()
}

#[test]
fn publish_reaches_server_as_events() {
    let mut pair = Pair::new();
    pair.client.publish("cam1?token=x");
    pair.drive().expect("handshake and publish");
    assert!(pair.client_events.contains(&ClientEvent::Connected));
    assert!(pair.client_events.contains(&ClientEvent::PublishStarted));
    assert_eq!(
        &pair.server_events[..2],
        &[
            Event::Other(ServerNotice::Connected {
                app: "live".into(),
                tc_url: Some("rtmp://127.0.0.1/live".into())
            }),
            Event::Publish(StreamRequest {
                app: "live".into(),
                name: "cam1".into(),
                query: "token=x".into(),
                user: None,
            }),
        ]
    );

    pair.server_events.clear();
    let meta = metadata_body();
    pair.client.send_metadata(&meta);
    let key = vec![0x17u8; 10_000];
    pair.client.send_video(0, &key);
    pair.client.send_audio(0, &[0xAF, 1, 2, 3]);
    pair.client.send_video(33, &[0x27, 1]);
    pair.client.send_video(66, &[0x27, 2]);
    pair.client.send_audio(23, &[0xAF, 1, 4]);
    pair.drive().expect("media");
    assert_eq!(
        pair.server_events,
        vec![
            Event::Media(Media::Metadata {
                payload: Bytes::from(meta)
            }),
            Event::Media(Media::Video {
                timestamp_ms: 0,
                payload: Bytes::from(key)
            }),
            Event::Media(Media::Audio {
                timestamp_ms: 0,
                payload: Bytes::from_static(&[0xAF, 1, 2, 3])
            }),
            Event::Media(Media::Video {
                timestamp_ms: 33,
                payload: Bytes::from_static(&[0x27, 1])
            }),
            Event::Media(Media::Video {
                timestamp_ms: 66,
                payload: Bytes::from_static(&[0x27, 2])
            }),
            Event::Media(Media::Audio {
                timestamp_ms: 23,
                payload: Bytes::from_static(&[0xAF, 1, 4])
            }),
        ]
    );

    pair.server_events.clear();
    pair.client.close_stream();
    pair.drive().expect("unpublish");
    assert_eq!(pair.server_events, vec![Event::Stop]);
}

#[test]
fn digest_handshake_publish() {
    let mut pair = Pair::with(config("live", true), 7);
    pair.client.publish("cam1");
    pair.drive().expect("digest handshake");
    assert!(pair.client_events.contains(&ClientEvent::PublishStarted));
}

#[test]
fn app_query_joins_stream_query() {
    let mut pair = Pair::with(config("live?a=1", false), 3);
    pair.client.publish("cam1?b=2");
    pair.drive().expect("publish");
    assert!(pair.server_events.contains(&Event::Publish(StreamRequest {
        app: "live".into(),
        name: "cam1".into(),
        query: "a=1&b=2".into(),
        user: None,
    })));
}

#[test]
fn play_receives_status_and_shared_media() {
    let mut pair = Pair::new();
    pair.client.play("cam1");
    pair.drive().expect("play");
    assert!(pair.server_events.contains(&Event::Play(StreamRequest {
        app: "live".into(),
        name: "cam1".into(),
        query: String::new(),
        user: None,
    })));
    assert!(pair.client_events.contains(&ClientEvent::PlayStarted));
    let codes: Vec<&str> = pair
        .client_events
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Status { code, .. } => Some(code.as_str()),
            _ => None,
        })
        .collect();
    // No `onStatus` data message (`NetStream.Data.Start`): ffmpeg would make it a
    // stream of its own.
    assert_eq!(codes, ["NetStream.Play.Reset", "NetStream.Play.Start"]);

    // The server's fan-out: type-0 chunks at the session's chunk size, including a
    // timestamp past the 24-bit field and one that wraps 2^32.
    pair.client_events.clear();
    let mut shared = BytesMut::new();
    let meta = metadata_body();
    write_message_chunks(
        &mut shared,
        CSID_DATA,
        0,
        MSG_DATA_AMF0,
        MEDIA_STREAM_ID,
        &meta,
        4096,
    );
    let big = vec![7u8; 20_000];
    write_message_chunks(
        &mut shared,
        CSID_VIDEO,
        0xFFFF_FFF0,
        MSG_VIDEO,
        MEDIA_STREAM_ID,
        &big,
        4096,
    );
    write_message_chunks(
        &mut shared,
        CSID_AUDIO,
        0x0000_0010,
        MSG_AUDIO,
        MEDIA_STREAM_ID,
        &[0xAF, 1],
        4096,
    );
    pair.to_client.extend_from_slice(&shared);
    pair.drive().expect("media to player");
    assert_eq!(
        pair.client_events,
        vec![
            ClientEvent::Metadata {
                payload: Bytes::from(meta)
            },
            ClientEvent::Video {
                timestamp_ms: 0xFFFF_FFF0,
                payload: Bytes::from(big)
            },
            ClientEvent::Audio {
                timestamp_ms: (1 << 32) + 0x10,
                payload: Bytes::from_static(&[0xAF, 1])
            },
        ]
    );

    pair.server
        .send_status("status", "NetStream.Play.UnpublishNotify", "gone");
    pair.client.close_stream();
    pair.drive().expect("stop");
    assert!(pair.server_events.contains(&Event::Stop));
    assert!(pair.client_events.iter().any(|e| matches!(e, ClientEvent::Status { code, .. } if code == "NetStream.Play.UnpublishNotify")));
}

#[test]
fn rejected_publish_reaches_client_and_closes_server() {
    let mut pair = Pair::new();
    pair.auto_accept = false;
    pair.client.publish("bad");
    pair.drive().expect("until publish");
    pair.server
        .reject_publish("NetStream.Publish.BadName", "no");
    pair.drive().expect("rejection");
    assert!(pair.client_events.contains(&ClientEvent::Rejected {
        code: "NetStream.Publish.BadName".into(),
        description: "no".into()
    }));
    assert!(matches!(
        pair.server.handle_input(&[0]),
        Err(RtmpError::Closed)
    ));
}

#[test]
fn rejected_play_reaches_client() {
    let mut pair = Pair::new();
    pair.auto_accept = false;
    pair.client.play("nothing");
    pair.drive().expect("until play");
    pair.server
        .reject_play("NetStream.Play.StreamNotFound", "no such stream");
    pair.drive().expect("rejection");
    assert!(pair.client_events.iter().any(|e| matches!(e, ClientEvent::Rejected { code, .. } if code == "NetStream.Play.StreamNotFound")));
}

#[test]
fn timestamps_unwrap_past_32_bits() {
    let mut pair = Pair::new();
    pair.client.publish("cam1");
    pair.drive().expect("publish");
    pair.server_events.clear();
    pair.client.send_video(u32::MAX - 20, &[0x17]);
    pair.client.send_video(u32::MAX, &[0x27]);
    pair.client.send_video(19, &[0x27]);
    pair.drive().expect("media");
    let times: Vec<i64> = pair
        .server_events
        .iter()
        .filter_map(|e| match e {
            Event::Media(Media::Video { timestamp_ms, .. }) => Some(*timestamp_ms),
            _ => None,
        })
        .collect();
    assert_eq!(
        times,
        [
            i64::from(u32::MAX - 20),
            i64::from(u32::MAX),
            (1 << 32) + 19
        ]
    );
}

#[test]
fn acknowledgements_follow_the_window() {
    // The server asks for a 2,500,000-byte window; send 3 MB of video and expect the
    // client to acknowledge... and the server to acknowledge the client's bytes.
    let mut pair = Pair::new();
    pair.client.publish("cam1");
    pair.drive().expect("publish");
    let frame = vec![0x27u8; 100_000];
    for i in 0..30 {
        pair.client.send_video(i * 40, &frame);
    }
    pair.drive().expect("media");
    assert!(pair.server.bytes_received() > 3_000_000);
    // The ack is a 4-byte Acknowledgement the client reads silently; reaching here
    // without an error shows both sides handled it. Count video events too.
    let n = pair
        .server_events
        .iter()
        .filter(|e| matches!(e, Event::Media(Media::Video { .. })))
        .count();
    assert_eq!(n, 30);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn publish_works_for_any_segmentation(seed in any::<u64>(), digest in any::<bool>()) {
        let mut pair = Pair::with(config("live", digest), seed);
        pair.client.publish("cam1");
        pair.client.send_video(0, &[0x17; 5000]);
        pair.drive().expect("publish");
        prop_assert!(pair.client_events.contains(&ClientEvent::PublishStarted));
        let held_video = Event::Media(Media::Video { timestamp_ms: 0, payload: Bytes::from(vec![0x17; 5000]) });
        prop_assert!(pair.server_events.contains(&held_video));
    }
}
