//! What operators see and control: each worker's connections ([`Clients`]), the
//! commands that reach a worker through its own channel ([`Command`]), and the
//! snapshots the HTTP API and `/metrics` are made of.
//!
//! Why a channel per worker: a connection belongs to the worker that accepted it, and
//! its state is that thread's alone (`Rc`, `RefCell`). The API asks each worker for its
//! part and joins the answers; no lock is shared by the workers' request paths.
//!
//! # Invariants
//! - A connection is in its worker's [`Clients`] from its start until its [`Client`]
//!   guard drops, whatever ends it.
//! - A kicked connection ends at its driver's next turn (`Conn::kicked`).

mod end;
pub mod ingest;

pub use end::EndReason;

use crate::core::fanout::Player;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use serde::Serialize;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A metric with one series per worker (label `worker`).
pub type PerWorker<M> = Family<Vec<(&'static str, String)>, M, fn() -> M>;

/// Panics so far (each ended one session: tokio catches a task's panic, and the
/// worker goes on). Counted by the hook `count_panics` installs.
pub static PANICS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts every panic (see [`PANICS`]) and logs it, after the default hook's message.
pub fn count_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        default(info);
        tracing::error!("panic: {info} (the session ends; the server goes on)");
    }));
}

/// Debug builds only: panics when a publisher of the stream `SLUICE_INJECT_PANIC` names
/// starts, so that a test can hold that one session's panic ends that session only.
pub fn inject_panic(key: &str) {
    #[cfg(debug_assertions)]
    {
        static KEY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        let wanted = KEY.get_or_init(|| std::env::var("SLUICE_INJECT_PANIC").ok());
        if wanted.as_deref() == Some(key) {
            panic!("injected panic for {key} (SLUICE_INJECT_PANIC)");
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = key;
}

/// The buckets of the time-to-first-frame histogram, in seconds.
const FIRST_FRAME_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
use tokio::sync::{mpsc, oneshot, Notify};

/// What a connection does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Connected; no stream yet (a request, a handshake).
    Idle,
    Publish,
    Play,
}

/// One connection of this worker, as its registry entry.
#[derive(Debug)]
struct Entry {
    protocol: &'static str,
    peer: SocketAddr,
    since: SystemTime,
    stream: RefCell<Option<Arc<str>>>,
    role: Cell<Role>,
    /// When the connection began its current role.
    role_since: Cell<tokio::time::Instant>,
    bytes_in: Cell<u64>,
    player: RefCell<Weak<Player>>,
    kick: Notify,
}

/// This worker's connections.
#[derive(Debug, Default)]
pub struct Clients {
    entries: RefCell<HashMap<u64, Rc<Entry>>>,
    /// Connections ended, by protocol and reason.
    ended: RefCell<HashMap<(&'static str, &'static str), u64>>,
    /// Told when a publisher or player stops (`[hooks]`).
    notifier: Option<Arc<crate::hooks::Notifier>>,
}

/// A connection's entry in its worker's [`Clients`]; dropping it removes the entry.
#[derive(Debug)]
pub struct Client {
    id: u64,
    entry: Rc<Entry>,
    clients: Weak<Clients>,
}

impl Clients {
    pub fn new(notifier: Option<Arc<crate::hooks::Notifier>>) -> Clients {
        Clients {
            notifier,
            ..Clients::default()
        }
    }

    /// Registers connection `id`.
    pub fn add(self: &Rc<Self>, id: u64, protocol: &'static str, peer: SocketAddr) -> Client {
        let entry = Rc::new(Entry {
            protocol,
            peer,
            since: SystemTime::now(),
            stream: RefCell::new(None),
            role: Cell::new(Role::Idle),
            role_since: Cell::new(tokio::time::Instant::now()),
            bytes_in: Cell::new(0),
            player: RefCell::new(Weak::new()),
            kick: Notify::new(),
        });
        self.entries.borrow_mut().insert(id, entry.clone());
        Client {
            id,
            entry,
            clients: Rc::downgrade(self),
        }
    }

    /// Asks connection `id` to end; `false` when it is not one of this worker's.
    pub fn kick(&self, id: u64) -> bool {
        match self.entries.borrow().get(&id) {
            Some(e) => {
                e.kick.notify_one();
                true
            }
            None => false,
        }
    }

    /// Asks every connection of this worker to end (a shutdown).
    pub fn kick_all(&self) {
        for e in self.entries.borrow().values() {
            e.kick.notify_one();
        }
    }

    /// Kicks every publisher of `key` on this worker; how many.
    pub fn kick_publishers(&self, key: &str) -> usize {
        let entries = self.entries.borrow();
        let mut n = 0;
        for e in entries.values() {
            if e.role.get() == Role::Publish && e.stream.borrow().as_deref() == Some(key) {
                e.kick.notify_one();
                n += 1;
            }
        }
        n
    }

    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// Connections ended so far, by (protocol, reason).
    pub fn ended(&self) -> Vec<((&'static str, &'static str), u64)> {
        self.ended.borrow().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Every connection of this worker as the API shows it.
    pub fn snapshot(&self, worker: usize) -> Vec<ClientInfo> {
        let now = SystemTime::now();
        self.entries
            .borrow()
            .iter()
            .map(|(&id, e)| {
                let player = e.player.borrow().upgrade();
                ClientInfo {
                    id,
                    worker,
                    protocol: e.protocol,
                    peer: e.peer.to_string(),
                    role: e.role.get(),
                    stream: e.stream.borrow().as_deref().map(str::to_owned),
                    bytes_in: e.bytes_in.get(),
                    bytes_out: player.as_ref().map_or(0, |p| p.bytes()),
                    skips: player.as_ref().map_or(0, |p| p.skips()),
                    lag_ms: player.as_ref().and_then(|p| p.lag_ms()),
                    since_unix_ms: unix_ms(e.since),
                    age_s: now
                        .duration_since(e.since)
                        .unwrap_or(Duration::ZERO)
                        .as_secs_f64(),
                }
            })
            .collect()
    }
}

impl Client {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn peer(&self) -> SocketAddr {
        self.entry.peer
    }

    /// The connection publishes `key`.
    pub fn publishing(&self, key: &str) {
        self.begin(Role::Publish, key);
    }

    /// The connection plays `key` as `player`.
    pub fn playing(&self, key: &str, player: &Rc<Player>) {
        self.begin(Role::Play, key);
        *self.entry.player.borrow_mut() = Rc::downgrade(player);
    }

    fn begin(&self, role: Role, key: &str) {
        self.end_role();
        self.entry.role.set(role);
        self.entry.role_since.set(tokio::time::Instant::now());
        *self.entry.stream.borrow_mut() = Some(key.into());
    }

    /// The connection stopped publishing or playing.
    pub fn idle(&self) {
        self.end_role();
        self.entry.role.set(Role::Idle);
        *self.entry.stream.borrow_mut() = None;
        *self.entry.player.borrow_mut() = Weak::new();
    }

    /// Tells the notification hook that the publisher or player stopped.
    fn end_role(&self) {
        let e = &self.entry;
        let event = match e.role.get() {
            Role::Idle => return,
            Role::Publish => crate::hooks::Ended::Publish,
            Role::Play => crate::hooks::Ended::Play,
        };
        let Some(notifier) = self
            .clients
            .upgrade()
            .and_then(|c| c.notifier.clone())
            .filter(|n| n.wants(event))
        else {
            return;
        };
        let player = e.player.borrow().upgrade();
        notifier.notify(
            event,
            serde_json::json!({
                "id": self.id,
                "protocol": e.protocol,
                "ip": e.peer.ip().to_string(),
                "path": e.stream.borrow().as_deref(),
                "bytes_in": e.bytes_in.get(),
                "bytes_out": player.map(|p| p.bytes()),
                "duration_s": e.role_since.get().elapsed().as_secs_f64(),
            }),
        );
    }

    pub fn count_in(&self, n: usize) {
        self.entry
            .bytes_in
            .set(self.entry.bytes_in.get() + n as u64);
    }

    /// The connection ended, for `reason`.
    pub fn ended(&self, reason: EndReason) {
        if let Some(clients) = self.clients.upgrade() {
            *clients
                .ended
                .borrow_mut()
                .entry((self.entry.protocol, reason.as_str()))
                .or_default() += 1;
        }
    }

    /// Until the API kicks the connection.
    pub async fn kicked(&self) {
        self.entry.kick.notified().await
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.end_role();
        if let Some(clients) = self.clients.upgrade() {
            clients.entries.borrow_mut().remove(&self.id);
        }
    }
}

/// A connection, as the API lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ClientInfo {
    pub id: u64,
    pub worker: usize,
    pub protocol: &'static str,
    pub peer: String,
    pub role: Role,
    pub stream: Option<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Times the player was moved to a newer keyframe because it fell behind.
    pub skips: u32,
    /// How far the player is behind the newest frame its worker holds.
    pub lag_ms: Option<i64>,
    pub since_unix_ms: u64,
    pub age_s: f64,
}

/// One worker's load, as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    pub worker: usize,
    /// CPU time of the worker's thread over the last [`LOAD_WINDOW`], as a fraction.
    pub busy: f64,
    /// CPU seconds of the worker's thread since it started.
    pub cpu_seconds: f64,
    /// The latest wake-up of the scheduling-delay probe since the worker started, ms.
    pub worst_delay_ms: f64,
    /// Probe wake-ups later than 10 ms since the worker started.
    pub late_ticks: u64,
    pub connections: usize,
}

/// What a worker answers.
#[derive(Debug)]
pub struct Snapshot {
    pub worker: WorkerInfo,
    pub clients: Vec<ClientInfo>,
    /// Connections ended, by (protocol, reason).
    pub ended: Vec<((&'static str, &'static str), u64)>,
}

/// A request to one worker.
#[derive(Debug)]
pub enum Command {
    /// Its load and connections.
    Snapshot(oneshot::Sender<Snapshot>),
    /// End connection `id` if it is this worker's.
    Kick(u64, oneshot::Sender<bool>),
    /// End every publisher of the stream; answers how many there were.
    KickPublishers(Arc<str>, oneshot::Sender<usize>),
    /// The stream went to another node: pull it from there for its viewers here.
    Follow(Arc<str>),
}

/// What a reload applies while sessions go on: these settings (a key ending in `.`
/// stands for its whole section), and the apps' auth keys.
const RELOADED: &[&str] = &[
    "http.tls_cert",
    "http.tls_key",
    "auth.",
    "users",
    "api.token",
    "limits.max_connections",
    "limits.max_connections_per_ip",
    "limits.max_streams",
    "limits.max_publishers_per_ip",
    "limits.max_udp_sessions",
    // For the streams that start after the reload (live ones keep theirs); VOD keeps
    // the segment duration it started with.
    "hls.",
    "players.merge_ms",
    "publishers.second",
    "publishers.no_viewers_s",
];

/// Reloaded while the recorder runs (see [`needs_restart`]).
const RELOADED_WHILE_RECORDING: &[&str] = &[
    "record.streams",
    "record.keep_days",
    "record.keep_bytes",
    "record.min_free_bytes",
];

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// What was reloaded (`tls_certificate`, `auth`, `limits`, `new_streams`).
    pub done: Vec<&'static str>,
    /// Settings that differ between the running configuration and the file, and take
    /// a restart (`section.key`, `apps`).
    pub restart: Vec<String>,
}

/// The settings that differ between `running` and `fresh` that a reload does not
/// apply. Recording settings are reloaded only while the recorder runs (`recording`):
/// starting its writer takes a restart.
fn needs_restart(
    running: &crate::config::Config,
    fresh: &crate::config::Config,
    recording: bool,
) -> Vec<String> {
    // An app entry's keys that a reload applies are cut; entries left with none of
    // the others (the relays') drop out, so adding or removing one is no change.
    let strip = |c: &crate::config::Config| {
        let mut c = c.clone();
        for app in &mut c.apps {
            (app.auth_publish, app.auth_read, app.auth_hook) = (None, None, None);
            (app.hls, app.hls_always, app.merge_ms) = (None, None, None);
            (app.second_publisher, app.no_viewers_s) = (None, None);
            if recording {
                (app.record, app.keep_days, app.keep_bytes) = (None, None, None);
            }
        }
        let name_only = |a: &crate::config::AppConfig| crate::config::AppConfig {
            name: a.name.clone(),
            ..Default::default()
        };
        c.apps.retain(|a| *a != name_only(a));
        c
    };
    strip(running)
        .changed_keys(&strip(fresh))
        .into_iter()
        .filter(|key| {
            let reloaded = |r: &&str| match r.strip_suffix('.') {
                Some(section) => key.split_once('.').is_some_and(|(s, _)| s == section),
                None => key == r,
            };
            !(RELOADED.iter().any(&reloaded)
                || recording && RELOADED_WHILE_RECORDING.iter().any(&reloaded))
        })
        .collect()
}

/// Reads the configuration again, from the same file and flags, for a reload.
pub type ConfigSource =
    Box<dyn Fn() -> Result<crate::config::Config, crate::config::ConfigError> + Send + Sync>;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The configuration no longer loads.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Its authorization settings do not load.
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthConfigError),
    /// The HTTPS certificate files do not load.
    #[error(transparent)]
    Certificate(#[from] crate::io::tls::TlsError),
}

/// The line to every worker, and what the whole server knows of itself.
pub struct Ops {
    workers: Vec<mpsc::UnboundedSender<Command>>,
    /// The HTTPS certificate, when HTTPS is on.
    certificate: Option<Arc<crate::io::tls::Certificate>>,
    /// The authorization every worker uses; a reload replaces it.
    pub auth: Arc<arc_swap::ArcSwap<crate::auth::Auth>>,
    /// The hub: a reload sets its admission limits and what new streams get (their
    /// policy, HLS, recording).
    hub: Arc<crate::core::hub::Hub>,
    source: std::sync::OnceLock<ConfigSource>,
    /// Seconds from a player's start to its first keyframe, one histogram per worker
    /// (each observed only by its worker).
    pub first_frame: PerWorker<Histogram>,
    pub started: SystemTime,
    pub started_at: Instant,
    /// What the datagram protocols' UDP endpoints count, all workers together.
    pub udp: UdpEndpoints,
    /// The UDP ingests (`[[ingest]]`) and what each counted.
    pub ingests: ingest::Ingests,
    /// Set by [`Ops::request_drain`], for the process's main thread.
    drain: tokio::sync::Notify,
}

/// The counters of each datagram protocol's endpoints (RTSP's RTP and RTCP together).
#[derive(Debug, Default)]
pub struct UdpEndpoints {
    pub srt: Arc<crate::io::endpoint::Counters>,
    pub webrtc: Arc<crate::io::endpoint::Counters>,
    pub rtsp: Arc<crate::io::endpoint::Counters>,
}

impl UdpEndpoints {
    /// Each protocol's counters, by its name.
    pub fn all(&self) -> [(&'static str, &crate::io::endpoint::Counters); 3] {
        [
            ("srt", &self.srt),
            ("webrtc", &self.webrtc),
            ("rtsp", &self.rtsp),
        ]
    }
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("workers", &self.workers.len())
            .field("started", &self.started)
            .finish()
    }
}

impl Ops {
    /// The line to `n` workers, and each worker's end of it.
    pub fn new(
        n: usize,
        certificate: Option<Arc<crate::io::tls::Certificate>>,
        auth: crate::auth::Auth,
        hub: Arc<crate::core::hub::Hub>,
    ) -> (Arc<Ops>, Vec<mpsc::UnboundedReceiver<Command>>) {
        let (tx, rx): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::unbounded_channel()).unzip();
        let ops = Ops {
            workers: tx,
            certificate,
            auth: Arc::new(arc_swap::ArcSwap::from_pointee(auth)),
            hub,
            source: std::sync::OnceLock::new(),
            first_frame: Family::new_with_constructor(|| Histogram::new(FIRST_FRAME_BUCKETS)),
            started: SystemTime::now(),
            started_at: Instant::now(),
            udp: UdpEndpoints::default(),
            ingests: ingest::Ingests::default(),
            drain: tokio::sync::Notify::new(),
        };
        (Arc::new(ops), rx)
    }

    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Worker `n`'s time-to-first-frame histogram.
    pub fn first_frame_of(&self, n: usize) -> Histogram {
        self.first_frame
            .get_or_create(&vec![("worker", n.to_string())])
            .clone()
    }

    /// Where a reload reads the configuration again (the file and flags the server
    /// started with); without one a reload takes only new certificate files.
    pub fn set_source(&self, source: ConfigSource) {
        let _ = self.source.set(source);
    }

    /// Reloads the HTTPS certificate from its files (connections keep theirs; new
    /// handshakes get the new one) and the authorization settings (`[auth]`,
    /// `[[users]]`, the apps' auth keys, `api.token`: sessions that are in keep going,
    /// the next requests are judged by the new ones), and the admission limits
    /// (`max_connections`, `max_connections_per_ip`, `max_streams`,
    /// `max_publishers_per_ip`, `max_udp_sessions`: what is in keeps its place), and
    /// what new streams get (their policy, HLS and recording, from `[hls]`, `[players]`,
    /// `[publishers]`, `[record]` and the apps: live streams keep theirs). All or nothing: a setting that
    /// does not load changes nothing. Returns what was reloaded, and the settings that
    /// changed in the file but take a restart.
    pub fn reload(&self, running: &crate::config::Config) -> Result<Reloaded, ReloadError> {
        let fresh = self.source.get().map(|load| load()).transpose()?;
        let config = fresh.as_ref().unwrap_or(running);
        let auth = fresh
            .as_ref()
            .map(|c| crate::auth::Auth::new(&c.auth_config()))
            .transpose()?;
        let mut done = Vec::new();
        if let Some(c) = &self.certificate {
            c.reload(&config.http.cert_source())?;
            done.push("tls_certificate");
        }
        if let Some(auth) = auth {
            let old = self.auth.load_full();
            self.auth.store(Arc::new(old.reloaded(auth)));
            done.push("auth");
        }
        let recording = self.hub.attached::<crate::record::Recorder>();
        if let Some(fresh) = &fresh {
            self.hub.limits.set(fresh.limit_settings());
            done.push("limits");
            // What each new stream gets; streams that are live keep theirs.
            let apps = Arc::new(fresh.apps());
            self.hub.config.policy.set(&apps.policies());
            if let Some(hls) = self.hub.attached::<crate::hls::HlsTaps>() {
                hls.settings.set(&apps.hls());
            }
            if let Some(recorder) = recording {
                recorder.records().set(&fresh.recorded());
                recorder.retention().store(Arc::new(fresh.retention()));
            }
            done.push("new_streams");
        }
        let restart = fresh
            .as_ref()
            .map_or_else(Vec::new, |f| needs_restart(running, f, recording.is_some()));
        if !restart.is_empty() {
            tracing::warn!(
                ?restart,
                "reload: these settings changed and take a restart"
            );
        }
        Ok(Reloaded { done, restart })
    }

    /// Sends every worker the command `make` builds around its reply channel, all at
    /// once, then collects the answers in worker order (a worker that is gone is left
    /// out).
    async fn ask<T>(&self, make: impl Fn(oneshot::Sender<T>) -> Command) -> Vec<T> {
        let asks: Vec<_> = self
            .workers
            .iter()
            .filter_map(|w| {
                let (tx, rx) = oneshot::channel();
                w.send(make(tx)).ok().map(|()| rx)
            })
            .collect();
        let mut out = Vec::with_capacity(asks.len());
        for rx in asks {
            if let Ok(answer) = rx.await {
                out.push(answer);
            }
        }
        out
    }

    /// Every worker's snapshot, in worker order.
    pub async fn snapshots(&self) -> Vec<Snapshot> {
        self.ask(Command::Snapshot).await
    }

    /// Kicks connection `id`; whether a worker had it.
    pub async fn kick(&self, id: u64) -> bool {
        self.ask(|tx| Command::Kick(id, tx)).await.contains(&true)
    }

    /// Starts a drain (the API's): admissions stop now, and the main thread, woken
    /// by [`Ops::drain_requested`], waits for the connections to end, then stops.
    pub fn request_drain(&self) {
        if !self.hub.limits.draining() {
            tracing::info!("draining: no new publishers or players");
        }
        self.hub.limits.drain();
        self.drain.notify_one();
    }

    /// Returns once a drain was requested (since the start, or since the last return).
    pub async fn drain_requested(&self) {
        self.drain.notified().await;
    }

    /// Kicks every publisher of `key`; how many there were.
    pub async fn kick_publishers(&self, key: &str) -> usize {
        let key: Arc<str> = key.into();
        self.ask(|tx| Command::KickPublishers(key.clone(), tx))
            .await
            .iter()
            .sum()
    }

    /// Stream `key` went to another node of the cluster: one worker makes its viewers
    /// here follow it (see [`crate::relay::Relays::follow`]).
    pub fn follow(&self, key: &str) {
        let key: Arc<str> = key.into();
        let _ = self
            .workers
            .iter()
            .any(|w| w.send(Command::Follow(key.clone())).is_ok());
    }
}

/// How far back a worker's `busy` fraction looks.
pub const LOAD_WINDOW: Duration = Duration::from_secs(1);

/// A worker's CPU use, sampled once per [`LOAD_WINDOW`] by its own task.
#[derive(Debug, Default)]
pub struct Load {
    busy: Cell<f64>,
}

impl Load {
    /// Samples the current thread's CPU time every [`LOAD_WINDOW`] (a local task).
    pub fn start() -> Rc<Load> {
        let load = Rc::new(Load::default());
        tokio::task::spawn_local({
            let load = load.clone();
            async move {
                let mut tick = tokio::time::interval(LOAD_WINDOW);
                let mut last = (Instant::now(), thread_cpu());
                loop {
                    tick.tick().await;
                    let now = (Instant::now(), thread_cpu());
                    let wall = now.0.duration_since(last.0).as_secs_f64();
                    if wall > 0.0 {
                        load.busy.set(((now.1 - last.1) / wall).clamp(0.0, 1.0));
                    }
                    last = now;
                }
            }
        });
        load
    }

    pub fn busy(&self) -> f64 {
        self.busy.get()
    }
}

/// CPU seconds the calling thread has run.
pub fn thread_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Kicks connection `id` once `stream` has had no players and no HLS viewers for
/// `after`.
pub async fn disconnect_without_viewers(
    stream: Arc<crate::core::hub::Stream>,
    clients: Rc<Clients>,
    id: u64,
    after: Duration,
) {
    let mut watched = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1).min(after));
    loop {
        tick.tick().await;
        let viewers = stream.viewers();
        let now = tokio::time::Instant::now();
        if viewers > 0 {
            watched = now;
        } else if now.duration_since(watched) >= after {
            tracing::info!(stream = %stream.key, "no viewers for {after:?}: disconnecting the publisher");
            clients.kick(id);
            return;
        }
    }
}

/// Answers the commands sent to this worker until the server stops.
pub async fn serve_commands(
    mut rx: mpsc::UnboundedReceiver<Command>,
    worker: usize,
    clients: Rc<Clients>,
    load: Rc<Load>,
    delay: Rc<crate::delay::DelayProbe>,
    relays: Option<Arc<crate::relay::Relays>>,
) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Command::Snapshot(reply) => {
                let delay = delay.total();
                let _ = reply.send(Snapshot {
                    worker: WorkerInfo {
                        worker,
                        busy: load.busy(),
                        cpu_seconds: thread_cpu(),
                        worst_delay_ms: delay.worst.as_secs_f64() * 1e3,
                        late_ticks: delay.late,
                        connections: clients.len(),
                    },
                    clients: clients.snapshot(worker),
                    ended: clients.ended(),
                });
            }
            Command::Kick(id, reply) => {
                let _ = reply.send(clients.kick(id));
            }
            Command::KickPublishers(key, reply) => {
                let _ = reply.send(clients.kick_publishers(&key));
            }
            Command::Follow(key) => {
                if let Some(relays) = &relays {
                    tokio::task::spawn_local(relays.clone().follow(key));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_says_which_changed_settings_take_a_restart() {
        use crate::config::{AppConfig, Config};
        let mut running = Config::default();
        running.apps.push(AppConfig {
            name: "live".into(),
            ..AppConfig::default()
        });
        let mut fresh = running.clone();
        fresh.limits.max_streams = 7;
        fresh.auth.signing_key = "a new key of sixteen bytes".into();
        fresh.apps[0].auth_publish = Some(true);
        fresh.apps[0].hls = Some(false);
        fresh.hls.segment_ms = 1000;
        fresh.apps.push(AppConfig {
            name: "tv".into(),
            merge_ms: Some(0),
            record: Some(true),
            keep_days: Some(3),
            ..AppConfig::default()
        });
        fresh.record.keep_bytes = 1 << 30;
        // Limits, auth, what new streams get and an app entry's keys of those are
        // reloaded; recording and retention too, while the recorder runs.
        assert_eq!(needs_restart(&running, &fresh, true), Vec::<String>::new());
        assert_eq!(
            needs_restart(&running, &fresh, false),
            ["apps", "record.keep_bytes"]
        );
        fresh.rtmp.chunk_size = 8192;
        fresh.apps[0].origins = Some(vec!["rtmp://origin/".into()]);
        fresh.record.streams = vec!["live/*".into()];
        assert_eq!(
            needs_restart(&running, &fresh, true),
            ["apps", "rtmp.chunk_size"]
        );
        assert_eq!(
            needs_restart(&running, &fresh, false),
            [
                "apps",
                "record.keep_bytes",
                "record.streams",
                "rtmp.chunk_size"
            ]
        );
    }

    #[test]
    fn a_client_is_listed_until_its_guard_drops() {
        let clients = Rc::new(Clients::default());
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let a = clients.add(1, "rtmp", peer);
        let b = clients.add(2, "http", peer);
        a.publishing("live/x");
        a.count_in(10);
        let list = clients.snapshot(0);
        assert_eq!(list.len(), 2);
        let one = list.iter().find(|c| c.id == 1).unwrap();
        assert_eq!(
            (one.role, one.stream.as_deref(), one.bytes_in),
            (Role::Publish, Some("live/x"), 10)
        );
        assert!(clients.kick(2));
        assert!(!clients.kick(3));
        assert_eq!(clients.kick_publishers("live/x"), 1);
        assert_eq!(clients.kick_publishers("live/y"), 0);
        drop(b);
        assert_eq!(clients.len(), 1);
        drop(a);
        assert_eq!(clients.len(), 0);
    }
}
