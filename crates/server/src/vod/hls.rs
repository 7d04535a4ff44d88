//! The HLS state of one file on demand: its segment plan, and the segments made
//! recently, so that a file watched by many HLS viewers is muxed about once. Served by
//! `http::vod`.

use bytes::Bytes;
use sluice_hls::vod::VodPlan;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Segment bytes kept per file.
const CACHE_BYTES: usize = 32 << 20;

/// The HLS state of one file: its plan and recently made segments.
#[derive(Debug)]
pub struct VodHls {
    plan: VodPlan,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    entries: VecDeque<(Key, Bytes)>,
    bytes: usize,
}

/// One object made from the file: its init segment, or segment n of a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Init,
    Ts(usize),
    Fmp4(usize),
}

impl VodHls {
    pub fn new(plan: VodPlan) -> VodHls {
        VodHls {
            plan,
            cache: Mutex::new(Cache::default()),
        }
    }

    pub fn plan(&self) -> &VodPlan {
        &self.plan
    }

    pub fn get_or_make(
        &self,
        key: Key,
        make: impl FnOnce(&VodPlan) -> Result<Bytes, sluice_hls::vod::VodError>,
    ) -> Result<Bytes, sluice_hls::vod::VodError> {
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, b)) = cache.entries.iter().find(|(k, _)| *k == key) {
                return Ok(b.clone());
            }
        }
        let bytes = make(&self.plan)?;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.bytes += bytes.len();
        cache.entries.push_back((key, bytes.clone()));
        while cache.bytes > CACHE_BYTES {
            let Some((_, old)) = cache.entries.pop_front() else {
                break;
            };
            cache.bytes -= old.len();
        }
        Ok(bytes)
    }
}
