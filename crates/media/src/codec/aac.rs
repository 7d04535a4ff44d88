//! AAC: the AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1) and ADTS headers (§1.A.2).
//!
//! Why: FLV, MP4 and RTSP carry AAC as raw frames plus an AudioSpecificConfig;
//! MPEG-TS needs each frame behind a 7-byte ADTS header built from the same fields.

use super::bits::BitReader;
use super::CodecError;
use bytes::Bytes;

/// `samplingFrequencyIndex` values 0..=12.
const SAMPLE_RATES: [u32; 13] = [
    96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
];

/// Largest ADTS frame: `aac_frame_length` is 13 bits and includes the header.
const MAX_ADTS_FRAME_LEN: usize = 0x1fff;
/// An ADTS header without CRC.
const ADTS_HEADER_LEN: usize = 7;

/// An AAC decoder configuration.
///
/// With explicit HE-AAC signalling (object type 5 or 29 first), `object_type` and
/// `sample_rate` describe the core (usually AAC-LC at half the output rate), which is
/// what ADTS headers and decoders doing implicit SBR detection expect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AacConfig {
    /// The AudioSpecificConfig, byte for byte as received.
    pub asc: Bytes,
    /// `audioObjectType` of the core coder (2 = AAC-LC).
    pub object_type: u8,
    /// Core sampling rate in Hz.
    pub sample_rate: u32,
    /// Number of channels (from `channelConfiguration`; 0 means a program config element
    /// in the stream says).
    pub channels: u8,
}

impl AacConfig {
    /// Parses an AudioSpecificConfig. Only the leading fields are read; the
    /// codec-specific part that follows is kept in `asc`.
    pub fn parse(asc: Bytes) -> Result<Self, CodecError> {
        let mut r = BitReader::new(&asc, "AudioSpecificConfig");
        let mut object_type = object_type(&mut r)?;
        let sample_rate = sample_rate(&mut r)?;
        let channel_config = r.u8(4)?;
        if object_type == 5 || object_type == 29 {
            // Explicit SBR/PS: the extension rate, then the core object type.
            let _extension_rate = sample_rate_or_escape(&mut r)?;
            object_type = object_type_raw(&mut r)?;
            if object_type == 22 {
                r.skip(4)?; // extensionChannelConfiguration (ER BSAC)
            }
        }
        if object_type == 0 {
            return Err(CodecError::Malformed {
                what: "AAC object type",
            });
        }
        let channels = match channel_config {
            0..=6 => channel_config,
            7 => 8,
            11 => 7,
            12 | 14 => 8,
            13 => 24,
            _ => {
                return Err(CodecError::Malformed {
                    what: "AAC channel configuration",
                })
            }
        };
        Ok(AacConfig {
            asc,
            object_type,
            sample_rate,
            channels,
        })
    }

    /// The 7-byte ADTS header (MPEG-4, no CRC) for a raw frame of `payload_len` bytes.
    ///
    /// Fails for what ADTS cannot say: object types above 4, rates outside the table,
    /// channel layouts other than 0-6 and 8 channels, frames over 8191 bytes.
    pub fn adts_header(&self, payload_len: usize) -> Result<[u8; 7], CodecError> {
        if !(1..=4).contains(&self.object_type) {
            return Err(CodecError::Unsupported {
                what: "AAC object type in ADTS",
            });
        }
        let profile = self.object_type - 1;
        let freq_index = SAMPLE_RATES
            .iter()
            .position(|&r| r == self.sample_rate)
            .ok_or(CodecError::Unsupported {
                what: "AAC sampling rate in ADTS",
            })? as u8;
        let channel_config = match self.channels {
            0..=6 => self.channels,
            8 => 7,
            _ => {
                return Err(CodecError::Unsupported {
                    what: "AAC channel layout in ADTS",
                })
            }
        };
        let frame_len = payload_len
            .checked_add(ADTS_HEADER_LEN)
            .filter(|&n| n <= MAX_ADTS_FRAME_LEN)
            .ok_or(CodecError::TooLarge {
                what: "ADTS frame",
                len: payload_len.saturating_add(ADTS_HEADER_LEN),
                limit: MAX_ADTS_FRAME_LEN,
            })?;
        // `frame_len` fits 13 bits, checked above.
        let len = frame_len as u16;
        Ok([
            0xff,
            0xf1, // syncword, MPEG-4, layer 0, no CRC
            (profile << 6) | (freq_index << 2) | (channel_config >> 2),
            ((channel_config & 3) << 6) | ((len >> 11) as u8),
            (len >> 3) as u8,
            (((len & 7) as u8) << 5) | 0x1f, // buffer fullness 0x7ff: variable rate
            0xfc,                            // rest of buffer fullness, one raw data block
        ])
    }
}

/// `GetAudioObjectType()`, rejecting 0 (null object).
fn object_type(r: &mut BitReader<'_>) -> Result<u8, CodecError> {
    let t = object_type_raw(r)?;
    if t == 0 {
        return Err(CodecError::Malformed {
            what: "AAC object type",
        });
    }
    Ok(t)
}

/// `GetAudioObjectType()`: 5 bits, 31 escapes to 32 + 6 bits.
fn object_type_raw(r: &mut BitReader<'_>) -> Result<u8, CodecError> {
    let t = r.u8(5)?;
    if t == 31 {
        Ok(32 + r.u8(6)?)
    } else {
        Ok(t)
    }
}

/// `samplingFrequencyIndex`, or the explicit 24-bit frequency after index 15.
fn sample_rate(r: &mut BitReader<'_>) -> Result<u32, CodecError> {
    let rate = sample_rate_or_escape(r)?;
    if rate == 0 {
        return Err(CodecError::Malformed {
            what: "AAC sampling frequency",
        });
    }
    Ok(rate)
}

/// Like [`sample_rate`], but a reserved index reads as 0 instead of failing.
fn sample_rate_or_escape(r: &mut BitReader<'_>) -> Result<u32, CodecError> {
    let index = r.u8(4)?;
    if index == 15 {
        return r.bits(24);
    }
    Ok(SAMPLE_RATES.get(usize::from(index)).copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &'static [u8]) -> Result<(u8, u32, u8), CodecError> {
        AacConfig::parse(Bytes::from_static(b)).map(|c| (c.object_type, c.sample_rate, c.channels))
    }

    #[test]
    fn common_configs() {
        assert_eq!(parse(&[0x11, 0x90]), Ok((2, 48000, 2)));
        assert_eq!(parse(&[0x12, 0x10]), Ok((2, 44100, 2)));
        assert_eq!(parse(&[0x12, 0x08]), Ok((2, 44100, 1)));
        // ffmpeg's LC 48 kHz stereo with backward-compatible SBR signalling appended.
        assert_eq!(parse(&[0x11, 0x90, 0x56, 0xe5, 0x00]), Ok((2, 48000, 2)));
        // Explicit HE-AAC: SBR (5), 24 kHz core, stereo, 48 kHz extension, LC core.
        assert_eq!(parse(&[0x2b, 0x11, 0x88, 0x00]), Ok((2, 24000, 2)));
    }

    #[test]
    fn explicit_frequency_escape() {
        // LC, index 15, 24-bit 22 kHz (0x0055F0), stereo.
        // 00010 1111 000000000101010111110000 0010 ...
        let asc: &'static [u8] = &[0x17, 0x80, 0x2a, 0xf8, 0x10];
        assert_eq!(parse(asc), Ok((2, 22000, 2)));
    }

    #[test]
    fn bad_configs_are_errors() {
        assert!(parse(&[]).is_err());
        assert!(parse(&[0x11]).is_err());
        assert!(parse(&[0x00, 0x00]).is_err()); // object type 0
        assert!(parse(&[0x16, 0x90]).is_err()); // reserved frequency index 13
        assert!(parse(&[0x11, 0xc8]).is_err()); // reserved channel configuration 9
    }

    #[test]
    fn adts_header_for_lc_48k_stereo() {
        let c = AacConfig::parse(Bytes::from_static(&[0x11, 0x90]));
        let h = c.and_then(|c| c.adts_header(100));
        // frame length 107 = 0b000_0000_1101_011
        assert_eq!(h, Ok([0xff, 0xf1, 0x4c, 0x80, 0x0d, 0x7f, 0xfc]));
    }

    #[test]
    fn adts_header_limits() {
        let c = AacConfig {
            asc: Bytes::new(),
            object_type: 2,
            sample_rate: 48000,
            channels: 2,
        };
        assert!(c.adts_header(MAX_ADTS_FRAME_LEN - 7).is_ok());
        assert!(c.adts_header(MAX_ADTS_FRAME_LEN - 6).is_err());
        assert!(c.adts_header(usize::MAX).is_err());
        let odd = AacConfig {
            sample_rate: 22000,
            ..c.clone()
        };
        assert!(odd.adts_header(10).is_err());
        let he = AacConfig {
            object_type: 5,
            ..c
        };
        assert!(he.adts_header(10).is_err());
    }
}
