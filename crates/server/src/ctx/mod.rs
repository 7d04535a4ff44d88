//! What every connection of one worker can reach: the shared configuration and hub,
//! the worker's fan-out and connections, the files of the media root, and the one
//! admission of publishers and players ([`admit`]). Protocols keep their own
//! per-worker state beside it (`http::Worker`, `rtsp::Worker`), so this holds nothing
//! of any one protocol. Its parts are reached through methods, so what a protocol
//! takes from it is plain to see.

pub mod admit;

use crate::config::Config;
use crate::core::fanout::Fanout;
use crate::core::hub::Hub;
use crate::core::limits::Admission;
use crate::io::filemap::FileMaps;
use crate::ops::{Clients, Ops};
use crate::relay::Relays;
use crate::vod::Vods;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// What a worker runs for each connection a listener accepts (a protocol's entry).
/// The connection holds its [`Admission`] (its place within the limits) until it ends.
pub type Accept = Rc<dyn Fn(tokio::net::TcpStream, std::net::SocketAddr, Admission)>;

/// One worker's view of the server.
#[derive(Debug)]
pub struct Ctx {
    config: Arc<Config>,
    hub: Arc<Hub>,
    fanout: Rc<Fanout>,
    worker: usize,
    files: Arc<FileMaps>,
    vods: Arc<Vods>,
    clients: Rc<Clients>,
    ops: Arc<Ops>,
    /// See [`Ctx::read_buf`].
    read_buf: RefCell<Box<[u8]>>,
    relays: Option<Arc<Relays>>,
}

/// What a worker's [`Ctx`] is made of.
#[derive(Debug)]
pub struct Parts {
    pub worker: usize,
    pub config: Arc<Config>,
    pub hub: Arc<Hub>,
    pub fanout: Rc<Fanout>,
    pub files: Arc<FileMaps>,
    pub vods: Arc<Vods>,
    pub clients: Rc<Clients>,
    pub ops: Arc<Ops>,
    pub relays: Option<Arc<Relays>>,
    /// See [`Ctx::read_buf`].
    pub read_buf: Box<[u8]>,
}

impl Ctx {
    pub fn new(parts: Parts) -> Ctx {
        let Parts {
            worker,
            config,
            hub,
            fanout,
            files,
            vods,
            clients,
            ops,
            relays,
            read_buf,
        } = parts;
        Ctx {
            config,
            hub,
            fanout,
            worker,
            files,
            vods,
            clients,
            ops,
            read_buf: RefCell::new(read_buf),
            relays,
        }
    }

    /// The configuration the server started with.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Every live stream, shared by every worker.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// This worker's players.
    pub fn fanout(&self) -> &Rc<Fanout> {
        &self.fanout
    }

    /// This worker's index.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Mappings of media-root files, shared by every worker.
    pub fn files(&self) -> &Arc<FileMaps> {
        &self.files
    }

    /// Files played on demand, shared by every worker.
    pub fn vods(&self) -> &Arc<Vods> {
        &self.vods
    }

    /// This worker's connections (for the API and its commands).
    pub fn clients(&self) -> &Rc<Clients> {
        &self.clients
    }

    /// The line to every worker, and the server's start.
    pub fn ops(&self) -> &Arc<Ops> {
        &self.ops
    }

    /// Who may publish and play, shared by every worker and protocol; a reload swaps it.
    pub fn auth(&self) -> &Arc<arc_swap::ArcSwap<crate::auth::Auth>> {
        &self.ops.auth
    }

    /// Where this worker's connections read into, one at a time (never held across an
    /// await): see `driver::READ_CHUNK`.
    pub fn read_buf(&self) -> &RefCell<Box<[u8]>> {
        &self.read_buf
    }

    /// Pulls from origins and pushes to targets, when relays are on.
    pub fn relays(&self) -> Option<&Arc<Relays>> {
        self.relays.as_ref()
    }
}
