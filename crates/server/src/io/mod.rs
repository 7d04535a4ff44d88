//! I/O at the edges: the UDP endpoint every datagram protocol shares (`endpoint`), the
//! transport a player is written through (`sock`), TLS set-up, RTP/RTCP port pairs,
//! batched UDP sends, the sockets of UDP ingests (bound, joined to their multicast
//! group), the sockets of UDP outputs (TTL, interface), sealed in-memory files, shared mappings of media-root files and who reads
//! them, and the descriptor limit.

pub mod endpoint;
pub mod fd_limit;
pub mod filemap;
pub mod http_client;
pub mod ingest_socket;
pub mod listen;
pub mod memfile;
pub mod readers;
pub mod sock;
pub mod tls;
pub mod udp_out;
pub mod udp_pair;
pub mod udp_send;
