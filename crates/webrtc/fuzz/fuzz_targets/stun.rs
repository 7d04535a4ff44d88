//! The first datagram of an unknown sender: classified, and a binding request's
//! username found, without panicking or reading past the datagram; and any datagram
//! taken as a STUN server's answer to our binding request, or as a viewer's consent
//! check (answered only when its integrity holds, which random bytes never have).
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
    let from = "192.0.2.1:5000".parse().expect("an address");
    if let Some((ours, _)) = stun::binding_username(data) {
        let ours = ours.to_owned();
        let answer = stun::answer_check(data, &ours, "a-password-of-22-chars", from);
        assert!(answer.map_or(true, |a| a.len() < 128));
    }
});
