//! The first datagram of an unknown sender: classified, and a binding request's
//! username found, without panicking or reading past the datagram; and any datagram
//! taken as a STUN server's answer to our binding request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_webrtc::stun;

fuzz_target!(|data: &[u8]| {
    let _ = stun::classify(data);
    if let Some((ours, theirs)) = stun::binding_username(data) {
        assert!(ours.len() + theirs.len() < data.len());
    }
    // The transaction is the datagram's own, so that the address is looked at.
    if let Some(transaction) = data.get(8..20).and_then(|t| <[u8; 12]>::try_from(t).ok()) {
        let _ = stun::mapped_address(data, &transaction);
    }
});
