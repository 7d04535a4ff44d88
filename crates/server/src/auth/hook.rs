//! The HTTP hook backend: a request the other backends do not settle is POSTed, as
//! JSON, to the operator's URL, and a 2xx answer allows it:
//!
//! ```json
//! { "action": "publish", "path": "live/cam1", "protocol": "rtmp", "ip": "10.0.0.7",
//!   "id": 42, "user": "enc1", "password": "...", "token": null, "query": "k=v" }
//! ```
//!
//! The call waits at most `auth.hook_timeout_ms` (then the request is refused as
//! `hook_unavailable`) on the calling session's own task, so a slow or dead hook delays
//! only the sessions asking it. Answers are remembered for `auth.hook_cache_ms` by
//! everything they were asked with, and a question already on its way is not asked
//! again: the sessions asking it wait for the one answer (a thousand players joining
//! at once cost the hook one request).

use super::{Denial, Grant, Request};
use crate::io::http_client::{self, FetchError, Target};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Most answers remembered; past it, expired ones are dropped, then all.
const MAX_CACHED: usize = 65_536;

type Decision = Result<Grant, Denial>;

enum Slot {
    /// Asked; the answer comes on this channel (`None` until then).
    Asking(watch::Receiver<Option<Decision>>),
    Answered(Instant, Decision),
}

enum Step {
    Known(Decision),
    Wait(watch::Receiver<Option<Decision>>),
    Ask(watch::Sender<Option<Decision>>),
}

/// The auth hook.
pub struct Hook {
    target: Target,
    timeout: Duration,
    cache_for: Duration,
    slots: Mutex<HashMap<[u8; 32], Slot>>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook")
            .field("target", &self.target)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Hook {
    pub fn new(url: &str, timeout: Duration, cache_for: Duration) -> Result<Hook, FetchError> {
        Ok(Hook {
            target: Target::parse(url)?,
            timeout,
            cache_for,
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// What the hook says of `req`.
    pub async fn check(&self, req: &Request<'_>) -> Decision {
        let key = cache_key(req);
        loop {
            match self.slot(key) {
                Step::Known(d) => return d,
                Step::Ask(tx) => return self.ask(req, key, tx).await,
                Step::Wait(mut rx) => {
                    // Another session asks; a dropped asker (its session went) leaves
                    // the slot to the next one.
                    let answer = rx.wait_for(Option::is_some).await.map(|d| d.clone());
                    if let Ok(Some(d)) = answer {
                        return d;
                    }
                    let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
                    if matches!(slots.get(&key), Some(Slot::Asking(r)) if r.has_changed().is_err())
                    {
                        slots.remove(&key);
                    }
                }
            }
        }
    }

    /// What to do about question `key`: its remembered answer, wait for the session
    /// asking it, or ask it (the slot is then marked as being asked).
    fn slot(&self, key: [u8; 32]) -> Step {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        match slots.get(&key) {
            Some(Slot::Answered(at, d)) if at.elapsed() < self.cache_for => {
                return Step::Known(d.clone())
            }
            Some(Slot::Asking(rx)) => return Step::Wait(rx.clone()),
            _ => {}
        }
        if slots.len() >= MAX_CACHED {
            let ttl = self.cache_for;
            slots.retain(|_, s| match s {
                Slot::Answered(at, _) => at.elapsed() < ttl,
                Slot::Asking(_) => true,
            });
            if slots.len() >= MAX_CACHED {
                slots.clear();
            }
        }
        let (tx, rx) = watch::channel(None);
        slots.insert(key, Slot::Asking(rx));
        Step::Ask(tx)
    }

    async fn ask(
        &self,
        req: &Request<'_>,
        key: [u8; 32],
        tx: watch::Sender<Option<Decision>>,
    ) -> Decision {
        // If this future is dropped mid-call, the slot must not stay `Asking`.
        struct Unblock<'a>(&'a Hook, [u8; 32], bool);
        impl Drop for Unblock<'_> {
            fn drop(&mut self) {
                if !self.2 {
                    let mut slots = self.0.slots.lock().unwrap_or_else(|e| e.into_inner());
                    if matches!(slots.get(&self.1), Some(Slot::Asking(_))) {
                        slots.remove(&self.1);
                    }
                }
            }
        }
        let mut unblock = Unblock(self, key, false);
        let answer = http_client::post_json(&self.target, body(req), self.timeout).await;
        let decision = match &answer {
            Ok(a) if (200..300).contains(&a.status) => Ok(Grant::Hook(
                req.credentials.user.clone().unwrap_or_default(),
            )),
            Ok(a) => {
                tracing::debug!(status = a.status, "auth hook refuses");
                Err(Denial::HookDenied)
            }
            Err(e) => {
                tracing::warn!(hook = %self.target, "auth hook: {e}");
                Err(Denial::HookUnavailable)
            }
        };
        {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            // A hook that did not answer is asked again next time.
            if answer.is_ok() {
                slots.insert(key, Slot::Answered(Instant::now(), decision.clone()));
            } else {
                slots.remove(&key);
            }
        }
        unblock.2 = true;
        let _ = tx.send(Some(decision.clone()));
        decision
    }
}

/// The JSON the hook gets.
fn body(req: &Request<'_>) -> String {
    let c = req.credentials;
    serde_json::json!({
        "action": req.action.name(),
        "path": req.path,
        "protocol": req.protocol,
        "ip": req.peer.to_string(),
        "id": req.id,
        "user": c.user,
        "password": c.password,
        "token": c.token,
        "query": req.query,
    })
    .to_string()
}

/// Everything the answer may depend on.
fn cache_key(req: &Request<'_>) -> [u8; 32] {
    let c = req.credentials;
    let mut h = Sha256::new();
    for part in [
        req.action.name(),
        req.path,
        req.protocol,
        &req.peer.to_string(),
        c.user.as_deref().unwrap_or("\u{0}"),
        c.password.as_deref().unwrap_or("\u{0}"),
        c.token.as_deref().unwrap_or("\u{0}"),
        req.query,
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}
