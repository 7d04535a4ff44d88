//! Read-only WebDAV (RFC 4918) for a tree of files: the `Depth` header and the
//! `207 Multi-Status` answer to `PROPFIND`, so that WebDAV clients (rclone, cadaver,
//! davfs2, desktop file managers) can list what `GET` downloads.
//!
//! Why so little: a PROPFIND body asks for named properties or all of them; every
//! client we serve asks for the live properties a listing needs, which we always
//! return (as for `allprop`), so the body is not parsed. Locks, writes and dead
//! properties do not exist on a read-only tree (class 1 only).

use crate::files::{content_type, format_http_date};
use std::fmt::Write as _;

/// How deep a `PROPFIND` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// The resource itself.
    Zero,
    /// The resource and, for a collection, its members.
    One,
}

/// Why a `Depth` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DepthError {
    /// `infinity` (or no header, which means it): refused as RFC 4918 §9.1 allows
    /// (`propfind-finite-depth`), since a listing of the whole tree is unbounded.
    #[error("Depth: infinity is not supported")]
    Infinity,
    /// Anything but `0`, `1` or `infinity`.
    #[error("bad Depth header")]
    Malformed,
}

/// The `Depth` of a `PROPFIND` from its header value.
pub fn depth(header: Option<&str>) -> Result<Depth, DepthError> {
    match header.map(str::trim) {
        Some("0") => Ok(Depth::Zero),
        Some("1") => Ok(Depth::One),
        None => Err(DepthError::Infinity),
        Some(v) if v.eq_ignore_ascii_case("infinity") => Err(DepthError::Infinity),
        Some(_) => Err(DepthError::Malformed),
    }
}

/// The body of the 403 that refuses `Depth: infinity`.
pub const FINITE_DEPTH: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:error xmlns:D=\"DAV:\"><D:propfind-finite-depth/></D:error>\n";

/// One file or directory of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path below the tree's root, decoded (`""` for the root), without slashes
    /// at either end.
    pub path: String,
    /// A collection (directory).
    pub is_dir: bool,
    /// Size in bytes (files).
    pub len: u64,
    /// Last modification, Unix seconds.
    pub modified: u64,
    /// The entity tag `GET` answers with (files only).
    pub etag: Option<String>,
}

/// Percent-encodes `path` for an `href`: every byte but unreserved ones and `/`.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Escapes text for XML character data and attribute values.
fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

/// The `207 Multi-Status` body listing `entries`, whose hrefs are `prefix` (such as
/// `/files/`) followed by each encoded path; directories end with `/`.
pub fn multistatus(prefix: &str, entries: &[Entry]) -> String {
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n",
    );
    for e in entries {
        let mut href = format!("{prefix}{}", encode_path(&e.path));
        if e.is_dir && !href.ends_with('/') {
            href.push('/');
        }
        let name = e.path.rsplit('/').next().unwrap_or("");
        out.push_str("<D:response><D:href>");
        escape(&href, &mut out);
        out.push_str("</D:href><D:propstat><D:prop><D:displayname>");
        escape(name, &mut out);
        out.push_str("</D:displayname>");
        if e.is_dir {
            out.push_str("<D:resourcetype><D:collection/></D:resourcetype>");
        } else {
            let _ = write!(
                out,
                "<D:resourcetype/><D:getcontentlength>{}</D:getcontentlength><D:getcontenttype>",
                e.len
            );
            escape(content_type(&e.path), &mut out);
            out.push_str("</D:getcontenttype>");
            if let Some(etag) = &e.etag {
                out.push_str("<D:getetag>");
                escape(etag, &mut out);
                out.push_str("</D:getetag>");
            }
        }
        let _ = write!(
            out,
            "<D:getlastmodified>{}</D:getlastmodified>",
            format_http_date(e.modified)
        );
        out.push_str("</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n");
    }
    out.push_str("</D:multistatus>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths() {
        assert_eq!(depth(Some("0")), Ok(Depth::Zero));
        assert_eq!(depth(Some(" 1 ")), Ok(Depth::One));
        assert_eq!(depth(Some("Infinity")), Err(DepthError::Infinity));
        assert_eq!(depth(None), Err(DepthError::Infinity));
        assert_eq!(depth(Some("2")), Err(DepthError::Malformed));
    }

    #[test]
    fn a_listing_escapes_and_encodes() {
        let entries = [
            Entry {
                path: "rec".into(),
                is_dir: true,
                len: 0,
                modified: 0,
                etag: None,
            },
            Entry {
                path: "rec/a <&> b.mp4".into(),
                is_dir: false,
                len: 42,
                modified: 784_111_777,
                etag: Some("\"x\"".into()),
            },
        ];
        let xml = multistatus("/files/", &entries);
        assert!(xml.contains("<D:href>/files/rec/</D:href>"), "{xml}");
        assert!(
            xml.contains("<D:href>/files/rec/a%20%3C%26%3E%20b.mp4</D:href>"),
            "{xml}"
        );
        assert!(
            xml.contains("<D:displayname>a &lt;&amp;&gt; b.mp4</D:displayname>"),
            "{xml}"
        );
        assert!(xml.contains("<D:getcontentlength>42</D:getcontentlength>"));
        assert!(
            xml.contains("<D:getcontenttype>video/mp4</D:getcontenttype>"),
            "{xml}"
        );
        assert!(xml.contains("<D:getetag>&quot;x&quot;</D:getetag>"));
        assert!(xml.contains("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert!(xml.contains("<D:collection/>"));
    }

    #[test]
    fn encoding_keeps_unreserved_and_slashes() {
        assert_eq!(encode_path("a/b-c_d.e~f"), "a/b-c_d.e~f");
        assert_eq!(encode_path("é"), "%C3%A9");
    }
}
