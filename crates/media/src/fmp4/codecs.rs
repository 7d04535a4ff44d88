//! RFC 6381 `codecs` parameters, for the `CODECS` attribute of HLS playlists.
//!
//! Why: players pick renditions (and Safari decides whether it can play at all) from
//! this string before fetching any media, so it must say exactly what the sample
//! entries say: `avc1.PPCCLL` (ISO/IEC 14496-15 Annex E for `hvc1`), `mp4a.40.N`, `opus`.

use crate::{Track, TrackConfig};

/// The `codecs` value of a track, or `None` for codecs we do not describe (AV1, VP9,
/// G.711) or an `hvcC` too short to read.
///
/// - H.264: `avc1.PPCCLL`, profile, constraint flags and level from the first SPS (from
///   the `avcC` header when there is no SPS), lower-case hex: `avc1.64001f`.
/// - H.265: `hvc1.{space}{profile}.{compatibility}.{tier}{level}[.{constraints}]` from the
///   `hvcC`: compatibility flags bit-reversed in hex, `L` or `H` and the level number,
///   then the six constraint bytes in hex with trailing zero bytes left out:
///   `hvc1.1.6.L120.90`.
/// - AAC: `mp4a.40.{audioObjectType}`, the first object type of the AudioSpecificConfig
///   (5 for explicit HE-AAC, 29 for HE-AAC v2).
/// - Opus: `opus`. MP3: `mp4a.40.34`.
pub fn codec_string(track: &Track) -> Option<String> {
    match &track.config {
        TrackConfig::H264(c) => {
            let (profile, compat, level) = match c.sps.first().and_then(|s| s.get(1..4)) {
                Some(&[p, c, l]) => (p, c, l),
                _ => (c.profile, c.compatibility, c.level),
            };
            Some(format!("avc1.{profile:02x}{compat:02x}{level:02x}"))
        }
        TrackConfig::H265(c) => hevc_string(c.record.get(1..13)?),
        TrackConfig::Aac(c) => {
            let first = c.asc.first().map(|b| b >> 3);
            let object_type = match first {
                Some(31) => {
                    let second = c.asc.get(1).copied().unwrap_or(0);
                    32 + (((c.asc.first().copied().unwrap_or(0) & 0x07) << 3) | (second >> 5))
                }
                Some(t) if t != 0 => t,
                _ => c.object_type,
            };
            Some(format!("mp4a.40.{object_type}"))
        }
        TrackConfig::Opus(_) => Some("opus".to_owned()),
        TrackConfig::Mp3 { .. } => Some("mp4a.40.34".to_owned()),
        TrackConfig::Av1 { .. }
        | TrackConfig::Vp9 { .. }
        | TrackConfig::Vp8 { .. }
        | TrackConfig::Pcma { .. }
        | TrackConfig::Pcmu { .. } => None,
    }
}

/// The `hvc1` string from bytes 1..13 of an `hvcC`: profile space, tier and profile;
/// 32 compatibility flags; 48 constraint flags; level.
fn hevc_string(ptl: &[u8]) -> Option<String> {
    let &[first, c0, c1, c2, c3, k0, k1, k2, k3, k4, k5, level] = ptl else {
        return None;
    };
    let space = match first >> 6 {
        0 => "",
        1 => "A",
        2 => "B",
        _ => "C",
    };
    let tier = if first & 0x20 != 0 { 'H' } else { 'L' };
    let profile = first & 0x1f;
    let compat = u32::from_be_bytes([c0, c1, c2, c3]).reverse_bits();
    let mut s = format!("hvc1.{space}{profile}.{compat:X}.{tier}{level}");
    let constraints = [k0, k1, k2, k3, k4, k5];
    let used = constraints
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i + 1);
    for b in constraints.iter().take(used) {
        s.push_str(&format!(".{b:X}"));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hevc_main_and_main10() {
        // Main, compatible with Main and Main 10, level 3.1, progressive/frame-only flags.
        let main = [0x01, 0x60, 0, 0, 0, 0xb0, 0, 0, 0, 0, 0, 93];
        assert_eq!(hevc_string(&main).as_deref(), Some("hvc1.1.6.L93.B0"));
        // Main 10, high tier, level 5.0, compatible with Main 10 only, no constraints.
        let main10 = [0x22, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 150];
        assert_eq!(hevc_string(&main10).as_deref(), Some("hvc1.2.4.H150"));
        assert_eq!(hevc_string(&main[..11]), None);
    }
}
