//! Stream key patterns: which streams are recorded (`record.streams`), which an
//! `[[apps]]` entry, a relay source, a user's permissions or a token's `path` claim
//! apply to.
//!
//! A key is `app/stream`; the app is everything before the last `/` (RTSP paths may
//! nest), the stream name what follows it. A pattern is `*` (every stream), or
//! `app/stream` where each side is a glob in which `*` matches any run of characters:
//! `live/*` (every stream of app `live`), `live/cam1`, `*/cam1`, `live/cam*`.

/// Why a pattern could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// No `/` between an app and a stream name.
    #[error("{0:?}: expected \"*\", \"app/*\" or \"app/stream\"")]
    NoApp(String),
    /// An empty app or stream name.
    #[error("{0:?}: empty app or stream name")]
    EmptyPart(String),
    /// An empty `[[apps]]` name.
    #[error("empty name")]
    EmptyName,
}

/// One stream key pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// `None` matches every key (the pattern `*`).
    parts: Option<(String, String)>,
}

impl Pattern {
    /// Parses a pattern; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        if text == "*" {
            return Ok(Pattern { parts: None });
        }
        let Some((app, stream)) = text.rsplit_once('/') else {
            return Err(PatternError::NoApp(text.to_string()));
        };
        if app.is_empty() || stream.is_empty() {
            return Err(PatternError::EmptyPart(text.to_string()));
        }
        Ok(Pattern {
            parts: Some((app.to_string(), stream.to_string())),
        })
    }

    /// The pattern of an `[[apps]]` name: a pattern, or an app name (no `/`) standing
    /// for all its streams.
    pub fn app(name: &str) -> Result<Pattern, PatternError> {
        if name.is_empty() {
            return Err(PatternError::EmptyName);
        }
        if name == "*" || name.contains('/') {
            Pattern::parse(name)
        } else {
            Pattern::parse(&format!("{name}/*"))
        }
    }

    /// Whether the stream `key` (`app/stream`) matches.
    pub fn matches(&self, key: &str) -> bool {
        let Some((app_glob, stream_glob)) = &self.parts else {
            return true;
        };
        let (app, stream) = key.rsplit_once('/').unwrap_or(("", key));
        glob(app_glob.as_bytes(), app.as_bytes()) && glob(stream_glob.as_bytes(), stream.as_bytes())
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of bytes (including
/// `/`) and every other byte itself. No recursion, and at worst the product of the
/// lengths: only the last `*` seen is ever retried.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut retry: Option<(usize, usize)> = None;
    while let Some(&byte) = text.get(t) {
        match pattern.get(p) {
            Some(b'*') => {
                retry = Some((p, t));
                p += 1;
            }
            Some(&c) if c == byte => {
                p += 1;
                t += 1;
            }
            _ => match retry {
                Some((star, from)) => {
                    p = star + 1;
                    t = from + 1;
                    retry = Some((star, from + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .unwrap_or_default()
        .iter()
        .all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, key: &str) -> bool {
        Pattern::parse(pattern).unwrap().matches(key)
    }

    #[test]
    fn patterns_match_apps_and_streams() {
        assert!(matches("*", "live/cam1"));
        assert!(matches("*", "cam1"));
        assert!(matches("live/*", "live/cam1"));
        assert!(!matches("live/*", "other/cam1"));
        assert!(!matches("live/*", "livex/cam1"));
        assert!(matches("live/cam1", "live/cam1"));
        assert!(!matches("live/cam1", "live/cam10"));
        assert!(!matches("live/cam1", "live/cam"));
        assert!(matches("*/cam1", "any/cam1"));
        assert!(matches("*/cam1", "a/b/cam1"));
        assert!(matches("live/cam*", "live/cam"));
        assert!(matches("live/cam*", "live/cam42"));
        assert!(matches("live/*cam*", "live/xcamy"));
        assert!(matches("a/b/*", "a/b/c"));
        assert!(!matches("a/b/*", "a/c"));
        assert!(!matches("live/*", "cam1"));
    }

    #[test]
    fn app_names_are_patterns_of_the_stream_key() {
        let m = |name: &str, key: &str| Pattern::app(name).unwrap().matches(key);
        assert!(m("live", "live/cam1"));
        assert!(!m("live", "livex/cam1"));
        assert!(!m("live", "other/live"));
        assert!(m("live/*", "live/cam1"));
        assert!(m("live/cam1", "live/cam1"));
        assert!(!m("live/cam1", "live/cam2"));
        assert!(m("cam*", "cams/a"));
        assert!(m("*", "anything/at-all"));
        assert!(m("*/cam1", "a/b/cam1"));
        for bad in ["", "live/", "/cam"] {
            assert!(Pattern::app(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_patterns_are_errors() {
        for bad in ["", "live", "live/", "/cam", "live/cam/"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn glob_needs_no_backtracking_blowup() {
        let text = "a".repeat(10_000);
        assert!(!glob(b"*a*a*a*a*a*b", text.as_bytes()));
        assert!(glob(b"*a*a*a*a*a*", text.as_bytes()));
    }
}
