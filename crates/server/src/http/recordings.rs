//! `GET /api/v1/recordings` (every recorded stream: first and last times, bytes,
//! files), `GET /api/v1/recordings/APP/NAME?from=&to=` (its gapless spans and its
//! files within `[from, to)`), read from the recorder's catalogue, and
//! `DELETE /api/v1/recordings/APP/NAME?from=&to=` (its files wholly within the range
//! removed, all or none: 409 when one of them is being read; the file being recorded
//! is never wholly within, its end being still to come).
//!
//! Why its own file: the API module routes and authorizes; this one turns the
//! catalogue's spans into JSON and parses the times. `from` and `to` are RFC 3339
//! (`2026-11-27T10:00:00Z`, an offset, fractions of a second) or Unix milliseconds;
//! either may be left out (open-ended). Times come back as both RFC 3339 UTC text and
//! Unix ms. The catalogue answers from memory, by binary search: no disk access on a
//! worker; a `DELETE` unlinks on the blocking pool.

use crate::core::hub::Hub;
use crate::record::{Recorder, RemoveError};
use serde_json::{json, Value};
use sluice_archive::time;

/// Files listed in one answer at most (`truncated` says when more matched).
const MAX_FILES: usize = 10_000;

fn when(ms: i64) -> Value {
    json!(time::format_rfc3339(ms))
}

/// `GET /api/v1/recordings`.
pub(super) fn list(hub: &Hub) -> (u16, Value) {
    let Some(recorder) = hub.attached::<Recorder>() else {
        return (
            200,
            json!({ "recording": false, "indexing": false, "recordings": [] }),
        );
    };
    let catalogue = recorder.catalogue();
    let list: Vec<Value> = catalogue
        .summaries()
        .into_iter()
        .map(|(stream, s)| {
            json!({
                "stream": stream,
                "first": when(s.first_ms),
                "last": when(s.last_ms),
                "first_ms": s.first_ms,
                "last_ms": s.last_ms,
                "bytes": s.bytes,
                "files": s.files,
            })
        })
        .collect();
    (
        200,
        json!({ "recording": true, "indexing": !catalogue.loaded(), "recordings": list }),
    )
}

/// The value of `name` in a query string, percent-decoded.
fn param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| sluice_http::percent_decode_utf8(v))
}

/// A bound of the range: absent means open-ended (`open`).
fn bound(query: &str, name: &str, open: i64) -> Result<i64, String> {
    match param(query, name) {
        None => Ok(open),
        Some(v) if v.is_empty() => Ok(open),
        Some(v) => time::parse(&v).map_err(|e| format!("{name}: {e}")),
    }
}

/// `GET /api/v1/recordings/APP/NAME?from=&to=`.
pub(super) fn stream(hub: &Hub, key: &str, query: &str) -> (u16, Value) {
    let (from, to) = match (bound(query, "from", i64::MIN), bound(query, "to", i64::MAX)) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(e), _) | (_, Err(e)) => return (400, json!({ "error": e })),
    };
    if from > to {
        return (400, json!({ "error": "from is after to" }));
    }
    let Some(recorder) = hub.attached::<Recorder>() else {
        return (404, json!({ "error": "recording is off" }));
    };
    let catalogue = recorder.catalogue();
    let dir_key = Recorder::dir_key(key);
    let Some(entry) = catalogue.get(&dir_key) else {
        return (404, json!({ "error": "no recordings of this stream" }));
    };
    let (files, truncated) = catalogue.covering(&dir_key, from, to, MAX_FILES);
    let spans: Vec<Value> = entry
        .runs(from, to)
        .into_iter()
        .map(|r| {
            json!({
                "start": when(r.start_ms),
                "end": when(r.end_ms),
                "start_ms": r.start_ms,
                "end_ms": r.end_ms,
                "files": r.files,
                "bytes": r.bytes,
            })
        })
        .collect();
    let files: Vec<Value> = files
        .into_iter()
        .map(|f| {
            json!({
                "path": f.path,
                "start": when(f.span.start_ms),
                "end": when(f.span.end_ms),
                "start_ms": f.span.start_ms,
                "end_ms": f.span.end_ms,
                "bytes": f.span.bytes,
                "fragments": f.span.fragments,
                "complete": f.span.closed,
            })
        })
        .collect();
    let open = |ms: i64| (ms != i64::MIN && ms != i64::MAX).then(|| when(ms));
    (
        200,
        json!({
            "stream": entry.key(),
            "from": open(from),
            "to": open(to),
            "indexing": !catalogue.loaded(),
            "spans": spans,
            "files": files,
            "truncated": truncated,
        }),
    )
}

/// `DELETE /api/v1/recordings/APP/NAME?from=&to=`: both bounds are required, so that
/// a forgotten query never removes a stream's every file.
pub(super) async fn delete(hub: &Hub, key: &str, query: &str) -> (u16, Value) {
    let (from, to) = match (bound(query, "from", i64::MIN), bound(query, "to", i64::MAX)) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(e), _) | (_, Err(e)) => return (400, json!({ "error": e })),
    };
    if from == i64::MIN || to == i64::MAX {
        return (400, json!({ "error": "from and to are both required" }));
    }
    if from > to {
        return (400, json!({ "error": "from is after to" }));
    }
    let Some(recorder) = hub.attached::<Recorder>().cloned() else {
        return (404, json!({ "error": "recording is off" }));
    };
    if !recorder.catalogue().loaded() {
        return (503, json!({ "error": "the recordings index is loading" }));
    }
    let dir_key = Recorder::dir_key(key);
    let removed = tokio::task::spawn_blocking({
        let dir_key = dir_key.clone();
        move || recorder.remove_range(&dir_key, from, to)
    })
    .await;
    let removed = match removed {
        Ok(Ok(removed)) => removed,
        Ok(Err(e)) => {
            let status = match &e {
                RemoveError::Writing { .. } | RemoveError::Reading { .. } => 409,
                RemoveError::NoStream => 404,
                RemoveError::Io { .. } => 500,
            };
            return (status, json!({ "error": e.to_string() }));
        }
        Err(e) => return (500, json!({ "error": e.to_string() })),
    };
    let bytes: u64 = removed.iter().map(|r| r.span.bytes).sum();
    let files: Vec<Value> = removed
        .iter()
        .map(|r| {
            json!({
                "path": r.path,
                "start": when(r.span.start_ms),
                "end": when(r.span.end_ms),
                "start_ms": r.span.start_ms,
                "end_ms": r.span.end_ms,
                "bytes": r.span.bytes,
            })
        })
        .collect();
    (
        200,
        json!({
            "stream": dir_key,
            "from": when(from),
            "to": when(to),
            "removed": files,
            "bytes": bytes,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_rfc3339_or_unix_ms_and_open_when_absent() {
        assert_eq!(bound("", "from", 7), Ok(7));
        assert_eq!(bound("from=", "from", 7), Ok(7));
        assert_eq!(bound("to=1000&from=5", "from", 7), Ok(5));
        assert_eq!(
            bound("from=1970-01-01T00%3A00%3A01%2B00:00", "from", 7),
            Ok(1000)
        );
        assert_eq!(bound("from=1970-01-01T00:00:02Z", "from", 7), Ok(2000));
        assert!(bound("from=yesterday", "from", 7).is_err());
    }
}
