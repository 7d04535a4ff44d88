//! Which files of the media root are being read now (an on-demand player, a download),
//! so that recordings retention never removes one of them.
//!
//! Why a registry of our own: Linux lets a file be unlinked while it is open, and the
//! reader would go on reading a file nobody can see, whose space is not freed until
//! it closes; the rule is that a file being read stays until its readers are done, and
//! is removed on a later pass. Files are known by device and inode, so a reader through
//! another name (a link) counts too.
//!
//! # Invariants
//! - A reader registers after it opened the file ([`Readers::hold`]) and before it
//!   reads; a remover claims the file ([`Readers::claim`]) before it unlinks it. The two
//!   exclude each other: a hold refused because of a claim makes the reader answer as
//!   if the file were gone (it is about to be), and a claim refused because of a hold
//!   leaves the file in place.
//! - The lock is held for a map operation only, never across I/O.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, MutexGuard};

/// A file, by device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdent {
    dev: u64,
    ino: u64,
}

impl FileIdent {
    pub fn of(meta: &Metadata) -> FileIdent {
        FileIdent {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// What is happening to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// This many holds.
    Read(u32),
    /// A remover claimed it.
    Removing,
}

/// The files being read, shared by every worker and the recordings retention.
#[derive(Debug, Default)]
pub struct Readers {
    files: Mutex<HashMap<FileIdent, Use>>,
}

/// A reader's hold on a file; the file may be removed once every hold is dropped.
#[derive(Debug)]
pub struct ReadHold {
    readers: Arc<Readers>,
    file: FileIdent,
}

/// A remover's claim on a file: no reader may start while it lives.
#[derive(Debug)]
pub struct Claim<'a> {
    readers: &'a Readers,
    file: FileIdent,
}

impl Readers {
    fn lock(&self) -> MutexGuard<'_, HashMap<FileIdent, Use>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a reader of the file `meta` describes; `None` when it is being removed.
    pub fn hold(self: &Arc<Self>, meta: &Metadata) -> Option<ReadHold> {
        let file = FileIdent::of(meta);
        let mut files = self.lock();
        let n = match files.get(&file) {
            Some(Use::Removing) => return None,
            Some(Use::Read(n)) => n.saturating_add(1),
            None => 1,
        };
        files.insert(file, Use::Read(n));
        Some(ReadHold {
            readers: self.clone(),
            file,
        })
    }

    /// Claims the file for removal; `None` while it is being read (or claimed).
    pub fn claim(&self, file: FileIdent) -> Option<Claim<'_>> {
        let mut files = self.lock();
        if files.contains_key(&file) {
            return None;
        }
        files.insert(file, Use::Removing);
        Some(Claim {
            readers: self,
            file,
        })
    }

    /// Files being read now.
    pub fn reading(&self) -> usize {
        self.lock()
            .values()
            .filter(|u| matches!(u, Use::Read(_)))
            .count()
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        let mut files = self.readers.lock();
        match files.get_mut(&self.file) {
            Some(Use::Read(n)) if *n > 1 => *n -= 1,
            _ => {
                files.remove(&self.file);
            }
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.readers.lock().remove(&self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_and_claims_exclude_each_other() {
        let dir = std::env::temp_dir().join(format!("sluice-readers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.mp4");
        std::fs::write(&path, b"x").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let file = FileIdent::of(&meta);
        let readers = Arc::new(Readers::default());
        let a = readers.hold(&meta).unwrap();
        let b = readers.hold(&meta).unwrap();
        assert_eq!(readers.reading(), 1);
        assert!(readers.claim(file).is_none(), "read twice");
        drop(a);
        assert!(readers.claim(file).is_none(), "still read once");
        drop(b);
        let claim = readers.claim(file).unwrap();
        assert!(readers.hold(&meta).is_none(), "being removed");
        assert!(readers.claim(file).is_none(), "claimed once");
        drop(claim);
        assert!(readers.hold(&meta).is_some());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
