//! The RTSP publishers' protocol, sans-IO: the requests a publisher sends (OPTIONS,
//! ANNOUNCE with the SDP of its tracks, SETUP each track with `mode=record`, RECORD,
//! then keep-alives and a last TEARDOWN) and what it makes of the answers.
//!
//! Why a second session beside `crate::rtsp::Session`: a publisher walks another
//! path (ANNOUNCE instead of DESCRIBE, RECORD instead of PLAY, its own SDP) and keeps
//! other facts (where to send RTP, not what to expect of it). Both share the message
//! types of `sluice_rtsp`, the TCP scanner (`crate::rtsp::InterleavedScanner`) and the
//! error type (`crate::rtsp::PlayError`).
//!
//! - [`announce_sdp`]: the SDP body of ANNOUNCE, track `i` under control `trackID=i`.
//! - [`RecordSession`]: OPTIONS → ANNOUNCE → (UDP: the driver's ports) → SETUP each
//!   track → RECORD → keep-alives (GET_PARAMETER when `Public` lists it, else OPTIONS).
//!
//! # Invariants
//! - Each response answers the one request in flight (same `CSeq`); anything else, or a
//!   request refused, ends the publisher with an error that says which. A 401 says that
//!   the server wants credentials, which the bench never sends.
//! - Nothing here panics on what the server says.

use crate::rtsp::{proposed_channels, refused_unless_ok, resolve, Dialog, Lower, PlayError};
use bytes::{Bytes, BytesMut};
use sluice_media::rtp::RtpCodec;
use sluice_media::sdp::{write_sdp, SdpError, SdpRange, SdpTrack, SessionDescription};
use sluice_media::Track;
use sluice_rtsp::{ChannelPair, Method, Mode, PortPair, Response, Transport};
use std::time::Duration;

/// The control of track `i` in our SDP, relative to the ANNOUNCE URL.
fn control(i: usize) -> String {
    format!("trackID={i}")
}

/// The SDP of `tracks` for ANNOUNCE: a live session named `name`, from `origin` (our
/// IPv4 address), track `i` at payload type [`RtpCodec::default_payload_type`] and
/// control `trackID=i`. Fails for a track without an RTP payload format.
pub(crate) fn announce_sdp(
    tracks: &[Track],
    name: &str,
    origin: &str,
    session_id: u64,
) -> Result<Bytes, SdpError> {
    let controls: Vec<String> = (0..tracks.len()).map(control).collect();
    let mut sdp_tracks = Vec::with_capacity(tracks.len());
    for (index, (track, control)) in tracks.iter().zip(&controls).enumerate() {
        let codec = RtpCodec::for_track(track).map_err(|_| SdpError::NoCodec { index })?;
        sdp_tracks.push(SdpTrack {
            track,
            payload_type: codec.default_payload_type(),
            control,
        });
    }
    let mut out = BytesMut::new();
    write_sdp(
        &SessionDescription {
            session_id,
            session_version: 1,
            origin_address: origin,
            name,
            range: SdpRange::Live,
            tracks: &sdp_tracks,
        },
        &mut out,
    )?;
    Ok(out.freeze())
}

/// One track of the ANNOUNCE, as set up.
#[derive(Debug, Clone)]
pub(crate) struct RecordTrack {
    /// The track URL used in SETUP.
    pub url: String,
    /// The server's `Transport` answer.
    pub transport: Option<Transport>,
}

impl RecordTrack {
    /// The interleaved channels of track `index` (as answered, else as proposed).
    pub(crate) fn channels(&self, index: usize) -> ChannelPair {
        self.transport
            .as_ref()
            .and_then(|t| t.interleaved)
            .unwrap_or_else(|| proposed_channels(index))
    }

    /// Where the server takes this track's RTP and RTCP over UDP.
    pub(crate) fn server_port(&self) -> Option<PortPair> {
        self.transport.as_ref().and_then(|t| t.server_port)
    }
}

/// Where the session is; each state names the answer it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ExpectOptions,
    ExpectAnnounce,
    /// RTP over UDP: the driver binds a port pair per track ([`RecordSession::set_ports`]).
    ExpectPorts,
    ExpectSetup {
        track: usize,
    },
    ExpectRecord,
    Recording,
    /// TEARDOWN sent: nothing more is expected.
    Done,
}

/// What the driver does after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    /// Bind this many RTP/RTCP port pairs and call [`RecordSession::set_ports`].
    NeedPorts(usize),
    /// RECORD was answered: send media.
    Recording,
}

/// One publisher's RTSP session. Call contract: [`RecordSession::start`], then each
/// response to [`RecordSession::on_response`] until [`Next::Recording`]; then
/// [`RecordSession::keep_alive`] every [`RecordSession::keepalive_interval`] (answers go
/// to `on_response` too) and [`RecordSession::teardown`] at the end. Requests are
/// appended to the caller's buffer.
#[derive(Debug)]
pub(crate) struct RecordSession {
    /// The ANNOUNCE and RECORD URL.
    url: String,
    lower: Lower,
    state: State,
    dialog: Dialog,
    sdp: Bytes,
    tracks: Vec<RecordTrack>,
    ports: Vec<PortPair>,
}

impl RecordSession {
    /// A session announcing `sdp` (from [`announce_sdp`], `tracks` media sections) at
    /// `url` (`rtsp://host:port/path`).
    pub(crate) fn new(url: String, lower: Lower, sdp: Bytes, tracks: usize) -> Self {
        let tracks = (0..tracks)
            .map(|i| RecordTrack {
                url: resolve(&url, &control(i)),
                transport: None,
            })
            .collect();
        RecordSession {
            url,
            lower,
            state: State::ExpectOptions,
            dialog: Dialog::new(),
            sdp,
            tracks,
            ports: Vec::new(),
        }
    }

    /// The first request: OPTIONS.
    pub(crate) fn start(&mut self, out: &mut BytesMut) {
        let url = self.url.clone();
        self.send(Method::Options, &url, &[], Bytes::new(), out);
    }

    /// The tracks, in SDP order.
    pub(crate) fn tracks(&self) -> &[RecordTrack] {
        &self.tracks
    }

    /// How often to send keep-alives once recording.
    pub(crate) fn keepalive_interval(&self) -> Duration {
        self.dialog.keepalive_interval()
    }

    /// Sends a keep-alive, unless the last one is still unanswered.
    pub(crate) fn keep_alive(&mut self, out: &mut BytesMut) {
        if self.state == State::Recording {
            self.dialog.keep_alive(&self.url, out);
        }
    }

    /// Ends the session (TEARDOWN), if it was set up; its answer is not waited for.
    pub(crate) fn teardown(&mut self, out: &mut BytesMut) {
        if self.dialog.has_session() && self.state != State::Done {
            let url = self.url.clone();
            self.send(Method::Teardown, &url, &[], Bytes::new(), out);
            self.state = State::Done;
        }
    }

    /// The client ports of each track (RTP over UDP), after [`Next::NeedPorts`]; sends
    /// the first SETUP.
    pub(crate) fn set_ports(&mut self, ports: Vec<PortPair>, out: &mut BytesMut) {
        if self.state == State::ExpectPorts && ports.len() == self.tracks.len() {
            self.ports = ports;
            self.setup(0, out);
        }
    }

    fn send(
        &mut self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
        out: &mut BytesMut,
    ) {
        let body = (!body.is_empty()).then_some(body);
        self.dialog.send(method, url, headers, body, out);
    }

    fn setup(&mut self, track: usize, out: &mut BytesMut) {
        let mut transport = match self.lower {
            Lower::Tcp => Transport::tcp(proposed_channels(track)),
            Lower::Udp => match self.ports.get(track) {
                Some(&p) => Transport::udp(p),
                None => return,
            },
        };
        transport.mode = Mode::Record;
        let Some(url) = self.tracks.get(track).map(|t| t.url.clone()) else {
            return;
        };
        let header = [("Transport", transport.to_string())];
        self.send(Method::Setup, &url, &header, Bytes::new(), out);
        self.state = State::ExpectSetup { track };
    }

    /// Takes the answer to the request in flight and sends the next request, if any.
    pub(crate) fn on_response(
        &mut self,
        resp: Response,
        out: &mut BytesMut,
    ) -> Result<Next, PlayError> {
        let method = self.dialog.answered(&resp)?;
        if resp.status == 401 {
            let challenge = resp.header("WWW-Authenticate").unwrap_or("no challenge");
            return Err(PlayError::Refused {
                method: method.as_str().to_string(),
                status: 401,
                reason: format!(
                    "{}: the server wants credentials ({challenge}), and sluice-bench \
                     publishes without any",
                    resp.reason
                ),
            });
        }
        refused_unless_ok(&method, &resp)?;
        match self.state {
            State::ExpectOptions => {
                self.dialog.pick_keepalive(&resp);
                let url = self.url.clone();
                let sdp = self.sdp.clone();
                let headers = [("Content-Type", "application/sdp".to_string())];
                self.send(Method::Announce, &url, &headers, sdp, out);
                self.state = State::ExpectAnnounce;
                Ok(Next::Continue)
            }
            State::ExpectAnnounce => match self.lower {
                Lower::Tcp => {
                    self.setup(0, out);
                    Ok(Next::Continue)
                }
                Lower::Udp => {
                    self.state = State::ExpectPorts;
                    Ok(Next::NeedPorts(self.tracks.len()))
                }
            },
            State::ExpectSetup { track } => {
                self.on_setup(track, &resp)?;
                if track + 1 < self.tracks.len() {
                    self.setup(track + 1, out);
                } else {
                    let url = self.url.clone();
                    let range = [("Range", "npt=0.000-".to_string())];
                    self.send(Method::Record, &url, &range, Bytes::new(), out);
                    self.state = State::ExpectRecord;
                }
                Ok(Next::Continue)
            }
            State::ExpectRecord => {
                self.state = State::Recording;
                Ok(Next::Recording)
            }
            State::Recording | State::Done => Ok(Next::Continue),
            State::ExpectPorts => Err(PlayError::Unexpected(
                "a response while no request was in flight".into(),
            )),
        }
    }

    fn on_setup(&mut self, track: usize, resp: &Response) -> Result<(), PlayError> {
        let transport = self.dialog.setup_answer(self.lower, resp)?;
        if self.lower == Lower::Udp && transport.as_ref().and_then(|t| t.server_port).is_none() {
            return Err(PlayError::Unexpected(
                "SETUP over UDP answered without a server_port".into(),
            ));
        }
        if let Some(t) = self.tracks.get_mut(track) {
            t.transport = transport;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_media::codec::{AacConfig, AvcConfig};
    use sluice_media::sdp::parse_sdp;
    use sluice_media::TrackConfig;

    fn tracks() -> Vec<Track> {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        vec![
            Track::new(TrackConfig::H264(
                AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap(),
            )),
            Track::new(TrackConfig::Aac(
                AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).unwrap(),
            )),
        ]
    }

    fn answer(cseq: u32, extra: &[(&str, &str)]) -> Response {
        let mut r = Response::new(200).with_header("CSeq", cseq.to_string());
        for (n, v) in extra {
            r = r.with_header(n, *v);
        }
        r
    }

    /// The requests written since the last call, head and body together.
    fn sent(out: &mut BytesMut) -> String {
        String::from_utf8(out.split().to_vec()).unwrap()
    }

    fn session(lower: Lower) -> RecordSession {
        let sdp = announce_sdp(&tracks(), "live/cam", "127.0.0.1", 7).unwrap();
        RecordSession::new("rtsp://h:8554/live/cam".into(), lower, sdp, 2)
    }

    #[test]
    fn announce_sdp_describes_each_track_and_parses_back() {
        let sdp = announce_sdp(&tracks(), "live/cam", "10.0.0.1", 7).unwrap();
        let text = std::str::from_utf8(&sdp).unwrap();
        assert!(text.contains("o=- 7 1 IN IP4 10.0.0.1\r\n"), "{text}");
        assert!(text.contains("a=rtpmap:96 H264/90000"), "{text}");
        assert!(text.contains("a=rtpmap:98 MPEG4-GENERIC/48000"), "{text}");
        let parsed = parse_sdp(&sdp).unwrap();
        assert_eq!(parsed.media.len(), 2);
        assert_eq!(parsed.media[0].control, "trackID=0");
        assert_eq!(parsed.media[1].control, "trackID=1");
        assert_eq!(parsed.media[0].track.as_ref(), Some(&tracks()[0]));
        assert_eq!(parsed.media[1].track.as_ref(), Some(&tracks()[1]));
        // A codec RTP does not carry here is refused, not described half.
        let mp3 = Track::new(TrackConfig::Mp3 {
            sample_rate: 44_100,
            channels: 2,
        });
        assert_eq!(
            announce_sdp(&[tracks()[0].clone(), mp3], "x", "127.0.0.1", 1),
            Err(SdpError::NoCodec { index: 1 })
        );
    }

    #[test]
    fn tcp_session_announces_sets_up_each_track_and_records() {
        let mut s = session(Lower::Tcp);
        let mut out = BytesMut::new();
        s.start(&mut out);
        let r = sent(&mut out);
        assert!(
            r.starts_with("OPTIONS rtsp://h:8554/live/cam RTSP/1.0\r\nCSeq: 1\r\n"),
            "{r}"
        );
        let public = [("Public", "OPTIONS, ANNOUNCE, SETUP, RECORD, GET_PARAMETER")];
        assert_eq!(
            s.on_response(answer(1, &public), &mut out).unwrap(),
            Next::Continue
        );
        let r = sent(&mut out);
        assert!(
            r.starts_with("ANNOUNCE rtsp://h:8554/live/cam RTSP/1.0\r\nCSeq: 2\r\n"),
            "{r}"
        );
        assert!(r.contains("Content-Type: application/sdp\r\n"), "{r}");
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{r}"
        );
        assert!(
            body.starts_with("v=0\r\n") && body.contains("m=audio"),
            "{r}"
        );
        s.on_response(answer(2, &[]), &mut out).unwrap();
        let r = sent(&mut out);
        assert!(
            r.starts_with("SETUP rtsp://h:8554/live/cam/trackID=0 RTSP/1.0\r\nCSeq: 3\r\n"),
            "{r}"
        );
        assert!(
            r.contains("Transport: RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\r\n"),
            "{r}"
        );
        assert!(!r.contains("Session:"), "{r}");
        let setup = [
            ("Session", "abcdef0123456789;timeout=20"),
            (
                "Transport",
                "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record",
            ),
        ];
        s.on_response(answer(3, &setup), &mut out).unwrap();
        let r = sent(&mut out);
        assert!(
            r.starts_with("SETUP rtsp://h:8554/live/cam/trackID=1 RTSP/1.0"),
            "{r}"
        );
        assert!(
            r.contains("interleaved=2-3;mode=record") && r.contains("Session: abcdef0123456789"),
            "{r}"
        );
        // The server moves audio to other channels: the answer wins.
        let setup = [
            ("Session", "abcdef0123456789;timeout=20"),
            (
                "Transport",
                "RTP/AVP/TCP;unicast;interleaved=6-7;mode=record",
            ),
        ];
        s.on_response(answer(4, &setup), &mut out).unwrap();
        let r = sent(&mut out);
        assert!(
            r.starts_with("RECORD rtsp://h:8554/live/cam RTSP/1.0"),
            "{r}"
        );
        assert!(
            r.contains("Range: npt=0.000-") && r.contains("Session: abcdef0123456789"),
            "{r}"
        );
        assert_eq!(
            s.on_response(answer(5, &[]), &mut out).unwrap(),
            Next::Recording
        );
        assert_eq!(s.tracks()[0].channels(0), ChannelPair { rtp: 0, rtcp: 1 });
        assert_eq!(s.tracks()[1].channels(1), ChannelPair { rtp: 6, rtcp: 7 });
        assert_eq!(s.keepalive_interval(), Duration::from_secs(10));
        s.keep_alive(&mut out);
        let r = sent(&mut out);
        assert!(
            r.starts_with("GET_PARAMETER rtsp://h:8554/live/cam RTSP/1.0\r\nCSeq: 6"),
            "{r}"
        );
        // Not twice while one is unanswered.
        s.keep_alive(&mut out);
        assert!(out.is_empty());
        s.on_response(answer(6, &[]), &mut out).unwrap();
        s.teardown(&mut out);
        let r = sent(&mut out);
        assert!(
            r.starts_with("TEARDOWN rtsp://h:8554/live/cam RTSP/1.0\r\nCSeq: 7"),
            "{r}"
        );
        s.teardown(&mut out);
        s.keep_alive(&mut out);
        assert!(out.is_empty(), "nothing after TEARDOWN");
    }

    #[test]
    fn udp_session_asks_for_ports_and_needs_server_ports() {
        let mut s = session(Lower::Udp);
        let mut out = BytesMut::new();
        s.start(&mut out);
        // No Public: keep-alives would be OPTIONS.
        s.on_response(answer(1, &[]), &mut out).unwrap();
        out.clear();
        assert_eq!(
            s.on_response(answer(2, &[]), &mut out).unwrap(),
            Next::NeedPorts(2)
        );
        assert!(out.is_empty());
        let pair = |rtp| PortPair { rtp, rtcp: rtp + 1 };
        s.set_ports(vec![pair(40000), pair(40002)], &mut out);
        let r = sent(&mut out);
        assert!(
            r.contains("Transport: RTP/AVP;unicast;client_port=40000-40001;mode=record\r\n"),
            "{r}"
        );
        let setup = [
            ("Session", "abcdef0123456789"),
            (
                "Transport",
                "RTP/AVP;unicast;client_port=40000-40001;server_port=5000-5001;mode=record",
            ),
        ];
        s.on_response(answer(3, &setup), &mut out).unwrap();
        assert_eq!(s.tracks()[0].server_port(), Some(pair(5000)));
        let r = sent(&mut out);
        assert!(r.contains("client_port=40002-40003"), "{r}");
        // An answer without server_port leaves nowhere to send.
        let setup = [
            ("Session", "abcdef0123456789"),
            ("Transport", "RTP/AVP;unicast;client_port=40002-40003"),
        ];
        let e = s.on_response(answer(4, &setup), &mut out).unwrap_err();
        assert!(e.to_string().contains("server_port"), "{e}");
        assert_eq!(s.keepalive_interval(), Duration::from_secs(30));
    }

    #[test]
    fn refusals_and_bad_answers_are_errors() {
        // 401: a clear word that credentials are wanted.
        let mut s = session(Lower::Tcp);
        let mut out = BytesMut::new();
        s.start(&mut out);
        s.on_response(answer(1, &[]), &mut out).unwrap();
        let mut unauthorized = Response::new(401)
            .with_header("CSeq", "2")
            .with_header("WWW-Authenticate", "Digest realm=\"sluice\", nonce=\"x\"");
        unauthorized.reason = "Unauthorized".into();
        let e = s.on_response(unauthorized, &mut out).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("ANNOUNCE answered 401 Unauthorized: the server wants credentials"),
            "{e}"
        );
        assert!(e.contains("realm=\"sluice\""), "{e}");

        // A stream already published.
        let mut s = session(Lower::Tcp);
        s.start(&mut out);
        s.on_response(answer(1, &[]), &mut out).unwrap();
        let e = s
            .on_response(Response::new(455).with_header("CSeq", "2"), &mut out)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ANNOUNCE answered 455 Method Not Valid in This State"
        );

        // CSeq mismatch, no CSeq, and an answer to nothing.
        let mut s = session(Lower::Tcp);
        s.start(&mut out);
        assert!(s.on_response(answer(9, &[]), &mut out).is_err());
        let mut s = session(Lower::Tcp);
        s.start(&mut out);
        assert!(s.on_response(Response::new(200), &mut out).is_err());
        assert!(s.on_response(answer(1, &[]), &mut out).is_err());

        // SETUP without a Session, with a bad or a UDP Transport, or another session.
        let to_setup = || {
            let mut s = session(Lower::Tcp);
            let mut out = BytesMut::new();
            s.start(&mut out);
            s.on_response(answer(1, &[]), &mut out).unwrap();
            s.on_response(answer(2, &[]), &mut out).unwrap();
            s
        };
        let e = to_setup()
            .on_response(answer(3, &[]), &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("without a Session"), "{e}");
        let bad = [("Session", "abcdef0123456789"), ("Transport", "RTP/XYZ")];
        assert!(to_setup().on_response(answer(3, &bad), &mut out).is_err());
        let udp = [
            ("Session", "abcdef0123456789"),
            ("Transport", "RTP/AVP;unicast;server_port=5000-5001"),
        ];
        let e = to_setup()
            .on_response(answer(3, &udp), &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("asked for Tcp"), "{e}");
        let mut s = to_setup();
        s.on_response(answer(3, &[("Session", "abcdef0123456789")]), &mut out)
            .unwrap();
        let e = s
            .on_response(answer(4, &[("Session", "0123456789abcdef")]), &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("after abcdef0123456789"), "{e}");
        // No Transport in the answer: the proposed channels stand.
        assert_eq!(s.tracks()[0].channels(0), ChannelPair { rtp: 0, rtcp: 1 });
    }
}
