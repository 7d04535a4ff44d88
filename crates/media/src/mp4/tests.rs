//! Whole files built in the test: a tiny box writer, progressive tables of every kind,
//! fragments from our own fMP4 writer and by hand, and cut-off files.

use super::*;
use crate::codec::{nal_units, AacConfig, AvcConfig, OpusConfig};
use crate::fmp4::{self, InitTrack, TrackRun};
use crate::{Frame, MediaKind, TrackConfig};
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

const AVCC: &[u8] = include_bytes!("../../tests/data/x264_720p.avcC");
const HVCC: &[u8] = include_bytes!("../../tests/data/x265_1080p.hvcC");
/// AAC-LC 48 kHz stereo.
const ASC: &[u8] = &[0x11, 0x90];

// ---- box writer ----

fn bx(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut v = ((body.len() + 8) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(kind);
    v.extend_from_slice(body);
    v
}

fn full(kind: &[u8; 4], version: u8, flags: u32, body: &[u8]) -> Vec<u8> {
    let mut b = ((u32::from(version) << 24) | flags).to_be_bytes().to_vec();
    b.extend_from_slice(body);
    bx(kind, &b)
}

fn be32(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn visual_entry(kind: &[u8; 4], config: &[u8; 4], record: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 0, 0, 0, 0, 0, 1];
    b.extend_from_slice(&[0; 70]);
    b.extend(bx(config, record));
    bx(kind, &b)
}

fn audio_fields() -> Vec<u8> {
    let mut b = vec![0, 0, 0, 0, 0, 0, 0, 1];
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&[0, 2, 0, 16, 0, 0, 0, 0, 0xbb, 0x80, 0, 0]);
    b
}

fn mp4a_entry(asc: &[u8]) -> Vec<u8> {
    let n = asc.len() as u8;
    let mut es = vec![0x03, 23 + n, 0, 1, 0];
    es.extend_from_slice(&[0x04, 15 + n, 0x40, 0x15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    es.extend_from_slice(&[0x05, n]);
    es.extend_from_slice(asc);
    es.extend_from_slice(&[0x06, 1, 2]);
    bx(b"mp4a", &cat(&[&audio_fields(), &full(b"esds", 0, 0, &es)]))
}

fn opus_entry() -> Vec<u8> {
    let dops = [0, 2, 0x01, 0x38, 0, 0, 0xbb, 0x80, 0, 0, 0];
    bx(b"Opus", &cat(&[&audio_fields(), &bx(b"dOps", &dops)]))
}

/// One progressive track's boxes, before offsets are known.
#[derive(Clone, Default)]
struct Trak {
    id: u32,
    timescale: u32,
    entry: Vec<u8>,
    stts: Vec<(u32, u32)>,
    ctts: Option<(u8, Vec<(u32, i32)>)>,
    stss: Option<Vec<u32>>,
    sizes: Vec<u32>,
    /// Nonzero: `stsz` gives this size to `sizes.len()` samples, with no table.
    fixed_size: u32,
    /// (first_chunk, samples_per_chunk)
    stsc: Vec<(u32, u32)>,
    chunks: Vec<u64>,
    co64: bool,
    /// Version, then (segment_duration, media_time) entries.
    elst: Option<(u8, Vec<(u64, i64)>)>,
}

impl Trak {
    fn to_box(&self) -> Vec<u8> {
        let tkhd = full(b"tkhd", 0, 3, &cat(&[&[0; 8], &be32(&[self.id]), &[0; 68]]));
        let mdhd = full(
            b"mdhd",
            0,
            0,
            &cat(&[&[0; 8], &be32(&[self.timescale, 0]), &[0x55, 0xc4, 0, 0]]),
        );
        let stsd = full(b"stsd", 0, 0, &cat(&[&be32(&[1]), &self.entry]));
        let pairs = |v: &[(u32, u32)]| {
            let mut b = be32(&[v.len() as u32]);
            for &(a, c) in v {
                b.extend(be32(&[a, c]));
            }
            b
        };
        let mut stbl = cat(&[&stsd, &full(b"stts", 0, 0, &pairs(&self.stts))]);
        if let Some((version, entries)) = &self.ctts {
            let e: Vec<_> = entries.iter().map(|&(n, o)| (n, o as u32)).collect();
            stbl.extend(full(b"ctts", *version, 0, &pairs(&e)));
        }
        if let Some(stss) = &self.stss {
            stbl.extend(full(
                b"stss",
                0,
                0,
                &cat(&[&be32(&[stss.len() as u32]), &be32(stss)]),
            ));
        }
        let n = self.sizes.len() as u32;
        let sizes = if self.fixed_size != 0 {
            be32(&[self.fixed_size, n])
        } else {
            cat(&[&be32(&[0, n]), &be32(&self.sizes)])
        };
        stbl.extend(full(b"stsz", 0, 0, &sizes));
        let mut stsc = be32(&[self.stsc.len() as u32]);
        for &(first, n) in &self.stsc {
            stsc.extend(be32(&[first, n, 1]));
        }
        stbl.extend(full(b"stsc", 0, 0, &stsc));
        let mut co = be32(&[self.chunks.len() as u32]);
        for &c in &self.chunks {
            if self.co64 {
                co.extend(c.to_be_bytes());
            } else {
                co.extend(be32(&[c as u32]));
            }
        }
        stbl.extend(full(if self.co64 { b"co64" } else { b"stco" }, 0, 0, &co));
        let minf = bx(b"minf", &bx(b"stbl", &stbl));
        let mdia = bx(b"mdia", &cat(&[&mdhd, &minf]));
        let mut trak = cat(&[&tkhd]);
        if let Some((version, entries)) = &self.elst {
            let mut e = be32(&[entries.len() as u32]);
            for &(d, m) in entries {
                if *version == 1 {
                    e.extend(d.to_be_bytes());
                    e.extend(m.to_be_bytes());
                } else {
                    e.extend(be32(&[d as u32, m as i32 as u32]));
                }
                e.extend(be32(&[0x0001_0000]));
            }
            trak.extend(bx(b"edts", &full(b"elst", *version, 0, &e)));
        }
        trak.extend(mdia);
        bx(b"trak", &trak)
    }
}

fn moov(traks: &[&Trak], extra: &[u8]) -> Vec<u8> {
    let mvhd = full(b"mvhd", 0, 0, &cat(&[&[0; 8], &be32(&[1000, 0]), &[0; 80]]));
    let mut body = mvhd;
    for t in traks {
        body.extend(t.to_box());
    }
    body.extend_from_slice(extra);
    bx(b"moov", &body)
}

/// A video sample: one length-prefixed NAL unit of `len` bytes in all.
fn nal(len: usize, idr: bool, length_size: usize) -> Vec<u8> {
    let n = len - length_size;
    let mut v = (n as u32).to_be_bytes()[4 - length_size..].to_vec();
    v.push(if idr { 0x65 } else { 0x41 });
    v.extend((1..n).map(|i| i as u8));
    v
}

fn frames(movie: &Movie, file: &Bytes) -> Vec<(usize, Frame)> {
    let mut pos = Position::default();
    let mut out = Vec::new();
    while let Some((t, s)) = movie.next(&mut pos) {
        out.push((t, movie.frame(file, t, s).expect("frame")));
    }
    out
}

// ---- progressive ----

/// Video 25 fps at timescale 12800 with B-frames (ctts v0), stss, three stsc runs and
/// co64; AAC at 48 kHz; `mdat` with a 64-bit size, before `moov` or (`faststart`) after.
fn progressive_file(faststart: bool) -> (Vec<u8>, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let video: Vec<Vec<u8>> = (0..7).map(|i| nal(20 + i, i % 4 == 0, 4)).collect();
    let audio: Vec<Vec<u8>> = (0..5).map(|i| vec![0x21, i as u8, 3]).collect();
    let ftyp = bx(b"ftyp", b"isom\0\0\0\0isom");
    let traks = |mdat_start: u64| {
        // Chunks in file order: v[0..2] a[0..2] v[2..3] a[2..5] v[3..7].
        let mut data = Vec::new();
        let mut at = |samples: &[Vec<u8>]| {
            let off = mdat_start + data.len() as u64;
            for s in samples {
                data.extend_from_slice(s);
            }
            off
        };
        let v0 = at(&video[0..2]);
        let a0 = at(&audio[0..2]);
        let v1 = at(&video[2..3]);
        let a1 = at(&audio[2..5]);
        let v2 = at(&video[3..7]);
        let vt = Trak {
            id: 1,
            timescale: 12_800,
            entry: visual_entry(b"avc1", b"avcC", AVCC),
            stts: vec![(7, 512)],
            ctts: Some((0, vec![(1, 1024), (1, 2560), (2, 0), (1, 1024), (2, 512)])),
            stss: Some(vec![1, 5]),
            sizes: video.iter().map(|s| s.len() as u32).collect(),
            stsc: vec![(1, 2), (2, 1), (3, 4)],
            chunks: vec![v0, v1, v2],
            co64: true,
            elst: Some((0, vec![(280, 1024)])),
            ..Trak::default()
        };
        let at = Trak {
            id: 2,
            timescale: 48_000,
            entry: mp4a_entry(ASC),
            stts: vec![(4, 1024), (1, 512)],
            sizes: vec![3; 5],
            stsc: vec![(1, 2), (2, 3)],
            chunks: vec![a0, a1],
            ..Trak::default()
        };
        let mut mdat = be32(&[1]);
        mdat.extend_from_slice(b"mdat");
        mdat.extend((16 + data.len() as u64).to_be_bytes());
        mdat.extend(data);
        (moov(&[&vt, &at], &[]), mdat)
    };
    let file = if faststart {
        let moov_len = traks(0).0.len();
        let (moov, mdat) = traks((ftyp.len() + moov_len + 16) as u64);
        cat(&[&ftyp, &moov, &mdat])
    } else {
        let (moov, mdat) = traks(ftyp.len() as u64 + 16);
        cat(&[&ftyp, &mdat, &moov])
    };
    (file, video, audio)
}

#[test]
fn progressive_tables() {
    let (file, video, audio) = progressive_file(false);
    let faststart = parse_movie(&progressive_file(true).0).expect("parses");
    let m = parse_movie(&file).expect("parses");
    assert!(!m.fragmented);
    assert!(m.skipped.is_empty(), "{:?}", m.skipped);
    assert_eq!((m.video(), m.audio()), (Some(0), Some(1)));
    let v = &m.tracks[0];
    assert_eq!((v.track_id, v.timescale), (1, 12_800));
    assert!(matches!(v.track.config, TrackConfig::H264(_)));
    // 512 ticks of 12800 = 3600 at 90 kHz; the edit list starts at media time 1024.
    let dts: Vec<_> = v.samples.iter().map(|s| s.dts).collect();
    assert_eq!(dts, [-7200, -3600, 0, 3600, 7200, 10800, 14400]);
    let cts: Vec<_> = v.samples.iter().map(|s| s.cts).collect();
    assert_eq!(cts, [7200, 18000, 0, 0, 7200, 3600, 3600]);
    let keys: Vec<_> = v.samples.iter().map(|s| s.keyframe).collect();
    assert_eq!(keys, [true, false, false, false, true, false, false]);
    let a = &m.tracks[1];
    assert!(matches!(&a.track.config, TrackConfig::Aac(c) if c.sample_rate == 48_000));
    let dts: Vec<_> = a.samples.iter().map(|s| s.dts).collect();
    assert_eq!(dts, [0, 1920, 3840, 5760, 7680]);
    assert!(a.samples.iter().all(|s| s.keyframe && s.cts == 0));
    // Video ends at 7 * 3600 - 7200; audio at 4.5 frames of 1920.
    assert_eq!(m.duration, 18_000);
    for (f, p) in faststart.tracks.iter().zip(&m.tracks) {
        let shifted: Vec<_> = p.samples.iter().map(|s| (s.dts, s.size)).collect();
        assert_eq!(
            f.samples
                .iter()
                .map(|s| (s.dts, s.size))
                .collect::<Vec<_>>(),
            shifted
        );
    }

    let file = Bytes::from(file);
    let out = frames(&m, &file);
    let order: Vec<_> = out.iter().map(|(t, f)| (*t, f.dts)).collect();
    assert_eq!(
        order,
        [
            (0, -7200),
            (0, -3600),
            (0, 0),
            (1, 0),
            (1, 1920),
            (0, 3600),
            (1, 3840),
            (1, 5760),
            (0, 7200),
            (1, 7680),
            (0, 10800),
            (0, 14400)
        ]
    );
    let payloads: Vec<_> = out.iter().map(|(_, f)| f.payload.to_vec()).collect();
    let mut expected = Vec::new();
    let (mut vi, mut ai) = (0, 0);
    for (t, _) in &order {
        if *t == 0 {
            expected.push(video[vi].clone());
            vi += 1;
        } else {
            expected.push(audio[ai].clone());
            ai += 1;
        }
    }
    assert_eq!(payloads, expected);
    let first = &out[0].1;
    assert_eq!(
        (first.kind, first.pts, first.keyframe),
        (MediaKind::Video, 0, true)
    );
    // Zero-copy: the payload points into the file.
    let at = m.tracks[0].samples[0].offset as usize;
    assert_eq!(first.payload.as_ptr(), file[at..].as_ptr());
}

#[test]
fn faststart_stco_ctts_v1_and_empty_edit() {
    let video: Vec<Vec<u8>> = (0..4).map(|i| nal(16, i == 0, 4)).collect();
    let mut vt = Trak {
        id: 7,
        timescale: 90_000,
        entry: visual_entry(b"avc1", b"avcC", AVCC),
        stts: vec![(4, 3000)],
        // Version 1, negative offsets: the first picture presents at its decode time.
        ctts: Some((1, vec![(1, 0), (1, 6000), (2, -3000)])),
        sizes: vec![16; 4],
        stsc: vec![(1, 4)],
        chunks: vec![0],
        // 0.5 s empty edit (movie timescale 1000), then from media time 0.
        elst: Some((1, vec![(500, -1), (1000, 0)])),
        ..Trak::default()
    };
    let ftyp = bx(b"ftyp", b"isom\0\0\0\0");
    let moov_len = moov(&[&vt], &[]).len();
    vt.chunks = vec![(ftyp.len() + moov_len + 8) as u64];
    // The last box has size 0: to the end of the file.
    let mdat = cat(&[&[0, 0, 0, 0], b"mdat", &video.concat()]);
    let file = cat(&[&ftyp, &moov(&[&vt], &[]), &mdat]);
    let m = parse_movie(&file).expect("parses");
    assert_eq!((m.video(), m.audio()), (Some(0), None));
    let s = &m.tracks[0].samples;
    let t: Vec<_> = s.iter().map(|s| (s.dts, s.cts, s.keyframe)).collect();
    assert_eq!(
        t,
        [
            (45_000, 0, true),
            (48_000, 6000, true),
            (51_000, -3000, true),
            (54_000, -3000, true)
        ]
    );
    assert_eq!(m.duration, 57_000);
    let file = Bytes::from(file);
    assert_eq!(
        m.frame(&file, 0, 3).map(|f| f.payload.to_vec()),
        Ok(video[3].clone())
    );
}

#[test]
fn stz2_hevc_and_two_byte_lengths() {
    // hvcC with lengthSizeMinusOne 1: samples are rewritten with 4-byte lengths.
    let mut hvcc = HVCC.to_vec();
    hvcc[21] = (hvcc[21] & !3) | 1;
    let video: Vec<Vec<u8>> = vec![
        nal(10, true, 2),
        [nal(6, false, 2), nal(4, false, 2)].concat(),
    ];
    let mut vt = Trak {
        id: 1,
        timescale: 25,
        entry: visual_entry(b"hev1", b"hvcC", &hvcc),
        stts: vec![(2, 1)],
        stsc: vec![(1, 2)],
        chunks: vec![0],
        ..Trak::default()
    };
    // Replace stsz with an stz2 of 8-bit sizes.
    let stz2 = full(b"stz2", 0, 0, &[0, 0, 0, 8, 0, 0, 0, 2, 10, 10]);
    let ftyp = bx(b"ftyp", b"iso5\0\0\0\0");
    let build = |vt: &Trak| {
        let moov = moov(&[vt], &[]);
        let stsz = full(b"stsz", 0, 0, &be32(&[0, 0]));
        let at = moov
            .windows(stsz.len())
            .position(|w| w == stsz)
            .expect("stsz");
        let mut patched = moov[..at].to_vec();
        patched.extend_from_slice(&stz2);
        patched.extend_from_slice(&moov[at + stsz.len()..]);
        // Grow every enclosing box by the 6 extra bytes: moov, trak, mdia, minf, stbl.
        for kind in [b"moov", b"trak", b"mdia", b"minf", b"stbl"] {
            let k = patched.windows(4).position(|w| w == kind).expect("box") - 4;
            let size = u32::from_be_bytes(patched[k..k + 4].try_into().expect("4")) + 6;
            patched[k..k + 4].copy_from_slice(&size.to_be_bytes());
        }
        patched
    };
    vt.chunks = vec![(ftyp.len() + build(&vt).len() + 8) as u64];
    let file = cat(&[&ftyp, &build(&vt), &bx(b"mdat", &video.concat())]);
    let m = parse_movie(&file).expect("parses");
    let t = &m.tracks[0];
    assert!(matches!(&t.track.config, TrackConfig::H265(c) if c.nal_length_size == 2));
    assert_eq!(
        t.samples.iter().map(|s| s.dts).collect::<Vec<_>>(),
        [0, 3600]
    );
    let file = Bytes::from(file);
    let f = m.frame(&file, 0, 1).expect("frame");
    assert_eq!(
        &f.payload[..],
        &[0, 0, 0, 4, 0x41, 1, 2, 3, 0, 0, 0, 2, 0x41, 1]
    );
    let units: Vec<_> = nal_units(&f.payload, 4).collect();
    assert_eq!(units.len(), 2);
}

#[test]
fn skipped_tracks_and_no_playable_track() {
    let (file, ..) = progressive_file(false);
    let mut encv = visual_entry(b"encv", b"avcC", AVCC);
    let mut mp4v = visual_entry(b"mp4v", b"esds", &[0; 4]);
    let traks: Vec<Trak> = [&mut encv, &mut mp4v]
        .into_iter()
        .map(|e| Trak {
            id: 9,
            timescale: 1000,
            entry: e.clone(),
            ..Trak::default()
        })
        .collect();
    let bad = moov(&[&traks[0], &traks[1]], &[]);
    assert_eq!(
        parse_movie(&cat(&[&bx(b"ftyp", b""), &bad])),
        Err(Mp4Error::NoPlayableTrack {
            skipped: vec![
                "trak 1: codec encv not supported".into(),
                "trak 2: codec mp4v not supported".into()
            ]
        })
    );
    // A second audio track is noted; the first plays.
    let opus = Trak {
        id: 3,
        timescale: 48_000,
        entry: opus_entry(),
        ..Trak::default()
    };
    let moov_at = file.windows(4).position(|w| w == b"moov").expect("moov") - 4;
    let mut extra = file[..moov_at].to_vec();
    let old_moov = &file[moov_at..];
    let mut body = old_moov[8..].to_vec();
    body.extend(opus.to_box());
    extra.extend(bx(b"moov", &body));
    let m = parse_movie(&extra).expect("parses");
    assert_eq!(m.tracks.len(), 2);
    assert_eq!(m.skipped, ["trak 3: another audio track (track 2 plays)"]);
    assert_eq!(parse_movie(b"\0\0\0\x08ftyp"), Err(Mp4Error::NoMoov));
    assert_eq!(parse_movie(b""), Err(Mp4Error::NoMoov));
}

#[test]
fn opus_track_from_dops() {
    let mut at = Trak {
        id: 1,
        timescale: 48_000,
        entry: opus_entry(),
        stts: vec![(3, 960)],
        sizes: vec![5; 3],
        fixed_size: 5,
        stsc: vec![(1, 3)],
        chunks: vec![0],
        elst: Some((0, vec![(60, 312)])),
        ..Trak::default()
    };
    let ftyp = bx(b"ftyp", b"");
    at.chunks = vec![(ftyp.len() + moov(&[&at], &[]).len() + 8) as u64];
    let file = cat(&[&ftyp, &moov(&[&at], &[]), &bx(b"mdat", &[1; 15])]);
    let m = parse_movie(&file).expect("parses");
    assert_eq!((m.video(), m.audio()), (None, Some(0)));
    let TrackConfig::Opus(c) = &m.tracks[0].track.config else {
        panic!("not Opus")
    };
    assert_eq!(c, &OpusConfig::parse(c.head.clone()).expect("head"));
    assert_eq!(
        (c.channels, c.pre_skip, c.input_sample_rate),
        (2, 312, 48_000)
    );
    // 312 samples of pre-skip: -585 ticks. A fixed stsz size: 5 bytes each.
    let t: Vec<_> = m.tracks[0]
        .samples
        .iter()
        .map(|s| (s.dts, s.size))
        .collect();
    assert_eq!(t, [(-585, 5), (1215, 5), (3015, 5)]);
    let offsets: Vec<_> = m.tracks[0].samples.iter().map(|s| s.offset).collect();
    assert_eq!(offsets, [at.chunks[0], at.chunks[0] + 5, at.chunks[0] + 10]);
}

#[test]
fn cut_progressive_files() {
    // moov first, then mdat cut short: the samples wholly in the file stay, in order.
    let (file, ..) = progressive_file(true);
    let whole = parse_movie(&file).expect("parses");
    let moov_end = whole.tracks[0].samples[0].offset as usize - 16;
    for cut in 0..file.len() {
        let parsed = parse_movie(&file[..cut]);
        if cut < moov_end {
            assert!(parsed.is_err(), "{cut}");
            continue;
        }
        let m = parsed.expect("moov is whole");
        for (t, w) in m.tracks.iter().zip(&whole.tracks) {
            let inside = w
                .samples
                .iter()
                .take_while(|s| s.offset + u64::from(s.size) <= cut as u64)
                .count();
            assert_eq!(t.samples[..], w.samples[..inside], "{cut}");
        }
    }
    // moov last: a cut file has no index.
    let (file, ..) = progressive_file(false);
    for cut in 0..file.len() {
        assert!(parse_movie(&file[..cut]).is_err());
    }
}

// ---- fragmented ----

fn init_segment(video: &Track, audio: &Track) -> BytesMut {
    let mut out = BytesMut::new();
    fmp4::write_init(
        &mut out,
        &[
            InitTrack {
                track_id: 1,
                track: video,
                timescale: 90_000,
            },
            InitTrack {
                track_id: 2,
                track: audio,
                timescale: 48_000,
            },
        ],
    )
    .expect("init");
    out
}

fn tracks() -> (Track, Track) {
    let v = Track::new(TrackConfig::H264(
        AvcConfig::parse(Bytes::from_static(AVCC)).expect("avcC"),
    ));
    let a = Track::new(TrackConfig::Aac(
        AacConfig::parse(Bytes::from_static(ASC)).expect("ASC"),
    ));
    (v, a)
}

/// Three fragments of 6 video frames (B-frames, keyframe first) and 10 AAC frames.
fn fragmented_file() -> (Vec<u8>, Vec<fmp4::Sample>, Vec<fmp4::Sample>) {
    let (v, a) = tracks();
    let mut out = init_segment(&v, &a);
    let (mut all_v, mut all_a) = (Vec::new(), Vec::new());
    for f in 0..3u64 {
        let vs: Vec<fmp4::Sample> = (0..6)
            .map(|i| fmp4::Sample {
                duration: 3600,
                cts_offset: [3600, 10800, 0, 0, 3600, 0][i],
                keyframe: i == 0,
                data: Bytes::from(nal(30 + i, i == 0, 4)),
            })
            .collect();
        let as_: Vec<fmp4::Sample> = (0..10)
            .map(|i| fmp4::Sample {
                duration: 1024,
                cts_offset: 0,
                keyframe: true,
                data: Bytes::from(vec![0x21, f as u8, i as u8]),
            })
            .collect();
        let runs = [
            TrackRun {
                track_id: 1,
                base_decode_time: f * 6 * 3600,
                samples: &vs,
            },
            TrackRun {
                track_id: 2,
                base_decode_time: f * 10 * 1024,
                samples: &as_,
            },
        ];
        fmp4::write_fragment(&mut out, f as u32 + 1, &runs).expect("fragment");
        all_v.extend(vs);
        all_a.extend(as_);
    }
    (out.to_vec(), all_v, all_a)
}

#[test]
fn round_trip_with_our_fmp4_writer() {
    let (file, vs, as_) = fragmented_file();
    let m = parse_movie(&file).expect("parses");
    assert!(m.fragmented);
    assert_eq!(m.tracks[0].samples.len(), 18);
    assert_eq!(m.tracks[1].samples.len(), 30);
    let (v, a) = tracks();
    assert_eq!((&m.tracks[0].track, &m.tracks[1].track), (&v, &a));
    for (i, (s, w)) in m.tracks[0].samples.iter().zip(&vs).enumerate() {
        assert_eq!(
            (s.dts, s.cts, s.keyframe),
            (i as i64 * 3600, w.cts_offset, w.keyframe)
        );
    }
    for (i, s) in m.tracks[1].samples.iter().enumerate() {
        assert_eq!(s.dts, i as i64 * 1920);
    }
    assert_eq!(m.duration, 18 * 3600);
    let file = Bytes::from(file);
    for (t, written) in [(0, &vs), (1, &as_)] {
        for (i, w) in written.iter().enumerate() {
            let f = m.frame(&file, t, i).expect("frame");
            assert_eq!(f.payload, w.data);
        }
    }
}

#[test]
fn cut_fragmented_file_keeps_every_whole_sample() {
    let (file, ..) = fragmented_file();
    let whole = parse_movie(&file).expect("parses");
    let moov_end = {
        let at = file.windows(4).position(|w| w == b"moov").expect("moov") - 4;
        at + u32::from_be_bytes(file[at..at + 4].try_into().expect("4")) as usize
    };
    for cut in moov_end..=file.len() {
        let m = parse_movie(&file[..cut]).expect("a cut fragmented file parses");
        for (t, w) in m.tracks.iter().zip(&whole.tracks) {
            // A prefix of the whole file's samples: every one wholly inside the cut,
            // and no sample that is wholly inside left out.
            assert_eq!(t.samples[..], w.samples[..t.samples.len()]);
            let kept_all = w
                .samples
                .iter()
                .take_while(|s| s.offset + u64::from(s.size) <= cut as u64)
                .count();
            // A moof that is itself cut gives none of its samples.
            assert!(t.samples.len() <= kept_all);
        }
    }
    // Cut right after the second fragment's mdat: exactly two fragments.
    let second_end = whole.tracks[1].samples[19].offset as usize + 3;
    let m = parse_movie(&file[..second_end]).expect("parses");
    assert_eq!(
        (m.tracks[0].samples.len(), m.tracks[1].samples.len()),
        (12, 20)
    );
    assert_eq!(m.duration, 12 * 3600);
}

/// A hand-made `moof`: one `traf` per track. Video: explicit base-data-offset, defaults
/// in `tfhd`, two `trun`s (the second continues after the first) with first-sample
/// flags; audio: no base (follows the video data), `trex` defaults.
fn base_offset_fragment(moof_start: u64, video: &[Vec<u8>], audio: &[Vec<u8>]) -> Vec<u8> {
    let build = |mdat_data_start: u64| {
        let vsize = video[0].len() as u32;
        let tfhd_v = full(
            b"tfhd",
            0,
            0x01 | 0x08 | 0x10 | 0x20,
            &cat(&[
                &be32(&[1]),
                &mdat_data_start.to_be_bytes(),
                &be32(&[3000, vsize, 0x0101_0000]),
            ]),
        );
        let tfdt_v = full(b"tfdt", 0, 0, &be32(&[90_000]));
        let trun1 = full(b"trun", 0, 0x01 | 0x04, &be32(&[2, 0, 0x0200_0000]));
        let trun2 = full(b"trun", 0, 0, &be32(&[1]));
        let traf_v = bx(b"traf", &cat(&[&tfhd_v, &tfdt_v, &trun1, &trun2]));
        let tfhd_a = full(b"tfhd", 0, 0, &be32(&[2]));
        let sizes: Vec<u32> = audio.iter().flat_map(|a| [1024, a.len() as u32]).collect();
        let trun_a = full(
            b"trun",
            0,
            0x100 | 0x200,
            &cat(&[&be32(&[audio.len() as u32]), &be32(&sizes)]),
        );
        let traf_a = bx(b"traf", &cat(&[&tfhd_a, &trun_a]));
        bx(
            b"moof",
            &cat(&[&full(b"mfhd", 0, 0, &be32(&[1])), &traf_v, &traf_a]),
        )
    };
    let moof_len = build(0).len() as u64;
    let moof = build(moof_start + moof_len + 8);
    cat(&[
        &moof,
        &bx(b"mdat", &cat(&[&video.concat(), &audio.concat()])),
    ])
}

#[test]
fn fragment_with_base_data_offset_and_defaults() {
    let (v, a) = tracks();
    let mut file = init_segment(&v, &a).to_vec();
    // trex defaults for the audio track: flags 0 (sync).
    let video: Vec<Vec<u8>> = (0..3).map(|i| nal(12, i == 0, 4)).collect();
    let audio: Vec<Vec<u8>> = (0..2).map(|i| vec![0x21, i, i, i]).collect();
    file.extend(base_offset_fragment(file.len() as u64, &video, &audio));
    let m = parse_movie(&file).expect("parses");
    let vt: Vec<_> = m.tracks[0]
        .samples
        .iter()
        .map(|s| (s.dts, s.keyframe))
        .collect();
    assert_eq!(vt, [(90_000, true), (93_000, false), (96_000, false)]);
    let at: Vec<_> = m.tracks[1].samples.iter().map(|s| s.dts).collect();
    assert_eq!(at, [0, 1920]);
    let file = Bytes::from(file);
    for (i, want) in video.iter().enumerate() {
        assert_eq!(
            m.frame(&file, 0, i).map(|f| f.payload.to_vec()),
            Ok(want.clone())
        );
    }
    for (i, want) in audio.iter().enumerate() {
        assert_eq!(
            m.frame(&file, 1, i).map(|f| f.payload.to_vec()),
            Ok(want.clone())
        );
    }
}

#[test]
fn samples_in_moov_then_fragments() {
    // A progressive video track whose movie goes on in fragments (tfdt continues it).
    let video: Vec<Vec<u8>> = (0..2).map(|i| nal(12, i == 0, 4)).collect();
    let mut vt = Trak {
        id: 1,
        timescale: 90_000,
        entry: visual_entry(b"avc1", b"avcC", AVCC),
        stts: vec![(2, 45_000)],
        sizes: vec![12, 12],
        stsc: vec![(1, 2)],
        chunks: vec![0],
        ..Trak::default()
    };
    let trex = full(b"trex", 0, 0, &be32(&[1, 1, 0, 0, 0]));
    let mvex = bx(b"mvex", &trex);
    let ftyp = bx(b"ftyp", b"");
    vt.chunks = vec![(ftyp.len() + moov(&[&vt], &mvex).len() + 8) as u64];
    let mut file = cat(&[&ftyp, &moov(&[&vt], &mvex), &bx(b"mdat", &video.concat())]);
    let more: Vec<Vec<u8>> = (0..3).map(|i| nal(12, i == 0, 4)).collect();
    file.extend(base_offset_fragment(file.len() as u64, &more, &[]));
    let m = parse_movie(&file).expect("parses");
    assert!(m.fragmented);
    let t: Vec<_> = m.tracks[0].samples.iter().map(|s| s.dts).collect();
    assert_eq!(t, [0, 45_000, 90_000, 93_000, 96_000]);
    let file = Bytes::from(file);
    let payloads: Vec<_> = frames(&m, &file)
        .into_iter()
        .map(|(_, f)| f.payload.to_vec())
        .collect();
    assert_eq!(payloads, [video, more].concat());
}

#[test]
fn malformed_moof_ends_fragments_with_a_note() {
    let (mut file, ..) = fragmented_file();
    let whole = parse_movie(&file).expect("parses");
    // Break the second fragment's first trun: a sample count its table cannot hold.
    let truns: Vec<usize> = file
        .windows(4)
        .enumerate()
        .filter(|(_, w)| w == b"trun")
        .map(|(i, _)| i)
        .collect();
    let count_at = truns[2] + 8;
    file[count_at..count_at + 4].copy_from_slice(&[0x7f, 0, 0, 0]);
    let m = parse_movie(&file).expect("parses");
    assert_eq!(m.tracks[0].samples.len(), 6);
    assert_eq!(m.tracks[0].samples[..], whole.tracks[0].samples[..6]);
    assert_eq!(m.skipped.len(), 1);
    assert!(m.skipped[0].contains("truncated trun"), "{:?}", m.skipped);
}

// ---- playing ----

#[test]
fn seek_starts_video_at_keyframe_and_audio_after_it() {
    let (file, ..) = fragmented_file();
    let m = parse_movie(&file).expect("parses");
    // Keyframes at dts 0, 21600, 43200 (pts +3600).
    let start = |t| {
        let p = m.seek(t);
        (p.sample(0), p.sample(1))
    };
    assert_eq!(start(0), (Some(0), Some(0)));
    assert_eq!(start(25_199), (Some(0), Some(0)));
    // The keyframe presented at 25200: audio from the first frame at or after 21600.
    assert_eq!(start(25_200), (Some(6), Some(12)));
    assert_eq!(start(1_000_000), (Some(12), Some(23)));
    assert_eq!(start(-5), (Some(0), Some(0)));
    let mut pos = m.seek(25_200);
    assert_eq!(m.peek_dts(&pos), Some(21_600));
    assert_eq!(m.next(&mut pos), Some((0, 6)));
    // Audio 11.25 frames in is 21600: frame 12 at 23040 comes after video 21600.
    assert_eq!(m.next(&mut pos), Some((1, 12)));
    let mut n = 2;
    while m.next(&mut pos).is_some() {
        n += 1;
    }
    assert_eq!(n, 12 + 18);
    assert_eq!(m.peek_dts(&pos), None);
}

#[test]
fn seek_without_video_and_frame_errors() {
    let (file, ..) = fragmented_file();
    let mut m = parse_movie(&file).expect("parses");
    m.tracks.remove(0);
    assert_eq!(m.seek(1920 * 3).sample(0), Some(3));
    assert_eq!(m.seek(1920 * 3 + 1).sample(0), Some(4));
    let file = Bytes::from(file);
    assert_eq!(
        m.frame(&file, 1, 0),
        Err(Mp4Error::NoSuchSample {
            track: 1,
            sample: 0
        })
    );
    assert_eq!(
        m.frame(&file, 0, 30),
        Err(Mp4Error::NoSuchSample {
            track: 0,
            sample: 30
        })
    );
    let s = m.tracks[0].samples[29];
    assert!(matches!(
        m.frame(&file.slice(..file.len() - 1), 0, 29),
        Err(Mp4Error::SampleOutsideFile { offset, .. }) if offset == s.offset
    ));
    // A movie with an empty track: nothing to play, no panic.
    m.tracks[0].samples.clear();
    assert_eq!(m.next(&mut m.seek(0)), None);
}

#[test]
fn sample_stays_small() {
    // u64 + i64 + u32 + i32 + bool, padded to 8 bytes.
    assert_eq!(std::mem::size_of::<Sample>(), 32);
}

// ---- hostile input ----

/// Valid files to mutate.
fn seeds() -> Vec<Vec<u8>> {
    vec![
        progressive_file(false).0,
        progressive_file(true).0,
        fragmented_file().0,
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_movie(&bytes);
    }

    #[test]
    fn mutated_files_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut file = seeds().swap_remove(which);
        for (at, b) in edits {
            let i = at.index(file.len());
            file[i] = b;
        }
        let len = file.len();
        file.truncate(len - cut.index(len / 4 + 1));
        if let Ok(m) = parse_movie(&file) {
            let file = Bytes::from(file);
            for (t, track) in m.tracks.iter().enumerate() {
                for (i, s) in track.samples.iter().enumerate() {
                    prop_assert!(s.offset + u64::from(s.size) <= file.len() as u64);
                    let _ = m.frame(&file, t, i);
                }
            }
            let mut pos = m.seek(0);
            while m.next(&mut pos).is_some() {}
        }
    }
}
