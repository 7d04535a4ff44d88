//! What every worker shares about WebRTC: where browsers reach the UDP port, the
//! answered sessions waiting for their first binding request (by our ICE ufrag, with
//! a bounded count and lifetime), and the session behind each WHEP resource URL.

use crate::core::format::Format;
use crate::core::hub::{Stream, TranscodeUse};
use crate::core::limits::UdpSlot;
use sluice_webrtc::restart::IceCredentials;
use sluice_webrtc::Peer;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a session is for.
#[derive(Debug)]
pub enum Job {
    /// Play `stream` (WHEP) with the tracks of `format`, holding the stream's
    /// transcoding while its audio is transcoded for the player.
    Play {
        stream: Arc<Stream>,
        format: Format,
        opus: Option<TranscodeUse>,
    },
    /// Publish `key` (WHIP) from `ip`.
    Publish { key: String, ip: IpAddr },
}

/// An answered offer whose ICE has not started.
#[derive(Debug)]
pub struct Pending {
    pub peer: Peer,
    pub job: Job,
    /// The session's id (its client entry, kicks, logs).
    pub id: u64,
    /// The WHEP resource's secret part.
    pub resource: String,
    pub slot: UdpSlot,
    created: Instant,
}

/// See the module doc.
#[derive(Debug)]
pub struct Registry {
    /// Host candidates announced in answers, UDP then TCP (passive).
    pub candidates: Vec<SocketAddr>,
    pub tcp_candidates: Vec<SocketAddr>,
    max_pending: usize,
    /// How long an answered session may wait for ICE to start.
    handshake: Duration,
    pending: Mutex<HashMap<String, Pending>>,
    /// WHEP resource (secret) → session id.
    resources: Mutex<HashMap<String, u64>>,
    /// ICE restarts a PATCH asked for, by our new ufrag, until the session's first
    /// check with it: at most one per session.
    restarts: Mutex<HashMap<String, Restart>>,
}

/// An ICE restart waiting for its session's first check.
#[derive(Debug)]
struct Restart {
    id: u64,
    resource: String,
    ours: IceCredentials,
    theirs: IceCredentials,
    /// Taken by the session: the entry stays, for checks from other addresses.
    taken: bool,
}

/// Why an answered session cannot wait for its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyPending;

impl Registry {
    pub fn new(
        candidates: Vec<SocketAddr>,
        tcp_candidates: Vec<SocketAddr>,
        max_pending: usize,
        handshake: Duration,
    ) -> Self {
        Registry {
            candidates,
            tcp_candidates,
            max_pending,
            handshake,
            pending: Mutex::default(),
            resources: Mutex::default(),
            restarts: Mutex::default(),
        }
    }

    /// Parks an answered session under its ufrag until its first binding request.
    pub fn park(
        &self,
        ufrag: String,
        peer: Peer,
        job: Job,
        id: u64,
        resource: String,
        slot: UdpSlot,
    ) -> Result<(), TooManyPending> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if self.max_pending > 0 && pending.len() >= self.max_pending {
            return Err(TooManyPending);
        }
        self.resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(resource.clone(), id);
        pending.insert(
            ufrag,
            Pending {
                peer,
                job,
                id,
                resource,
                slot,
                created: Instant::now(),
            },
        );
        Ok(())
    }

    /// The session a binding request to `ufrag` starts, if it is still waiting.
    pub fn take(&self, ufrag: &str) -> Option<Pending> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(ufrag)
    }

    /// Drops the sessions that waited too long for ICE; how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut gone = Vec::new();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, p| {
                let keep = now.duration_since(p.created) < self.handshake;
                if !keep {
                    gone.push(p.resource.clone());
                }
                keep
            });
        let mut resources = self.resources.lock().unwrap_or_else(|e| e.into_inner());
        for r in &gone {
            resources.remove(r);
        }
        gone.len()
    }

    /// The session behind a WHEP resource.
    pub fn resource(&self, resource: &str) -> Option<u64> {
        self.resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(resource)
            .copied()
    }

    /// Keeps an ICE restart of the session behind `resource` for its first check
    /// (replacing one not yet taken); false if there is no such session.
    pub fn restart(&self, resource: &str, ours: IceCredentials, theirs: IceCredentials) -> bool {
        let Some(id) = self.resource(resource) else {
            return false;
        };
        let mut restarts = self.restarts.lock().unwrap_or_else(|e| e.into_inner());
        restarts.retain(|_, r| r.id != id);
        let restart = Restart {
            id,
            resource: resource.to_owned(),
            ours,
            theirs,
            taken: false,
        };
        restarts.insert(restart.ours.ufrag.clone(), restart);
        true
    }

    /// The session an ICE restart to `ufrag` is for.
    pub fn restarting(&self, ufrag: &str) -> Option<u64> {
        let restarts = self.restarts.lock().unwrap_or_else(|e| e.into_inner());
        restarts.get(ufrag).map(|r| r.id)
    }

    /// The credentials of the ICE restart to `ufrag`, ours then theirs, once, if it
    /// is session `id`'s.
    pub fn take_restart(&self, ufrag: &str, id: u64) -> Option<(IceCredentials, IceCredentials)> {
        let mut restarts = self.restarts.lock().unwrap_or_else(|e| e.into_inner());
        let r = restarts.get_mut(ufrag).filter(|r| r.id == id && !r.taken)?;
        r.taken = true;
        Some((r.ours.clone(), r.theirs.clone()))
    }

    /// Forgets a resource; a session still waiting for ICE is dropped with it.
    pub fn forget(&self, resource: &str) {
        self.restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, r| r.resource != resource);
        self.resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(resource);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, p| p.resource != resource);
    }
}
