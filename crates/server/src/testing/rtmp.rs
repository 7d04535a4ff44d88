//! The test's side of an RTMP connection: `sluice_rtmp::ClientSession` over a
//! [`Peer`], and what a player or publisher test needs of it.

use super::wire::Peer;
use bytes::Bytes;
use sluice_media::flv::{self, VideoTag};
use sluice_rtmp::{ClientConfig, ClientEvent, ClientOutput, ClientSession};
use std::collections::VecDeque;
use std::time::Duration;

/// A publisher's or player's frame rate: 25 fps, a keyframe each second.
pub const FRAME_MS: i64 = 40;

/// Bytes of each frame's payload.
pub const FRAME_LEN: usize = 1000;

/// One RTMP client connection of a test.
pub struct RtmpClient {
    /// The server's id of the connection (the API's, for kicks).
    pub id: u64,
    session: ClientSession,
    peer: Peer,
    events: VecDeque<ClientEvent>,
}

/// A video message a player got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Video {
    Config,
    Frame { ts: i64, key: bool },
}

impl RtmpClient {
    pub fn new(id: u64, peer: Peer) -> RtmpClient {
        let session = ClientSession::new(ClientConfig {
            app: "live".into(),
            tc_url: "rtmp://sluice/live".into(),
            chunk_size: 4096,
            digest_handshake: false,
        });
        let mut client = RtmpClient {
            id,
            session,
            peer,
            events: VecDeque::new(),
        };
        client.flush();
        client
    }

    /// The connection's wire.
    pub fn peer(&self) -> &Peer {
        &self.peer
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
                .handle_input(&bytes)
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

    /// Reads until the server closes the connection; the events before.
    pub async fn until_closed(&mut self) -> Vec<ClientEvent> {
        let mut events = Vec::new();
        while let Some(e) = self.next().await {
            events.push(e);
        }
        events
    }

    /// Publishes `live/<name>` and waits for the server's answer; whether accepted.
    pub async fn publish(&mut self, name: &str) -> bool {
        self.session.publish(name);
        let answer = self
            .until(|e| {
                matches!(
                    e,
                    ClientEvent::PublishStarted | ClientEvent::Rejected { .. }
                )
            })
            .await;
        if answer != Some(ClientEvent::PublishStarted) {
            return false;
        }
        self.session.send_video(0, &super::avc_config());
        self.flush();
        true
    }

    /// Plays `live/<name>` and waits for the server's answer; whether accepted.
    pub async fn play(&mut self, name: &str) -> bool {
        self.session.play(name);
        let answer = self
            .until(|e| matches!(e, ClientEvent::PlayStarted | ClientEvent::Rejected { .. }))
            .await;
        answer == Some(ClientEvent::PlayStarted)
    }

    /// Sends the frames from `from` to `to` ms as an encoder does, each at its time
    /// (on the paused clock: the virtual time), a keyframe each second.
    pub async fn frames(&mut self, from: i64, to: i64) {
        let start = tokio::time::Instant::now();
        for ms in (from..=to).step_by(FRAME_MS as usize) {
            let due = start + Duration::from_millis(u64::try_from(ms - from).unwrap_or(0));
            tokio::time::sleep_until(due).await;
            let body = super::avc_frame(ms % 1000 == 0, FRAME_LEN);
            self.session
                .send_video(u32::try_from(ms).unwrap_or(0), &body);
            self.flush();
        }
    }

    /// Stops publishing or playing (`deleteStream`).
    pub fn close_stream(&mut self) {
        self.session.close_stream();
        self.flush();
    }

    /// The next video message; `None` once the connection ended.
    pub async fn next_video(&mut self) -> Option<Video> {
        loop {
            if let ClientEvent::Video {
                timestamp_ms,
                payload,
            } = self.next().await?
            {
                return Some(video(timestamp_ms, &payload));
            }
        }
    }

    /// Video messages until a frame at `ts` ms or later (included).
    pub async fn video_until(&mut self, ts: i64) -> Vec<Video> {
        let mut got = Vec::new();
        while let Some(v) = self.next_video().await {
            got.push(v);
            if matches!(v, Video::Frame { ts: t, .. } if t >= ts) {
                break;
            }
        }
        got
    }
}

pub(super) fn video(ts: i64, payload: &Bytes) -> Video {
    match flv::parse_video(payload).expect("a video tag") {
        VideoTag::Config(_) => Video::Config,
        VideoTag::Frame { keyframe, .. } => Video::Frame { ts, key: keyframe },
        other => panic!("unexpected video tag {other:?}"),
    }
}

/// The frames' timestamps in `got`.
pub fn frame_times(got: &[Video]) -> Vec<i64> {
    got.iter()
        .filter_map(|v| match v {
            Video::Frame { ts, .. } => Some(*ts),
            Video::Config => None,
        })
        .collect()
}
