//! Segment bytes in page-cache-backed memory: a sealed `memfd`, mapped once.
//!
//! Why: on plain HTTP the kernel can `sendfile` such a file straight from its pages,
//! with no copy through a user-space buffer — what nginx does with HLS files on disk,
//! without the disk. TLS and HTTP/2 read the same pages through the mapping. The file
//! is sealed before it is mapped: it can never shrink under a reader (no SIGBUS).

use bytes::Bytes;
use memmap2::Mmap;
use rustix::fs::{MemfdFlags, SealFlags};
use std::fs::File;
use std::io::{self, Write};

/// One immutable in-memory file.
#[derive(Debug)]
pub struct MemFile {
    file: File,
    /// The whole file through its mapping; slices share it.
    pub bytes: Bytes,
}

impl MemFile {
    /// A file holding `pieces` one after the other.
    pub fn new(pieces: &[Bytes]) -> io::Result<MemFile> {
        let fd = rustix::fs::memfd_create(
            "sluice-segment",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        let mut file = File::from(fd);
        for piece in pieces {
            file.write_all(piece)?;
        }
        rustix::fs::fcntl_add_seals(
            &file,
            SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
        )?;
        let bytes = if pieces.iter().all(|p| p.is_empty()) {
            Bytes::new()
        } else {
            // SAFETY: the file is sealed against writes and shrinking, so the mapping
            // can neither change nor fault past its end.
            Bytes::from_owner(unsafe { Mmap::map(&file)? })
        };
        Ok(MemFile { file, bytes })
    }

    /// The file, for `sendfile`.
    pub fn file(&self) -> &File {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn holds_the_pieces_and_cannot_change() {
        let f = MemFile::new(&[Bytes::from_static(b"abc"), Bytes::from_static(b"defg")]).unwrap();
        assert_eq!(&f.bytes[..], b"abcdefg");
        assert_eq!(f.file().metadata().unwrap().len(), 7);
        let mut buf = [0u8; 7];
        f.file().read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"abcdefg");
        assert!(f.file().write_at(b"x", 0).is_err(), "sealed against writes");
        assert!(f.file().set_len(1).is_err(), "sealed against shrinking");
        assert!(MemFile::new(&[]).unwrap().bytes.is_empty());
    }
}
