//! The `prft` box (ISO/IEC 14496-12 §8.16.5, ProducerReferenceTimeBox): an NTP
//! wall-clock time and the media time of the reference track that it corresponds to.
//!
//! Why: the recorder writes one before each fragment's `moof`, so a file says by itself
//! which UTC time each fragment holds, whatever it was renamed to or wherever it was
//! copied; the index is rebuilt from these when it is lost. Written as version 1
//! (64-bit media time), flags 0; versions 0 and 1 are read. Players skip it (ffmpeg
//! writes the same box with `-write_prft`).

use crate::fmp4::ScanError;
use bytes::{BufMut, BytesMut};

/// Bytes of a version 1 `prft` box.
pub const PRFT_LEN: usize = 32;
/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_SECS: i64 = 2_208_988_800;

/// One producer reference time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prft {
    /// The track whose media time is given.
    pub track_id: u32,
    /// NTP time: seconds since 1900 in the high 32 bits, the fraction in the low.
    pub ntp: u64,
    /// The reference track's media time (its timescale) at that wall-clock time.
    pub media_time: u64,
}

/// The NTP timestamp of Unix ms `ms` (0 before 1900).
pub fn ntp_from_unix_ms(ms: i64) -> u64 {
    let secs = ms.div_euclid(1000).saturating_add(NTP_UNIX_SECS);
    let Ok(secs) = u64::try_from(secs) else {
        return 0;
    };
    let frac = (ms.rem_euclid(1000) as u64) * (1u64 << 32) / 1000;
    (secs << 32) | frac
}

/// The Unix ms of an NTP timestamp (rounded to the nearest ms).
pub fn unix_ms_from_ntp(ntp: u64) -> i64 {
    let secs = (ntp >> 32) as i64 - NTP_UNIX_SECS;
    let frac = ((ntp & 0xffff_ffff) * 1000 + (1 << 31)) >> 32;
    secs * 1000 + frac as i64
}

impl Prft {
    /// The time of `media_time` on track `track_id` was Unix ms `unix_ms`.
    pub fn new(track_id: u32, unix_ms: i64, media_time: u64) -> Prft {
        Prft {
            track_id,
            ntp: ntp_from_unix_ms(unix_ms),
            media_time,
        }
    }

    /// The wall-clock time in Unix ms.
    pub fn unix_ms(&self) -> i64 {
        unix_ms_from_ntp(self.ntp)
    }

    /// Appends the whole box (version 1, [`PRFT_LEN`] bytes).
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u32(PRFT_LEN as u32);
        out.put_slice(b"prft");
        out.put_u32(1 << 24);
        out.put_u32(self.track_id);
        out.put_u64(self.ntp);
        out.put_u64(self.media_time);
    }

    /// Parses a box's content (what follows its 8-byte header).
    pub fn parse(body: &[u8]) -> Result<Prft, ScanError> {
        let bad = ScanError::Malformed("prft");
        let version = *body.first().ok_or(bad.clone())?;
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?))
        };
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_be_bytes(body.get(at..at + 8)?.try_into().ok()?))
        };
        let track_id = u32_at(4).ok_or(bad.clone())?;
        let ntp = u64_at(8).ok_or(bad.clone())?;
        let media_time = match version {
            0 => u32_at(16).map(u64::from),
            1 => u64_at(16),
            _ => None,
        }
        .ok_or(bad)?;
        Ok(Prft {
            track_id,
            ntp,
            media_time,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let p = Prft::new(1, 1_795_773_600_123, 90_000 * 3600);
        let mut out = BytesMut::new();
        p.encode(&mut out);
        assert_eq!(out.len(), PRFT_LEN);
        assert_eq!(&out[4..8], b"prft");
        let back = Prft::parse(&out[8..]).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.unix_ms(), 1_795_773_600_123);
        for ms in [0, 1, 999, 1_000, 1_709_210_096_789] {
            assert_eq!(unix_ms_from_ntp(ntp_from_unix_ms(ms)), ms);
        }
    }

    #[test]
    fn known_ntp_and_version_0() {
        // 1970-01-01T00:00:00.500Z
        assert_eq!(ntp_from_unix_ms(500), (2_208_988_800 << 32) | (1 << 31));
        let v0 = [0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7];
        let p = Prft::parse(&v0).unwrap();
        assert_eq!((p.track_id, p.ntp, p.media_time), (2, 1 << 32, 7));
        assert!(Prft::parse(&v0[..19]).is_err());
        let mut v2 = v0;
        v2[0] = 2;
        assert!(Prft::parse(&v2).is_err());
    }
}
