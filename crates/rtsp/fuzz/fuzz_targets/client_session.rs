//! Arbitrary bytes to a client session, in pieces whose size the first byte picks,
//! read the buffered way or in place (the mode byte's low bit). The fake application
//! goes on after every answer (DESCRIBE, SETUP over TCP or UDP, PLAY, or ANNOUNCE and
//! RECORD), so server bytes reach every state; time advances per piece.
#![no_main]

use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_rtsp::{
    ClientConfig, ClientEvent, ClientOutput, ClientSession, ClientTransport, NptRange, PortPair,
};

const SDP: &[u8] = b"v=0\r\nm=video 0 RTP/AVP 96\r\na=control:trackID=0\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(config) = ClientConfig::new("rtsp://user:pass@127.0.0.1:8554/live/s") else {
        return;
    };
    let mut now = Instant::now();
    let mut client = ClientSession::new(config, [3; 32], now);
    let record = mode & 2 == 2;
    let udp = mode & 4 == 4;
    let _ = client.options();
    for part in rest.chunks(usize::from(mode >> 3).max(1)) {
        now += Duration::from_millis(u64::from(mode) * 100);
        client.handle_timeout(now);
        let mut left = part;
        loop {
            let result = if mode & 1 == 1 {
                client
                    .handle_input_in_place(now, left, &mut |_, _| {})
                    .map(|used| left = left.get(used..).unwrap_or_default())
            } else {
                let r = client.handle_input(now, left);
                left = &[];
                r
            };
            if result.is_err() {
                while client.poll_output().is_some() {}
                return;
            }
            while let Some(out) = client.poll_output() {
                let ClientOutput::Event(e) = out else {
                    continue;
                };
                let _ = match e {
                    ClientEvent::Options { .. } if record => {
                        client.announce(Bytes::from_static(SDP))
                    }
                    ClientEvent::Options { .. } => client.describe(),
                    ClientEvent::Described { .. } | ClientEvent::Announced => {
                        let transport = if udp {
                            ClientTransport::Udp {
                                client_port: PortPair {
                                    rtp: 5000,
                                    rtcp: 5001,
                                },
                            }
                        } else {
                            ClientTransport::Interleaved
                        };
                        client.setup("trackID=0", transport).map(|_| ())
                    }
                    ClientEvent::SetUp { .. } if record => client.record(None),
                    ClientEvent::SetUp { .. } => client.play(Some(NptRange::FROM_ZERO)),
                    ClientEvent::Refused(_) => {
                        client.teardown();
                        Ok(())
                    }
                    _ => Ok(()),
                };
            }
            if left.is_empty() {
                break;
            }
        }
    }
});
