//! `/files/<path>`: downloads from the media root, with Range, If-Range, conditional
//! requests and HEAD (the decisions are `sluice_http::files`; this is the I/O).
//!
//! Why two body paths: on plain HTTP the kernel sends the file itself (`sendfile`
//! from the page cache to the socket: no copy through user space, no buffer of ours);
//! under TLS and on HTTP/2 the bytes must pass through rustls, so the body is the
//! file's one shared mapping (`FileMaps`), handed over in slices without copying.
//!
//! # Invariants
//! - No file data is buffered per connection: a slow client holds an open file (and,
//!   under TLS, a reference to the shared mapping), never a copy of the bytes.
//! - A client that takes nothing for `limits.idle_timeout_ms` while its body is due is
//!   closed; one that keeps reading, however slowly, is served to the end.
//! - A body is exactly `Content-Length` bytes or the connection is closed (a file cut
//!   short while it is sent ends the connection, never a keep-alive with a short body).
//! - Opening stays beneath the media root (`open_beneath`): `..` and symbolic links
//!   out are 403, anything but a regular file is 404.

use super::{write_bounded, Error};
use crate::ctx::Ctx;
use crate::driver::{Conn, DriveError};
use crate::io::filemap::open_beneath;
use crate::io::readers::ReadHold;
use bytes::Bytes;
use sluice_http::files::{relative_path, FileEntity, FileResponse};
use sluice_http::ServerSession;
use sluice_http::{Method, Request};
use std::collections::VecDeque;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Most bytes asked of one `sendfile` call. The socket's send buffer bounds what one
/// call moves anyway; 4 MiB lets a large (autotuned) buffer fill in one call.
const SENDFILE_MAX: usize = 4 << 20;

/// Bytes sent on one connection before letting the worker's other connections run,
/// when the socket never pushes back (a fast client on loopback): about 5 ms of
/// line rate, so one download cannot starve the others on its worker.
const YIELD_EVERY: u64 = 16 << 20;

/// Size of the slices of the mapping handed to TLS and HTTP/2: large enough that
/// per-slice work is noise, small enough that a stalled client is noticed per slice.
pub(crate) const SLICE: usize = 256 << 10;

/// Extra headers of every file response: the browser may read the range headers of
/// a cross-origin download, and must not sniff a type other than ours.
pub(crate) const FILE_HEADERS: [(&str, &str); 2] = [
    (
        "Access-Control-Expose-Headers",
        "Content-Length, Content-Range, Accept-Ranges, ETag, Last-Modified",
    ),
    ("X-Content-Type-Options", "nosniff"),
];

/// An opened file and what to send of it.
pub(crate) struct Opened {
    file: File,
    meta: Metadata,
    response: FileResponse,
    /// Recordings retention leaves the file alone while the answer is sent.
    hold: ReadHold,
}

/// No file: a status and a short text body.
type Refusal = (u16, &'static str);

/// Opens the file a request names (`rest`: the path below `/files/`, still encoded)
/// and decides the answer. Opening runs on the blocking pool: a slow file system
/// (a network mount, a cold directory) must not stall the worker's other sessions.
pub(crate) async fn answer(ctx: &Ctx, req: &Request, rest: &str) -> Result<Opened, Refusal> {
    let rel = match relative_path(rest) {
        Ok(rel) if !rel.is_empty() => rel,
        Ok(_) => return Err((404, "not found\n")),
        Err(e) => {
            tracing::info!(path = %req.path, "file refused: {e}");
            return Err((e.status(), "refused\n"));
        }
    };
    let (root, path) = (ctx.config().media_root.clone(), rel.clone());
    let opened =
        tokio::task::spawn_blocking(move || open_beneath(Path::new(&root), Path::new(&path)))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
    let (file, meta) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            let (status, text) = open_error(&e);
            if status == 403 {
                tracing::info!(path = %rel, "file refused: {e}");
            } else if status == 500 {
                tracing::warn!(path = %rel, "cannot open file: {e}");
            } else {
                tracing::debug!(path = %rel, "no file: {e}");
            }
            return Err((status, text));
        }
    };
    // A file being removed (recordings retention) is as good as gone.
    let Some(hold) = ctx.files().readers.hold(&meta) else {
        return Err((404, "not found\n"));
    };
    let entity = FileEntity::new(
        &rel,
        meta.len(),
        meta.ino(),
        meta.mtime(),
        meta.mtime_nsec(),
    );
    let response = sluice_http::files::respond(req, &entity);
    tracing::debug!(path = %rel, status = response.status.code(), range = ?response.range, "file");
    Ok(Opened {
        file,
        meta,
        response,
        hold,
    })
}

/// The status for a failed open: missing or not a file is 404, outside the root or
/// unreadable is 403, anything else (out of descriptors, I/O error) is 500.
fn open_error(e: &io::Error) -> (u16, &'static str) {
    use rustix::io::Errno;
    match e.kind() {
        io::ErrorKind::NotFound => return (404, "not found\n"),
        io::ErrorKind::PermissionDenied => return (403, "forbidden\n"),
        _ => {}
    }
    let errno = e.raw_os_error().map(Errno::from_raw_os_error);
    match errno {
        Some(Errno::NOTDIR | Errno::LOOP | Errno::NAMETOOLONG | Errno::NXIO | Errno::ISDIR) => {
            (404, "not found\n")
        }
        Some(Errno::ACCESS | Errno::PERM | Errno::XDEV) => (403, "forbidden\n"),
        _ => (500, "cannot open\n"),
    }
}

/// Sends an opened file's answer on an HTTP/1.1 connection, plain or TLS.
pub(crate) async fn serve(
    ctx: &Ctx,
    conn: &mut Conn<ServerSession>,
    req: &Request,
    opened: Opened,
    idle: Duration,
) -> Result<(), Error> {
    let text = |code: u16, body: &'static str| (code, vec![Bytes::from_static(body.as_bytes())]);
    let Opened {
        file,
        meta,
        response,
        hold: _hold,
    } = opened;
    let range = response.range.clone();
    let send_body = response.body && req.method == Method::Get && !range.is_empty();
    let headers: Vec<(&str, &str)> = FILE_HEADERS
        .iter()
        .copied()
        .chain(response.headers.iter().map(|(n, v)| (*n, v.as_str())))
        .collect();
    let status = response.status.code();
    let sock = conn.sock.clone();
    if !send_body {
        // The headers carry the length (or there is no body).
        conn.session.respond_head(status, &headers, None);
        conn.session.body_sent();
        return Ok(());
    }
    if sock.plain_tcp().is_some() {
        conn.session.respond_head(status, &headers, None);
        send_file_body(conn, &file, range.start, range.end, idle, !req.keep_alive()).await?;
        conn.session.body_sent();
        return Ok(());
    }
    // Map before the head: a mapping that fails is still a clean 500.
    let map = match ctx.files().map(&file, &meta) {
        Ok(map) => map,
        Err(e) => {
            tracing::warn!(path = %req.path, "cannot map file: {e}");
            let (code, body) = text(500, "cannot map\n");
            conn.session
                .respond(code, &[("Content-Type", "text/plain")], body);
            return Ok(());
        }
    };
    tracing::debug!(files_mapped = ctx.files().mapped(), "mapped for TLS");
    let body = slice(&map, range.start, range.end)?;
    conn.session.respond_head(status, &headers, None);
    let mut out = conn.take_transmits();
    write_bounded(&sock, &mut out, idle).await?;
    // In slices: rustls encrypts from the mapping directly, a slice at a time.
    for chunk in (0..body.len()).step_by(SLICE) {
        let mut out = VecDeque::from([body.slice(chunk..(chunk + SLICE).min(body.len()))]);
        write_bounded(&sock, &mut out, idle).await?;
    }
    conn.session.body_sent();
    Ok(())
}

/// Sends what is owed to the connection (the answer's head) with `MSG_MORE`, then
/// bytes `start..end` of `file` with `sendfile`. Plain TCP only. `closing`: the
/// connection ends after this answer (see [`send_head_and_file`]).
pub(crate) async fn send_file_body(
    conn: &mut Conn<ServerSession>,
    file: &File,
    start: u64,
    end: u64,
    idle: Duration,
    closing: bool,
) -> Result<(), Error> {
    let sock = conn.sock.clone();
    let Some(tcp) = sock.plain_tcp() else {
        return Err(DriveError::Io(io::ErrorKind::Unsupported.into()));
    };
    let head: Vec<u8> = conn
        .take_transmits()
        .iter()
        .flat_map(|b| b.iter().copied())
        .collect();
    send_head_and_file(tcp, &head, file, start..end, idle, closing).await
}

/// Sends `head`, then bytes `range` of `file`, to `tcp`.
///
/// When the connection ends after this answer (`Connection: close`, HTTP/1.0), the
/// socket is corked first: the body's last partial segment then waits for the close,
/// which sends it with the FIN, one segment fewer per connection for both ends (as
/// nginx's `tcp_nopush` does). A kept-alive connection is not corked: its last segment
/// would wait up to 200 ms for a close that does not come.
async fn send_head_and_file(
    tcp: &TcpStream,
    head: &[u8],
    file: &File,
    range: std::ops::Range<u64>,
    idle: Duration,
    closing: bool,
) -> Result<(), Error> {
    if closing {
        // Best effort: without the cork, the answer is the same, a segment longer.
        let _ = rustix::net::sockopt::set_tcp_cork(tcp, true);
    }
    send_more(tcp, head, idle).await?;
    sendfile(tcp, file, range.start, range.end, idle).await
}

/// `range` of a mapping, or an error if the file is no longer as long as it was
/// (which `map` can only see when the file changed between `fstat` and `mmap`).
fn slice(map: &Bytes, start: u64, end: u64) -> io::Result<Bytes> {
    let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
        return Err(io::ErrorKind::FileTooLarge.into());
    };
    if end > map.len() || start > end {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "file changed while it was opened",
        ));
    }
    Ok(map.slice(start..end))
}

/// Waits until `tcp` can take more, for at most `idle`.
async fn writable(tcp: &TcpStream, idle: Duration) -> Result<(), Error> {
    tokio::time::timeout(idle, tcp.writable())
        .await
        .map_err(|_| DriveError::Stalled(idle))??;
    Ok(())
}

/// Writes the head with `MSG_MORE`, so that it leaves in one segment with the first
/// bytes of the body instead of alone (the socket has `TCP_NODELAY`).
pub(crate) async fn send_more(
    tcp: &TcpStream,
    mut head: &[u8],
    idle: Duration,
) -> Result<(), Error> {
    use rustix::net::SendFlags;
    while !head.is_empty() {
        match tcp.try_io(Interest::WRITABLE, || {
            rustix::net::send(tcp, head, SendFlags::MORE | SendFlags::NOSIGNAL)
                .map_err(io::Error::from)
        }) {
            Ok(n) => head = head.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => writable(tcp, idle).await?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Sends bytes `start..end` of `file` to `tcp` with `sendfile`, waiting for the socket
/// whenever it is full (a slow client costs a wait, not a spin).
pub(crate) async fn sendfile(
    tcp: &TcpStream,
    file: &File,
    start: u64,
    end: u64,
    idle: Duration,
) -> Result<(), Error> {
    let mut offset = start;
    let mut since_yield = 0u64;
    while offset < end {
        let count = usize::try_from(end - offset).map_or(SENDFILE_MAX, |n| n.min(SENDFILE_MAX));
        let before = offset;
        match tcp.try_io(Interest::WRITABLE, || {
            rustix::fs::sendfile(tcp, file, Some(&mut offset), count).map_err(io::Error::from)
        }) {
            Ok(0) => {
                return Err(DriveError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file ended before its length (cut while sent)",
                )))
            }
            Ok(_) => {
                since_yield += offset - before;
                if since_yield >= YIELD_EVERY {
                    since_yield = 0;
                    tokio::task::yield_now().await;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                since_yield = 0;
                writable(tcp, idle).await?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// An opened file's answer on HTTP/2: status, headers, and the body as the shared
/// mapping's bytes (empty for HEAD and bodiless statuses).
pub(crate) fn h2_answer(
    ctx: &Ctx,
    req: &Request,
    opened: Opened,
) -> (u16, Vec<(&'static str, String)>, Bytes) {
    let Opened {
        file,
        meta,
        response,
        hold,
    } = opened;
    let mut headers: Vec<(&'static str, String)> = FILE_HEADERS
        .iter()
        .map(|(n, v)| (*n, v.to_string()))
        .collect();
    headers.extend(response.headers);
    let range = response.range;
    let body = if response.body && req.method == Method::Get && !range.is_empty() {
        match ctx
            .files()
            .map(&file, &meta)
            .and_then(|map| slice(&map, range.start, range.end))
        {
            // The body outlives this call: it carries the hold along.
            Ok(body) => Bytes::from_owner(Held { body, _hold: hold }),
            Err(e) => {
                tracing::warn!(path = %req.path, "cannot map file: {e}");
                return (
                    500,
                    vec![("Content-Type", "text/plain".to_string())],
                    Bytes::from_static(b"cannot map\n"),
                );
            }
        }
    } else {
        Bytes::new()
    };
    (response.status.code(), headers, body)
}

/// An HTTP/2 body and the hold on its file, released when the last of it is sent.
struct Held {
    body: Bytes,
    _hold: ReadHold,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

/// The headers that say `/files/` is a read-only WebDAV tree (class 1).
pub(crate) const DAV_HEADERS: [(&str, &str); 3] = [
    ("DAV", "1"),
    ("Allow", "OPTIONS, GET, HEAD, PROPFIND"),
    ("MS-Author-Via", "DAV"),
];

/// Answers a WebDAV `PROPFIND` on `/files/<rest>`: the file or directory's properties,
/// and with `Depth: 1` a directory's members. Listing runs on the blocking pool.
pub(crate) async fn propfind(ctx: &Ctx, req: &Request, rest: &str) -> (u16, &'static str, Bytes) {
    use sluice_http::dav;
    let xml = "application/xml; charset=utf-8";
    let depth = match dav::depth(req.header("depth")) {
        Ok(d) => d,
        Err(dav::DepthError::Infinity) => {
            return (403, xml, Bytes::from_static(dav::FINITE_DEPTH.as_bytes()))
        }
        Err(dav::DepthError::Malformed) => {
            return (400, "text/plain", Bytes::from_static(b"bad Depth\n"))
        }
    };
    let rel = match relative_path(rest) {
        Ok(rel) => rel,
        Err(e) => {
            tracing::info!(path = %req.path, "listing refused: {e}");
            return (e.status(), "text/plain", Bytes::from_static(b"refused\n"));
        }
    };
    let root = ctx.config().media_root.clone();
    let members = depth == dav::Depth::One;
    let path = rel.clone();
    let listed = tokio::task::spawn_blocking(move || {
        crate::io::filemap::list_beneath(Path::new(&root), &path, members)
    })
    .await
    .unwrap_or_else(|e| Err(io::Error::other(e)));
    let listed = match listed {
        Ok(l) => l,
        Err(e) => {
            let (status, text) = open_error(&e);
            tracing::debug!(path = %rel, "no listing: {e}");
            return (status, "text/plain", Bytes::from_static(text.as_bytes()));
        }
    };
    let entries: Vec<dav::Entry> = listed
        .into_iter()
        .map(|l| dav::Entry {
            etag: (!l.is_dir)
                .then(|| FileEntity::new(&l.path, l.len, l.ino, l.mtime, l.mtime_nsec).etag),
            modified: u64::try_from(l.mtime).unwrap_or(0),
            path: l.path,
            is_dir: l.is_dir,
            len: l.len,
        })
        .collect();
    (207, xml, Bytes::from(dav::multistatus("/files/", &entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_errors_map_to_statuses() {
        use rustix::io::Errno;
        let os = |e: Errno| io::Error::from_raw_os_error(e.raw_os_error());
        assert_eq!(open_error(&os(Errno::NOENT)).0, 404);
        assert_eq!(open_error(&os(Errno::NOTDIR)).0, 404);
        assert_eq!(open_error(&os(Errno::LOOP)).0, 404);
        assert_eq!(open_error(&os(Errno::ACCESS)).0, 403);
        assert_eq!(open_error(&os(Errno::MFILE)).0, 500);
        let outside = io::Error::new(io::ErrorKind::PermissionDenied, "out");
        assert_eq!(open_error(&outside).0, 403);
    }

    #[test]
    fn slices_check_the_mapping() {
        let map = Bytes::from_static(b"0123456789");
        assert_eq!(&slice(&map, 2, 5).unwrap()[..], b"234");
        assert!(slice(&map, 2, 11).is_err());
    }

    /// The body arrives whole after the head either way; only an answer that closes
    /// the connection corks it (so that its last segment leaves with the FIN).
    #[tokio::test]
    async fn a_closing_answer_is_corked() {
        use crate::io::memfile::MemFile;
        use tokio::io::AsyncReadExt;
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let file = MemFile::new(&[Bytes::from(body.clone())]).unwrap();
        let file = file.file();
        for closing in [false, true] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (server, _) = listener.accept().await.unwrap();
            server.set_nodelay(true).unwrap();
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got
            });
            let idle = Duration::from_secs(10);
            send_head_and_file(&server, b"HEAD", file, 1000..250_000, idle, closing)
                .await
                .unwrap();
            let corked = rustix::net::sockopt::tcp_cork(&server).unwrap();
            assert_eq!(corked, closing);
            drop(server);
            let got = reader.await.unwrap();
            assert_eq!(&got[..4], b"HEAD");
            assert!(got[4..] == body[1000..250_000], "closing {closing}");
        }
    }
}
