//! The CMAF header (init segment): `ftyp` and a `moov` with no samples in it.
//!
//! Why: a player needs the decoder configuration and the timescale of every track
//! before the first fragment; the sample tables are empty because all samples come in
//! fragments (`mvex` announces them).

use super::boxes::{put_matrix, write_box, write_full_box};
use super::Fmp4Error;
use crate::codec::{AacConfig, OpusConfig};
use crate::{MediaKind, Track, TrackConfig};
use bytes::{BufMut, BytesMut};

/// Most tracks in one init segment. HLS renditions hold one video and one audio
/// track; a handful more leaves room for alternates without letting a caller's slice
/// size the output unboundedly.
const MAX_TRACKS: usize = 8;
/// Timescale of `mvhd`: milliseconds; nothing in it is timed since its duration is 0.
const MOVIE_TIMESCALE: u32 = 1000;
/// The `ftyp` brands: ISO BMFF with fragments (`iso6`) and CMAF (`cmfc`).
const MAJOR_BRAND: &[u8; 4] = b"iso6";
const COMPATIBLE_BRANDS: [&[u8; 4]; 2] = [b"iso6", b"cmfc"];
/// ISO 639-2 "und" packed as three 5-bit letters, for `mdhd`.
const LANGUAGE_UND: u16 =
    ((b'u' - 0x60) as u16) << 10 | ((b'n' - 0x60) as u16) << 5 | (b'd' - 0x60) as u16;
/// `tkhd` flags: track enabled, in movie.
const TKHD_FLAGS: u32 = 0x000003;

/// One track of an init segment.
#[derive(Debug, Clone, Copy)]
pub struct InitTrack<'a> {
    /// The `track_ID`, nonzero and unique in the segment; fragments name the track by it.
    pub track_id: u32,
    /// What the track carries.
    pub track: &'a Track,
    /// Ticks per second of this track's sample times: 90000 for video (the hub's
    /// clock), the sample rate for audio.
    pub timescale: u32,
}

/// Writes an init segment: `ftyp` (major brand `iso6`, compatible `iso6`, `cmfc`) and
/// `moov` with `mvhd`, one `trak` per track (`tkhd`, `mdia` with `mdhd`, `hdlr`, `minf`
/// with `vmhd` or `smhd`, `dinf/dref`, and an `stbl` holding the sample entry and empty
/// `stts`/`stsc`/`stsz`/`stco`), then `mvex` with one `trex` per track.
///
/// Sample entries: `avc1` + `avcC` and `hvc1` + `hvcC` from the track's record, width and
/// height from its SPS; `mp4a` + `esds` from the AudioSpecificConfig; `Opus` + `dOps`
/// from the `OpusHead`; `av01` + `av1C` and `vp09` + `vpcC` from the track's record, with
/// a picture size of 0x0 (the decoder reads it from the bitstream; we do not parse
/// sequence headers here). Other codecs are [`Fmp4Error::Unsupported`]. No tracks, more
/// than eight, a track id of 0 or repeated, or a timescale of 0 are
/// [`Fmp4Error::InvalidInput`]. Writes nothing on error.
pub fn write_init(out: &mut BytesMut, tracks: &[InitTrack<'_>]) -> Result<(), Fmp4Error> {
    validate(tracks)?;
    let start = out.len();
    let result = write_init_boxes(out, tracks);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn validate(tracks: &[InitTrack<'_>]) -> Result<(), Fmp4Error> {
    if tracks.is_empty() {
        return Err(Fmp4Error::InvalidInput {
            what: "init segment without tracks",
        });
    }
    if tracks.len() > MAX_TRACKS {
        return Err(Fmp4Error::TooLarge {
            what: "track count",
            len: tracks.len(),
            limit: MAX_TRACKS,
        });
    }
    for (i, t) in tracks.iter().enumerate() {
        if t.track_id == 0 {
            return Err(Fmp4Error::InvalidInput { what: "track id 0" });
        }
        if t.timescale == 0 {
            return Err(Fmp4Error::InvalidInput {
                what: "timescale 0",
            });
        }
        if tracks.iter().skip(i + 1).any(|o| o.track_id == t.track_id) {
            return Err(Fmp4Error::InvalidInput {
                what: "repeated track id",
            });
        }
    }
    Ok(())
}

fn write_init_boxes(out: &mut BytesMut, tracks: &[InitTrack<'_>]) -> Result<(), Fmp4Error> {
    write_box(out, b"ftyp", |out| {
        out.put_slice(MAJOR_BRAND);
        out.put_u32(0); // minor_version
        for b in COMPATIBLE_BRANDS {
            out.put_slice(b);
        }
        Ok(())
    })?;
    write_box(out, b"moov", |out| {
        let next_track_id = tracks
            .iter()
            .map(|t| t.track_id)
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        write_mvhd(out, next_track_id)?;
        for t in tracks {
            write_trak(out, t)?;
        }
        write_box(out, b"mvex", |out| {
            for t in tracks {
                write_full_box(out, b"trex", 0, 0, |out| {
                    out.put_u32(t.track_id);
                    out.put_u32(1); // default_sample_description_index
                    out.put_u32(0); // default_sample_duration
                    out.put_u32(0); // default_sample_size
                    out.put_u32(0); // default_sample_flags
                    Ok(())
                })?;
            }
            Ok(())
        })
    })
}

fn write_mvhd(out: &mut BytesMut, next_track_id: u32) -> Result<(), Fmp4Error> {
    write_full_box(out, b"mvhd", 0, 0, |out| {
        out.put_u32(0); // creation_time
        out.put_u32(0); // modification_time
        out.put_u32(MOVIE_TIMESCALE);
        out.put_u32(0); // duration: unknown, fragmented
        out.put_u32(0x0001_0000); // rate 1.0
        out.put_u16(0x0100); // volume 1.0
        out.put_bytes(0, 2 + 8); // reserved
        put_matrix(out);
        out.put_bytes(0, 24); // pre_defined
        out.put_u32(next_track_id);
        Ok(())
    })
}

fn write_trak(out: &mut BytesMut, t: &InitTrack<'_>) -> Result<(), Fmp4Error> {
    let kind = t.track.kind();
    let (width, height) = picture_size(t.track)?;
    write_box(out, b"trak", |out| {
        write_full_box(out, b"tkhd", 0, TKHD_FLAGS, |out| {
            out.put_u32(0); // creation_time
            out.put_u32(0); // modification_time
            out.put_u32(t.track_id);
            out.put_u32(0); // reserved
            out.put_u32(0); // duration
            out.put_bytes(0, 8); // reserved
            out.put_u16(0); // layer
            out.put_u16(0); // alternate_group
            out.put_u16(if kind == MediaKind::Audio { 0x0100 } else { 0 });
            out.put_u16(0); // reserved
            put_matrix(out);
            out.put_u32(u32::from(width) << 16);
            out.put_u32(u32::from(height) << 16);
            Ok(())
        })?;
        write_box(out, b"mdia", |out| {
            write_full_box(out, b"mdhd", 0, 0, |out| {
                out.put_u32(0); // creation_time
                out.put_u32(0); // modification_time
                out.put_u32(t.timescale);
                out.put_u32(0); // duration
                out.put_u16(LANGUAGE_UND);
                out.put_u16(0); // pre_defined
                Ok(())
            })?;
            write_full_box(out, b"hdlr", 0, 0, |out| {
                out.put_u32(0); // pre_defined
                let (handler, name): (&[u8; 4], &[u8]) = match kind {
                    MediaKind::Video => (b"vide", b"VideoHandler\0"),
                    MediaKind::Audio => (b"soun", b"SoundHandler\0"),
                };
                out.put_slice(handler);
                out.put_bytes(0, 12); // reserved
                out.put_slice(name);
                Ok(())
            })?;
            write_box(out, b"minf", |out| {
                match kind {
                    MediaKind::Video => write_full_box(out, b"vmhd", 0, 1, |out| {
                        out.put_bytes(0, 8); // graphicsmode, opcolor
                        Ok(())
                    })?,
                    MediaKind::Audio => write_full_box(out, b"smhd", 0, 0, |out| {
                        out.put_u32(0); // balance, reserved
                        Ok(())
                    })?,
                }
                write_box(out, b"dinf", |out| {
                    write_full_box(out, b"dref", 0, 0, |out| {
                        out.put_u32(1); // entry_count
                                        // Self-contained: the media is in this file.
                        write_full_box(out, b"url ", 0, 1, |_| Ok(()))
                    })
                })?;
                write_box(out, b"stbl", |out| {
                    write_full_box(out, b"stsd", 0, 0, |out| {
                        out.put_u32(1); // entry_count
                        write_sample_entry(out, t.track, width, height)
                    })?;
                    for kind in [b"stts", b"stsc", b"stco"] {
                        write_full_box(out, kind, 0, 0, |out| {
                            out.put_u32(0); // entry_count
                            Ok(())
                        })?;
                    }
                    write_full_box(out, b"stsz", 0, 0, |out| {
                        out.put_u32(0); // sample_size
                        out.put_u32(0); // sample_count
                        Ok(())
                    })
                })
            })
        })
    })
}

/// The picture size of a video track as the 16-bit fields of a sample entry carry it;
/// 0x0 for audio.
fn picture_size(track: &Track) -> Result<(u16, u16), Fmp4Error> {
    let (w, h) = match &track.config {
        TrackConfig::H264(c) => (c.width, c.height),
        TrackConfig::H265(c) => (c.width, c.height),
        _ => return Ok((0, 0)),
    };
    let fit = |v: u32| {
        u16::try_from(v).map_err(|_| Fmp4Error::TooLarge {
            what: "picture dimension",
            len: v as usize,
            limit: usize::from(u16::MAX),
        })
    };
    Ok((fit(w)?, fit(h)?))
}

fn write_sample_entry(
    out: &mut BytesMut,
    track: &Track,
    width: u16,
    height: u16,
) -> Result<(), Fmp4Error> {
    match &track.config {
        TrackConfig::H264(c) => write_visual_entry(out, b"avc1", b"avcC", &c.record, width, height),
        TrackConfig::H265(c) => write_visual_entry(out, b"hvc1", b"hvcC", &c.record, width, height),
        TrackConfig::Aac(c) => write_mp4a(out, c),
        TrackConfig::Opus(c) => write_opus(out, c),
        TrackConfig::Av1 { record } => {
            // av1C starts with its marker and version (0x81) and three bytes of fields.
            if record.len() < 4 || record.first() != Some(&0x81) {
                return Err(Fmp4Error::Unsupported {
                    what: "AV1 without an av1C record",
                });
            }
            write_visual_entry(out, b"av01", b"av1C", record, width, height)
        }
        TrackConfig::Vp9 { record } => {
            let vpcc = vpcc_box_payload(record);
            write_visual_entry(out, b"vp09", b"vpcC", &vpcc, width, height)
        }
        TrackConfig::Vp8 { .. } => Err(Fmp4Error::Unsupported { what: "VP8" }),
        TrackConfig::Mp3 { .. } => Err(Fmp4Error::Unsupported { what: "MP3" }),
        TrackConfig::Pcma { .. } | TrackConfig::Pcmu { .. } => {
            Err(Fmp4Error::Unsupported { what: "G.711" })
        }
    }
}

/// Length of a `VPCodecConfigurationRecord` body (VP Codec ISO Media File Format
/// Binding §2.2): profile, level, bit depth/chroma/range, three colour bytes and an
/// empty `codecInitializationData` size.
const VPCC_BODY_LEN: usize = 8;

/// The `vpcC` payload (version 1, flags 0, then the record) of a VP9 track's record,
/// which publishers send with or without the full box's version and flags; an empty
/// or unreadable one becomes profile 0, level 3.1, 8-bit 4:2:0, BT.709 (what a
/// browser's encoder sends), which decoders only use as a hint.
fn vpcc_box_payload(record: &[u8]) -> Vec<u8> {
    const DEFAULT: [u8; VPCC_BODY_LEN] = [0, 31, 0x82, 1, 1, 1, 0, 0];
    let body = match record {
        [1, 0, 0, 0, body @ ..] if body.len() >= VPCC_BODY_LEN => body,
        body if body.len() >= VPCC_BODY_LEN && body.first().is_some_and(|&p| p <= 3) => body,
        _ => &DEFAULT,
    };
    let mut out = vec![1, 0, 0, 0];
    out.extend_from_slice(body.get(..VPCC_BODY_LEN).unwrap_or(&DEFAULT));
    out
}

/// The 8 bytes every sample entry starts with: reserved, `data_reference_index` 1.
fn put_sample_entry_header(out: &mut BytesMut) {
    out.put_bytes(0, 6);
    out.put_u16(1);
}

/// A `VisualSampleEntry` (ISO/IEC 14496-12 §12.1.3) holding the decoder configuration
/// record as box `config`.
fn write_visual_entry(
    out: &mut BytesMut,
    kind: &[u8; 4],
    config: &[u8; 4],
    record: &[u8],
    width: u16,
    height: u16,
) -> Result<(), Fmp4Error> {
    write_box(out, kind, |out| {
        put_sample_entry_header(out);
        out.put_u16(0); // pre_defined
        out.put_u16(0); // reserved
        out.put_bytes(0, 12); // pre_defined
        out.put_u16(width);
        out.put_u16(height);
        out.put_u32(0x0048_0000); // horizresolution 72 dpi
        out.put_u32(0x0048_0000); // vertresolution 72 dpi
        out.put_u32(0); // reserved
        out.put_u16(1); // frame_count
        out.put_bytes(0, 32); // compressorname: empty
        out.put_u16(0x0018); // depth: colour, no alpha
        out.put_i16(-1); // pre_defined
        write_box(out, config, |out| {
            out.put_slice(record);
            Ok(())
        })
    })
}

/// The fields of an `AudioSampleEntry` (§12.2.3) after the common header.
fn put_audio_entry_fields(out: &mut BytesMut, channels: u8, sample_rate: u32) {
    put_sample_entry_header(out);
    out.put_bytes(0, 8); // reserved
    out.put_u16(u16::from(channels));
    out.put_u16(16); // samplesize
    out.put_u16(0); // pre_defined
    out.put_u16(0); // reserved
                    // 16.16 fixed point; rates above 65535 Hz do not fit and are left to the decoder config.
    out.put_u32(if sample_rate <= 0xffff {
        sample_rate << 16
    } else {
        0
    });
}

/// `mp4a` with an `esds` (ISO/IEC 14496-14 §5.6, 14496-1 §7.2.6.5) around the
/// AudioSpecificConfig.
fn write_mp4a(out: &mut BytesMut, c: &AacConfig) -> Result<(), Fmp4Error> {
    // channelConfiguration 0 (a PCE says) is usually stereo in live streams.
    let channels = if c.channels == 0 { 2 } else { c.channels };
    write_box(out, b"mp4a", |out| {
        put_audio_entry_fields(out, channels, c.sample_rate);
        write_full_box(out, b"esds", 0, 0, |out| {
            let asc_len = c.asc.len();
            let dsi_len = descriptor_total(asc_len)?;
            let dcd_len = descriptor_total(13usize.saturating_add(dsi_len))?;
            let sl_len = descriptor_total(1)?;
            let es_body = 3usize.saturating_add(dcd_len).saturating_add(sl_len);
            put_descriptor_header(out, 0x03, es_body)?; // ES_Descriptor
            out.put_u16(0); // ES_ID: 0 in MP4 files
            out.put_u8(0); // no dependence, URL or OCR stream
            put_descriptor_header(out, 0x04, 13usize.saturating_add(dsi_len))?; // DecoderConfigDescriptor
            out.put_u8(0x40); // objectTypeIndication: MPEG-4 audio
            out.put_u8(0x15); // streamType audio (5) << 2, upStream 0, reserved 1
            out.put_bytes(0, 3); // bufferSizeDB
            out.put_u32(0); // maxBitrate
            out.put_u32(0); // avgBitrate
            put_descriptor_header(out, 0x05, asc_len)?; // DecoderSpecificInfo
            out.put_slice(&c.asc);
            put_descriptor_header(out, 0x06, 1)?; // SLConfigDescriptor
            out.put_u8(0x02); // predefined: reserved for MP4 files
            Ok(())
        })
    })
}

/// Largest descriptor body: its size field has four 7-bit groups.
const MAX_DESCRIPTOR_LEN: usize = (1 << 28) - 1;

/// The bytes a descriptor with a body of `len` bytes takes, tag and size included.
fn descriptor_total(len: usize) -> Result<usize, Fmp4Error> {
    let size_bytes = match len {
        0..0x80 => 1,
        0x80..0x4000 => 2,
        0x4000..0x20_0000 => 3,
        _ => 4,
    };
    check_descriptor_len(len)?;
    Ok(1 + size_bytes + len)
}

fn check_descriptor_len(len: usize) -> Result<(), Fmp4Error> {
    if len > MAX_DESCRIPTOR_LEN {
        return Err(Fmp4Error::TooLarge {
            what: "esds descriptor",
            len,
            limit: MAX_DESCRIPTOR_LEN,
        });
    }
    Ok(())
}

/// A descriptor tag and its expandable size: 7 bits per byte, high bit "more follows",
/// in as few bytes as the size needs.
fn put_descriptor_header(out: &mut BytesMut, tag: u8, len: usize) -> Result<(), Fmp4Error> {
    check_descriptor_len(len)?;
    out.put_u8(tag);
    let mut started = false;
    for shift in [21u32, 14, 7] {
        let group = ((len >> shift) & 0x7f) as u8;
        if group != 0 || started {
            out.put_u8(0x80 | group);
            started = true;
        }
    }
    out.put_u8((len & 0x7f) as u8);
    Ok(())
}

/// `Opus` with a `dOps` (Encapsulation of Opus in ISO BMFF, §4.3.2): the `OpusHead`
/// fields, big-endian, version 0.
fn write_opus(out: &mut BytesMut, c: &OpusConfig) -> Result<(), Fmp4Error> {
    let head = &c.head;
    let byte = |at: usize| head.get(at).copied().unwrap_or(0);
    let output_gain = [byte(16), byte(17)];
    let family = byte(18);
    write_box(out, b"Opus", |out| {
        put_audio_entry_fields(out, c.channels, 48_000);
        write_box(out, b"dOps", |out| {
            out.put_u8(0); // Version
            out.put_u8(c.channels);
            out.put_u16(c.pre_skip);
            out.put_u32(c.input_sample_rate);
            out.put_i16(i16::from_le_bytes(output_gain));
            out.put_u8(family);
            if family != 0 {
                // Stream count, coupled count, one mapping byte per channel; the parser
                // checked these are present.
                let table_len = 2 + usize::from(c.channels);
                let Some(table) = head.get(19..19 + table_len) else {
                    return Err(Fmp4Error::InvalidInput {
                        what: "OpusHead without its channel mapping table",
                    });
                };
                out.put_slice(table);
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_sizes() {
        for (len, bytes) in [
            (0usize, vec![0x05, 0x00]),
            (2, vec![0x05, 0x02]),
            (127, vec![0x05, 0x7f]),
            (128, vec![0x05, 0x81, 0x00]),
            (0x4000, vec![0x05, 0x81, 0x80, 0x00]),
        ] {
            let mut out = BytesMut::new();
            assert_eq!(put_descriptor_header(&mut out, 5, len), Ok(()));
            assert_eq!(&out[..], &bytes[..], "{len}");
            assert_eq!(descriptor_total(len), Ok(bytes.len() + len));
        }
        let mut out = BytesMut::new();
        assert!(put_descriptor_header(&mut out, 5, 1 << 28).is_err());
    }

    fn entry_of(track: &Track) -> BytesMut {
        let mut out = BytesMut::new();
        write_sample_entry(&mut out, track, 0, 0).expect("sample entry");
        out
    }

    #[test]
    fn av1_and_vp9_sample_entries_carry_their_records() {
        let av1c = bytes::Bytes::from_static(&[0x81, 0x08, 0x0c, 0x00, 0x0a, 0x0b]);
        let out = entry_of(&Track::new(TrackConfig::Av1 {
            record: av1c.clone(),
        }));
        assert_eq!(&out[4..8], b"av01");
        // The visual entry's 78 bytes, then av1C with the record as it is.
        assert_eq!(&out[8 + 78 + 4..8 + 78 + 8], b"av1C");
        assert_eq!(&out[8 + 78 + 8..], &av1c[..]);
        let bare = Track::new(TrackConfig::Av1 {
            record: bytes::Bytes::new(),
        });
        assert!(write_sample_entry(&mut BytesMut::new(), &bare, 0, 0).is_err());

        // vpcC with or without its version and flags, or none: a full box either way.
        let body = [0u8, 31, 0x82, 1, 1, 1, 0, 0];
        for record in [
            body.to_vec(),
            [&[1u8, 0, 0, 0][..], &body[..]].concat(),
            Vec::new(),
        ] {
            let out = entry_of(&Track::new(TrackConfig::Vp9 {
                record: record.into(),
            }));
            assert_eq!(&out[4..8], b"vp09");
            assert_eq!(&out[8 + 78 + 4..8 + 78 + 8], b"vpcC");
            assert_eq!(&out[8 + 78 + 8..8 + 78 + 12], &[1, 0, 0, 0]);
            assert_eq!(&out[8 + 78 + 12..], &body[..]);
        }
    }

    #[test]
    fn language_is_und() {
        assert_eq!(LANGUAGE_UND, 0x55c4);
    }
}
