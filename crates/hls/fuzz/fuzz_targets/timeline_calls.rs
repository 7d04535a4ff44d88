//! Arbitrary bytes as a sequence of timeline calls, rendering after each. Must never
//! panic, whatever the order or the durations.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_hls::{BlockingRequest, Encryption, HlsConfig, SegmentNames, Timeline, Variant};

struct Names;

impl SegmentNames for Names {
    fn segment(&self, msn: u64, out: &mut String) {
        out.push_str(&msn.to_string());
    }
    fn part(&self, msn: u64, part: u32, out: &mut String) {
        out.push_str(&format!("{msn}.{part}"));
    }
    fn init(&self, out: &mut String) {
        out.push_str("init");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, calls)) = data.split_first() else {
        return;
    };
    let config = HlsConfig {
        window: usize::from(setup & 7) + 1,
        keep_extra: usize::from(setup >> 3 & 3),
        low_latency: setup & 0x20 != 0,
        // Encrypted playlists too (refused with low latency, as configured so).
        encryption: if setup & 0x80 != 0 {
            Encryption::Aes128 { rotation: 3 }
        } else {
            Encryption::None
        },
        ..HlsConfig::default()
    };
    let variant = if setup & 0x40 != 0 {
        Variant::Fmp4
    } else {
        Variant::Ts
    };
    let Ok(mut timeline) = Timeline::new(config, variant) else {
        return;
    };
    let mut out = String::new();
    for call in calls.chunks(9) {
        let Some((&op, arg)) = call.split_first() else {
            return;
        };
        let mut bytes = [0u8; 8];
        bytes[..arg.len()].copy_from_slice(arg);
        let value = i64::from_le_bytes(bytes);
        match op % 5 {
            0 => drop(timeline.start_segment(op & 0x80 != 0, value)),
            1 => drop(timeline.add_part(value, op & 0x80 != 0)),
            2 => drop(timeline.end_segment(value)),
            3 => drop(timeline.end_stream()),
            _ => {
                let request = BlockingRequest {
                    msn: value.unsigned_abs(),
                    part: (op & 0x80 != 0).then_some(u32::from(op)),
                };
                let _ = timeline.readiness(request);
                let _ = timeline.part_state(request.msn, u32::from(op));
            }
        }
        out.clear();
        timeline.render(&Names, &mut out);
    }
});
