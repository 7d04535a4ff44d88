//! An RTSP/TCP player written one interleaved RTP packet per send call, as servers
//! without frame batching do. Only to measure what batching saves
//! (`[rtsp] batch = false`); players are written with one vectored write otherwise.

use crate::io::sock::{Ready, Transport};
use std::io::{self, IoSlice};
use tokio::net::TcpStream;

/// TCP, one `send` per interleaved packet.
#[derive(Debug)]
pub struct PerPacket(pub TcpStream);

impl Transport for PerPacket {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        write_per_packet(&self.0, bufs)
    }

    fn readable(&self) -> Ready<'_> {
        Box::pin(self.0.readable())
    }

    fn writable(&self) -> Ready<'_> {
        Box::pin(self.0.writable())
    }

    fn tcp(&self) -> Option<&TcpStream> {
        Some(&self.0)
    }
}

/// One `send` per interleaved RTP packet (and per other buffer), until one is cut short.
fn write_per_packet(s: &TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let mut total = 0;
    for buf in bufs {
        let mut rest: &[u8] = buf;
        while !rest.is_empty() {
            let len = match rest {
                [b'$', _, hi, lo, ..] => {
                    (4 + usize::from(u16::from_be_bytes([*hi, *lo]))).min(rest.len())
                }
                _ => rest.len(),
            };
            match s.try_write(&rest[..len]) {
                Ok(n) => {
                    total += n;
                    if n < len {
                        return Ok(total);
                    }
                    rest = &rest[len..];
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && total > 0 => return Ok(total),
                Err(e) => return Err(e),
            }
        }
    }
    Ok(total)
}
