//! SCTE-35 cues as `EXT-X-DATERANGE`: arbitrary bytes as a sequence of cues (a section
//! and its splice time) and segment starts. Never panics, keeps no more than its
//! bounds, and every tag rendered is one line of quoted ASCII that ends where it
//! should, so no cue can add playlist lines.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_hls::{Splices, MAX_PENDING};
use sluice_media::ts::SpliceInfo;

fn i64_at(data: &[u8]) -> i64 {
    let mut bytes = [0u8; 8];
    let n = data.len().min(8);
    bytes[..n].copy_from_slice(&data[..n]);
    i64::from_le_bytes(bytes)
}

fuzz_target!(|data: &[u8]| {
    let mut splices = Splices::default();
    let mut rest = data;
    let mut msn = 0u64;
    let mut out = String::new();
    while let Some((&op, tail)) = rest.split_first() {
        if op & 1 == 0 {
            // A cue: a 2-byte length, the section, its splice time.
            let Some(len) = tail.get(..2).map(|l| usize::from(u16::from_le_bytes([l[0], l[1]])))
            else {
                return;
            };
            let Some(section) = tail.get(2..2 + len) else {
                return;
            };
            let at = i64_at(&tail[2 + len..]);
            rest = tail.get(2 + len + 8..).unwrap_or_default();
            if let Ok(info) = SpliceInfo::parse(Bytes::copy_from_slice(section)) {
                splices.cue(at, info);
            }
        } else {
            // A segment starts at a time, dated by it.
            let dts = i64_at(tail);
            rest = tail.get(8..).unwrap_or_default();
            let ranges = splices.at_segment(dts, dts / 90, msn);
            assert!(ranges.len() <= MAX_PENDING);
            msn += 1;
            for range in ranges {
                out.clear();
                range.render(&mut out);
                assert!(out.is_ascii());
                assert_eq!(out.find('\n'), Some(out.len() - 1));
                assert_eq!(out.matches('"').count(), 4);
            }
        }
    }
});
