//! Arbitrary bytes to a server session, in pieces whose size the first byte picks.
//! The fake application answers every request (accepting, or rejecting when the mode
//! byte's low bit is set), so input reaches every state; time advances per piece.
#![no_main]

use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_rtsp::{
    NptRange, PortPair, ServerConfig, ServerEvent, ServerOutput, ServerSession, SetupAnswer,
    TrackStart,
};

const SDP: &[u8] = b"v=0\r\nm=video 0 RTP/AVP 96\r\na=control:trackID=0\r\nm=audio 0 RTP/AVP 97\r\na=control:trackID=1\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut now = Instant::now();
    let mut session = ServerSession::new(ServerConfig::default(), [1; 32], now);
    for part in rest.chunks(usize::from(mode >> 1).max(1)) {
        now += Duration::from_millis(u64::from(mode));
        session.handle_timeout(now);
        if session.handle_input(now, part).is_err() {
            while session.poll_output().is_some() {}
            return;
        }
        for _ in 0..64 {
            let mut events = Vec::new();
            while let Some(out) = session.poll_output() {
                if let ServerOutput::Event(e) = out {
                    events.push(e);
                }
            }
            if events.is_empty() {
                break;
            }
            for e in events {
                let reject = mode & 1 == 1;
                let _ = match e {
                    _ if reject => session.reject(404),
                    ServerEvent::Describe { .. } => {
                        session.answer_describe(Bytes::from_static(SDP))
                    }
                    ServerEvent::Announce { .. } => session.accept_announce(),
                    ServerEvent::Setup { transport, .. } => {
                        session.answer_setup(match transport.interleaved {
                            Some(channels) => SetupAnswer::Interleaved {
                                channels,
                                ssrc: None,
                            },
                            None => SetupAnswer::Udp {
                                server_port: PortPair {
                                    rtp: 6000,
                                    rtcp: 6001,
                                },
                                ssrc: Some(1),
                            },
                        })
                    }
                    ServerEvent::Play { .. } => session.answer_play(
                        &[TrackStart {
                            track: 0,
                            seq: 0,
                            rtptime: 0,
                        }],
                        Some(NptRange::FROM_ZERO),
                    ),
                    ServerEvent::Record { .. } => session.accept_record(),
                    _ => Ok(()),
                };
            }
        }
    }
});
