//! ANNOUNCE bodies: the SDP parser, then a depacketizer for every media it accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_media::sdp::parse_sdp;

fuzz_target!(|data: &[u8]| {
    if let Ok(session) = parse_sdp(data) {
        for media in &session.media {
            let _ = media.depacketizer();
        }
    }
});
