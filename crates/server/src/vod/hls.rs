//! The HLS state of one file on demand: its segment plan, and the segments made
//! recently, so that a file watched by many HLS viewers is muxed about once. Served by
//! `http::vod`.
//!
//! Why a snapshot: every segment request of every worker looks here, so the cache is
//! an immutable list read through `ArcSwap`, without a lock; a new segment replaces the
//! list under a writers' mutex (once per segment made, not per request).

use arc_swap::ArcSwap;
use bytes::Bytes;
use sluice_hls::vod::VodPlan;
use std::sync::{Arc, Mutex};

/// Segment bytes kept per file.
const CACHE_BYTES: usize = 32 << 20;

/// The HLS state of one file: its plan and recently made segments.
#[derive(Debug)]
pub struct VodHls {
    plan: VodPlan,
    cache: ArcSwap<Vec<(Key, Bytes)>>,
    writers: Mutex<()>,
}

/// One object made from the file: its init segment, or segment n of a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Init,
    Ts(usize),
    Fmp4(usize),
    /// Segment n with decode times on the wall clock (playback of recordings by range,
    /// `http::playback`).
    WallTs(usize),
    WallFmp4(usize),
}

impl VodHls {
    pub fn new(plan: VodPlan) -> VodHls {
        VodHls {
            plan,
            cache: ArcSwap::from_pointee(Vec::new()),
            writers: Mutex::new(()),
        }
    }

    pub fn plan(&self) -> &VodPlan {
        &self.plan
    }

    /// The object `key`, if it was made recently.
    pub fn get(&self, key: Key) -> Option<Bytes> {
        self.cache
            .load()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, b)| b.clone())
    }

    /// Keeps `bytes` as `key`, forgetting the oldest objects past the cache's bound.
    pub fn put(&self, key: Key, bytes: Bytes) {
        let _turn = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.cache.load();
        if old.iter().any(|(k, _)| *k == key) {
            return;
        }
        let mut list: Vec<(Key, Bytes)> = Vec::with_capacity(old.len() + 1);
        let mut total = bytes.len();
        // Newest first: keep from the newest back while within the bound.
        list.push((key, bytes));
        for (k, b) in old.iter() {
            total += b.len();
            if total > CACHE_BYTES {
                break;
            }
            list.push((*k, b.clone()));
        }
        self.cache.store(Arc::new(list));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_the_newest_within_its_bound() {
        let movie = sluice_media::mp4::Movie {
            tracks: Vec::new(),
            duration: 0,
            fragmented: false,
            skipped: Vec::new(),
        };
        let plan = VodPlan::new(&movie, 2000);
        let hls = VodHls::new(plan);
        let big = Bytes::from(vec![0u8; CACHE_BYTES / 3 + 1]);
        for n in 0..4 {
            hls.put(Key::Ts(n), big.clone());
        }
        assert!(hls.get(Key::Ts(0)).is_none());
        assert!(hls.get(Key::Ts(1)).is_none());
        assert!(hls.get(Key::Ts(2)).is_some());
        assert!(hls.get(Key::Ts(3)).is_some());
        hls.put(Key::Init, Bytes::from_static(b"init"));
        assert_eq!(hls.get(Key::Init).as_deref(), Some(&b"init"[..]));
    }
}
