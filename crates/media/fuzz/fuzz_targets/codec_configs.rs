//! Decoder configuration records and NAL unit splitting. The first byte picks the parser.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_media::codec::{nal_units, AacConfig, AvcConfig, HevcConfig, OpusConfig};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let b = Bytes::copy_from_slice(rest);
    match which % 6 {
        0 => {
            if let Ok(c) = AvcConfig::parse(b) {
                if !c.sps.is_empty() && !c.pps.is_empty() {
                    let _ = AvcConfig::from_parameter_sets(&c.sps, &c.pps);
                }
            }
        }
        1 => {
            if let Ok(c) = HevcConfig::parse(b) {
                let _ = HevcConfig::from_parameter_sets(&c.vps, &c.sps, &c.pps);
            }
        }
        2 => {
            if let Ok(c) = AacConfig::parse(b) {
                let _ = c.adts_header(rest.len());
            }
        }
        3 => {
            let _ = OpusConfig::parse(b);
        }
        4 => {
            let sets = [b.clone()];
            let _ = AvcConfig::from_parameter_sets(&sets, &sets);
            let _ = HevcConfig::from_parameter_sets(&sets, &sets, &sets);
        }
        _ => {
            for size in 0..=5 {
                for unit in nal_units(&b, size).flatten() {
                    assert!(!unit.is_empty());
                }
            }
        }
    }
});
