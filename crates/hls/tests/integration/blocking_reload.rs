//! Blocking playlist reload and preload hints: readiness for past, current, next and
//! far-future msn/part, and segment/part availability.

use crate::common::{ms, T0};
use sluice_hls::{
    parse_blocking_request, Availability, BlockingRequest, HlsConfig, Readiness, Timeline, Variant,
};

fn req(msn: u64, part: Option<u32>) -> BlockingRequest {
    BlockingRequest { msn, part }
}

/// Default LL-HLS config, window 2 + 1 kept: segments 0..=3 complete (0 released,
/// 1 kept only, 2 and 3 listed), segment 4 in progress with parts 0 and 1.
fn live() -> Timeline {
    let config = HlsConfig {
        window: 2,
        keep_extra: 1,
        ..HlsConfig::default()
    };
    let mut timeline = Timeline::new(config, Variant::Fmp4).unwrap();
    for _ in 0..4 {
        timeline.start_segment(false, T0).unwrap();
        for i in 0..6 {
            timeline.add_part(ms(300), i == 0).unwrap();
        }
        timeline.add_part(ms(200), false).unwrap();
        timeline.end_segment(ms(2000)).unwrap();
    }
    timeline.start_segment(false, T0).unwrap();
    timeline.add_part(ms(300), true).unwrap();
    timeline.add_part(ms(300), false).unwrap();
    timeline
}

#[test]
fn readiness_of_whole_segments() {
    let timeline = live();
    for msn in 0..4 {
        assert_eq!(
            timeline.readiness(req(msn, None)),
            Readiness::Ready,
            "{msn}"
        );
    }
    assert_eq!(timeline.readiness(req(4, None)), Readiness::Wait);
    assert_eq!(timeline.readiness(req(5, None)), Readiness::Wait);
    assert_eq!(timeline.readiness(req(6, None)), Readiness::TooFarAhead);
    assert_eq!(
        timeline.readiness(req(u64::MAX, None)),
        Readiness::TooFarAhead
    );
}

#[test]
fn readiness_of_parts() {
    let timeline = live();
    // Part target 0.3 s: the Advance Part Limit is 3 / 0.3 = 10 parts.
    assert_eq!(timeline.readiness(req(3, Some(0))), Readiness::Ready);
    assert_eq!(timeline.readiness(req(3, Some(7))), Readiness::Ready); // one past its last part
    assert_eq!(timeline.readiness(req(0, Some(u32::MAX))), Readiness::Ready); // past
    assert_eq!(timeline.readiness(req(4, Some(0))), Readiness::Ready);
    assert_eq!(timeline.readiness(req(4, Some(1))), Readiness::Ready);
    assert_eq!(timeline.readiness(req(4, Some(2))), Readiness::Wait);
    assert_eq!(timeline.readiness(req(4, Some(11))), Readiness::Wait);
    assert_eq!(timeline.readiness(req(4, Some(12))), Readiness::TooFarAhead);
    assert_eq!(
        timeline.readiness(req(4, Some(u32::MAX))),
        Readiness::TooFarAhead
    );
    assert_eq!(timeline.readiness(req(5, Some(0))), Readiness::Wait);
    assert_eq!(timeline.readiness(req(5, Some(9))), Readiness::Wait);
    assert_eq!(timeline.readiness(req(5, Some(10))), Readiness::TooFarAhead);
    assert_eq!(timeline.readiness(req(6, Some(0))), Readiness::TooFarAhead);
}

#[test]
fn a_wait_becomes_ready_when_the_part_or_segment_appears() {
    let mut timeline = live();
    let part2 = req(4, Some(2));
    let seg4 = req(4, None);
    let next = req(5, Some(0));
    assert_eq!(timeline.readiness(part2), Readiness::Wait);
    timeline.add_part(ms(300), false).unwrap();
    assert_eq!(timeline.readiness(part2), Readiness::Ready);
    assert_eq!(timeline.readiness(seg4), Readiness::Wait);
    timeline.end_segment(ms(2000)).unwrap();
    assert_eq!(timeline.readiness(seg4), Readiness::Ready);
    // Between segments the edge is the next msn: its part 0 is awaited.
    assert_eq!(timeline.readiness(next), Readiness::Wait);
    assert_eq!(timeline.readiness(req(6, None)), Readiness::Wait);
    assert_eq!(timeline.readiness(req(7, None)), Readiness::TooFarAhead);
    timeline.start_segment(false, T0).unwrap();
    assert_eq!(timeline.readiness(next), Readiness::Wait);
    timeline.add_part(ms(300), true).unwrap();
    assert_eq!(timeline.readiness(next), Readiness::Ready);
}

#[test]
fn everything_is_ready_once_ended() {
    let mut timeline = live();
    timeline.end_stream();
    for request in [req(4, Some(5)), req(5, None), req(u64::MAX, Some(u32::MAX))] {
        assert_eq!(timeline.readiness(request), Readiness::Ready);
    }
}

#[test]
fn readiness_before_any_segment() {
    let timeline = Timeline::new(HlsConfig::default(), Variant::Fmp4).unwrap();
    assert_eq!(timeline.readiness(req(0, None)), Readiness::Wait);
    assert_eq!(timeline.readiness(req(0, Some(0))), Readiness::Wait);
    assert_eq!(timeline.readiness(req(1, None)), Readiness::Wait);
    assert_eq!(timeline.readiness(req(2, None)), Readiness::TooFarAhead);
    assert_eq!(timeline.block_limit_ms(), 6000);
}

#[test]
fn parsed_requests_drive_readiness() {
    let timeline = live();
    let ask = |query: &str| parse_blocking_request(query).map(|r| r.map(|r| timeline.readiness(r)));
    assert_eq!(ask("_HLS_msn=4&_HLS_part=1"), Ok(Some(Readiness::Ready)));
    assert_eq!(
        ask("_HLS_msn=4&_HLS_part=2&_HLS_skip=YES"),
        Ok(Some(Readiness::Wait))
    );
    assert_eq!(ask("_HLS_msn=99999999"), Ok(Some(Readiness::TooFarAhead)));
    assert_eq!(ask("session=1"), Ok(None));
    assert!(ask("_HLS_part=2").is_err());
    assert!(ask("_HLS_msn=99999999999999999999999").is_err());
}

#[test]
fn segment_availability() {
    let timeline = live();
    assert_eq!(timeline.kept(), 1..4);
    assert_eq!(timeline.listed(), 2..4);
    assert_eq!(timeline.segment_state(0), Availability::Gone);
    for msn in 1..4 {
        assert_eq!(
            timeline.segment_state(msn),
            Availability::Available,
            "{msn}"
        );
    }
    assert_eq!(timeline.segment_state(4), Availability::Pending);
    assert_eq!(timeline.segment_state(5), Availability::Unknown);
    assert_eq!(timeline.segment_state(u64::MAX), Availability::Unknown);
}

#[test]
fn part_availability() {
    let mut timeline = live();
    assert_eq!(timeline.part_state(0, 0), Availability::Gone);
    assert_eq!(timeline.part_state(1, 1), Availability::Available); // kept, not listed
    assert_eq!(timeline.part_state(3, 1), Availability::Available);
    assert_eq!(timeline.part_state(3, 6), Availability::Available);
    assert_eq!(timeline.part_state(3, 7), Availability::Unknown);
    assert_eq!(timeline.part_state(4, 1), Availability::Available);
    assert_eq!(timeline.part_state(4, 2), Availability::Pending); // the preload hint
    assert_eq!(timeline.part_state(4, 3), Availability::Unknown);
    assert_eq!(timeline.part_state(5, 0), Availability::Pending);
    assert_eq!(timeline.part_state(5, 1), Availability::Unknown);
    assert_eq!(
        timeline.part_state(u64::MAX, u32::MAX),
        Availability::Unknown
    );
    // The segment ends where the hint expected part 2: that part never comes.
    timeline.end_segment(ms(600)).unwrap();
    assert_eq!(timeline.part_state(4, 2), Availability::Unknown);
    assert_eq!(timeline.part_state(5, 0), Availability::Pending);
    assert_eq!(timeline.part_state(1, 0), Availability::Gone);
    timeline.end_stream();
    assert_eq!(timeline.part_state(5, 0), Availability::Unknown);
    assert_eq!(timeline.segment_state(5), Availability::Unknown);
}

#[test]
fn ts_has_no_parts_and_waits_for_whole_segments() {
    let config = HlsConfig {
        low_latency: false,
        ..HlsConfig::default()
    };
    let mut timeline = Timeline::new(config, Variant::Ts).unwrap();
    timeline.start_segment(false, T0).unwrap();
    assert_eq!(timeline.part_state(0, 0), Availability::Unknown);
    assert_eq!(timeline.readiness(req(0, Some(0))), Readiness::Wait);
    timeline.end_segment(ms(2000)).unwrap();
    assert_eq!(timeline.readiness(req(0, Some(0))), Readiness::Ready);
    assert_eq!(timeline.segment_state(0), Availability::Available);
    assert_eq!(timeline.segment_state(1), Availability::Pending);
}
