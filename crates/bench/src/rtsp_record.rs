//! The RTSP publishers' side of `sluice_rtsp::ClientSession`: the SDP of ANNOUNCE, and
//! the requests a publisher asks for (OPTIONS, ANNOUNCE, SETUP each track with
//! `mode=record`, RECORD; keep-alives go by themselves, a last TEARDOWN at the end).
//!
//! Why a second client beside `crate::rtsp::Player`: a publisher walks another path
//! (ANNOUNCE instead of DESCRIBE, RECORD instead of PLAY, its own SDP) and keeps other
//! facts (where to send RTP, not what to expect of it). Both share the client session,
//! [`crate::rtsp::drain`] and the error type (`crate::rtsp::PlayError`).
//!
//! - [`announce_sdp`]: the SDP body of ANNOUNCE, track `i` under control `trackID=i`.
//! - [`Recorder`]: OPTIONS → ANNOUNCE → (UDP: the driver's ports) → SETUP each track →
//!   RECORD.
//!
//! # Invariants
//! - A refusal ends the publisher with an error that says which. A 401 says that the
//!   server wants credentials, which the bench never sends.
//! - Nothing here panics on what the server says.

use crate::rtsp::{client_session, common_event, Lower, Next, PlayError, RtspClient};
use bytes::{Bytes, BytesMut};
use sluice_media::rtp::RtpCodec;
use sluice_media::sdp::{write_sdp, SdpError, SdpRange, SdpTrack, SessionDescription};
use sluice_media::Track;
use sluice_rtsp::{ClientEvent, ClientSession, ClientTransport, NptRange, PortPair};
use std::time::Instant;

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

/// One publisher's RTSP session: the client session and what it announces.
#[derive(Debug)]
pub(crate) struct Recorder {
    session: ClientSession,
    lower: Lower,
    sdp: Bytes,
    /// Media sections of the SDP.
    tracks: usize,
    ports: Vec<PortPair>,
}

impl Recorder {
    /// A publisher announcing `sdp` (from [`announce_sdp`], `tracks` media sections)
    /// at `url` (`rtsp://host:port/path`), at `now`; OPTIONS is the first output.
    pub(crate) fn new(
        url: &str,
        lower: Lower,
        sdp: Bytes,
        tracks: usize,
        now: Instant,
    ) -> Result<Self, PlayError> {
        let mut session = client_session(url, now)?;
        session.options()?;
        Ok(Recorder {
            session,
            lower,
            sdp,
            tracks,
            ports: Vec::new(),
        })
    }

    /// The interleaved RTP channel of each track, as answered (TCP).
    pub(crate) fn channels(&self) -> Vec<u8> {
        self.session
            .tracks()
            .iter()
            .map(|t| t.transport.interleaved.map_or(0, |c| c.rtp))
            .collect()
    }

    /// Where the server takes each track's RTP and RTCP (UDP).
    pub(crate) fn server_ports(&self) -> Vec<Option<PortPair>> {
        self.session
            .tracks()
            .iter()
            .map(|t| t.transport.server_port)
            .collect()
    }

    fn setup(&mut self, i: usize) -> Result<(), PlayError> {
        let transport = match (self.lower, self.ports.get(i)) {
            (Lower::Tcp, _) => ClientTransport::Interleaved,
            (Lower::Udp, Some(&client_port)) => ClientTransport::Udp { client_port },
            (Lower::Udp, None) => return Ok(()),
        };
        self.session.setup(&control(i), transport)?;
        Ok(())
    }
}

impl RtspClient for Recorder {
    fn session(&mut self) -> &mut ClientSession {
        &mut self.session
    }

    fn on_event(&mut self, e: ClientEvent) -> Result<Next, PlayError> {
        match e {
            ClientEvent::Options { .. } => {
                self.session.announce(self.sdp.clone())?;
                Ok(Next::Continue)
            }
            ClientEvent::Announced => match self.lower {
                Lower::Tcp => {
                    self.setup(0)?;
                    Ok(Next::Continue)
                }
                Lower::Udp => Ok(Next::NeedPorts(self.tracks)),
            },
            ClientEvent::SetUp { track, .. } => {
                if track + 1 < self.tracks {
                    self.setup(track + 1)?;
                } else {
                    self.session.record(Some(NptRange::FROM_ZERO))?;
                }
                Ok(Next::Continue)
            }
            ClientEvent::Recording => Ok(Next::Started),
            ClientEvent::Refused(r) if r.status == 401 && !r.sent_credentials => {
                let challenge = r.challenges.first().map_or("no challenge", String::as_str);
                Err(PlayError::Refused {
                    method: r.method.as_str().to_string(),
                    status: 401,
                    reason: format!(
                        "{}: the server wants credentials ({challenge}), and sluice-bench \
                         publishes without any",
                        r.reason
                    ),
                })
            }
            e => common_event(e),
        }
    }

    fn set_ports(&mut self, ports: Vec<PortPair>) -> Result<(), PlayError> {
        if ports.len() != self.tracks {
            return Err(PlayError::Unexpected(
                "UDP ports for another number of tracks".into(),
            ));
        }
        self.ports = ports;
        self.setup(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtsp::tests::converse;
    use sluice_media::codec::{AacConfig, AvcConfig};
    use sluice_media::sdp::parse_sdp;
    use sluice_media::TrackConfig;
    use sluice_rtsp::{AuthConfig, ServerConfig, ServerSession};
    use std::collections::HashMap;

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

    fn recorder(lower: Lower) -> Recorder {
        let sdp = announce_sdp(&tracks(), "live/cam", "127.0.0.1", 7).unwrap();
        Recorder::new("rtsp://h:8554/live/cam", lower, sdp, 2, Instant::now()).unwrap()
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
    fn tcp_publisher_announces_sets_up_each_track_and_records() {
        let mut r = recorder(Lower::Tcp);
        let mut server = ServerSession::new(ServerConfig::default(), [1; 32], Instant::now());
        let (written, started) = converse(&mut r, &mut server, "").unwrap();
        assert!(started, "{written}");
        let requests: Vec<&str> = written
            .lines()
            .filter(|l| l.ends_with(" RTSP/1.0"))
            .collect();
        assert_eq!(
            requests,
            [
                "OPTIONS rtsp://h:8554/live/cam RTSP/1.0",
                "ANNOUNCE rtsp://h:8554/live/cam RTSP/1.0",
                "SETUP rtsp://h:8554/live/cam/trackID=0 RTSP/1.0",
                "SETUP rtsp://h:8554/live/cam/trackID=1 RTSP/1.0",
                "RECORD rtsp://h:8554/live/cam RTSP/1.0",
            ],
            "{written}"
        );
        assert!(written.contains("Content-Type: application/sdp\r\n"));
        assert!(written.contains("Transport: RTP/AVP/TCP;unicast;interleaved=2-3;mode=record\r\n"));
        assert!(written.contains("Range: npt=0.000-\r\n"));
        assert_eq!(r.channels(), vec![0, 2]);
        assert_eq!(server.state_name(), "Recording");
        let mut out = BytesMut::new();
        assert!(r.session().teardown());
        crate::rtsp::drain(&mut r, &mut out, &mut |_| Ok(vec![])).unwrap();
        assert!(out.starts_with(b"TEARDOWN rtsp://h:8554/live/cam RTSP/1.0\r\n"));
    }

    #[test]
    fn udp_publisher_asks_for_ports_and_gets_server_ports() {
        let mut r = recorder(Lower::Udp);
        let mut server = ServerSession::new(ServerConfig::default(), [1; 32], Instant::now());
        let (written, started) = converse(&mut r, &mut server, "").unwrap();
        assert!(started, "{written}");
        assert!(
            written.contains("Transport: RTP/AVP;unicast;client_port=40002-40003;mode=record\r\n"),
            "{written}"
        );
        let five = Some(PortPair {
            rtp: 5000,
            rtcp: 5001,
        });
        assert_eq!(r.server_ports(), vec![five, five]);
    }

    #[test]
    fn a_server_that_wants_credentials_is_a_clear_refusal() {
        let mut r = recorder(Lower::Tcp);
        let auth = AuthConfig::new("sluice", HashMap::new());
        let config = ServerConfig {
            auth: Some(auth),
            ..ServerConfig::default()
        };
        let mut server = ServerSession::new(config, [1; 32], Instant::now());
        let e = converse(&mut r, &mut server, "").unwrap_err().to_string();
        assert!(
            e.starts_with("ANNOUNCE answered 401 Unauthorized: the server wants credentials"),
            "{e}"
        );
        assert!(e.contains("realm=\"sluice\""), "{e}");
    }
}
