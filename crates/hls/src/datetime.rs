//! ISO 8601 dates for `EXT-X-PROGRAM-DATE-TIME`, from Unix milliseconds.
//!
//! Why: one small function instead of a date crate. Days are turned into a civil
//! date with the proleptic Gregorian calendar's 400-year cycle (146097 days), counting
//! years from March so that the leap day falls at the end of a year.
//!
//! # Invariants
//! - Output is always `YYYY-MM-DDTHH:MM:SS.mmmZ` (24 bytes): inputs are clamped to
//!   years 0001..=9999.

use std::fmt::Write as _;

/// 0001-01-01T00:00:00.000Z.
const MIN_MS: i64 = -62_135_596_800_000;
/// 9999-12-31T23:59:59.999Z.
const MAX_MS: i64 = 253_402_300_799_999;
const MS_PER_DAY: i64 = 86_400_000;

/// Appends `unix_ms` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC), clamped to years 1..=9999.
pub fn write_iso8601_ms(out: &mut String, unix_ms: i64) {
    let ms = unix_ms.clamp(MIN_MS, MAX_MS);
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    );
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Shift the epoch to 0000-03-01, the start of a 400-year cycle counted from March.
    let since_march_0 = days + 719_468;
    let cycle = since_march_0.div_euclid(146_097);
    let day_of_cycle = since_march_0.rem_euclid(146_097); // 0..=146096
                                                          // Years into the cycle, correcting for the leap days of 4-, 100- and 400-year rules.
    let year_of_cycle =
        (day_of_cycle - day_of_cycle / 1460 + day_of_cycle / 36_524 - day_of_cycle / 146_096) / 365; // 0..=399
    let day_of_year =
        day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
    // Months from March, each run of five months having 153 days.
    let month_from_march = (5 * day_of_year + 2) / 153; // 0..=11
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_cycle + cycle * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iso(ms: i64) -> String {
        let mut out = String::new();
        write_iso8601_ms(&mut out, ms);
        out
    }

    #[test]
    fn known_dates() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(iso(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(iso(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(iso(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(iso(1_767_225_599_000), "2025-12-31T23:59:59.000Z");
    }

    #[test]
    fn extremes_are_clamped() {
        assert_eq!(iso(i64::MIN), "0001-01-01T00:00:00.000Z");
        assert_eq!(iso(i64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn consecutive_days_advance_by_one() {
        // Walk 1600-01-01 .. 2400-01-01 day by day: the date always moves forward by
        // exactly one calendar day.
        let start = -11_676_096_000_000_i64 / MS_PER_DAY;
        let mut previous = civil_from_days(start - 1);
        for days in start..start + 292_194 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = previous;
            let next_day = (y, m, d) == (py, pm, pd + 1);
            let next_month = (y, m, d) == (py, pm + 1, 1);
            let next_year = (y, m, d) == (py + 1, 1, 1) && (pm, pd) == (12, 31);
            assert!(
                next_day || next_month || next_year,
                "{previous:?} -> {:?}",
                (y, m, d)
            );
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let month_len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            assert!(d <= month_len[(m - 1) as usize]);
            previous = (y, m, d);
        }
        assert_eq!(previous, (2399, 12, 31));
    }
}
