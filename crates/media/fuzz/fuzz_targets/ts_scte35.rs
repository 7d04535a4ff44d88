//! SCTE-35 splice info sections: any bytes never panic; what parses keeps the section
//! whole, gives times on the 33-bit clock, holds no more descriptors than fit, and
//! survives retiming.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_media::ts::{SpliceInfo, MAX_SECTION_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(info) = SpliceInfo::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    assert!(data.len() <= MAX_SECTION_LEN);
    assert_eq!(&info.raw[..], data);
    assert!(info.splice_pts().is_none_or(|p| p < 1 << 33));
    // A segmentation descriptor takes at least 11 bytes (tag, length, CUEI, id, flag).
    assert!(info.segmentations.len() * 11 <= data.len());
    assert!(info.segmentations.iter().all(|s| s.upid.len() <= 255));
    // Retimed for another clock, it still parses, splices where asked, and says the
    // same otherwise.
    let pts = u64::from_le_bytes(
        data.iter()
            .copied()
            .chain([0; 8])
            .take(8)
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_default(),
    ) & ((1 << 33) - 1);
    let retimed = SpliceInfo::parse(info.retimed(pts)).expect("a retimed section parses");
    assert_eq!(retimed.command, info.command);
    assert_eq!(retimed.segmentations, info.segmentations);
    if info.splice_pts().is_some() {
        assert_eq!(retimed.splice_pts(), Some(pts));
    }
});
