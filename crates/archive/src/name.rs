//! Recording file names: `<stream>-<YYYYmmdd-HHMMSS>[-N].<ext>`, the UTC second the
//! file's first frame arrived, with `-N` when several files began in one second.
//!
//! Why one place: the writer names files with it, the index log stores a file as its
//! [`FileId`] (second, suffix, format) rather than as text, so that its records have a
//! fixed size, and a rebuild reads the start time back from the name when a file has no
//! `prft` box.

use crate::span::Format;
use crate::time;

/// Which file of a stream's directory: its name without the stream's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// The UTC second in the name (Unix seconds).
    pub name_secs: i64,
    /// The `-N` suffix (0: none).
    pub attempt: u16,
    /// The container, from the extension.
    pub format: Format,
}

impl FileId {
    /// The id of a file begun at `unix_ms`, the `attempt`-th with that second.
    pub fn new(unix_ms: i64, attempt: u16, format: Format) -> FileId {
        FileId {
            name_secs: unix_ms.div_euclid(1000),
            attempt,
            format,
        }
    }

    /// The file name in the directory of `stream`.
    pub fn file_name(&self, stream: &str) -> String {
        let (y, mo, d, h, mi, s, _) = time::fields(self.name_secs.saturating_mul(1000));
        let suffix = if self.attempt == 0 {
            String::new()
        } else {
            format!("-{}", self.attempt)
        };
        format!(
            "{stream}-{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}{suffix}.{}",
            self.format.extension()
        )
    }

    /// The id of `name` if it is a recording file name of `stream`.
    pub fn parse(stream: &str, name: &str) -> Option<FileId> {
        let rest = name.strip_prefix(stream)?.strip_prefix('-')?;
        let (stem, ext) = rest.rsplit_once('.')?;
        let format = Format::from_extension(ext)?;
        let (stamp, attempt) = match stem.len() {
            15 => (stem, 0),
            n if n > 16 => {
                let (stamp, n) = stem.split_at_checked(15)?;
                let n = n.strip_prefix('-')?;
                // As the writer names them: 1.., no leading zero.
                if n.is_empty()
                    || n.len() > 5
                    || n.starts_with('0')
                    || !n.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                (stamp, n.parse().ok()?)
            }
            _ => return None,
        };
        let b = stamp.as_bytes();
        if b.get(8) != Some(&b'-') {
            return None;
        }
        let num = |from: usize, len: usize| -> Option<u32> {
            let s = stamp.get(from..from + len)?;
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse().ok())?
        };
        let ms = time::from_fields(
            i64::from(num(0, 4)?),
            num(4, 2)?,
            num(6, 2)?,
            num(9, 2)?,
            num(11, 2)?,
            num(13, 2)?,
        )
        .ok()?;
        Some(FileId::new(ms, attempt, format))
    }

    /// The Unix ms of the name's second.
    pub fn name_ms(&self) -> i64 {
        self.name_secs.saturating_mul(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let ms = 1_709_210_096_789; // 2024-02-29T12:34:56.789Z
        let id = FileId::new(ms, 0, Format::Fmp4);
        assert_eq!(id.file_name("cam1"), "cam1-20240229-123456.mp4");
        assert_eq!(FileId::parse("cam1", "cam1-20240229-123456.mp4"), Some(id));
        let id = FileId::new(ms, 2, Format::Ts);
        assert_eq!(id.file_name("c-1"), "c-1-20240229-123456-2.ts");
        assert_eq!(FileId::parse("c-1", "c-1-20240229-123456-2.ts"), Some(id));
        assert_eq!(id.name_ms(), 1_709_210_096_000);
    }

    #[test]
    fn other_names_are_not_recordings() {
        for name in [
            "cam1-20240229-123456.mkv",
            "cam2-20240229-123456.mp4",
            "cam1-20240230-123456.mp4",
            "cam1-20240229-123456-.mp4",
            "cam1-20240229-123456-x.mp4",
            "cam1-20240229-123456-0.mp4",
            "cam1-20240229-123456-02.mp4",
            "cam1-20240229-123456-99999.mp4",
            "cam1-2024022-1234567.mp4",
            ".sluice-index",
            "cam1-",
        ] {
            assert_eq!(FileId::parse("cam1", name), None, "{name}");
        }
    }
}
