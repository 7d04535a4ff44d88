//! A viewer's RTCP, as it reaches our media path: the compound walk never panics,
//! never reads past the packet, and a NACK names a bounded number of packets; SRTCP
//! unprotection of any bytes is an error at most.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_webrtc::rtcp::{self, Feedback};
use sluice_webrtc::srtp::{Profile, Session};

fuzz_target!(|data: &[u8]| {
    for feedback in rtcp::feedback(data) {
        if let Feedback::Nack { lost, .. } = feedback {
            assert!(!lost.is_empty() && lost.len() <= 256);
        }
    }
    // The first byte picks the profile; the packet is then taken as SRTCP, which
    // fails its check unless it is one of the session's own (it never is here).
    let profile = match data.first() {
        Some(b) if b % 3 == 0 => Profile::Aes128CmSha1_80,
        Some(b) if b % 3 == 1 => Profile::AeadAes128Gcm,
        _ => Profile::AeadAes256Gcm,
    };
    let material = vec![7u8; profile.material_len()];
    let mut session = Session::new(profile, &material, false).expect("keys");
    let mut out = Vec::new();
    let _ = session.rx.unprotect_rtcp(data.get(1..).unwrap_or_default(), &mut out);
});
