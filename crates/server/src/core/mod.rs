//! The data path: streams in the hub, their rings of shared packets, and each worker's
//! fan-out to its players. No protocol lives here; protocols reach it through
//! [`ingest::Ingest`] (publishers) and [`fanout::Player`] (players).

pub mod cue;
pub mod cursor;
pub mod derive;
pub mod fanout;
pub mod format;
pub mod hub;
pub mod ingest;
pub mod limits;
pub mod packet;
pub mod play;
pub mod protocol;
pub mod ring;
pub mod tap;
