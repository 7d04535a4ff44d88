//! Compound RTCP packets from players and publishers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_media::rtp::rtcp::parse_compound;

fuzz_target!(|data: &[u8]| {
    for packet in parse_compound(data) {
        let _ = packet;
    }
});
