//! Notification hooks (`[hooks]`): a JSON body POSTed when a publisher or player
//! stops and when a recording is complete. Sessions and the recording thread only
//! queue the event; a thread of its own sends them, a bounded number at a time, so a
//! slow or dead receiver delays nothing else. Past a full queue events are dropped
//! and counted.

use crate::io::http_client::{self, Target};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

/// Events waiting to be sent.
const QUEUE: usize = 4096;
/// Notifications on their way at once.
const IN_FLIGHT: usize = 64;

/// The `[hooks]` table. Its keys' defaults, flags and help are in the configuration's
/// settings table (`config.rs`), which also gives it its `Default`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HookSettings {
    pub on_publish_done: String,
    pub on_play_done: String,
    pub on_record_done: String,
    pub timeout_ms: u64,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A publisher stopped: `publish_done`.
    Publish,
    /// A player stopped: `play_done`.
    Play,
    /// A recording's file is complete: `record_done`.
    Record,
}

impl Ended {
    fn name(self) -> &'static str {
        match self {
            Ended::Publish => "publish_done",
            Ended::Play => "play_done",
            Ended::Record => "record_done",
        }
    }
}

/// The sender of notifications.
#[derive(Debug)]
pub struct Notifier {
    tx: mpsc::Sender<(Arc<Target>, String)>,
    publish_done: Option<Arc<Target>>,
    play_done: Option<Arc<Target>>,
    record_done: Option<Arc<Target>>,
    dropped: AtomicU64,
}

/// Why the notifier cannot start.
#[derive(Debug, thiserror::Error)]
pub enum HooksError {
    #[error("hooks.{key}: {source}")]
    Url {
        key: &'static str,
        source: crate::io::http_client::UrlError,
    },
    #[error("hooks thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl Notifier {
    /// The notifier `[hooks]` describes, and its thread; `None` when no hook is set.
    pub fn start(settings: &HookSettings) -> Result<Option<Arc<Notifier>>, HooksError> {
        let target = |key: &'static str, url: &str| -> Result<Option<Arc<Target>>, HooksError> {
            if url.is_empty() {
                return Ok(None);
            }
            Target::parse(url)
                .map(|t| Some(Arc::new(t)))
                .map_err(|source| HooksError::Url { key, source })
        };
        let publish_done = target("on_publish_done", &settings.on_publish_done)?;
        let play_done = target("on_play_done", &settings.on_play_done)?;
        let record_done = target("on_record_done", &settings.on_record_done)?;
        if publish_done.is_none() && play_done.is_none() && record_done.is_none() {
            return Ok(None);
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let timeout = Duration::from_millis(settings.timeout_ms.max(1));
        std::thread::Builder::new()
            .name("sluice-hooks".into())
            .spawn(move || send_all(rx, timeout))
            .map_err(HooksError::Thread)?;
        Ok(Some(Arc::new(Notifier {
            tx,
            publish_done,
            play_done,
            record_done,
            dropped: AtomicU64::new(0),
        })))
    }

    /// Whether `event` has a hook (so callers can skip building its body).
    pub fn wants(&self, event: Ended) -> bool {
        self.target(event).is_some()
    }

    fn target(&self, event: Ended) -> Option<&Arc<Target>> {
        match event {
            Ended::Publish => self.publish_done.as_ref(),
            Ended::Play => self.play_done.as_ref(),
            Ended::Record => self.record_done.as_ref(),
        }
    }

    /// Queues `event` with the fields of `body` (an object) and `"event"`.
    pub fn notify(&self, event: Ended, mut body: Value) {
        let Some(target) = self.target(event) else {
            return;
        };
        if let Value::Object(map) = &mut body {
            map.insert("event".into(), event.name().into());
        }
        if self
            .tx
            .try_send((target.clone(), body.to_string()))
            .is_err()
        {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "notification hooks: queue full, events dropped"
                );
            }
        }
    }
}

fn send_all(mut rx: mpsc::Receiver<(Arc<Target>, String)>, timeout: Duration) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("notification hooks: cannot start: {e}");
            return;
        }
    };
    runtime.block_on(async move {
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        while let Some((target, body)) = rx.recv().await {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            tokio::spawn(async move {
                match http_client::post_json(&target, body, timeout).await {
                    Ok(a) if (200..300).contains(&a.status) => {}
                    Ok(a) => {
                        tracing::debug!(hook = %target, status = a.status, "notification refused")
                    }
                    Err(e) => tracing::warn!(hook = %target, "notification: {e}"),
                }
                drop(slot);
            });
        }
    });
}
