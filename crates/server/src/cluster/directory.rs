//! The directory's own thread: every call to the store happens here, never on a
//! worker, so a slow or absent Redis delays no media.
//!
//! The loop keeps what this node owns (`owned`: streams claimed, or admitted while the
//! store was unreachable) and refreshes it with the node's record every third of the
//! TTL. A refresh that fails marks the directory down: claims and lookups then answer
//! at once without a round trip (publishers are admitted as on a single server,
//! viewers are served what this node has), and the next refresh that succeeds writes
//! everything owned back, which is how a restarted Redis learns the cluster again. A
//! stream another node took meanwhile is reported lost, and its publisher here is
//! disconnected.
//!
//! Until the first refresh has an answer, claims and lookups wait for it (at most
//! `cluster.timeout_ms`): a node just started behind a load balancer must not serve a
//! publisher without its claim, or tell a player that no node has its stream.

use super::node::{self, LoadMeter};
use super::store::{Claimed, NodeEntry, NodeRecord, Store, StoreError};
use super::{Counters, Op};
use crate::core::hub::Hub;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What a worker asks of the directory.
#[derive(Debug)]
pub(super) enum Command {
    Claim {
        key: String,
        takeover: bool,
        reply: oneshot::Sender<Result<Claimed, StoreError>>,
    },
    Release {
        key: String,
    },
    /// The stream's publisher left (its grace window began).
    Orphan {
        key: String,
    },
    Locate {
        key: String,
        reply: oneshot::Sender<Result<Option<NodeRecord>, StoreError>>,
    },
    Nodes {
        reply: oneshot::Sender<Result<Vec<NodeEntry>, StoreError>>,
    },
    /// Leave the directory (shutdown, drain); refreshes stop.
    Leave {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// What the loop needs to know of this node.
pub(super) struct Me {
    pub id: String,
    pub urls: BTreeMap<String, String>,
    pub started: SystemTime,
    pub ttl: Duration,
    pub timeout: Duration,
    /// The hub, once the server has made it (it needs this directory's tap first).
    pub hub: Arc<OnceLock<Arc<Hub>>>,
    /// Called (on this thread) with each stream another node took from this one.
    pub lost: Box<dyn Fn(String)>,
}

/// Answered once the store answers, or with [`StoreError::Timeout`] past `timeout`.
async fn bounded<T>(
    timeout: Duration,
    op: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(timeout, op)
        .await
        .unwrap_or(Err(StoreError::Timeout(timeout)))
}

/// Runs the directory until every sender of `rx` is gone.
pub(super) async fn run<S: Store>(
    store: S,
    me: Me,
    mut rx: mpsc::UnboundedReceiver<Command>,
    counters: Arc<Counters>,
) {
    let mut owned: HashMap<String, Owned> = HashMap::new();
    let mut meter = LoadMeter::new(me.hub.clone());
    let mut tick = tokio::time::interval(me.ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut left = false;
    // Whether the directory's state was logged: one never reached (a wrong address,
    // an untrusted certificate) is said too, not only one that went away.
    let mut reported = false;
    // Claims and lookups that came before the first refresh's answer.
    let mut early: Vec<Command> = Vec::new();
    let me = Rc::new(me);
    loop {
        tokio::select! {
            _ = tick.tick(), if !left => {
                prune(&me, &mut owned);
                let keys: Vec<(String, bool)> =
                    owned.iter().map(|(k, o)| (k.clone(), o.away)).collect();
                let draining = counters.draining.load(Ordering::Relaxed);
                let load = meter.sample();
                counters.egress_bps.store(load.egress_bps, Ordering::Relaxed);
                let record = node::record(&me.id, me.started, &me.urls, load, draining);
                let result = bounded(me.timeout, store.refresh(&record, &keys, me.ttl)).await;
                counters.count(Op::Refresh, result.is_ok());
                match result {
                    Ok(lost) => {
                        reported = true;
                        if !counters.up.swap(true, Ordering::Relaxed) {
                            tracing::info!(node = %me.id, streams = keys.len(), "cluster: directory reachable, this node registered");
                        }
                        for key in lost {
                            owned.remove(&key);
                            counters.lost.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(stream = %key, "cluster: another node took the stream over; its publisher here is disconnected, its viewers here follow it");
                            (me.lost)(key);
                        }
                    }
                    Err(e) => {
                        if counters.up.swap(false, Ordering::Relaxed) || !reported {
                            reported = true;
                            tracing::warn!(node = %me.id, "cluster: {e}; serving what this node has until it is back");
                        }
                    }
                }
                for cmd in std::mem::take(&mut early) {
                    handle(cmd, &store, &me, &mut owned, &counters, &mut left).await;
                }
            }
            cmd = rx.recv() => {
                let Some(cmd) = cmd else { break };
                if !reported && matches!(cmd, Command::Claim { .. } | Command::Locate { .. }) {
                    early.push(cmd);
                    continue;
                }
                handle(cmd, &store, &me, &mut owned, &counters, &mut left).await;
            }
        }
    }
}

/// A stream this node owns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Owned {
    /// When it was claimed (a claim comes before its stream exists).
    since: Instant,
    /// Its publisher left; the grace window runs.
    away: bool,
}

impl Owned {
    fn now() -> Owned {
        Owned {
            since: Instant::now(),
            away: false,
        }
    }
}

/// Streams claimed a while ago that have no stream here (the publisher was refused
/// after its claim, or its end was not seen) are released.
fn prune(me: &Me, owned: &mut HashMap<String, Owned>) {
    let now = Instant::now();
    let Some(hub) = me.hub.get() else {
        return;
    };
    owned.retain(|key, o| now.duration_since(o.since) < me.ttl || hub.find(key).is_some());
}

async fn handle<S: Store>(
    cmd: Command,
    store: &S,
    me: &Rc<Me>,
    owned: &mut HashMap<String, Owned>,
    counters: &Arc<Counters>,
    left: &mut bool,
) {
    let up = counters.up.load(Ordering::Relaxed) && !*left;
    match cmd {
        Command::Claim {
            key,
            takeover,
            reply,
        } => {
            // Admitted whatever the store says when it cannot say: registered later.
            if !up {
                owned.insert(key, Owned::now());
                let _ = reply.send(Err(StoreError::Timeout(Duration::ZERO)));
                return;
            }
            let result = bounded(me.timeout, store.claim(&me.id, &key, takeover, me.ttl)).await;
            counters.count(Op::Claim, result.is_ok());
            match &result {
                Ok(Claimed::Owned { from }) => {
                    if from.is_some() {
                        counters.takeovers.fetch_add(1, Ordering::Relaxed);
                    }
                    owned.insert(key, Owned::now());
                }
                Ok(Claimed::Held(_)) => {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    counters.up.store(false, Ordering::Relaxed);
                    owned.insert(key, Owned::now());
                }
            }
            let _ = reply.send(result);
        }
        Command::Release { key } => {
            if owned.remove(&key).is_some() && up {
                let result = bounded(me.timeout, store.release(&me.id, &key)).await;
                counters.count(Op::Release, result.is_ok());
            }
        }
        Command::Orphan { key } => {
            let Some(o) = owned.get_mut(&key) else {
                return;
            };
            o.away = true;
            if up {
                let result = bounded(me.timeout, store.away(&me.id, &key, me.ttl)).await;
                counters.count(Op::Away, result.is_ok());
            }
        }
        Command::Locate { key, reply } => {
            if !up {
                let _ = reply.send(Err(StoreError::Timeout(Duration::ZERO)));
                return;
            }
            let (store, me, counters) = (store.clone(), me.clone(), counters.clone());
            tokio::task::spawn_local(async move {
                let result = bounded(me.timeout, store.owner(&key)).await;
                counters.count(Op::Locate, result.is_ok());
                let _ = reply.send(result);
            });
        }
        Command::Nodes { reply } => {
            let (store, me, counters) = (store.clone(), me.clone(), counters.clone());
            tokio::task::spawn_local(async move {
                let result = bounded(me.timeout, store.nodes()).await;
                counters.count(Op::Nodes, result.is_ok());
                let _ = reply.send(result);
            });
        }
        Command::Leave { reply } => {
            *left = true;
            let keys: Vec<String> = owned.drain().map(|(k, _)| k).collect();
            let result = bounded(me.timeout, store.leave(&me.id, &keys)).await;
            counters.count(Op::Leave, result.is_ok());
            if result.is_ok() {
                tracing::info!(node = %me.id, streams = keys.len(), "cluster: left the directory");
            }
            let _ = reply.send(result);
        }
    }
}
