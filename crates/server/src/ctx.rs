//! What every connection of one worker can reach: the shared configuration and hub,
//! the worker's fan-out, and the files of the media root. Protocols keep their own
//! per-worker state beside it (`http::Worker`, `rtsp::Worker`), so this holds nothing
//! of any one protocol.

use crate::auth::{Denial, Grant, Request};
use crate::config::Config;
use crate::core::fanout::Fanout;
use crate::core::hub::{Hub, PublishError, Stream};
use crate::core::ingest::Publisher;
use crate::core::limits::Admission;
use crate::io::filemap::FileMaps;
use crate::vod::{VodError, VodPlay, Vods};
use sluice_media::Timestamp;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// What a worker runs for each connection a listener accepts (a protocol's entry).
/// The connection holds its [`Admission`] (its place within the limits) until it ends.
pub type Accept = Rc<dyn Fn(tokio::net::TcpStream, std::net::SocketAddr, Admission)>;

/// One worker's view of the server.
#[derive(Debug)]
pub struct Ctx {
    pub config: Arc<Config>,
    pub hub: Arc<Hub>,
    pub fanout: Rc<Fanout>,
    pub worker: usize,
    /// Mappings of media-root files, shared by every worker.
    pub files: Arc<FileMaps>,
    /// Files played on demand, shared by every worker.
    pub vods: Arc<Vods>,
    /// This worker's connections (for the API and its commands).
    pub clients: Rc<crate::ops::Clients>,
    /// The line to every worker, and the server's start.
    pub ops: Arc<crate::ops::Ops>,
    /// Who may publish and play, shared by every worker and protocol; a reload swaps it.
    pub auth: Arc<arc_swap::ArcSwap<crate::auth::Auth>>,
    /// Where this worker's connections read into, one at a time (never held across an
    /// await): see `driver::READ_CHUNK`.
    pub read_buf: RefCell<Box<[u8]>>,
    /// Pulls from origins, when this server is an edge.
    pub relays: Option<Arc<crate::relay::Relays>>,
}

/// How long a publisher taking a stream over waits for the one it displaces to go.
const TAKEOVER_WAIT: Duration = Duration::from_secs(3);

impl Ctx {
    /// Authorizes `req`; a denial is logged with its reason (and counted by `Auth`).
    pub async fn authorize(&self, req: &Request<'_>) -> Result<Grant, Denial> {
        let auth = self.auth.load_full();
        let result = auth.authorize(req).await;
        let Request {
            action,
            path,
            protocol,
            peer,
            credentials,
            ..
        } = *req;
        if let Err(denial) = result {
            tracing::info!(
                action = action.name(),
                %path,
                protocol,
                %peer,
                user = credentials.user.as_deref().unwrap_or(""),
                reason = denial.reason(),
                "denied"
            );
        }
        result
    }

    /// Makes connection `id` of this worker the publisher of `key`. A stream that has
    /// one refuses it, unless its app lets a second publisher take over: then the first
    /// is disconnected (on whichever worker it is) and this one waits for it to let go.
    /// When the app says so, the publisher is disconnected after a time without viewers.
    /// An address publishing `limits.max_publishers_per_ip` streams already is refused.
    pub async fn publish(
        &self,
        key: &str,
        id: u64,
        peer: std::net::IpAddr,
    ) -> Result<Publisher, PublishError> {
        crate::ops::inject_panic(key);
        let slot = self
            .hub
            .limits
            .publisher(peer)
            .map_err(PublishError::Limit)?;
        let settings = self.hub.config.policy.of(key);
        let mut publisher = Publisher::new(&self.hub, key, id);
        if settings.takeover && matches!(publisher, Err(PublishError::InUse(_))) {
            let kicked = self.ops.kick_publishers(key).await;
            tracing::info!(stream = %key, kicked, "a second publisher takes the stream over");
            let deadline = tokio::time::Instant::now() + TAKEOVER_WAIT;
            while matches!(publisher, Err(PublishError::InUse(_)))
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
                publisher = Publisher::new(&self.hub, key, id);
            }
        }
        let mut publisher = publisher?;
        publisher.hold(slot);
        if let Some(relays) = &self.relays {
            relays.on_publish(&publisher.stream);
        }
        if let Some(after) = settings.no_viewers {
            let task = tokio::task::spawn_local(crate::ops::disconnect_without_viewers(
                publisher.stream.clone(),
                self.clients.clone(),
                id,
                after,
            ));
            publisher.watch(task.abort_handle());
        }
        Ok(publisher)
    }

    /// Opens `path` below the media root and starts playing it from `from` (90 kHz).
    pub async fn open_play(
        &self,
        path: &str,
        id: u64,
        from: Timestamp,
    ) -> Result<VodPlay, VodError> {
        let root = Path::new(&self.config.media_root);
        let file = self.vods.open(&self.files, root, path).await?;
        tracing::info!(
            file = %path,
            from,
            open = self.vods.open_files(),
            mapped = self.files.mapped(),
            "vod: play"
        );
        Ok(VodPlay::start(file, &self.hub.config, id, from))
    }

    /// The stream a player of `key` gets: the file `file` names (played from its start,
    /// kept going by the returned [`VodPlay`]), or else the live stream `key`, waiting up
    /// to `players.wait_ms` for it. `None` when neither is there.
    pub async fn stream_or_file(
        &self,
        key: &str,
        file: Option<&str>,
        id: u64,
    ) -> Option<(Arc<Stream>, Option<VodPlay>)> {
        match file {
            Some(path) => match self.open_play(path, id, 0).await {
                Ok(play) => Some((play.stream.clone(), Some(play))),
                Err(e) => {
                    tracing::info!(file = %path, "vod: {e}");
                    None
                }
            },
            None => self.find_live(key).await.map(|s| (s, None)),
        }
    }

    /// The live stream `key`, waiting up to `players.wait_ms` for its publisher; on
    /// an edge, a stream not published here is pulled from an origin, and waited for
    /// as long as an origin may take to start sending it.
    pub async fn find_live(&self, key: &str) -> Option<Arc<Stream>> {
        let wait = Duration::from_millis(self.config.players.wait_ms);
        let Some(relays) = self.relays.as_ref().filter(|r| r.ensure(key)) else {
            return self.hub.find_or_wait(key, wait).await;
        };
        // A pull that ends without the stream (no origin has it) ends the wait too.
        let deadline = tokio::time::Instant::now() + wait.max(relays.config.connect_timeout);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let step = left.min(Duration::from_millis(100));
            if let Some(s) = self.hub.find_or_wait(key, step).await {
                return Some(s);
            }
            if left.is_zero() || relays.pull_of(key).is_none() {
                return self.hub.find(key);
            }
        }
    }

    /// Whether `key` (`vod/<path>` for a file) can be played now.
    pub async fn exists(&self, key: &str) -> bool {
        match key.strip_prefix("vod/") {
            Some(path) => {
                let root = Path::new(&self.config.media_root);
                self.vods.open(&self.files, root, path).await.is_ok()
            }
            // An edge pulls what it does not have, and says yes once the pull delivers.
            None => {
                self.hub.find(key).is_some()
                    || (self.relays.as_ref().is_some_and(|r| r.pulls_here(key))
                        && self.find_live(key).await.is_some())
            }
        }
    }
}
