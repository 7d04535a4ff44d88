//! The first datagram of an unknown sender: classified, and a binding request's
//! username found, without panicking or reading past the datagram.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_webrtc::stun;

fuzz_target!(|data: &[u8]| {
    let _ = stun::classify(data);
    if let Some((ours, theirs)) = stun::binding_username(data) {
        assert!(ours.len() + theirs.len() < data.len());
    }
});
