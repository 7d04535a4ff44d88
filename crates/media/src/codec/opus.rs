//! Opus: the identification header `OpusHead` (RFC 7845 §5.1).
//!
//! Why: Enhanced RTMP and MP4 (`dOps`) carry Opus configuration as this header; WebRTC
//! and RTSP ingest have none, so [`OpusConfig::stereo_48k`] supplies the usual one, and
//! MPEG-TS ingest has only a channel count, for which [`OpusConfig::new`] builds one.

use super::CodecError;
use bytes::Bytes;

const MAGIC: &[u8; 8] = b"OpusHead";
/// Magic, version, channels, pre-skip, input rate, output gain, mapping family.
const MIN_HEAD_LEN: usize = 19;
/// Pre-skip of libopus at 48 kHz (3.25 ms lookahead plus decoder delay).
const DEFAULT_PRE_SKIP: u16 = 312;
/// Mapping family 1 (RFC 7845 §5.1.1.2) for 3 to 8 channels, in the Vorbis channel
/// order: stream count, coupled stream count, channel mapping. These are libopus's
/// surround layouts, and what ffmpeg's MPEG-TS demuxer builds from a channel count.
const VORBIS_LAYOUTS: [(u8, u8, &[u8]); 6] = [
    (2, 1, &[0, 2, 1]),
    (2, 2, &[0, 1, 2, 3]),
    (3, 2, &[0, 4, 1, 2, 3]),
    (4, 2, &[0, 4, 1, 2, 3, 5]),
    (4, 3, &[0, 4, 1, 2, 3, 5, 6]),
    (5, 3, &[0, 6, 1, 2, 3, 4, 5, 7]),
];

/// An Opus decoder configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpusConfig {
    /// The `OpusHead` identification header, byte for byte.
    pub head: Bytes,
    /// Output channel count (1..=255).
    pub channels: u8,
    /// Samples at 48 kHz to discard from the decoder output at the start.
    pub pre_skip: u16,
    /// Sample rate of the original input, informational only (Opus always decodes at 48 kHz).
    pub input_sample_rate: u32,
}

impl OpusConfig {
    /// Parses an `OpusHead` header. Versions 0.x (any minor version) are accepted;
    /// mapping families other than 0 must carry their channel mapping table.
    pub fn parse(head: Bytes) -> Result<Self, CodecError> {
        const WHAT: &str = "OpusHead";
        let Some(fixed) = head.get(..MIN_HEAD_LEN) else {
            return Err(CodecError::Truncated { what: WHAT });
        };
        if fixed.get(..8) != Some(MAGIC.as_slice()) {
            return Err(CodecError::Malformed {
                what: "OpusHead magic",
            });
        }
        let field = |at: usize| fixed.get(at).copied().unwrap_or(0);
        if field(8) & 0xf0 != 0 {
            return Err(CodecError::Unsupported {
                what: "OpusHead major version",
            });
        }
        let channels = field(9);
        if channels == 0 {
            return Err(CodecError::Malformed {
                what: "OpusHead channel count",
            });
        }
        let pre_skip = u16::from_le_bytes([field(10), field(11)]);
        let input_sample_rate = u32::from_le_bytes([field(12), field(13), field(14), field(15)]);
        let family = field(18);
        if family == 0 {
            if channels > 2 {
                return Err(CodecError::Malformed {
                    what: "OpusHead channel count for mapping family 0",
                });
            }
        } else {
            // Stream count, coupled count, then one mapping byte per channel.
            let table_len = 2 + usize::from(channels);
            let Some(table) = head.get(MIN_HEAD_LEN..MIN_HEAD_LEN + table_len) else {
                return Err(CodecError::Truncated {
                    what: "OpusHead channel mapping",
                });
            };
            let (streams, coupled) = (table.first(), table.get(1));
            match (streams, coupled) {
                (Some(&s), Some(&c)) if s > 0 && c <= s => {}
                _ => {
                    return Err(CodecError::Malformed {
                        what: "OpusHead stream counts",
                    })
                }
            }
        }
        Ok(OpusConfig {
            head,
            channels,
            pre_skip,
            input_sample_rate,
        })
    }

    /// The configuration of a plain stereo 48 kHz stream (family 0, libopus pre-skip),
    /// for sources that carry no `OpusHead` (WebRTC, RTSP).
    pub fn stereo_48k() -> Self {
        Self::with_layout(2, None)
    }

    /// The configuration of a 48 kHz stream of `channels` channels (1 to 8) with the
    /// libopus pre-skip, for sources that announce only a channel count (MPEG-TS).
    /// One or two channels use mapping family 0; three to eight use family 1 with the
    /// Vorbis channel order (RFC 7845 §5.1.1.2). Other counts are
    /// [`CodecError::Unsupported`].
    pub fn new(channels: u8) -> Result<Self, CodecError> {
        match channels {
            1 | 2 => Ok(Self::with_layout(channels, None)),
            _ => {
                let layout = usize::from(channels)
                    .checked_sub(3)
                    .and_then(|i| VORBIS_LAYOUTS.get(i))
                    .ok_or(CodecError::Unsupported {
                        what: "Opus channel count without a mapping",
                    })?;
                Ok(Self::with_layout(channels, Some(*layout)))
            }
        }
    }

    /// An `OpusHead` for `channels`, family 0 without `mapping`, family 1 with it.
    fn with_layout(channels: u8, mapping: Option<(u8, u8, &[u8])>) -> Self {
        let mut head = Vec::with_capacity(MIN_HEAD_LEN + 2 + usize::from(channels));
        head.extend_from_slice(MAGIC);
        head.push(1); // version
        head.push(channels);
        head.extend_from_slice(&DEFAULT_PRE_SKIP.to_le_bytes());
        head.extend_from_slice(&48_000u32.to_le_bytes());
        head.extend_from_slice(&0i16.to_le_bytes()); // output gain
        match mapping {
            None => head.push(0), // mapping family
            Some((streams, coupled, table)) => {
                head.push(1);
                head.extend_from_slice(&[streams, coupled]);
                head.extend_from_slice(table);
            }
        }
        OpusConfig {
            head: Bytes::from(head),
            channels,
            pre_skip: DEFAULT_PRE_SKIP,
            input_sample_rate: 48_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_head_parses_to_itself() {
        let d = OpusConfig::stereo_48k();
        assert_eq!(d.head.len(), MIN_HEAD_LEN);
        assert_eq!(OpusConfig::parse(d.head.clone()), Ok(d));
    }

    #[test]
    fn channel_counts_build_heads_that_parse() {
        assert_eq!(OpusConfig::new(2), Ok(OpusConfig::stereo_48k()));
        for channels in 1..=8u8 {
            let c = OpusConfig::new(channels).expect("1 to 8 channels");
            assert_eq!(c.channels, channels);
            assert_eq!(OpusConfig::parse(c.head.clone()), Ok(c.clone()));
            let family = if channels > 2 { 1 } else { 0 };
            assert_eq!(c.head[18], family, "{channels} channels");
        }
        assert!(OpusConfig::new(0).is_err());
        assert!(OpusConfig::new(9).is_err());
    }

    #[test]
    fn ffmpeg_head() {
        // As libopus via ffmpeg writes it: stereo, pre-skip 312, 48 kHz input.
        let head = Bytes::from_static(&[
            b'O', b'p', b'u', b's', b'H', b'e', b'a', b'd', 1, 2, 0x38, 0x01, 0x80, 0xbb, 0, 0, 0,
            0, 0,
        ]);
        let c = OpusConfig::parse(head).map(|c| (c.channels, c.pre_skip, c.input_sample_rate));
        assert_eq!(c, Ok((2, 312, 48000)));
    }

    #[test]
    fn surround_needs_mapping_table() {
        let mut head = OpusConfig::stereo_48k().head.to_vec();
        head[9] = 6;
        head[18] = 1;
        assert!(OpusConfig::parse(Bytes::from(head.clone())).is_err());
        head.extend_from_slice(&[4, 2, 0, 4, 1, 2, 3, 5]);
        let c = OpusConfig::parse(Bytes::from(head)).map(|c| c.channels);
        assert_eq!(c, Ok(6));
    }

    #[test]
    fn bad_heads_are_errors() {
        let good = OpusConfig::stereo_48k().head;
        for n in 0..good.len() {
            assert!(OpusConfig::parse(good.slice(..n)).is_err());
        }
        let mut v = good.to_vec();
        v[8] = 0x10;
        assert!(OpusConfig::parse(Bytes::from(v)).is_err());
        assert!(OpusConfig::parse(Bytes::from_static(b"OpusTags\0\0\0\0\0\0\0\0\0\0\0")).is_err());
    }
}
