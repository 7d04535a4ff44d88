//! Files of the media root: opened safely beneath it, and mapped once however many
//! readers they have.
//!
//! Why one mapping per file: a hot file (a VOD title, a popular download) is read by
//! many sessions at once; each sharing one mapping keeps one copy of the file in the
//! page cache and no copy in the heap, and the last reader to go unmaps it.
//!
//! A mapped file must not shrink while it is mapped (reading a page past the new end
//! raises SIGBUS). Sluice itself only appends (recordings); operators replace files
//! by renaming a new one over them, which keeps the old inode, and the old mapping,
//! intact.

use bytes::Bytes;
use memmap2::Mmap;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

/// Mappings kept track of before dead entries are swept out of the table.
const SWEEP_AT: usize = 256;

/// Opens `rel` (relative, already free of `..`) beneath `root` for reading.
///
/// Resolution stays beneath `root`: `..` and symbolic links that lead out of it fail
/// (`EXDEV` from `openat2(RESOLVE_BENEATH)`), reported as `PermissionDenied`. Opening
/// is non-blocking, so a FIFO cannot stall the worker; anything but a regular file is
/// `NotFound`.
pub fn open_beneath(root: &Path, rel: &Path) -> io::Result<(File, Metadata)> {
    regular(open_any_beneath(root, rel)?)
}

/// Opens whatever `rel` names beneath `root` (a file or a directory), as
/// [`open_beneath`] resolves it; `""` is the root itself.
fn open_any_beneath(root: &Path, rel: &Path) -> io::Result<File> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::openat2(
        &dir,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::XDEV) => {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "path leads out of the media root",
            ))
        }
        // Before Linux 5.6 (no `openat2`): resolve, then check the result is beneath.
        Err(rustix::io::Errno::NOSYS) => {
            let root = root.canonicalize()?;
            let path = root.join(rel).canonicalize()?;
            if !path.starts_with(&root) {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "path leads out of the media root",
                ));
            }
            rustix::fs::open(&path, flags, Mode::empty())?
        }
        Err(e) => return Err(e.into()),
    };
    Ok(File::from(fd))
}

/// Most members one directory listing returns (a WebDAV answer stays bounded).
pub const MAX_LISTED: usize = 10_000;

/// A file or directory found by [`list_beneath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its path below the root (`""`: the root).
    pub path: String,
    pub is_dir: bool,
    pub len: u64,
    pub ino: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
}

/// What `rel` (relative, free of `..`) names beneath `root`, and with `members`, when
/// it is a directory, its regular files and directories by name (at most
/// [`MAX_LISTED`]; hidden names, symbolic links and other kinds are left out).
pub fn list_beneath(root: &Path, rel: &str, members: bool) -> io::Result<Vec<Listed>> {
    use rustix::fs::{AtFlags, FileType};
    let dir = open_any_beneath(root, Path::new(rel))?;
    let listed = |path: String, st: &rustix::fs::Stat| -> Option<Listed> {
        let kind = FileType::from_raw_mode(st.st_mode);
        (kind == FileType::RegularFile || kind == FileType::Directory).then(|| Listed {
            path,
            is_dir: kind == FileType::Directory,
            len: u64::try_from(st.st_size).unwrap_or(0),
            ino: st.st_ino,
            mtime: st.st_mtime,
            mtime_nsec: i64::try_from(st.st_mtime_nsec).unwrap_or(0),
        })
    };
    let st = rustix::fs::fstat(&dir)?;
    let Some(me) = listed(rel.to_string(), &st) else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "not a file or directory",
        ));
    };
    let mut out = vec![me.clone()];
    if !(members && me.is_dir) {
        return Ok(out);
    }
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name.first() == Some(&b'.') {
            continue;
        }
        if let Ok(name) = std::str::from_utf8(name) {
            names.push(name.to_owned());
        }
        if names.len() > MAX_LISTED {
            break;
        }
    }
    names.sort_unstable();
    for name in names.into_iter().take(MAX_LISTED) {
        let Ok(st) = rustix::fs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        out.extend(listed(path, &st));
    }
    Ok(out)
}

fn regular(file: File) -> io::Result<(File, Metadata)> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "not a regular file",
        ));
    }
    Ok((file, meta))
}

/// Which version of which file a mapping holds: a file rewritten in place or replaced
/// gets a new mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileKey {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileKey {
    pub fn of(meta: &Metadata) -> FileKey {
        FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }

    /// 48 bits naming this version of the file (in URLs).
    pub fn tag(&self) -> u64 {
        let mtime = self.mtime_ns as u64 ^ (self.mtime_ns >> 64) as u64;
        (self.dev ^ self.ino.rotate_left(17) ^ self.len.rotate_left(31) ^ mtime.rotate_left(47))
            & 0xffff_ffff_ffff
    }
}

/// The mappings of the files being read now, shared by every worker.
#[derive(Debug, Default)]
pub struct FileMaps {
    maps: Mutex<HashMap<FileKey, Weak<Mmap>>>,
    /// Who reads which file (mapped or not), for recordings retention.
    pub readers: Arc<crate::io::readers::Readers>,
}

/// Owns one reference to a mapping for the `Bytes` made from it.
struct MapOwner(Arc<Mmap>);

impl AsRef<[u8]> for MapOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl FileMaps {
    /// No mappings yet; readers registered with `readers`.
    pub fn new(readers: Arc<crate::io::readers::Readers>) -> FileMaps {
        FileMaps {
            maps: Mutex::default(),
            readers,
        }
    }

    /// The whole of `file` as `Bytes` over its one shared mapping, mapping it if no
    /// reader has it mapped now. Slices of the result share the mapping and keep it
    /// alive; it is unmapped when the last of them is dropped.
    pub fn map(&self, file: &File, meta: &Metadata) -> io::Result<Bytes> {
        if meta.len() == 0 {
            return Ok(Bytes::new());
        }
        let key = FileKey::of(meta);
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = maps.get(&key).and_then(Weak::upgrade) {
            return Ok(Bytes::from_owner(MapOwner(map)));
        }
        // SAFETY: the mapping is read-only and private to no one; the hazard is the
        // file shrinking underneath it (SIGBUS), which the module docs rule out.
        let map = Arc::new(unsafe { Mmap::map(file)? });
        if maps.len() >= SWEEP_AT {
            maps.retain(|_, m| m.strong_count() > 0);
        }
        maps.insert(key, Arc::downgrade(&map));
        Ok(Bytes::from_owner(MapOwner(map)))
    }

    /// Files mapped now.
    pub fn mapped(&self) -> usize {
        let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        maps.values().filter(|m| m.strong_count() > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_root(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sluice-filemap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/sub")).unwrap();
        dir
    }

    #[test]
    fn opens_beneath_and_refuses_ways_out() {
        let dir = temp_root("open");
        let root = dir.join("root");
        std::fs::write(root.join("sub/a.txt"), b"hello").unwrap();
        std::fs::write(dir.join("secret.txt"), b"secret").unwrap();
        std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("sub/a.txt", root.join("in")).unwrap();

        let (_, meta) = open_beneath(&root, Path::new("sub/a.txt")).unwrap();
        assert_eq!(meta.len(), 5);
        assert!(open_beneath(&root, Path::new("in")).is_ok());
        let out = open_beneath(&root, Path::new("out")).unwrap_err();
        assert_eq!(out.kind(), io::ErrorKind::PermissionDenied);
        let up = open_beneath(&root, Path::new("../secret.txt")).unwrap_err();
        assert_eq!(up.kind(), io::ErrorKind::PermissionDenied);
        let dir_err = open_beneath(&root, Path::new("sub")).unwrap_err();
        assert_eq!(dir_err.kind(), io::ErrorKind::NotFound);
        let missing = open_beneath(&root, Path::new("nope")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_mapping_per_file_released_by_the_last_reader() {
        let dir = temp_root("map");
        let root = dir.join("root");
        let mut f = File::create(root.join("m.bin")).unwrap();
        f.write_all(&[7u8; 10_000]).unwrap();
        drop(f);
        let maps = FileMaps::default();
        let (file, meta) = open_beneath(&root, Path::new("m.bin")).unwrap();
        let a = maps.map(&file, &meta).unwrap();
        let b = maps.map(&file, &meta).unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr(), "second reader shares the mapping");
        assert_eq!(maps.mapped(), 1);
        let slice = a.slice(100..200);
        drop((a, b));
        assert_eq!(maps.mapped(), 1, "a slice keeps the mapping");
        assert_eq!(&slice[..], &[7u8; 100][..]);
        drop(slice);
        assert_eq!(maps.mapped(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
