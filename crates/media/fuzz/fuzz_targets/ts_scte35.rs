//! SCTE-35 splice info sections: any bytes never panic; what parses keeps the section
//! whole, gives times on the 33-bit clock, and holds no more descriptors than fit.
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
});
