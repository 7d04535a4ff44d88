//! HLS viewers, counted by the media they fetch: no cookie, no session id, no state
//! per viewer.
//!
//! Why: a live HLS viewer fetches every segment once (or, with Low-Latency HLS, every
//! part), whatever player it is and whether or not it keeps cookies. So the fetches of
//! one segment count the viewers who played through it. A count kept by cookie (as
//! before) made a new viewer of every playlist poll of a player that drops cookies
//! (hls.js on a page of another origin, ExoPlayer, set-top boxes), and its
//! `Set-Cookie` made playlists uncacheable by nginx, Varnish and most CDNs. Here the
//! responses are the same for every viewer and a request costs one atomic add.
//!
//! What is counted, per variant and media sequence number (msn): `GET`s answered 200
//! of the whole segment, and of its first part (a Low-Latency viewer fetches every
//! part of a segment, and the first one only once). A viewer that joins mid-segment is
//! counted from the next one. The count is the highest of the segments still kept:
//! a viewer who left is counted until the last segment it fetched leaves the
//! playlist's window (as long as a cookie-kept session lasted), one who came is
//! counted at its first fetch. Behind a cache (docs/cdn.md) the origin counts the
//! cache's fetches: viewers the cache answers never reach the origin, whatever the
//! counting; the cache's logs count them.
//!
//! # Invariants
//! - A slot packs an msn (its high 40 bits) and that msn's fetches (its low 24): one
//!   compare-and-swap moves it to a newer msn and counts the first fetch, so no fetch
//!   is counted against another msn, whatever the workers do at once.
//! - A fetch of an msn older than its slot's is dropped (the slot was reused).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Segments whose fetches are kept: more than a playlist keeps (six by default), so
/// the count covers every segment a viewer may still fetch.
const SLOTS: usize = 32;

/// Bits of a slot that count fetches.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// msn are kept modulo this: far more segments than a stream makes in years.
const MSN_MASK: u64 = (1 << (64 - COUNT_BITS)) - 1;

/// The fetches of one variant's recent segments.
#[derive(Debug)]
pub struct Audience {
    slots: [AtomicU64; SLOTS],
}

impl Default for Audience {
    fn default() -> Self {
        Audience {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Audience {
    /// A viewer fetched segment `msn` (or its first part).
    pub fn fetched(&self, msn: u64) {
        let msn = msn & MSN_MASK;
        let slot = &self.slots[slot_of(msn)];
        let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |packed| {
            let (held, count) = (packed >> COUNT_BITS, packed & COUNT_MASK);
            match held.cmp(&msn) {
                std::cmp::Ordering::Equal => Some(packed + u64::from(count < COUNT_MASK)),
                // Empty (0, 0) or an older segment's: this segment's first fetch.
                std::cmp::Ordering::Less => Some((msn << COUNT_BITS) | 1),
                std::cmp::Ordering::Greater => None,
            }
        });
    }

    /// Viewers now: the most fetches of a segment of `kept` (the msn a playlist still
    /// lists or serves, and the one in progress).
    pub fn viewers(&self, kept: Range<u64>) -> usize {
        let start = kept.start.max(kept.end.saturating_sub(SLOTS as u64));
        (start..kept.end)
            .map(|msn| {
                let packed = self.slots[slot_of(msn & MSN_MASK)].load(Ordering::Relaxed);
                if packed >> COUNT_BITS == msn & MSN_MASK {
                    usize::try_from(packed & COUNT_MASK).unwrap_or(usize::MAX)
                } else {
                    0
                }
            })
            .max()
            .unwrap_or(0)
    }
}

fn slot_of(msn: u64) -> usize {
    // SLOTS is a power of two, far below usize::MAX.
    (msn % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_segment_counts_its_fetches_and_the_most_is_the_count() {
        let a = Audience::default();
        // Three viewers fetch 0..=4; a fourth joins at 3.
        for msn in 0..5 {
            for _ in 0..3 {
                a.fetched(msn);
            }
        }
        a.fetched(3);
        a.fetched(4);
        assert_eq!(a.viewers(0..6), 4);
        // Two leave after 4: counted until 3 and 4 leave the window.
        for msn in 5..8 {
            a.fetched(msn);
            a.fetched(msn);
        }
        assert_eq!(a.viewers(2..8), 4);
        assert_eq!(a.viewers(5..8), 2);
        assert_eq!(a.viewers(8..8), 0);
    }

    #[test]
    fn a_reused_slot_forgets_the_older_segment_and_late_fetches_of_it() {
        let a = Audience::default();
        a.fetched(1);
        a.fetched(1 + SLOTS as u64);
        // A late fetch of msn 1 lands on the slot msn 33 holds now: dropped.
        a.fetched(1);
        assert_eq!(a.viewers(1..2), 0);
        assert_eq!(a.viewers(1 + SLOTS as u64..2 + SLOTS as u64), 1);
    }

    #[test]
    fn workers_counting_at_once_lose_no_fetch() {
        let a = std::sync::Arc::new(Audience::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for msn in 0..40 {
                        for _ in 0..250 {
                            a.fetched(msn);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(a.viewers(39..40), 1000);
    }
}
