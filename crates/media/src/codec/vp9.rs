//! The few VP9 bitstream facts RTP needs: the frames of a superframe, and whether a
//! frame is a key frame and how large it is.
//!
//! Why: a VP9 chunk as containers carry it (FLV, MP4, IVF) may be a superframe: several
//! frames (typically a hidden alt-ref frame and the frame shown) followed by an index of
//! their sizes (VP9 bitstream specification, Annex B). RTP (RFC 9628) sends frames, not
//! superframes, and its payload descriptor wants the key frame bit and, on key frames,
//! the picture size, which sit in the first bytes of each frame's uncompressed header.
//!
//! # Invariants
//! - A chunk whose trailing index is inconsistent (sizes that do not add up to the
//!   chunk, a zero size, a truncated index) is one plain frame: we never split on a
//!   guess, and never read past the chunk.
//! - Nothing here allocates.

use super::bits::BitReader;
use super::CodecError;

/// Most frames a superframe index lists (`frames_in_superframe_minus_1` is 3 bits).
pub const VP9_MAX_SUPERFRAME_FRAMES: usize = 8;

/// The frames of one VP9 chunk, in decoding order, without the superframe index.
#[derive(Debug, Clone)]
pub struct Vp9Frames<'a> {
    rest: &'a [u8],
    sizes: [u32; VP9_MAX_SUPERFRAME_FRAMES],
    count: usize,
    next: usize,
}

/// Splits `chunk` into its frames: those its superframe index lists, or the whole
/// chunk when it has no (consistent) index. An empty chunk has no frames.
pub fn vp9_frames(chunk: &[u8]) -> Vp9Frames<'_> {
    let mut frames = Vp9Frames {
        rest: chunk,
        sizes: [0; VP9_MAX_SUPERFRAME_FRAMES],
        count: 0,
        next: 0,
    };
    if let Some((sizes, count, index_len)) = superframe_index(chunk) {
        frames.sizes = sizes;
        frames.count = count;
        frames.rest = chunk.get(..chunk.len() - index_len).unwrap_or_default();
    }
    frames
}

impl Vp9Frames<'_> {
    /// Whether the chunk had a superframe index.
    pub fn is_superframe(&self) -> bool {
        self.count > 0
    }
}

impl<'a> Iterator for Vp9Frames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.count == 0 {
            // No index: the whole chunk, once.
            let all = std::mem::take(&mut self.rest);
            return (!all.is_empty()).then_some(all);
        }
        let size = *self.sizes.get(self.next)?;
        if self.next >= self.count {
            return None;
        }
        self.next += 1;
        // `superframe_index` checked that the sizes add up to the data.
        let size = usize::try_from(size).ok()?;
        let (frame, rest) = self.rest.split_at_checked(size)?;
        self.rest = rest;
        Some(frame)
    }
}

/// The frame sizes, their count and the index length of a chunk ending in a
/// consistent superframe index (Annex B.3), or `None`.
fn superframe_index(chunk: &[u8]) -> Option<([u32; VP9_MAX_SUPERFRAME_FRAMES], usize, usize)> {
    let &marker = chunk.last()?;
    if marker & 0xe0 != 0xc0 {
        return None;
    }
    let count = usize::from(marker & 0x07) + 1;
    let size_bytes = usize::from((marker >> 3) & 0x03) + 1;
    let index_len = 2 + size_bytes * count;
    let index = chunk.get(chunk.len().checked_sub(index_len)?..)?;
    if index.first() != Some(&marker) {
        return None;
    }
    let mut sizes = [0u32; VP9_MAX_SUPERFRAME_FRAMES];
    let mut total = 0usize;
    let fields = index.get(1..1 + size_bytes * count)?;
    for (slot, field) in sizes.iter_mut().zip(fields.chunks_exact(size_bytes)) {
        // Little-endian, 1 to 4 bytes.
        let size = field
            .iter()
            .rev()
            .fold(0u32, |v, &b| (v << 8) | u32::from(b));
        if size == 0 {
            return None;
        }
        *slot = size;
        total = total.checked_add(usize::try_from(size).ok()?)?;
    }
    (total == chunk.len() - index_len).then_some((sizes, count, index_len))
}

/// What the uncompressed header of one VP9 frame says, as far as RTP cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vp9FrameHeader {
    /// `frame_type == KEY_FRAME`: decodable without any earlier frame.
    pub keyframe: bool,
    /// `show_existing_frame`: a one- or two-byte frame that shows a stored frame.
    pub show_existing_frame: bool,
    /// `show_frame`: whether the frame is displayed (false for hidden alt-ref frames).
    pub show_frame: bool,
    /// Width and height in pixels, read for key frames only.
    pub size: Option<(u32, u32)>,
}

/// `frame_sync_code` of key frames (VP9 bitstream specification §6.2.1).
const FRAME_SYNC_CODE: u32 = 0x49_83_42;
/// `color_space` value of RGB, which has no `color_range` bit.
const CS_RGB: u32 = 7;

/// Reads the start of a frame's uncompressed header (§6.2): profile, frame type and,
/// for key frames, the frame size. `Malformed` when the frame marker or the sync code
/// is wrong, `Truncated` when the frame ends first.
pub fn vp9_frame_header(frame: &[u8]) -> Result<Vp9FrameHeader, CodecError> {
    const WHAT: &str = "VP9 uncompressed header";
    let mut r = BitReader::new(frame, WHAT);
    if r.bits(2)? != 2 {
        return Err(CodecError::Malformed {
            what: "VP9 frame marker",
        });
    }
    let low = r.bits(1)?;
    let profile = (r.bits(1)? << 1) | low;
    if profile == 3 {
        r.skip(1)?;
    }
    if r.bit()? {
        return Ok(Vp9FrameHeader {
            keyframe: false,
            show_existing_frame: true,
            show_frame: true,
            size: None,
        });
    }
    let keyframe = !r.bit()?;
    let show_frame = r.bit()?;
    let _error_resilient = r.bit()?;
    let mut header = Vp9FrameHeader {
        keyframe,
        show_existing_frame: false,
        show_frame,
        size: None,
    };
    if !keyframe {
        return Ok(header);
    }
    if r.bits(24)? != FRAME_SYNC_CODE {
        return Err(CodecError::Malformed {
            what: "VP9 frame sync code",
        });
    }
    // color_config(): bit depth, color space, range and subsampling (§6.2.2).
    if profile >= 2 {
        r.skip(1)?;
    }
    let color_space = r.bits(3)?;
    let odd_profile = profile == 1 || profile == 3;
    if color_space != CS_RGB {
        r.skip(1)?;
        if odd_profile {
            r.skip(3)?;
        }
    } else if odd_profile {
        r.skip(1)?;
    }
    let width = r.bits(16)? + 1;
    let height = r.bits(16)? + 1;
    header.size = Some((width, height));
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile 0 key frame header of `w` x `h`, shown, BT.601, then `tail`.
    pub(crate) fn key_frame(w: u16, h: u16, tail: &[u8]) -> Vec<u8> {
        // 10 0 0 | 0 (show_existing) 0 (key) 1 (show) 0 (error resilient)
        let mut v = vec![0b1000_0010, 0x49, 0x83, 0x42];
        // color_space 1 (3 bits), color_range 0, then width-1 and height-1 (16 bits each):
        // the next bits start at bit 0 of byte 4.
        let (w1, h1) = (u32::from(w) - 1, u32::from(h) - 1);
        let bits: u64 = (1u64 << 33) | (u64::from(w1) << 16) | u64::from(h1);
        // 4 + 32 bits = 36 bits, padded to 40.
        let packed = bits << 4;
        v.extend_from_slice(&packed.to_be_bytes()[3..]);
        v.extend_from_slice(tail);
        v
    }

    #[test]
    fn key_frame_size_is_read() {
        let f = key_frame(640, 360, &[0xaa; 20]);
        let h = vp9_frame_header(&f).expect("header");
        assert!(h.keyframe && h.show_frame && !h.show_existing_frame);
        assert_eq!(h.size, Some((640, 360)));
    }

    #[test]
    fn inter_and_show_existing_frames() {
        // 10 0 0 | 0 1 0 0: inter, hidden.
        let h = vp9_frame_header(&[0b1000_0100, 0]).expect("inter");
        assert!(!h.keyframe && !h.show_frame && h.size.is_none());
        // 10 0 0 | 1 + index: show_existing_frame.
        let h = vp9_frame_header(&[0b1000_1000]).expect("show existing");
        assert!(h.show_existing_frame && !h.keyframe);
        assert!(vp9_frame_header(&[0x00]).is_err());
        assert!(vp9_frame_header(&[0b1000_0010, 0x49]).is_err());
        assert!(vp9_frame_header(&[]).is_err());
    }

    #[test]
    fn superframe_is_split_and_index_dropped() {
        let (a, b) = ([0x84u8; 300], [0x86u8; 5]);
        // 2 frames, 2-byte sizes: marker 0b110_01_001.
        let marker = 0xc9;
        let mut chunk = [&a[..], &b[..]].concat();
        chunk.extend_from_slice(&[marker, 0x2c, 0x01, 0x05, 0x00, marker]);
        let frames = vp9_frames(&chunk);
        assert!(frames.is_superframe());
        let got: Vec<&[u8]> = frames.collect();
        assert_eq!(got, vec![&a[..], &b[..]]);
    }

    #[test]
    fn inconsistent_index_is_plain_data() {
        let marker = 0xc9;
        // Sizes 300 + 5 but only 10 bytes of frames: past the end.
        let mut chunk = vec![0x84u8; 10];
        chunk.extend_from_slice(&[marker, 0x2c, 0x01, 0x05, 0x00, marker]);
        let frames = vp9_frames(&chunk);
        assert!(!frames.is_superframe());
        assert_eq!(frames.collect::<Vec<_>>(), vec![&chunk[..]]);
        // A marker byte alone, a mismatched first marker, a zero size.
        for chunk in [
            vec![0xc0],
            vec![0x84, 0xc8, 0x01, 0x00, 0xc1],
            vec![0xc0, 0x00, 0xc0],
        ] {
            assert_eq!(vp9_frames(&chunk).collect::<Vec<_>>(), vec![&chunk[..]]);
        }
        assert_eq!(vp9_frames(&[]).count(), 0);
    }
}
