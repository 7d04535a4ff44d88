//! fMP4 and Low-Latency HLS playlists: the LL-HLS tags by exact lines (m3u8-rs has no
//! model of them), the rest parsed back by m3u8-rs.

use crate::common::{lines_with, ms, parse, render, T0};
use sluice_hls::{HlsConfig, HlsError, Timeline, Variant, MAX_PARTS_PER_SEGMENT};

/// One complete segment of parts of these durations (ms), the first independent.
fn ll_segment(timeline: &mut Timeline, wall_clock_ms: i64, parts: &[i64]) -> Vec<u64> {
    timeline.start_segment(false, wall_clock_ms).unwrap();
    for (i, part) in parts.iter().enumerate() {
        timeline.add_part(ms(*part), i == 0).unwrap();
    }
    timeline.end_segment(ms(parts.iter().sum())).unwrap()
}

#[test]
fn exact_low_latency_playlist() {
    let config = HlsConfig {
        target_duration_ms: 1000,
        part_duration_ms: 500,
        window: 3,
        keep_extra: 0,
        low_latency: true,
        ..HlsConfig::default()
    };
    let mut timeline = Timeline::new(config, Variant::Fmp4).unwrap();
    for n in 0..4 {
        let released = ll_segment(&mut timeline, T0 + n * 1000, &[500, 500]);
        assert_eq!(released, if n == 3 { vec![0] } else { vec![] });
    }
    timeline.start_segment(false, T0 + 4000).unwrap();
    assert_eq!(timeline.add_part(ms(500), true), Ok((4, 0)));
    // From the end: 0.5 s of segment 4, segment 3 starts 1.5 s back, 2 at 2.5 s (both
    // within 3 target durations: parts listed), 1 at 3.5 s (parts no longer listed).
    assert_eq!(
        render(&timeline, "m4s"),
        "#EXTM3U\n\
         #EXT-X-VERSION:6\n\
         #EXT-X-TARGETDURATION:1\n\
         #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.500,HOLD-BACK=3.000\n\
         #EXT-X-PART-INF:PART-TARGET=0.500\n\
         #EXT-X-MEDIA-SEQUENCE:1\n\
         #EXT-X-INDEPENDENT-SEGMENTS\n\
         #EXT-X-MAP:URI=\"init.mp4\"\n\
         #EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:00:01.000Z\n\
         #EXTINF:1.000,\n\
         seg1.m4s\n\
         #EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:00:02.000Z\n\
         #EXT-X-PART:DURATION=0.500,URI=\"part2.0.m4s\",INDEPENDENT=YES\n\
         #EXT-X-PART:DURATION=0.500,URI=\"part2.1.m4s\"\n\
         #EXTINF:1.000,\n\
         seg2.m4s\n\
         #EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:00:03.000Z\n\
         #EXT-X-PART:DURATION=0.500,URI=\"part3.0.m4s\",INDEPENDENT=YES\n\
         #EXT-X-PART:DURATION=0.500,URI=\"part3.1.m4s\"\n\
         #EXTINF:1.000,\n\
         seg3.m4s\n\
         #EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:00:04.000Z\n\
         #EXT-X-PART:DURATION=0.500,URI=\"part4.0.m4s\",INDEPENDENT=YES\n\
         #EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part4.1.m4s\"\n"
    );
}

#[test]
fn default_low_latency_playlist_parses_back() {
    let mut timeline = Timeline::new(HlsConfig::default(), Variant::Fmp4).unwrap();
    let parts = [300, 300, 300, 300, 300, 300, 200];
    for n in 0..12 {
        ll_segment(&mut timeline, T0 + n * 2000, &parts);
    }
    timeline.start_segment(true, T0 + 30_000).unwrap();
    timeline.add_part(ms(300), true).unwrap();
    timeline.add_part(ms(300), false).unwrap();
    let text = render(&timeline, "m4s");
    let parsed = parse(&text);
    assert_eq!(parsed.version, Some(6));
    assert_eq!(parsed.target_duration, 2);
    assert_eq!(parsed.media_sequence, 6);
    assert!(parsed.independent_segments);
    let uris: Vec<_> = parsed.segments.iter().map(|s| s.uri.clone()).collect();
    let expected: Vec<_> = (6..12).map(|n| format!("seg{n}.m4s")).collect();
    assert_eq!(uris, expected);
    assert!(parsed.segments.iter().all(|s| s.duration == 2.0));
    assert_eq!(
        parsed
            .segments
            .first()
            .and_then(|s| s.map.as_ref())
            .map(|m| m.uri.as_str()),
        Some("init.mp4")
    );
    // Parts of segments 10 and 11 (starting 4.6 s and 2.6 s from the end) and of the
    // segment in progress; 9 starts 6.6 s back, beyond 3 target durations.
    let part_lines = lines_with(&text, "#EXT-X-PART:");
    assert_eq!(part_lines.len(), 7 + 7 + 2);
    assert_eq!(
        part_lines.first().copied(),
        Some("#EXT-X-PART:DURATION=0.300,URI=\"part10.0.m4s\",INDEPENDENT=YES")
    );
    assert_eq!(
        part_lines.last().copied(),
        Some("#EXT-X-PART:DURATION=0.300,URI=\"part12.1.m4s\"")
    );
    assert_eq!(lines_with(&text, "#EXT-X-PART:DURATION=0.200").len(), 2);
    assert_eq!(
        lines_with(&text, "#EXT-X-PART:")
            .iter()
            .filter(|l| l.ends_with("INDEPENDENT=YES"))
            .count(),
        3
    );
    assert_eq!(
        lines_with(&text, "#EXT-X-SERVER-CONTROL"),
        ["#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=0.900,HOLD-BACK=6.000"]
    );
    assert_eq!(
        lines_with(&text, "#EXT-X-PART-INF"),
        ["#EXT-X-PART-INF:PART-TARGET=0.300"]
    );
    // The segment in progress follows a restart: its discontinuity and date come
    // before its parts; the hint names its next part and ends the playlist.
    let tail: Vec<_> = text.lines().rev().take(5).collect();
    assert_eq!(
        tail,
        [
            "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part12.2.m4s\"",
            "#EXT-X-PART:DURATION=0.300,URI=\"part12.1.m4s\"",
            "#EXT-X-PART:DURATION=0.300,URI=\"part12.0.m4s\",INDEPENDENT=YES",
            "#EXT-X-PROGRAM-DATE-TIME:2024-01-01T00:00:30.000Z",
            "#EXT-X-DISCONTINUITY",
        ]
    );
}

#[test]
fn preload_hint_between_segments_names_part_zero_of_the_next() {
    let mut timeline = Timeline::new(HlsConfig::default(), Variant::Fmp4).unwrap();
    let text = render(&timeline, "m4s");
    assert_eq!(
        lines_with(&text, "#EXT-X-PRELOAD-HINT"),
        ["#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part0.0.m4s\""]
    );
    ll_segment(&mut timeline, T0, &[300; 6]);
    let text = render(&timeline, "m4s");
    assert_eq!(
        lines_with(&text, "#EXT-X-PRELOAD-HINT"),
        ["#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part1.0.m4s\""]
    );
    // A segment started but without parts yet: no dangling tags for it, same hint.
    timeline.start_segment(true, T0 + 1800).unwrap();
    let text = render(&timeline, "m4s");
    assert_eq!(lines_with(&text, "#EXT-X-DISCONTINUITY").len(), 0);
    assert_eq!(lines_with(&text, "#EXT-X-PROGRAM-DATE-TIME").len(), 1);
    assert_eq!(
        lines_with(&text, "#EXT-X-PRELOAD-HINT"),
        ["#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part1.0.m4s\""]
    );
    parse(&text);
}

#[test]
fn end_stream_completes_the_segment_in_progress_from_its_parts() {
    let mut timeline = Timeline::new(HlsConfig::default(), Variant::Fmp4).unwrap();
    ll_segment(&mut timeline, T0, &[300; 6]);
    timeline.start_segment(false, T0 + 1800).unwrap();
    timeline.add_part(ms(300), true).unwrap();
    timeline.add_part(ms(250), false).unwrap();
    assert!(timeline.end_stream().is_empty());
    let text = render(&timeline, "m4s");
    let parsed = parse(&text);
    assert!(parsed.end_list);
    let durations: Vec<_> = parsed.segments.iter().map(|s| s.duration).collect();
    assert_eq!(durations, [1.8, 0.55]);
    assert!(!text.contains("PRELOAD-HINT"));
    assert!(text.ends_with("seg1.m4s\n#EXT-X-ENDLIST\n"));
    assert!(matches!(
        timeline.add_part(ms(300), true),
        Err(HlsError::Unexpected { .. })
    ));
}

#[test]
fn part_target_grows_with_a_longer_part() {
    let mut timeline = Timeline::new(HlsConfig::default(), Variant::Fmp4).unwrap();
    timeline.start_segment(false, T0).unwrap();
    timeline.add_part(ms(300), true).unwrap();
    timeline.add_part(ms(412), false).unwrap();
    timeline.add_part(ms(100), false).unwrap();
    assert_eq!(timeline.part_target_ms(), 412);
    let text = render(&timeline, "m4s");
    assert_eq!(
        lines_with(&text, "#EXT-X-PART-INF"),
        ["#EXT-X-PART-INF:PART-TARGET=0.412"]
    );
    assert!(text.contains("PART-HOLD-BACK=1.236,"));
}

#[test]
fn fmp4_without_low_latency_has_map_but_no_parts() {
    let config = HlsConfig {
        low_latency: false,
        ..HlsConfig::default()
    };
    let mut timeline = Timeline::new(config, Variant::Fmp4).unwrap();
    timeline.start_segment(false, T0).unwrap();
    assert!(matches!(
        timeline.add_part(ms(300), true),
        Err(HlsError::Unexpected { .. })
    ));
    timeline.end_segment(ms(2000)).unwrap();
    let text = render(&timeline, "m4s");
    let parsed = parse(&text);
    assert_eq!(parsed.version, Some(6));
    assert_eq!(parsed.segments.len(), 1);
    assert!(text.contains("#EXT-X-MAP:URI=\"init.mp4\"\n"));
    for tag in ["SERVER-CONTROL", "PART-INF", "EXT-X-PART:", "PRELOAD-HINT"] {
        assert!(!text.contains(tag), "{tag}");
    }
}

#[test]
fn bad_parts_are_refused() {
    let mut timeline = Timeline::new(HlsConfig::default(), Variant::Fmp4).unwrap();
    assert!(matches!(
        timeline.add_part(ms(300), true),
        Err(HlsError::Unexpected { .. })
    ));
    timeline.start_segment(false, T0).unwrap();
    for bad in [0, -5, i64::MIN, i64::MAX, ms(60_001)] {
        assert!(matches!(
            timeline.add_part(bad, true),
            Err(HlsError::BadDuration { .. })
        ));
    }
    for i in 0..MAX_PARTS_PER_SEGMENT {
        assert_eq!(timeline.add_part(1, false), Ok((0, i)));
    }
    assert_eq!(
        timeline.add_part(1, false),
        Err(HlsError::TooManyParts {
            limit: MAX_PARTS_PER_SEGMENT
        })
    );
    // Refused parts left the part target alone.
    assert_eq!(
        timeline.part_target_ms(),
        u64::from(HlsConfig::default().part_duration_ms)
    );
}
