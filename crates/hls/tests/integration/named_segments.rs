//! Segments the caller names (live HLS names them by their start on the stream's
//! timeline) and a first msn other than 0: URIs, lookups by name, preload hints.

use crate::common::{lines_with, ms, parse, render, T0};
use sluice_hls::{HlsConfig, HlsError, Timeline, Variant};

fn ll() -> Timeline {
    let config = HlsConfig {
        target_duration_ms: 1000,
        part_duration_ms: 500,
        window: 3,
        keep_extra: 1,
        low_latency: true,
        ..HlsConfig::default()
    };
    Timeline::new(config, Variant::Fmp4).unwrap()
}

#[test]
fn named_segments_keep_their_names_in_uris_and_lookups() {
    let mut timeline = ll();
    timeline.set_first_msn(40).unwrap();
    for (n, name) in [9000u64, 99_000, 189_000, 279_000, 369_000]
        .iter()
        .enumerate()
    {
        let msn = timeline
            .start_named_segment(false, T0 + n as i64 * 1000, *name)
            .unwrap();
        assert_eq!(msn, 40 + n as u64);
        timeline.add_part(ms(500), true).unwrap();
        timeline.add_part(ms(500), false).unwrap();
        timeline.end_segment(ms(1000)).unwrap();
    }
    assert_eq!(
        timeline.set_first_msn(0),
        Err(HlsError::Unexpected {
            call: "set_first_msn",
            state: "after the first segment"
        })
    );
    // A name that does not grow is raised past the last one.
    assert_eq!(timeline.start_named_segment(false, T0 + 5000, 5), Ok(45));
    timeline.add_part(ms(500), true).unwrap();
    let playlist = render(&timeline, "m4s");
    assert!(
        playlist.contains("#EXT-X-MEDIA-SEQUENCE:42\n"),
        "{playlist}"
    );
    assert!(
        playlist.contains("#EXTINF:1.000,\nseg189000.m4s\n"),
        "{playlist}"
    );
    assert!(
        playlist.contains("URI=\"part369001.0.m4s\",INDEPENDENT=YES\n"),
        "{playlist}"
    );
    assert_eq!(
        lines_with(&playlist, "#EXT-X-PRELOAD-HINT"),
        ["#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part369001.1.m4s\""]
    );
    parse(&playlist);
    // Kept (window 3 plus 1) and in progress are found by name; the rest are not.
    assert_eq!(timeline.msn_named(99_000), Some(41));
    assert_eq!(timeline.msn_named(369_000), Some(44));
    assert_eq!(timeline.msn_named(369_001), Some(45));
    assert_eq!(timeline.msn_named(9000), None, "left the kept range");
    assert_eq!(timeline.msn_named(100_000), None);
    assert!(timeline.msn_named(369_002).is_none());
}

#[test]
fn between_named_segments_there_is_no_preload_hint() {
    let mut timeline = ll();
    timeline.start_named_segment(false, T0, 90_000).unwrap();
    timeline.add_part(ms(500), true).unwrap();
    timeline.end_segment(ms(500)).unwrap();
    let playlist = render(&timeline, "m4s");
    assert!(
        lines_with(&playlist, "#EXT-X-PRELOAD-HINT").is_empty(),
        "{playlist}"
    );
    // Unnamed segments hint at the next one's first part by its msn.
    let mut plain = ll();
    plain.start_segment(false, T0).unwrap();
    plain.add_part(ms(500), true).unwrap();
    plain.end_segment(ms(500)).unwrap();
    assert!(render(&plain, "m4s").contains("URI=\"part1.0.m4s\""));
}

#[test]
fn the_first_segment_of_any_number_ignores_a_discontinuity() {
    let config = HlsConfig {
        low_latency: false,
        ..HlsConfig::default()
    };
    let mut timeline = Timeline::new(config, Variant::Ts).unwrap();
    timeline.set_first_msn(7).unwrap();
    timeline.start_named_segment(true, T0, 0).unwrap();
    timeline.end_segment(ms(2000)).unwrap();
    timeline
        .start_named_segment(true, T0 + 2000, 180_000)
        .unwrap();
    timeline.end_segment(ms(2000)).unwrap();
    let playlist = render(&timeline, "ts");
    assert_eq!(
        lines_with(&playlist, "#EXT-X-DISCONTINUITY").len(),
        1,
        "{playlist}"
    );
    assert!(
        playlist
            .contains("#EXT-X-DISCONTINUITY\n#EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:00:02.000Z\n"),
        "{playlist}"
    );
}
