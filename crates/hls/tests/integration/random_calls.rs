//! Random call sequences never panic and keep the timeline's invariants; every
//! rendered playlist parses with m3u8-rs and agrees with the timeline.

use std::collections::BTreeSet;

use crate::common::{lines_with, parse, render};
use proptest::prelude::*;
use sluice_hls::{
    parse_blocking_request, Availability, BlockingRequest, HlsConfig, Readiness, Timeline, Variant,
    MAX_SEGMENT_TICKS,
};

#[derive(Debug, Clone)]
enum Call {
    Start {
        discontinuity: bool,
        wall_clock_ms: i64,
    },
    Part {
        ticks: i64,
        independent: bool,
    },
    End {
        ticks: i64,
    },
    EndStream,
    Ask {
        msn_back: i64,
        part: Option<u32>,
    },
}

fn ticks() -> impl Strategy<Value = i64> {
    prop_oneof![
        8 => 1i64..=400_000,
        1 => Just(0i64),
        1 => Just(MAX_SEGMENT_TICKS),
        1 => any::<i64>(),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        3 => (any::<bool>(), any::<i64>())
            .prop_map(|(discontinuity, wall_clock_ms)| Call::Start { discontinuity, wall_clock_ms }),
        6 => (ticks(), any::<bool>()).prop_map(|(ticks, independent)| Call::Part { ticks, independent }),
        3 => ticks().prop_map(|ticks| Call::End { ticks }),
        1 => Just(Call::EndStream),
        3 => (-12i64..4, proptest::option::of(prop_oneof![0u32..12, any::<u32>()]))
            .prop_map(|(msn_back, part)| Call::Ask { msn_back, part }),
    ]
}

fn setup() -> impl Strategy<Value = (HlsConfig, Variant)> {
    (
        1usize..8,
        0usize..4,
        1u32..=6000,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(
            |(window, keep_extra, target_duration_ms, fmp4, low_latency)| {
                (1..=target_duration_ms).prop_map(move |part_duration_ms| {
                    let variant = if fmp4 { Variant::Fmp4 } else { Variant::Ts };
                    let config = HlsConfig {
                        target_duration_ms,
                        part_duration_ms,
                        window,
                        keep_extra,
                        low_latency: low_latency && fmp4,
                        ..HlsConfig::default()
                    };
                    (config, variant)
                })
            },
        )
}

/// Seconds with three decimals, as rendered, back to ms.
fn parse_ms(text: &str) -> u64 {
    let (secs, frac) = text.split_once('.').expect("three decimals");
    assert_eq!(frac.len(), 3, "{text}");
    secs.parse::<u64>().expect("secs") * 1000 + frac.parse::<u64>().expect("ms")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_calls_keep_invariants(
        (config, variant) in setup(),
        calls in proptest::collection::vec(call(), 0..120),
    ) {
        let mut timeline = Timeline::new(config, variant).expect("valid config");
        let ext = if variant == Variant::Ts { "ts" } else { "m4s" };
        let mut released = BTreeSet::new();
        let mut last_media_sequence = 0;
        let mut last_discontinuity_sequence = 0;
        let mut last_target = 0;
        for call in calls {
            match call {
                Call::Start { discontinuity, wall_clock_ms } => {
                    let before = timeline.in_progress();
                    if let Ok(msn) = timeline.start_segment(discontinuity, wall_clock_ms) {
                        prop_assert!(before.is_none());
                        prop_assert_eq!(msn, timeline.kept().end);
                        prop_assert!(!released.contains(&msn));
                    }
                }
                Call::Part { ticks, independent } => {
                    if let Ok((msn, _)) = timeline.add_part(ticks, independent) {
                        prop_assert_eq!(Some(msn), timeline.in_progress());
                    }
                }
                Call::End { ticks } => {
                    if let Ok(freed) = timeline.end_segment(ticks) {
                        prop_assert!(freed.len() <= 1);
                        for msn in freed {
                            prop_assert!(released.insert(msn), "released twice: {}", msn);
                        }
                    }
                }
                Call::EndStream => {
                    for msn in timeline.end_stream() {
                        prop_assert!(released.insert(msn), "released twice: {}", msn);
                    }
                }
                Call::Ask { msn_back, part } => {
                    let edge = timeline.kept().end;
                    let msn = edge.saturating_add_signed(msn_back);
                    let readiness = timeline.readiness(BlockingRequest { msn, part });
                    if msn < edge || timeline.is_ended() {
                        prop_assert_eq!(readiness, Readiness::Ready);
                    }
                    if msn > edge + 1 && !timeline.is_ended() {
                        prop_assert_eq!(readiness, Readiness::TooFarAhead);
                    }
                    let state = timeline.segment_state(msn);
                    prop_assert_eq!(state == Availability::Available, timeline.kept().contains(&msn));
                    if released.contains(&msn) {
                        // Gone, or Unknown for a segment in progress dropped at the end.
                        let part_state = timeline.part_state(msn, part.unwrap_or(0));
                        for state in [state, part_state] {
                            prop_assert!(matches!(state, Availability::Gone | Availability::Unknown));
                        }
                    }
                }
            }

            // Ranges and monotone counters.
            let listed = timeline.listed();
            let kept = timeline.kept();
            prop_assert!(listed.end - listed.start <= config.window as u64);
            prop_assert!(kept.end - kept.start <= (config.window + config.keep_extra) as u64);
            prop_assert_eq!(listed.end, kept.end);
            prop_assert!(kept.start <= listed.start);
            prop_assert!(released.iter().all(|msn| !kept.contains(msn)));
            prop_assert!(timeline.media_sequence() >= last_media_sequence);
            prop_assert!(timeline.discontinuity_sequence() >= last_discontinuity_sequence);
            prop_assert!(timeline.target_duration_secs() >= last_target);
            last_media_sequence = timeline.media_sequence();
            last_discontinuity_sequence = timeline.discontinuity_sequence();
            last_target = timeline.target_duration_secs();

            // The playlist parses and agrees with the timeline.
            let text = render(&timeline, ext);
            let parsed = parse(&text);
            prop_assert_eq!(parsed.media_sequence, listed.start);
            prop_assert_eq!(parsed.discontinuity_sequence, timeline.discontinuity_sequence());
            prop_assert_eq!(parsed.target_duration, timeline.target_duration_secs());
            prop_assert_eq!(parsed.end_list, timeline.is_ended());
            let uris: Vec<_> = parsed.segments.iter().map(|s| s.uri.clone()).collect();
            let expected: Vec<_> = listed.clone().map(|msn| format!("seg{msn}.{ext}")).collect();
            prop_assert_eq!(uris, expected);
            for line in lines_with(&text, "#EXTINF:") {
                let ms = parse_ms(line.trim_start_matches("#EXTINF:").trim_end_matches(','));
                prop_assert!(ms.div_ceil(1000) <= timeline.target_duration_secs(), "{}", line);
            }
            for line in lines_with(&text, "#EXT-X-PART:DURATION=") {
                let value = line.trim_start_matches("#EXT-X-PART:DURATION=");
                let ms = parse_ms(value.split(',').next().unwrap_or_default());
                prop_assert!(ms <= timeline.part_target_ms(), "{}", line);
            }
            if config.low_latency {
                prop_assert_eq!(lines_with(&text, "#EXT-X-PRELOAD-HINT").len(), usize::from(!timeline.is_ended()));
            } else {
                prop_assert!(!text.contains("EXT-X-PART") && !text.contains("PRELOAD-HINT"));
            }
            for line in text.lines() {
                prop_assert!(line.bytes().all(|b| (0x20..0x7f).contains(&b)), "{:?}", line);
            }
        }
    }

    #[test]
    fn any_query_parses_or_errs_without_panic(query in ".{0,200}") {
        let _ = parse_blocking_request(&query);
    }

    #[test]
    fn well_formed_queries_round_trip(msn in any::<u64>(), part in proptest::option::of(any::<u32>()), skip in any::<bool>()) {
        let mut query = format!("session=x&_HLS_msn={msn}");
        if let Some(part) = part {
            query.push_str(&format!("&_HLS_part={part}"));
        }
        if skip {
            query.push_str("&_HLS_skip=YES");
        }
        prop_assert_eq!(parse_blocking_request(&query), Ok(Some(BlockingRequest { msn, part })));
    }
}
