//! What a caller asks for in its stream id (the handshake's SID extension): which
//! stream, to publish or to read, and its credentials.
//!
//! Why several syntaxes: encoders and players are configured by people who copy what
//! their other server took. The access-control syntax of the SRT documentation
//! (`#!::r=app/stream,m=publish,u=user`) is what SRS and libsrt's tools use; the short
//! `publish:app/stream` and `read:app/stream` (with `:user:pass` after, as MediaMTX
//! takes them) is what people type. A bare `app/stream` reads.
//!
//! Anything after a `?` in the stream's name is a query (`token=...`), handed on as
//! is: signed URLs and tokens work as they do over RTMP.

use std::fmt;

/// Longest stream id libsrt sends (`SRT_STREAMID_MAX`).
pub const MAX_LEN: usize = 512;

/// Publish or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Publish,
    Read,
}

/// A parsed stream id.
#[derive(Clone, PartialEq, Eq)]
pub struct StreamId {
    pub mode: Mode,
    /// The stream's name (`app/stream`), without a query.
    pub resource: String,
    /// What followed `?` in the name, if anything.
    pub query: Option<String>,
    /// `u=` or the short form's user.
    pub user: Option<String>,
    /// The short form's password.
    pub password: Option<String>,
    /// `s=`: a session the caller names (logged).
    pub session: Option<String>,
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password and the query (tokens) stay out of logs.
        f.debug_struct("StreamId")
            .field("mode", &self.mode)
            .field("resource", &self.resource)
            .field("user", &self.user)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// Why a stream id was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamIdError {
    #[error("no stream id")]
    Missing,
    #[error("stream id longer than {MAX_LEN} bytes")]
    TooLong,
    #[error("stream id names no stream")]
    NoResource,
    #[error("unknown mode {0:?} (publish, request or read)")]
    Mode(String),
    #[error("stream type {0:?} is not served (only stream)")]
    Type(String),
    #[error("malformed key-value pair {0:?}")]
    Pair(String),
}

impl StreamId {
    /// Parses any of the accepted syntaxes (see the module).
    pub fn parse(sid: &str) -> Result<StreamId, StreamIdError> {
        if sid.len() > MAX_LEN {
            return Err(StreamIdError::TooLong);
        }
        let sid = sid.trim_end_matches('\0');
        if sid.is_empty() {
            return Err(StreamIdError::Missing);
        }
        if let Some(pairs) = sid.strip_prefix("#!::") {
            return Self::access_control(pairs);
        }
        let (mode, rest) = if let Some(rest) = sid.strip_prefix("publish:") {
            (Mode::Publish, rest)
        } else if let Some(rest) = sid.strip_prefix("read:") {
            (Mode::Read, rest)
        } else if let Some(rest) = sid.strip_prefix("request:") {
            (Mode::Read, rest)
        } else {
            (Mode::Read, sid)
        };
        // `name[?query][:user:pass]`, the credentials last.
        let mut parts = rest.splitn(3, ':');
        let name = parts.next().unwrap_or_default();
        let user = parts.next().map(str::to_owned);
        let password = parts.next().map(str::to_owned);
        let mut id = Self::named(mode, name)?;
        id.user = user.filter(|u| !u.is_empty());
        id.password = password;
        Ok(id)
    }

    /// The SRT access-control syntax: `key=value` pairs, comma-separated.
    fn access_control(pairs: &str) -> Result<StreamId, StreamIdError> {
        let mut mode = Mode::Read;
        let mut resource = None;
        let mut user = None;
        let mut session = None;
        for pair in pairs.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| StreamIdError::Pair(pair.to_owned()))?;
            match key {
                "r" => resource = Some(value),
                "m" => {
                    mode = match value {
                        "publish" => Mode::Publish,
                        "request" | "read" => Mode::Read,
                        other => return Err(StreamIdError::Mode(other.to_owned())),
                    }
                }
                "u" => user = Some(value.to_owned()),
                "s" => session = Some(value.to_owned()),
                "t" if value != "stream" => return Err(StreamIdError::Type(value.to_owned())),
                // h (host) and anything the documentation leaves to applications.
                _ => {}
            }
        }
        let mut id = Self::named(mode, resource.unwrap_or_default())?;
        id.user = user.filter(|u| !u.is_empty());
        id.session = session;
        Ok(id)
    }

    fn named(mode: Mode, name: &str) -> Result<StreamId, StreamIdError> {
        let (name, query) = match name.split_once('?') {
            Some((n, q)) => (n, Some(q.to_owned())),
            None => (name, None),
        };
        let resource = name.trim_matches('/');
        if resource.is_empty() {
            return Err(StreamIdError::NoResource);
        }
        Ok(StreamId {
            mode,
            resource: resource.to_owned(),
            query: query.filter(|q| !q.is_empty()),
            user: None,
            password: None,
            session: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_access_control_syntax() {
        let id = StreamId::parse("#!::r=live/cam1,m=publish,u=alice,s=abc123").unwrap();
        assert_eq!(id.mode, Mode::Publish);
        assert_eq!(id.resource, "live/cam1");
        assert_eq!(id.user.as_deref(), Some("alice"));
        assert_eq!(id.session.as_deref(), Some("abc123"));
        let id = StreamId::parse("#!::m=request,r=live/cam1?token=xyz").unwrap();
        assert_eq!(id.mode, Mode::Read);
        assert_eq!(id.resource, "live/cam1");
        assert_eq!(id.query.as_deref(), Some("token=xyz"));
        // No mode: reading, as libsrt's documentation says.
        assert_eq!(StreamId::parse("#!::r=a/b").unwrap().mode, Mode::Read);
    }

    #[test]
    fn the_short_syntax_with_credentials() {
        let id = StreamId::parse("publish:live/cam1").unwrap();
        assert_eq!(
            (id.mode, id.resource.as_str()),
            (Mode::Publish, "live/cam1")
        );
        let id = StreamId::parse("read:live/cam1?token=t:bob:secret").unwrap();
        assert_eq!(id.mode, Mode::Read);
        assert_eq!(id.resource, "live/cam1");
        assert_eq!(id.query.as_deref(), Some("token=t"));
        assert_eq!(id.user.as_deref(), Some("bob"));
        assert_eq!(id.password.as_deref(), Some("secret"));
        let id = StreamId::parse("live/cam1").unwrap();
        assert_eq!((id.mode, id.resource.as_str()), (Mode::Read, "live/cam1"));
    }

    #[test]
    fn what_is_refused() {
        assert_eq!(StreamId::parse(""), Err(StreamIdError::Missing));
        assert_eq!(StreamId::parse("publish:"), Err(StreamIdError::NoResource));
        assert_eq!(
            StreamId::parse("#!::m=publish"),
            Err(StreamIdError::NoResource)
        );
        assert!(matches!(
            StreamId::parse("#!::r=a/b,m=bidirectional"),
            Err(StreamIdError::Mode(_))
        ));
        assert!(matches!(
            StreamId::parse("#!::r=a/b,t=file"),
            Err(StreamIdError::Type(_))
        ));
        assert!(matches!(
            StreamId::parse("#!::r=a/b,junk"),
            Err(StreamIdError::Pair(_))
        ));
        assert_eq!(
            StreamId::parse(&"x".repeat(MAX_LEN + 1)),
            Err(StreamIdError::TooLong)
        );
    }

    #[test]
    fn credentials_stay_out_of_debug() {
        let id = StreamId::parse("publish:a/b?token=SECRET:u:PASS").unwrap();
        let shown = format!("{id:?}");
        assert!(!shown.contains("SECRET") && !shown.contains("PASS"));
    }
}
