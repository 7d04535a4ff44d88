//! [`parse_movie`]: the walk over the file, the choice of tracks, edit lists.
//!
//! Why it is quick: the top level is a handful of boxes (`ftyp`, `moov`, `mdat`, or pairs
//! of `moof` and `mdat`). We walk it twice, once for `moov` (which may come last) and once
//! for the `moof`s in order, and never read the media data, so even a large file parses
//! in the time it takes to read its index.
//!
//! Which tracks play: the first video and the first audio track whose codec Sluice
//! plays and whose tables read. A broken or unsupported track is a note in
//! [`Movie::skipped`], not an error, so a file with one bad track still plays the other.

use super::boxes::{top_level, BoxRef, Reader};
use super::entry::read_stsd;
use super::fragment::{read_moof, read_trex};
use super::table::read_sample_table;
use super::timeline::{to_clock, Budget, Edit, Timeline};
use super::{Movie, MovieTrack, Mp4Error};
use crate::{MediaKind, Track};

/// `media_rate` 1.0 (16.16 fixed point) of an `elst` entry.
const RATE_ONE: u32 = 0x0001_0000;

/// Parses a whole MP4 file in memory: a progressive one (`moov` before or after `mdat`),
/// a fragmented one (`moov` with `mvex`, then `moof` + `mdat` pairs, possibly cut off
/// anywhere), or both (samples in `moov`, more in fragments).
///
/// Errors: no `moov`, or one cut short or malformed; no playable track. Everything about
/// one track or fragment is a note in [`Movie::skipped`] instead: a malformed `moof`
/// ends the fragments read, a sample outside the file ends its track.
pub fn parse_movie(file: &[u8]) -> Result<Movie, Mp4Error> {
    let moov = top_level(file)
        .find(|t| &t.b.kind == b"moov")
        .ok_or(Mp4Error::NoMoov)?;
    if !moov.complete {
        return Err(Mp4Error::TruncatedBox { kind: *b"moov" });
    }
    let moov = moov.b;
    let file_len = file.len() as u64;
    let mut budget = Budget::for_file(file.len());
    let movie_timescale = read_mvhd(&moov)?;

    let mut skipped = Vec::new();
    let mut trex = Vec::new();
    let (mut video, mut audio): (Option<Taken>, Option<Taken>) = (None, None);
    let mut trak_number = 0u32;
    for b in moov.children() {
        let b = b?;
        match &b.kind {
            b"trak" => {
                trak_number = trak_number.saturating_add(1);
                let note = |e: Mp4Error| format!("trak {trak_number}: {e}");
                let header = match read_trak_header(&b, movie_timescale) {
                    Ok(h) => h,
                    Err(e) => {
                        skipped.push(note(e));
                        continue;
                    }
                };
                let kind = header.track.kind();
                let slot = match kind {
                    MediaKind::Video => &mut video,
                    MediaKind::Audio => &mut audio,
                };
                if let Some(taken) = slot {
                    let kind = match kind {
                        MediaKind::Video => "video",
                        MediaKind::Audio => "audio",
                    };
                    let playing = taken.track_id;
                    skipped.push(format!(
                        "trak {trak_number}: another {kind} track (track {playing} plays)"
                    ));
                    continue;
                }
                match read_trak_samples(header, file_len, &mut budget) {
                    Ok(t) => *slot = Some(t),
                    Err(e) => skipped.push(note(e)),
                }
            }
            b"mvex" => {
                for t in b.children() {
                    let t = t?;
                    if &t.kind == b"trex" {
                        trex.push(read_trex(t.body)?);
                    }
                }
            }
            _ => {}
        }
    }

    let taken: Vec<Taken> = video.into_iter().chain(audio).collect();
    if taken.is_empty() {
        return Err(Mp4Error::NoPlayableTrack { skipped });
    }
    // Sorted for lookups by track id: a file may list many.
    trex.sort_unstable_by_key(|&(id, _)| id);
    let (meta, mut timelines): (Vec<_>, Vec<_>) = taken
        .into_iter()
        .map(|t| ((t.track_id, t.track, t.timescale), t.timeline))
        .unzip();

    let mut fragmented = false;
    for t in top_level(file).filter(|t| &t.b.kind == b"moof") {
        if !t.complete {
            break; // cut off while being written
        }
        fragmented = true;
        if let Err(e) = read_moof(&t.b, &trex, &mut timelines, &mut budget) {
            skipped.push(format!(
                "moof at byte {}: {e}; later fragments dropped",
                t.b.start
            ));
            break;
        }
    }

    let duration = timelines
        .iter()
        .map(Timeline::end)
        .max()
        .unwrap_or(0)
        .max(0);
    let tracks = meta
        .into_iter()
        .zip(timelines)
        .map(|((track_id, track, timescale), timeline)| MovieTrack {
            track_id,
            track,
            timescale,
            samples: timeline.into_samples(),
        })
        .collect();
    Ok(Movie {
        tracks,
        duration,
        fragmented,
        skipped,
    })
}

/// A track chosen to play, with its samples so far.
struct Taken {
    track_id: u32,
    track: Track,
    timescale: u32,
    timeline: Timeline,
}

/// What a `trak` says before its sample tables.
struct TrakHeader<'a> {
    track_id: u32,
    track: Track,
    timescale: u32,
    edit: Edit,
    stbl: BoxRef<'a>,
}

/// The `mvhd` timescale (of edit list durations).
fn read_mvhd(moov: &BoxRef<'_>) -> Result<u32, Mp4Error> {
    let mvhd = moov.children().require(b"mvhd", "mvhd")?;
    let mut r = Reader::new(mvhd.body, "mvhd");
    let (version, _) = r.version_flags()?;
    r.u32_or_u64(version)?; // creation_time
    r.u32_or_u64(version)?; // modification_time
    r.u32()
}

fn read_trak_header<'a>(
    trak: &BoxRef<'a>,
    movie_timescale: u32,
) -> Result<TrakHeader<'a>, Mp4Error> {
    let tkhd = trak.children().require(b"tkhd", "tkhd")?;
    let mut r = Reader::new(tkhd.body, "tkhd");
    let (version, _) = r.version_flags()?;
    r.u32_or_u64(version)?; // creation_time
    r.u32_or_u64(version)?; // modification_time
    let track_id = r.u32()?;

    let mdia = trak.children().require(b"mdia", "mdia")?;
    let mdhd = mdia.children().require(b"mdhd", "mdhd")?;
    let mut r = Reader::new(mdhd.body, "mdhd");
    let (version, _) = r.version_flags()?;
    r.u32_or_u64(version)?;
    r.u32_or_u64(version)?;
    let timescale = r.u32()?;
    if timescale == 0 {
        return Err(Mp4Error::Malformed {
            what: "mdhd timescale 0",
        });
    }
    let stbl = mdia
        .children()
        .require(b"minf", "minf")?
        .children()
        .require(b"stbl", "stbl")?;
    let stsd = stbl.children().require(b"stsd", "stsd")?;
    let track = Track::new(read_stsd(&stsd)?);
    // A broken edit list costs at most a timestamp shift, never the track.
    let edit = match trak.children().get(b"edts") {
        Ok(Some(edts)) => read_edit(&edts, movie_timescale).unwrap_or_default(),
        _ => Edit::default(),
    };
    Ok(TrakHeader {
        track_id,
        track,
        timescale,
        edit,
        stbl,
    })
}

fn read_trak_samples(
    h: TrakHeader<'_>,
    file_len: u64,
    budget: &mut Budget,
) -> Result<Taken, Mp4Error> {
    let audio = h.track.kind() == MediaKind::Audio;
    let mut timeline = Timeline::new(h.track_id, h.timescale, h.edit, audio, file_len);
    read_sample_table(&h.stbl, &mut timeline, budget)?;
    Ok(Taken {
        track_id: h.track_id,
        track: h.track,
        timescale: h.timescale,
        timeline,
    })
}

/// The shift of a simple edit list: one entry, or an empty edit then one entry; the
/// media time of that entry plays at the empty edit's duration. Of a longer list only
/// that start is used; a dwell, a rate other than 1 or no media edit means no shift.
fn read_edit(edts: &BoxRef<'_>, movie_timescale: u32) -> Result<Edit, Mp4Error> {
    let Some(elst) = edts.children().get(b"elst")? else {
        return Ok(Edit::default());
    };
    let mut r = Reader::new(elst.body, "elst");
    let (version, _) = r.version_flags()?;
    let count = r.u32()?;
    let mut lead = 0;
    for i in 0..count.min(2) {
        let duration = r.u32_or_u64(version)?;
        let media_time = if version == 1 {
            r.i64()?
        } else {
            i64::from(r.i32()?)
        };
        let rate = r.u32()?;
        if media_time == -1 {
            if i > 0 {
                break;
            }
            lead = to_clock(duration, movie_timescale);
            continue;
        }
        if rate != RATE_ONE || media_time < 0 {
            break;
        }
        return Ok(Edit {
            media_start: media_time,
            lead,
        });
    }
    Ok(Edit::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `edts` with an `elst` of (segment_duration, media_time, rate) entries, version 0.
    fn edts(entries: &[(u32, i32, u32)]) -> Vec<u8> {
        let mut elst = vec![0, 0, 0, 0];
        elst.extend((entries.len() as u32).to_be_bytes());
        for &(d, m, r) in entries {
            elst.extend(d.to_be_bytes());
            elst.extend(m.to_be_bytes());
            elst.extend(r.to_be_bytes());
        }
        let mut b = ((elst.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(b"elst");
        b.extend(elst);
        b
    }

    fn edit(entries: &[(u32, i32, u32)]) -> Result<Edit, Mp4Error> {
        let body = edts(entries);
        let b = BoxRef {
            kind: *b"edts",
            start: 0,
            header_len: 8,
            body: &body,
        };
        read_edit(&b, 1000)
    }

    #[test]
    fn simple_edit_lists() {
        let shift = |media_start, lead| Ok(Edit { media_start, lead });
        assert_eq!(edit(&[(3000, 1024, RATE_ONE)]), shift(1024, 0));
        // A 2 s empty edit, then from media time 0.
        assert_eq!(
            edit(&[(2000, -1, RATE_ONE), (3000, 0, RATE_ONE)]),
            shift(0, 180_000)
        );
        // Several media edits: the first one starts the movie.
        assert_eq!(
            edit(&[(10, 5, RATE_ONE), (10, 500, RATE_ONE), (10, 9, RATE_ONE)]),
            shift(5, 0)
        );
    }

    #[test]
    fn fancy_edit_lists_are_ignored() {
        let none = Ok(Edit::default());
        assert_eq!(edit(&[]), none);
        assert_eq!(edit(&[(3000, 1024, 0)]), none, "a dwell");
        assert_eq!(edit(&[(3000, 1024, 0x0002_0000)]), none, "rate 2");
        assert_eq!(edit(&[(1000, -1, RATE_ONE)]), none, "only an empty edit");
        assert_eq!(edit(&[(1000, -1, RATE_ONE), (1000, -1, RATE_ONE)]), none);
        assert_eq!(edit(&[(1000, -7, RATE_ONE)]), none);
        // Entries the box does not hold are an error, not a guess.
        let mut body = edts(&[(1, 2, RATE_ONE)]);
        body.truncate(body.len() - 1);
        let b = BoxRef {
            kind: *b"edts",
            start: 0,
            header_len: 8,
            body: &body,
        };
        assert!(read_edit(&b, 1000).is_err());
    }
}
