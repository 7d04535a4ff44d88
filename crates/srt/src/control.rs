//! Control packets this side writes, through srt-runtime's codecs, and the round-trip
//! estimate both directions share.

use srt_runtime::packet::{
    AckAckPacket, AckCif, AckPacket, ControlPacket, DropReqPacket, KeepAlivePacket, LossListEntry,
    NakPacket, ShutdownPacket, UserDefinedPacket,
};
use std::time::Duration;

/// `SRT_CMD_KMREQ` and `SRT_CMD_KMRSP`: key material in a user-defined control packet.
pub const KMREQ: u16 = 3;
pub const KMRSP: u16 = 4;

fn bytes(packet: &ControlPacket<'_>) -> Vec<u8> {
    let mut buf = vec![0; packet.serialized_len()];
    match packet.serialize_into(&mut buf) {
        Ok(n) => {
            buf.truncate(n);
            buf
        }
        // Only fields out of range fail, and we build none.
        Err(_) => Vec::new(),
    }
}

pub fn keepalive(dest: u32, ts: u32) -> Vec<u8> {
    bytes(&ControlPacket::KeepAlive(KeepAlivePacket {
        timestamp: ts,
        dest_socket_id: dest,
        libsrt_pad: true,
    }))
}

pub fn shutdown(dest: u32, ts: u32) -> Vec<u8> {
    bytes(&ControlPacket::Shutdown(ShutdownPacket {
        timestamp: ts,
        dest_socket_id: dest,
        libsrt_pad: true,
    }))
}

pub fn ackack(dest: u32, ts: u32, ack_number: u32) -> Vec<u8> {
    bytes(&ControlPacket::AckAck(AckAckPacket {
        ack_number,
        timestamp: ts,
        dest_socket_id: dest,
        libsrt_pad: true,
    }))
}

pub fn ack(dest: u32, ts: u32, ack_number: u32, cif: AckCif) -> Vec<u8> {
    bytes(&ControlPacket::Ack(AckPacket {
        ack_number,
        timestamp: ts,
        dest_socket_id: dest,
        cif,
    }))
}

/// NAKs for `losses`, split so that each fits one datagram.
pub fn naks(dest: u32, ts: u32, losses: &[LossListEntry]) -> Vec<Vec<u8>> {
    // 1500 - IP/UDP (28) - SRT header (16), in 4-byte words.
    const MAX_WORDS: usize = (1500 - 28 - 16) / 4;
    let mut out = Vec::new();
    let mut words = 0;
    let mut start = 0;
    for (i, e) in losses.iter().enumerate() {
        let w = if matches!(e, LossListEntry::Single(_)) {
            1
        } else {
            2
        };
        if words + w > MAX_WORDS {
            out.push(nak(dest, ts, losses.get(start..i).unwrap_or_default()));
            start = i;
            words = 0;
        }
        words += w;
    }
    if start < losses.len() {
        out.push(nak(dest, ts, losses.get(start..).unwrap_or_default()));
    }
    out
}

fn nak(dest: u32, ts: u32, losses: &[LossListEntry]) -> Vec<u8> {
    let Ok(raw) = srt_runtime::packet::nak::build_loss_list(losses) else {
        return Vec::new();
    };
    bytes(&ControlPacket::Nak(NakPacket {
        timestamp: ts,
        dest_socket_id: dest,
        raw_loss_list: &raw,
    }))
}

pub fn dropreq(dest: u32, ts: u32, first: u32, last: u32) -> Vec<u8> {
    bytes(&ControlPacket::DropReq(DropReqPacket {
        message_number: 0,
        timestamp: ts,
        dest_socket_id: dest,
        first_seq: first,
        last_seq: last,
    }))
}

/// A key material answer (`KMRSP`) echoing `cif`.
pub fn kmrsp(dest: u32, ts: u32, cif: &[u8]) -> Vec<u8> {
    bytes(&ControlPacket::UserDefined(UserDefinedPacket {
        control_type: srt_runtime::packet::control::CONTROL_TYPE_USER_DEFINED,
        subtype: KMRSP,
        type_specific_info: 0,
        timestamp: ts,
        dest_socket_id: dest,
        cif,
    }))
}

/// Smoothed round-trip time and its variation (RFC 6298's weights, as SRT uses).
#[derive(Debug, Clone, Copy)]
pub struct Rtt {
    pub rtt: Duration,
    pub var: Duration,
}

impl Default for Rtt {
    /// SRT's starting values: 100 ms and 50 ms.
    fn default() -> Self {
        Rtt {
            rtt: Duration::from_millis(100),
            var: Duration::from_millis(50),
        }
    }
}

impl Rtt {
    pub fn sample(&mut self, sample: Duration) {
        let diff = self.rtt.abs_diff(sample);
        self.var = (self.var * 3 + diff) / 4;
        self.rtt = (self.rtt * 7 + sample) / 8;
    }

    /// How long a loss report waits before it is repeated: SRT's `RTT + 4 RTTVar`,
    /// never under 20 ms.
    pub fn nak_interval(&self) -> Duration {
        (self.rtt + self.var * 4).max(Duration::from_millis(20))
    }

    pub fn us(d: Duration) -> u32 {
        u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
    }
}
