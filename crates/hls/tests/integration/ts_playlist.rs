//! MPEG-TS playlists: grammar checked by m3u8-rs, window sliding, released segments,
//! target duration rounding, discontinuities, dates, misuse of the call order.

use crate::common::{lines_with, ms, parse, render, T0};
use sluice_hls::{HlsConfig, HlsError, Timeline, Variant};

fn ts_config(window: usize, keep_extra: usize) -> HlsConfig {
    HlsConfig {
        window,
        keep_extra,
        low_latency: false,
        ..HlsConfig::default()
    }
}

/// Appends one complete segment, dated 2 s after the previous one; returns the
/// released msn.
fn segment(timeline: &mut Timeline, duration_ms: i64, discontinuity: bool) -> Vec<u64> {
    let wall_clock_ms = T0 + 2000 * timeline.kept().end as i64;
    let msn = timeline
        .start_segment(discontinuity, wall_clock_ms)
        .unwrap_or_else(|err| panic!("start: {err}"));
    timeline
        .end_segment(ms(duration_ms))
        .unwrap_or_else(|err| panic!("end {msn}: {err}"))
}

#[test]
fn ts_playlist_parses_back() {
    let mut timeline = Timeline::new(ts_config(6, 3), Variant::Ts).unwrap();
    for duration in [2000, 2002, 1968] {
        assert!(segment(&mut timeline, duration, false).is_empty());
    }
    let text = render(&timeline, "ts");
    let parsed = parse(&text);
    assert_eq!(parsed.version, Some(3));
    assert_eq!(parsed.target_duration, 3); // ceil(2.002)
    assert_eq!(parsed.media_sequence, 0);
    assert_eq!(parsed.discontinuity_sequence, 0);
    assert!(parsed.independent_segments);
    assert!(!parsed.end_list);
    let uris: Vec<_> = parsed.segments.iter().map(|s| s.uri.as_str()).collect();
    assert_eq!(uris, ["seg0.ts", "seg1.ts", "seg2.ts"]);
    let durations: Vec<_> = parsed.segments.iter().map(|s| s.duration).collect();
    assert_eq!(durations, [2.0, 2.002, 1.968]);
    assert!(parsed
        .segments
        .iter()
        .all(|s| s.program_date_time.is_some()));
    assert!(parsed.segments.iter().all(|s| s.map.is_none()));
    assert_eq!(
        lines_with(&text, "#EXTINF"),
        ["#EXTINF:2.000,", "#EXTINF:2.002,", "#EXTINF:1.968,"]
    );
    // No Low-Latency tags in a TS playlist.
    assert!(!text.contains("EXT-X-PART") && !text.contains("SERVER-CONTROL"));
    assert!(!text.contains("PRELOAD-HINT") && !text.contains("EXT-X-MAP"));
}

#[test]
fn exact_ts_playlist() {
    let mut timeline = Timeline::new(ts_config(6, 0), Variant::Ts).unwrap();
    timeline.start_segment(false, T0).unwrap();
    timeline.end_segment(180_000).unwrap();
    timeline.start_segment(true, T0 + 60_000).unwrap();
    timeline.end_segment(179_999).unwrap();
    timeline.end_stream();
    assert_eq!(
        render(&timeline, "ts"),
        "#EXTM3U\n\
         #EXT-X-VERSION:3\n\
         #EXT-X-TARGETDURATION:2\n\
         #EXT-X-MEDIA-SEQUENCE:0\n\
         #EXT-X-INDEPENDENT-SEGMENTS\n\
         #EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:00:00.000Z\n\
         #EXTINF:2.000,\n\
         seg0.ts\n\
         #EXT-X-DISCONTINUITY\n\
         #EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:01:00.000Z\n\
         #EXTINF:2.000,\n\
         seg1.ts\n\
         #EXT-X-ENDLIST\n"
    );
}

#[test]
fn target_duration_is_ceiled_and_never_below_config() {
    // Configured 1.5 s rounds up to 2.
    let config = HlsConfig {
        target_duration_ms: 1500,
        part_duration_ms: 300,
        ..ts_config(3, 0)
    };
    let mut timeline = Timeline::new(config, Variant::Ts).unwrap();
    assert_eq!(timeline.target_duration_secs(), 2);
    segment(&mut timeline, 1000, false);
    assert_eq!(timeline.target_duration_secs(), 2);
    segment(&mut timeline, 2000, false);
    assert_eq!(timeline.target_duration_secs(), 2);
    // 2.0006 s renders as 2.001 and needs 3.
    timeline.start_segment(false, T0).unwrap();
    timeline.end_segment(180_054).unwrap();
    assert_eq!(timeline.target_duration_secs(), 3);
    assert_eq!(parse(&render(&timeline, "ts")).target_duration, 3);
    // 2.0004 s renders as 2.000: no need to grow for it alone.
    let mut other = Timeline::new(config, Variant::Ts).unwrap();
    other.start_segment(false, T0).unwrap();
    other.end_segment(180_036).unwrap();
    assert_eq!(other.target_duration_secs(), 2);
    // It never shrinks again, even once the long segment left the window.
    for _ in 0..5 {
        segment(&mut timeline, 1000, false);
    }
    assert_eq!(timeline.target_duration_secs(), 3);
    let longest = parse(&render(&timeline, "ts"))
        .segments
        .iter()
        .map(|s| s.duration)
        .fold(0f32, f32::max);
    assert_eq!(longest, 1.0);
}

#[test]
fn window_slides_and_releases_each_segment_once() {
    let mut timeline = Timeline::new(ts_config(6, 3), Variant::Ts).unwrap();
    let mut released = Vec::new();
    for n in 0..20u64 {
        let freed = segment(&mut timeline, 2000, false);
        // A segment is released once the 9 newest are kept: at the end of msn 9.
        let expected: Vec<u64> = n.checked_sub(9).into_iter().collect();
        assert_eq!(freed, expected, "after msn {n}");
        released.extend(freed);
        let listed = timeline.listed();
        assert_eq!(listed.end, n + 1);
        assert_eq!(listed.start, (n + 1).saturating_sub(6));
        assert_eq!(timeline.kept(), (n + 1).saturating_sub(9)..n + 1);
        let parsed = parse(&render(&timeline, "ts"));
        assert_eq!(parsed.media_sequence, listed.start);
        assert_eq!(parsed.segments.len() as u64, listed.end - listed.start);
        for gone in &released {
            assert!(parsed
                .segments
                .iter()
                .all(|s| s.uri != format!("seg{gone}.ts")));
        }
    }
    assert_eq!(released, (0..11).collect::<Vec<_>>());
}

#[test]
fn discontinuity_sequence_counts_those_that_left_the_window() {
    let mut timeline = Timeline::new(ts_config(3, 1), Variant::Ts).unwrap();
    // msn 0 (a discontinuity on the first segment follows nothing: dropped), 1, 2 (restart), 3, 4 (restart), 5..
    let restarts = [true, false, true, false, true, false, false, false];
    let mut sequences = Vec::new();
    let mut flagged = Vec::new();
    for restart in restarts {
        segment(&mut timeline, 2000, restart);
        let parsed = parse(&render(&timeline, "ts"));
        sequences.push(parsed.discontinuity_sequence);
        flagged.push(
            parsed
                .segments
                .iter()
                .filter(|s| s.discontinuity)
                .map(|s| s.uri.clone())
                .collect::<Vec<_>>(),
        );
    }
    // Listed after each: [0] [0,1] [0,1,2] [1,2,3] [2,3,4] [3,4,5] [4,5,6] [5,6,7].
    assert_eq!(sequences, [0, 0, 0, 0, 0, 1, 1, 2]);
    assert_eq!(timeline.discontinuity_sequence(), 2);
    assert_eq!(flagged[0], Vec::<String>::new());
    assert_eq!(flagged[4], ["seg2.ts", "seg4.ts"]);
    assert_eq!(flagged[7], Vec::<String>::new());
    let text = render(&timeline, "ts");
    assert_eq!(
        lines_with(&text, "#EXT-X-DISCONTINUITY-SEQUENCE"),
        ["#EXT-X-DISCONTINUITY-SEQUENCE:2"]
    );
}

#[test]
fn uris_cannot_inject_tags() {
    struct Hostile;
    impl sluice_hls::SegmentNames for Hostile {
        fn segment(&self, msn: u64, out: &mut String) {
            out.push_str(&format!("a b\"\n#EXT-X-ENDLIST\né{msn}.ts"));
        }
        fn part(&self, _: u64, _: u32, _: &mut String) {}
        fn init(&self, _: &mut String) {}
    }
    let mut timeline = Timeline::new(ts_config(6, 0), Variant::Ts).unwrap();
    segment(&mut timeline, 2000, false);
    let mut out = String::new();
    timeline.render(&Hostile, &mut out);
    assert!(
        out.contains("\na%20b%22%0A#EXT-X-ENDLIST%0A%C3%A90.ts\n"),
        "{out}"
    );
    assert!(!parse(&out).end_list);
    assert_eq!(lines_with(&out, "#EXT-X-ENDLIST").len(), 0);
}

#[test]
fn calls_out_of_order_are_errors_and_change_nothing() {
    let mut timeline = Timeline::new(ts_config(6, 0), Variant::Ts).unwrap();
    assert!(matches!(
        timeline.end_segment(ms(2000)),
        Err(HlsError::Unexpected { .. })
    ));
    assert!(matches!(
        timeline.add_part(ms(300), true),
        Err(HlsError::Unexpected { .. })
    ));
    timeline.start_segment(false, T0).unwrap();
    let revision = timeline.revision();
    assert!(matches!(
        timeline.start_segment(false, T0),
        Err(HlsError::Unexpected { .. })
    ));
    for bad in [0, -1, i64::MIN, i64::MAX, ms(60_001)] {
        assert!(matches!(
            timeline.end_segment(bad),
            Err(HlsError::BadDuration { .. })
        ));
    }
    assert_eq!(timeline.revision(), revision);
    assert_eq!(timeline.in_progress(), Some(0));
    timeline.end_segment(ms(60_000)).unwrap();
    assert_eq!(timeline.target_duration_secs(), 60);
    // A TS segment in progress at the end has no parts: it is dropped and released.
    timeline.start_segment(false, T0).unwrap();
    assert_eq!(timeline.end_stream(), [1]);
    assert!(timeline.end_stream().is_empty());
    assert!(matches!(
        timeline.start_segment(true, T0),
        Err(HlsError::Unexpected { .. })
    ));
    let parsed = parse(&render(&timeline, "ts"));
    assert!(parsed.end_list);
    assert_eq!(parsed.segments.len(), 1);
}

#[test]
fn configs_out_of_range_are_refused() {
    let bad = [
        HlsConfig {
            target_duration_ms: 0,
            ..ts_config(6, 0)
        },
        HlsConfig {
            target_duration_ms: 60_001,
            ..ts_config(6, 0)
        },
        HlsConfig {
            part_duration_ms: 0,
            ..ts_config(6, 0)
        },
        HlsConfig {
            part_duration_ms: 2001,
            ..ts_config(6, 0)
        },
        ts_config(0, 0),
        ts_config(1001, 0),
        ts_config(6, 1001),
        HlsConfig {
            low_latency: true,
            ..ts_config(6, 0)
        },
    ];
    for config in bad {
        assert!(
            matches!(
                Timeline::new(config, Variant::Ts),
                Err(HlsError::Config { .. })
            ),
            "{config:?}"
        );
    }
    assert!(Timeline::new(HlsConfig::default(), Variant::Fmp4).is_ok());
}
