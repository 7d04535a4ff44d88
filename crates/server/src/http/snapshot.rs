//! `GET /APP/NAME.jpg[?width=W]`: a stream's snapshot (see `crate::snapshot`), its read
//! authorization checked by the router already.
//!
//! Cached as long as it stays the newest (`max-age`: what is left of the interval),
//! `private` for streams whose reading needs authorization.

use super::reply::Reply;
use crate::ctx::Ctx;
use crate::snapshot::{SnapshotError, Snapshots, WIDTHS};
use sluice_http::Request;

/// The answer to a snapshot request for `key`.
pub(super) async fn reply(ctx: &Ctx, req: &Request, key: &str) -> Reply {
    let Some(stream) = ctx.hub().find(key) else {
        return Reply::text(404, "no such stream\n");
    };
    let Some(snapshots) = stream.tap::<Snapshots>() else {
        return Reply::text(404, "snapshots are off on this server\n");
    };
    let Ok(width) = width(&req.query) else {
        return Reply::text(400, "width must be a number from 16 to 3840\n");
    };
    match snapshots.get(&stream, width).await {
        Ok(snapshot) => {
            let private = ctx.auth().load().required(crate::auth::Action::Read, key);
            let left = snapshots
                .interval()
                .saturating_sub(snapshot.age)
                .as_secs()
                .max(1);
            let scope = if private { "private" } else { "public" };
            Reply::new(
                200,
                vec![
                    ("Content-Type", "image/jpeg".into()),
                    ("Cache-Control", format!("{scope}, max-age={left}")),
                ],
                vec![snapshot.jpeg],
            )
        }
        Err(SnapshotError::Codec(_)) => Reply::text(415, "no snapshots of this codec\n"),
        Err(e) => {
            tracing::debug!(stream = %key, "snapshot: {e}");
            let mut reply = Reply::text(503, "no snapshot yet\n");
            reply.headers.push(("Retry-After", "1".into()));
            reply
        }
    }
}

/// `width` of the query, if given: within [`WIDTHS`].
fn width(query: &str) -> Result<Option<u32>, ()> {
    let Some(value) = query.split('&').find_map(|kv| kv.strip_prefix("width=")) else {
        return Ok(None);
    };
    match value.parse::<u32>() {
        Ok(w) if WIDTHS.contains(&w) => Ok(Some(w)),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        assert_eq!(width(""), Ok(None));
        assert_eq!(width("sluice_auth=x&width=320"), Ok(Some(320)));
        for bad in ["width=", "width=8", "width=4000", "width=-1", "width=1e3"] {
            assert_eq!(width(bad), Err(()), "{bad}");
        }
    }
}
