//! Sample entries (`stsd`, ISO/IEC 14496-12 §8.5.2) into the track's decoder configuration.
//!
//! Why: the sample entry names the codec and carries its configuration record: `avcC`
//! (14496-15 §5.4), `hvcC` (§8.4), the AudioSpecificConfig inside `esds` descriptors
//! (14496-1 §7.2.6) or `dOps` (Opus in ISO BMFF §4.3.2), which we turn back into the
//! `OpusHead` the rest of Sluice uses (the inverse of `fmp4::init`).
//!
//! Only the first entry of `stsd` is read: a track switching sample descriptions
//! mid-stream is not something Sluice can play anyway.

use super::boxes::{BoxRef, Children, Reader};
use super::Mp4Error;
use crate::codec::{AacConfig, AvcConfig, HevcConfig, OpusConfig};
use crate::TrackConfig;
use bytes::Bytes;

/// Bytes of a `VisualSampleEntry` before its child boxes.
const VISUAL_ENTRY_LEN: usize = 78;
/// Bytes of an `AudioSampleEntry` before its child boxes; QuickTime sound descriptions
/// version 1 and 2 add 16 and 36.
const AUDIO_ENTRY_LEN: usize = 28;

/// `objectTypeIndication` values of AAC: MPEG-4 audio, and MPEG-2 AAC Main, LC and SSR.
const OTI_MPEG4_AUDIO: u8 = 0x40;
const OTI_MPEG2_AAC: [u8; 3] = [0x66, 0x67, 0x68];
/// `objectTypeIndication` of MPEG-1/2 audio (MP3).
const OTI_MP3: [u8; 2] = [0x69, 0x6b];

/// The configuration of the first sample entry in `stsd`. A codec Sluice does not play,
/// encrypted ones included (`encv`, `enca`), is [`Mp4Error::UnsupportedCodec`].
pub(super) fn read_stsd(stsd: &BoxRef<'_>) -> Result<TrackConfig, Mp4Error> {
    // Version, flags and entry_count: the boxes that follow say how many there are.
    let entry = stsd
        .children_after(8, "stsd")?
        .next()
        .ok_or(Mp4Error::Missing {
            what: "sample entry",
        })??;
    match &entry.kind {
        b"avc1" | b"avc3" => {
            let record = visual_child(&entry, b"avcC", "avcC")?;
            Ok(TrackConfig::H264(AvcConfig::parse(record)?))
        }
        b"hvc1" | b"hev1" => {
            let record = visual_child(&entry, b"hvcC", "hvcC")?;
            Ok(TrackConfig::H265(HevcConfig::parse(record)?))
        }
        b"mp4a" => {
            let kids = audio_children(&entry)?;
            let esds = match kids.clone().get(b"esds")? {
                Some(esds) => esds,
                // QuickTime puts it in a `wave` box.
                None => kids
                    .get(b"wave")?
                    .ok_or(Mp4Error::Missing { what: "esds" })?
                    .children()
                    .require(b"esds", "esds")?,
            };
            let asc = read_esds(esds.body)?;
            Ok(TrackConfig::Aac(AacConfig::parse(Bytes::copy_from_slice(
                asc,
            ))?))
        }
        b"Opus" => {
            let dops = audio_children(&entry)?.require(b"dOps", "dOps")?;
            Ok(TrackConfig::Opus(OpusConfig::parse(opus_head(dops.body)?)?))
        }
        _ => Err(Mp4Error::UnsupportedCodec { codec: entry.kind }),
    }
}

/// The configuration box `kind` of a visual sample entry, copied out.
fn visual_child(entry: &BoxRef<'_>, kind: &[u8; 4], what: &'static str) -> Result<Bytes, Mp4Error> {
    let b = entry
        .children_after(VISUAL_ENTRY_LEN, "visual sample entry")?
        .require(kind, what)?;
    Ok(Bytes::copy_from_slice(b.body))
}

/// The child boxes of an audio sample entry, after its (version-dependent) fields.
fn audio_children<'a>(entry: &BoxRef<'a>) -> Result<Children<'a>, Mp4Error> {
    const WHAT: &str = "audio sample entry";
    let mut r = Reader::new(entry.body, WHAT);
    r.skip(8)?; // reserved, data_reference_index
    let fields = match r.u16()? {
        0 => AUDIO_ENTRY_LEN,
        1 => AUDIO_ENTRY_LEN + 16,
        2 => AUDIO_ENTRY_LEN + 36,
        _ => {
            return Err(Mp4Error::Malformed {
                what: "audio sample entry version",
            })
        }
    };
    entry.children_after(fields, WHAT)
}

/// The AudioSpecificConfig inside `esds`: ES_Descriptor, DecoderConfigDescriptor,
/// DecoderSpecificInfo.
fn read_esds(body: &[u8]) -> Result<&[u8], Mp4Error> {
    let mut r = Reader::new(body, "esds");
    r.version_flags()?;
    let es = descriptor(&mut r, 0x03)?;
    let mut r = Reader::new(es, "ES_Descriptor");
    r.u16()?; // ES_ID
    let flags = r.u8()?;
    if flags & 0x80 != 0 {
        r.u16()?; // dependsOn_ES_ID
    }
    if flags & 0x40 != 0 {
        let len = r.u8()?;
        r.skip(usize::from(len))?; // URL
    }
    if flags & 0x20 != 0 {
        r.u16()?; // OCR_ES_Id
    }
    let config = descriptor(&mut r, 0x04)?;
    let mut r = Reader::new(config, "DecoderConfigDescriptor");
    let object_type = r.u8()?;
    if OTI_MP3.contains(&object_type) {
        return Err(Mp4Error::UnsupportedCodec { codec: *b".mp3" });
    }
    if object_type != OTI_MPEG4_AUDIO && !OTI_MPEG2_AAC.contains(&object_type) {
        return Err(Mp4Error::UnsupportedCodec { codec: *b"mp4a" });
    }
    r.skip(1 + 3 + 4 + 4)?; // streamType, bufferSizeDB, maxBitrate, avgBitrate
    descriptor(&mut r, 0x05)
}

/// Skips descriptors until one with `tag` and returns its body. Sizes are "expandable":
/// up to four bytes of 7 bits, the high bit saying another follows.
fn descriptor<'a>(r: &mut Reader<'a>, tag: u8) -> Result<&'a [u8], Mp4Error> {
    loop {
        let t = r.u8()?;
        let mut len = 0usize;
        for i in 0..4 {
            let b = r.u8()?;
            len = (len << 7) | usize::from(b & 0x7f);
            if b & 0x80 == 0 {
                break;
            }
            if i == 3 {
                return Err(Mp4Error::Malformed {
                    what: "descriptor size",
                });
            }
        }
        let body = r.take(len)?;
        if t == tag {
            return Ok(body);
        }
    }
}

/// `dOps` (big-endian, version 0) as the `OpusHead` (little-endian, version 1) that
/// [`OpusConfig`] holds: the same fields in the same order.
fn opus_head(dops: &[u8]) -> Result<Bytes, Mp4Error> {
    let mut r = Reader::new(dops, "dOps");
    if r.u8()? != 0 {
        return Err(Mp4Error::Malformed {
            what: "dOps version",
        });
    }
    let channels = r.u8()?;
    let pre_skip = r.u16()?;
    let input_rate = r.u32()?;
    let gain = r.u16()?;
    let family = r.u8()?;
    let mut head = Vec::with_capacity(21 + usize::from(channels));
    head.extend_from_slice(b"OpusHead");
    head.push(1);
    head.push(channels);
    head.extend_from_slice(&pre_skip.to_le_bytes());
    head.extend_from_slice(&input_rate.to_le_bytes());
    head.extend_from_slice(&gain.to_le_bytes());
    head.push(family);
    if family != 0 {
        // Stream count, coupled count and one mapping byte per channel, unchanged.
        head.extend_from_slice(r.take(2 + usize::from(channels))?);
    }
    Ok(Bytes::from(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dops_to_opus_head() {
        let dops = [0, 2, 0x01, 0x38, 0, 0, 0xbb, 0x80, 0xff, 0xfe, 0];
        let head = opus_head(&dops).expect("dOps");
        assert_eq!(&head[..], b"OpusHead\x01\x02\x38\x01\x80\xbb\0\0\xfe\xff\0");
        let c = OpusConfig::parse(head).expect("OpusHead");
        assert_eq!(
            (c.channels, c.pre_skip, c.input_sample_rate),
            (2, 312, 48_000)
        );
        // Family 1 carries its table.
        let surround = [
            0, 6, 0, 0, 0, 0, 0xbb, 0x80, 0, 0, 1, 4, 2, 0, 4, 1, 2, 3, 5,
        ];
        let head = opus_head(&surround).expect("dOps");
        assert_eq!(OpusConfig::parse(head).map(|c| c.channels), Ok(6));
        assert!(opus_head(&surround[..18]).is_err());
        assert!(opus_head(&[1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn esds_with_long_sizes_and_flags() {
        // ES_Descriptor with a URL and 4-byte sizes, as some writers pad them.
        let esds = [
            0, 0, 0, 0, // version, flags
            0x03, 0x80, 0x80, 0x80, 24, 0, 1, 0x40, 2, b'a', b'b', // ES_ID, URL_Flag, URL
            0x04, 0x80, 0x80, 0x80, 20, 0x40, 0x15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x05, 0x80,
            0x80, 0x80, 2, 0x12, 0x10, 0x06, 0x01, 0x02,
        ];
        // The ES_Descriptor claims 24 bytes but holds 34: the reader stops at its end.
        assert!(read_esds(&esds).is_err());
        let mut fixed = esds.to_vec();
        fixed[8] = 34;
        assert_eq!(read_esds(&fixed), Ok(&[0x12, 0x10][..]));
        let mut mp3 = fixed.clone();
        mp3[20] = 0x6b;
        assert_eq!(
            read_esds(&mp3),
            Err(Mp4Error::UnsupportedCodec { codec: *b".mp3" })
        );
    }
}
