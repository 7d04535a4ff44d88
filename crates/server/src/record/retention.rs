//! Recordings retention, the policy: given every recording file (its time, size, app
//! and whether it is in use) and the limits, which files to remove and why. Pure: the
//! `pruner` lists the files, measures the free space and removes what this picks.
//!
//! Why apart from the I/O: the rules (oldest first, per app and global, by age, bytes
//! and free space, never a file in use) are the part worth testing exhaustively, and
//! they need no disk to be tested.
//!
//! # Rules, in order
//! 1. Age: a file whose end is older than its group's `max_age_ms` goes (`keep_days`;
//!    an `[[apps]]` entry's replaces the global one).
//! 2. A group's bytes: while the files of one `[[apps]]` entry hold more than its
//!    `keep_bytes`, its oldest file goes.
//! 3. All bytes: while every recording together holds more than `record.keep_bytes`,
//!    the oldest file of any stream goes.
//! 4. Free space: while the free space (plus what the rules above free) is below
//!    `record.min_free_bytes`, the oldest file of any stream goes.
//!
//! # Invariants
//! - A file in use (being written or read) is never picked, but its bytes count: the
//!   next oldest goes in its place, and it is picked on a later pass once free.
//! - "Oldest" is the earliest start (then the earliest end, then the input order); each
//!   file is picked at most once, for the first rule that picks it.

use crate::keys::Pattern;
use std::collections::HashMap;

/// Why a recording was removed (the `reason` label of the removal metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Older than `keep_days`.
    Age,
    /// Over `keep_bytes`, of its app or of all recordings.
    Bytes,
    /// The disk had less than `min_free_bytes` free.
    Disk,
    /// `DELETE /api/v1/recordings/...`.
    Api,
}

impl Reason {
    /// Every reason, in the metrics' order.
    pub const ALL: [Reason; 4] = [Reason::Age, Reason::Bytes, Reason::Disk, Reason::Api];

    /// Its name in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Age => "age",
            Reason::Bytes => "bytes",
            Reason::Disk => "disk",
            Reason::Api => "api",
        }
    }

    /// Its place in [`Reason::ALL`].
    pub fn index(self) -> usize {
        match self {
            Reason::Age => 0,
            Reason::Bytes => 1,
            Reason::Disk => 2,
            Reason::Api => 3,
        }
    }
}

/// What one group of streams keeps: an `[[apps]]` entry's streams, or those that no
/// entry matches. `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// Files whose end is older than this (ms) go.
    pub max_age_ms: Option<i64>,
    /// The group's files together hold at most this.
    pub max_bytes: Option<u64>,
}

/// The retention settings, from `[record]` and the `[[apps]]` entries.
#[derive(Debug, Clone, Default)]
pub struct RetentionConfig {
    /// Every recording together holds at most this (`record.keep_bytes`).
    pub max_bytes: Option<u64>,
    /// The record dir's file system keeps this free (`record.min_free_bytes`).
    pub min_free_bytes: Option<u64>,
    /// What the streams no entry matches keep (`record.keep_days`).
    pub default: Keep,
    /// The `[[apps]]` entries, in order: a stream's group is the first that matches
    /// its directory key (`app/name`), as for every other app setting.
    pub apps: Vec<(Pattern, Keep)>,
}

impl RetentionConfig {
    /// Whether nothing is ever removed but by the API.
    pub fn is_off(&self) -> bool {
        let off = |k: &Keep| k.max_age_ms.is_none() && k.max_bytes.is_none();
        self.max_bytes.is_none()
            && self.min_free_bytes.is_none()
            && off(&self.default)
            && self.apps.iter().all(|(_, k)| off(k))
    }

    /// The group of the stream whose directory key is `key`: an index into
    /// [`RetentionConfig::groups`].
    pub fn group(&self, key: &str) -> usize {
        self.apps
            .iter()
            .position(|(p, _)| p.matches(key))
            .unwrap_or(self.apps.len())
    }

    /// What each group keeps: the apps' entries, then the default.
    pub fn groups(&self) -> Vec<Keep> {
        let mut groups: Vec<Keep> = self.apps.iter().map(|(_, k)| *k).collect();
        groups.push(self.default);
        groups
    }
}

/// One recording file, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Its stream's group (see [`RetentionConfig::group`]).
    pub group: usize,
    /// UTC ms.
    pub start_ms: i64,
    /// UTC ms.
    pub end_ms: i64,
    pub bytes: u64,
    /// Being written or read: never picked.
    pub busy: bool,
}

/// The limits of one pass.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// What each group keeps, by group index; a group without an entry keeps all.
    pub groups: Vec<Keep>,
    /// Every file together holds at most this.
    pub max_bytes: Option<u64>,
    /// Keep at least this free...
    pub min_free_bytes: Option<u64>,
    /// ...of what is free now (`None`: not measured, rule 4 is skipped).
    pub free_bytes: Option<u64>,
    /// UTC ms.
    pub now_ms: i64,
}

/// The files to remove (indices into `files`) and why, oldest first.
pub fn select(files: &[Candidate], limits: &Limits) -> Vec<(usize, Reason)> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| files.get(i).map(|f| (f.start_ms, f.end_ms, i)));
    let mut picked: Vec<Option<Reason>> = vec![None; files.len()];
    let keep = |f: &Candidate| limits.groups.get(f.group).copied().unwrap_or_default();
    let each = || order.iter().filter_map(|&i| Some((i, files.get(i)?)));

    // 1. Age.
    for (i, f) in each() {
        let too_old = keep(f)
            .max_age_ms
            .is_some_and(|age| limits.now_ms.saturating_sub(f.end_ms) > age);
        if too_old && !f.busy {
            picked[i] = Some(Reason::Age);
        }
    }
    // 2. Each group's bytes.
    let mut held: HashMap<usize, u64> = HashMap::new();
    for (_, f) in each().filter(|(i, _)| picked[*i].is_none()) {
        *held.entry(f.group).or_default() += f.bytes;
    }
    for (i, f) in each() {
        let (Some(max), Some(now)) = (keep(f).max_bytes, held.get_mut(&f.group)) else {
            continue;
        };
        if *now > max && picked[i].is_none() && !f.busy {
            picked[i] = Some(Reason::Bytes);
            *now = now.saturating_sub(f.bytes);
        }
    }
    // 3. All bytes.
    if let Some(max) = limits.max_bytes {
        let mut total: u64 = each()
            .filter(|(i, _)| picked[*i].is_none())
            .map(|(_, f)| f.bytes)
            .sum();
        for (i, f) in each() {
            if total <= max {
                break;
            }
            if picked[i].is_none() && !f.busy {
                picked[i] = Some(Reason::Bytes);
                total = total.saturating_sub(f.bytes);
            }
        }
    }
    // 4. Free space.
    if let (Some(min), Some(free)) = (limits.min_free_bytes, limits.free_bytes) {
        let mut free = each()
            .filter(|(i, _)| picked[*i].is_some())
            .fold(free, |free, (_, f)| free.saturating_add(f.bytes));
        for (i, f) in each() {
            if free >= min {
                break;
            }
            if picked[i].is_none() && !f.busy {
                picked[i] = Some(Reason::Disk);
                free = free.saturating_add(f.bytes);
            }
        }
    }
    order
        .into_iter()
        .filter_map(|i| Some((i, picked.get(i).copied().flatten()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;
    const NOW: i64 = 100 * DAY;

    /// A file of `group` that started `age_days` ago and lasted an hour.
    fn file(group: usize, age_days: i64, bytes: u64) -> Candidate {
        let start = NOW - age_days * DAY;
        Candidate {
            group,
            start_ms: start,
            end_ms: start + 3_600_000,
            bytes,
            busy: false,
        }
    }

    fn limits(groups: Vec<Keep>) -> Limits {
        Limits {
            groups,
            now_ms: NOW,
            ..Limits::default()
        }
    }

    fn bytes(max: u64) -> Keep {
        Keep {
            max_bytes: Some(max),
            ..Keep::default()
        }
    }

    fn days(n: i64) -> Keep {
        Keep {
            max_age_ms: Some(n * DAY),
            ..Keep::default()
        }
    }

    #[test]
    fn nothing_goes_within_the_limits() {
        let files = [file(0, 3, 100), file(0, 2, 100)];
        let mut l = limits(vec![days(7)]);
        l.max_bytes = Some(200);
        (l.min_free_bytes, l.free_bytes) = (Some(10), Some(10));
        assert!(select(&files, &l).is_empty());
        assert!(select(&[], &l).is_empty());
    }

    #[test]
    fn a_byte_limit_removes_the_oldest_first_and_skips_files_in_use() {
        // Given newest first: the order is by time, not by input.
        let mut files = [
            file(0, 1, 100),
            file(0, 2, 100),
            file(0, 3, 100),
            file(0, 4, 100),
        ];
        let mut l = limits(vec![Keep::default()]);
        l.max_bytes = Some(250);
        assert_eq!(select(&files, &l), [(3, Reason::Bytes), (2, Reason::Bytes)]);
        // The oldest is being played: the next oldest goes in its place, and its bytes
        // still count.
        files[3].busy = true;
        assert_eq!(select(&files, &l), [(2, Reason::Bytes), (1, Reason::Bytes)]);
        // Everything in use: nothing, even over the limit.
        for f in &mut files {
            f.busy = true;
        }
        assert!(select(&files, &l).is_empty());
    }

    #[test]
    fn an_app_keeps_its_own_days_and_bytes_within_the_global_limits() {
        // Group 0: an app keeping 30 days and 150 bytes; group 1: an app keeping
        // forever; group 2: the rest, 7 days.
        let files = [
            file(0, 40, 10),  // 0: over 30 days
            file(0, 20, 100), // 1: over the app's 150 bytes with file 2
            file(0, 10, 100), // 2
            file(1, 90, 100), // 3: kept forever by its app
            file(2, 8, 100),  // 4: over 7 days
            file(2, 6, 100),  // 5
        ];
        let l = limits(vec![
            Keep {
                max_age_ms: Some(30 * DAY),
                max_bytes: Some(150),
            },
            Keep::default(),
            days(7),
        ]);
        assert_eq!(
            select(&files, &l),
            [(0, Reason::Age), (1, Reason::Bytes), (4, Reason::Age)]
        );
        // And a global limit on top: the oldest left (the app that keeps forever) goes.
        let mut l = l;
        l.max_bytes = Some(250);
        assert_eq!(
            select(&files, &l),
            [
                (3, Reason::Bytes),
                (0, Reason::Age),
                (1, Reason::Bytes),
                (4, Reason::Age)
            ]
        );
    }

    #[test]
    fn low_free_space_removes_the_oldest_until_enough_is_free() {
        let files = [file(0, 5, 100), file(1, 6, 100), file(0, 3, 100)];
        let mut l = limits(vec![Keep::default(), days(4)]);
        (l.min_free_bytes, l.free_bytes) = (Some(1000), Some(850));
        // File 1 goes for its age (freeing 100); 950 free is still short: the oldest
        // left, 0, goes too.
        assert_eq!(select(&files, &l), [(1, Reason::Age), (0, Reason::Disk)]);
        // Free space not measured: rule 4 is skipped.
        l.free_bytes = None;
        assert_eq!(select(&files, &l), [(1, Reason::Age)]);
    }

    #[test]
    fn groups_follow_the_first_matching_app_entry() {
        let config = RetentionConfig {
            default: days(7),
            apps: vec![
                (Pattern::app("cctv").unwrap(), bytes(10)),
                (Pattern::parse("*/cam*").unwrap(), Keep::default()),
            ],
            ..RetentionConfig::default()
        };
        assert_eq!(config.group("cctv/cam1"), 0);
        assert_eq!(config.group("live/cam1"), 1);
        assert_eq!(config.group("live/x"), 2);
        assert_eq!(config.groups(), [bytes(10), Keep::default(), days(7)]);
        assert!(!config.is_off());
        assert!(RetentionConfig::default().is_off());
    }
}
