//! Writing ISO BMFF boxes into a `BytesMut`: a header with a placeholder size, the
//! content, then the size patched in.
//!
//! Why: nested boxes (`moov/trak/mdia/minf/stbl/stsd/avc1/avcC`) know their size
//! only once their content is written; patching avoids building each level in its own
//! buffer.

use super::Fmp4Error;
use bytes::{BufMut, BytesMut};

/// Writes a box of type `kind` whose content `body` writes, and patches its size.
pub(super) fn write_box<F>(out: &mut BytesMut, kind: &[u8; 4], body: F) -> Result<(), Fmp4Error>
where
    F: FnOnce(&mut BytesMut) -> Result<(), Fmp4Error>,
{
    let start = out.len();
    out.put_u32(0);
    out.put_slice(kind);
    body(out)?;
    patch_size(out, start)
}

/// Writes a full box (version and 24-bit flags after the header).
pub(super) fn write_full_box<F>(
    out: &mut BytesMut,
    kind: &[u8; 4],
    version: u8,
    flags: u32,
    body: F,
) -> Result<(), Fmp4Error>
where
    F: FnOnce(&mut BytesMut) -> Result<(), Fmp4Error>,
{
    write_box(out, kind, |out| {
        out.put_u32((u32::from(version) << 24) | (flags & 0x00ff_ffff));
        body(out)
    })
}

/// Sets the 32-bit size of the box that starts at `start` to run to the end of `out`.
pub(super) fn patch_size(out: &mut BytesMut, start: usize) -> Result<(), Fmp4Error> {
    let len = out.len().saturating_sub(start);
    let size = u32::try_from(len).map_err(|_| Fmp4Error::TooLarge {
        what: "box",
        len,
        limit: u32::MAX as usize,
    })?;
    patch_u32(out, start, size);
    Ok(())
}

/// Overwrites the 4 bytes at `at` (which the caller wrote earlier) with `value`.
pub(super) fn patch_u32(out: &mut BytesMut, at: usize, value: u32) {
    if let Some(dst) = at.checked_add(4).and_then(|end| out.get_mut(at..end)) {
        dst.copy_from_slice(&value.to_be_bytes());
    }
}

/// The unity transformation matrix of `mvhd` and `tkhd`.
pub(super) const UNITY_MATRIX: [u32; 9] = [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000];

/// Writes [`UNITY_MATRIX`].
pub(super) fn put_matrix(out: &mut BytesMut) {
    for v in UNITY_MATRIX {
        out.put_u32(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_sizes() {
        let mut out = BytesMut::from(&b"xx"[..]);
        let r = write_box(&mut out, b"moov", |out| {
            write_full_box(out, b"mvex", 1, 0x020001, |out| {
                out.put_u8(7);
                Ok(())
            })
        });
        assert_eq!(r, Ok(()));
        assert_eq!(
            &out[..],
            b"xx\0\0\0\x15moov\0\0\0\x0dmvex\x01\x02\x00\x01\x07"
        );
    }
}
