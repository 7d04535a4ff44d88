//! A reader's place in a stream's packets: each player of the fan-out (in its worker's
//! mirror of the ring) and each push relay (in the ring itself) holds one.
//!
//! Why one type: a reader that starts, or falls behind and skips to the newest start
//! keyframe, must first get the decoder configurations that keyframe was made with.
//! A skip can jump past a new sequence header (a resolution change), and a decoder
//! fed new frames with the old configuration shows garbage. That rule is written here
//! once, not in each reader. (The replays that start a form from the ring,
//! `Stream::want_form` and `catch_up`, read it once under the stream's lock
//! and never lag: they hold no cursor.)
//!
//! # Invariants
//! - A cursor is moved to a start keyframe only by [`Cursor::jump`], which hands out
//!   first the metadata and configurations of the stream it was not sent yet.
//! - The configurations it was sent are noted whether they went out at a jump or in
//!   line with the media ([`Cursor::advance`]), so a jump resends only what changed.
//! - Nothing is allocated per packet: a cursor is a position and three pointers.

use crate::core::packet::{Packet, Payload};
use crate::core::ring::Ring;
use sluice_media::MediaKind;
use std::collections::VecDeque;
use std::sync::Arc;

/// Where a reader is, and which configurations it was last sent.
#[derive(Debug, Default)]
pub struct Cursor {
    /// The next packet to read; `None` until the reader is placed at a start keyframe.
    pos: Option<u64>,
    /// The metadata and decoder configurations last sent, by [`config_slot`].
    sent: [Option<Arc<Packet>>; 4],
}

/// What [`Cursor::read`] did before reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// No start keyframe yet: nothing was read.
    Waiting,
    /// A new reader was placed at the start keyframe.
    Started,
    /// The reader had fallen out of the ring and was moved to the start keyframe.
    Skipped,
    /// It read on from where it was.
    Stayed,
}

impl Cursor {
    /// The next packet to read, once placed.
    pub fn pos(&self) -> Option<u64> {
        self.pos
    }

    /// Whether it has been placed and the packets from its position on are gone.
    pub fn lagged_out(&self, first: u64) -> bool {
        self.pos.is_some_and(|p| p < first)
    }

    /// Moves to `to` (a start keyframe, or where a player asked to start), after
    /// handing to `send` each of `configs` (the stream's metadata and decoder
    /// configurations now) that it was not sent yet.
    pub fn jump<'a>(
        &mut self,
        to: u64,
        configs: impl IntoIterator<Item = &'a Arc<Packet>>,
        mut send: impl FnMut(&Arc<Packet>),
    ) {
        for config in configs {
            let Some(slot) = config_slot(config) else {
                continue;
            };
            if self.sent[slot]
                .as_ref()
                .is_some_and(|sent| Arc::ptr_eq(sent, config))
            {
                continue;
            }
            send(config);
            self.sent[slot] = Some(config.clone());
        }
        self.pos = Some(to);
    }

    /// Whether `config`, a decoder configuration, differs from the one of its kind the
    /// reader was sent last (by value: a publisher that comes back sends the same one
    /// again in a new packet); false for anything else.
    pub fn changes(&self, config: &Packet) -> bool {
        let (Some(slot), Payload::Config(track)) = (config_slot(config), &config.payload) else {
            return false;
        };
        match self.sent[slot].as_deref().map(|p| &p.payload) {
            Some(Payload::Config(sent)) => sent != track,
            _ => true,
        }
    }

    /// `packet`, the one at the cursor, went out: the cursor moves past it, noting it
    /// when it is a configuration.
    pub fn advance(&mut self, packet: &Arc<Packet>) {
        if let Some(slot) = config_slot(packet) {
            self.sent[slot] = Some(packet.clone());
        }
        if let Some(pos) = &mut self.pos {
            *pos += 1;
        }
    }

    /// Appends to `out` what the reader gets next from `ring`, whose stream's metadata
    /// and configurations are `configs`: a new reader starts at the start keyframe, one
    /// that fell out of the ring skips to it (or, with none kept, to the newest
    /// packet), each after the configurations it lacks; then the packets from there on.
    pub fn read<'a>(
        &mut self,
        ring: &Ring,
        configs: impl IntoIterator<Item = &'a Arc<Packet>>,
        out: &mut VecDeque<Arc<Packet>>,
    ) -> Moved {
        let moved = if self.pos.is_none() {
            let Some(start) = ring.start() else {
                return Moved::Waiting;
            };
            self.jump(start, configs, |p| out.push_back(p.clone()));
            Moved::Started
        } else if self.lagged_out(ring.first()) {
            let to = ring.start().unwrap_or(ring.next());
            self.jump(to, configs, |p| out.push_back(p.clone()));
            Moved::Skipped
        } else {
            Moved::Stayed
        };
        let Some(pos) = self.pos else {
            return moved;
        };
        let from = out.len();
        ring.copy_since(pos, out);
        for packet in out.range(from..) {
            self.advance(packet);
        }
        moved
    }
}

/// Which configuration `packet` replaces: metadata, video, audio or transcoded audio
/// configuration; `None` for media.
fn config_slot(packet: &Packet) -> Option<usize> {
    match &packet.payload {
        Payload::Media { .. } => None,
        // The stream's audio in the other codec (`core::transcode`), beside its own.
        Payload::Config(_) if packet.derived => Some(3),
        Payload::Metadata(_) => Some(0),
        Payload::Config(track) => match track.kind() {
            MediaKind::Video => Some(1),
            MediaKind::Audio => Some(2),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ring::RingLimits;
    use bytes::Bytes;
    use sluice_media::codec::AvcConfig;
    use sluice_media::{Frame, Track, TrackConfig};

    /// An H.264 configuration; `level` tells two apart.
    fn config(level: u8, ts: i64) -> Arc<Packet> {
        let sps = Bytes::from(vec![0x67, 0x42, 0xc0, level, 0xd9, 0x00, 0xa0, 0x47]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        let track = Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap(),
        ));
        Packet::new(Payload::Config(Arc::new(track)), ts, false)
    }

    fn frame(video: &Arc<Packet>, ts: i64, key: bool) -> Arc<Packet> {
        let Payload::Config(track) = &video.payload else {
            unreachable!()
        };
        let frame = Frame {
            kind: MediaKind::Video,
            dts: Frame::ticks_from_ms(ts),
            pts: Frame::ticks_from_ms(ts),
            keyframe: key,
            payload: Bytes::from(vec![0u8; 100]),
        };
        Packet::new(
            Payload::Media {
                frame,
                track: track.clone(),
            },
            ts,
            key,
        )
    }

    /// A stream as the hub keeps it: its ring and its current video configuration.
    struct Stream {
        ring: Ring,
        video: Option<Arc<Packet>>,
        ts: i64,
    }

    impl Stream {
        fn new() -> Stream {
            Stream {
                // 200 ms kept (at least one GOP).
                ring: Ring::new(RingLimits {
                    max_ms: 200,
                    max_bytes: 1 << 20,
                }),
                video: None,
                ts: 0,
            }
        }

        /// A new configuration, as the hub pushes one: in line, and current.
        fn configure(&mut self, level: u8) -> Arc<Packet> {
            let c = config(level, self.ts);
            self.ring.reset_start();
            self.ring.push(c.clone());
            self.video = Some(c.clone());
            c
        }

        /// `gops` GOPs of 5 frames, 40 ms apart.
        fn gops(&mut self, gops: usize) {
            let video = self.video.clone().unwrap();
            for i in 0..gops * 5 {
                self.ring.push(frame(&video, self.ts, i % 5 == 0));
                self.ts += 40;
            }
        }

        fn read(&self, cursor: &mut Cursor, out: &mut VecDeque<Arc<Packet>>) -> Moved {
            cursor.read(&self.ring, self.video.iter(), out)
        }
    }

    /// The configuration each video frame read was decoded with, in order, as a
    /// decoder sees it: the last configuration read before it.
    fn decoded_with(read: &VecDeque<Arc<Packet>>) -> Vec<(Option<Arc<Packet>>, Arc<Packet>)> {
        let mut current = None;
        let mut frames = Vec::new();
        for p in read {
            match &p.payload {
                Payload::Config(_) => current = Some(p.clone()),
                Payload::Media { .. } => frames.push((current.clone(), p.clone())),
                Payload::Metadata(_) => {}
            }
        }
        frames
    }

    #[test]
    fn a_slow_reader_gets_the_new_configuration_before_the_new_keyframe() {
        let mut stream = Stream::new();
        let first = stream.configure(1);
        stream.gops(2);
        let mut cursor = Cursor::default();
        let mut read = VecDeque::new();
        assert_eq!(stream.read(&mut cursor, &mut read), Moved::Started);
        assert!(Arc::ptr_eq(&read[0], &first), "configuration first");
        // The reader stalls while the resolution changes and the ring moves past
        // the new configuration's sequence header.
        let second = stream.configure(2);
        stream.gops(3);
        assert!(stream.ring.get(stream.ring.first()).unwrap().is_video());
        assert!(cursor.lagged_out(stream.ring.first()));
        let before = read.len();
        assert_eq!(stream.read(&mut cursor, &mut read), Moved::Skipped);
        assert!(Arc::ptr_eq(&read[before], &second), "{:?}", read[before]);
        assert!(read[before + 1].key);
        // Every frame read was made with the configuration read before it.
        for (config, frame) in decoded_with(&read) {
            let Payload::Media { track, .. } = &frame.payload else {
                unreachable!()
            };
            let Some(Payload::Config(with)) = config.as_ref().map(|c| &c.payload) else {
                panic!("a frame before any configuration")
            };
            assert!(
                Arc::ptr_eq(track, with),
                "a frame with the wrong configuration"
            );
        }
        // Reading on: nothing sent twice.
        stream.gops(1);
        let before = read.len();
        assert_eq!(stream.read(&mut cursor, &mut read), Moved::Stayed);
        assert_eq!(read.len() - before, 5);
        assert!(read.range(before..).all(|p| !p.is_config()));
    }

    #[test]
    fn a_skip_resends_only_what_changed() {
        let mut stream = Stream::new();
        stream.configure(1);
        stream.gops(1);
        let mut cursor = Cursor::default();
        let mut read = VecDeque::new();
        stream.read(&mut cursor, &mut read);
        // Behind the ring, the configuration unchanged: the skip sends none again.
        stream.gops(10);
        let before = read.len();
        assert_eq!(stream.read(&mut cursor, &mut read), Moved::Skipped);
        assert!(read[before].key, "{:?}", read[before]);
        assert!(read.range(before..).all(|p| !p.is_config()));
    }

    #[test]
    fn nothing_is_read_before_a_start_keyframe() {
        let mut stream = Stream::new();
        stream.configure(1);
        let mut cursor = Cursor::default();
        let mut read = VecDeque::new();
        assert_eq!(stream.read(&mut cursor, &mut read), Moved::Waiting);
        assert!(read.is_empty() && cursor.pos().is_none());
    }
}
