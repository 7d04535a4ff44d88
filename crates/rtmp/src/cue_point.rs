//! Ad cue points a publisher sends as an AMF0 data message (`onCuePoint`), in the
//! form YouTube's ingest defines and encoders send for it:
//!
//! ```text
//! "onCuePoint" { type: "com.youtube.cuepoint", version: "0.1",
//!                pre_roll_time_sec: 2.56, cue_point_start: true,
//!                break_duration_sec: 30, splice_event_id: 0 }
//! ```
//!
//! Why here: a cue point is the RTMP form of an SCTE-35 `splice_insert`; the server
//! turns it into one so HLS marks and cuts segments for it as for a TS input's cues.
//! Only this form is read: other `onCuePoint` objects (Flash navigation cue points)
//! carry no break and are reported as ignored.
//!
//! # Invariants
//! - Numbers are checked: a pre-roll past [`MAX_PRE_ROLL_MS`], a break past
//!   [`MAX_BREAK_MS`], negative or non-finite values, or an event id that is not a
//!   32-bit integer make the message a [`CuePointError`], never a wrapped value.

use sluice_media::amf0::Amf0Value;

/// The `type` of YouTube's cue points.
pub const YOUTUBE_CUE_POINT: &str = "com.youtube.cuepoint";
/// Longest pre-roll accepted: a splicer announces a break seconds ahead, not hours.
pub const MAX_PRE_ROLL_MS: u64 = 60_000;
/// Longest break accepted (a day).
pub const MAX_BREAK_MS: u64 = 86_400_000;

/// One ad cue point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuePoint {
    /// `splice_event_id` (0 when absent).
    pub event_id: u32,
    /// `cue_point_start`: a break starts (else one ends).
    pub start: bool,
    /// `pre_roll_time_sec` in ms: the break starts this long after the message's time.
    pub pre_roll_ms: u64,
    /// `break_duration_sec` in ms, when given.
    pub break_ms: Option<u64>,
}

/// Why an `onCuePoint` message was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CuePointError {
    /// No object, or one of another `type` (a navigation cue point, say).
    #[error("onCuePoint of another kind (type {0:?})")]
    OtherKind(Option<String>),
    /// A field holds a value out of range or of the wrong type.
    #[error("onCuePoint field {0} out of range")]
    Field(&'static str),
}

/// Reads the values of an `onCuePoint` message (its name, then its object).
pub fn read_cue_point(values: &[Amf0Value]) -> Result<CuePoint, CuePointError> {
    let object = values.get(1).filter(|v| v.properties().is_some());
    let Some(object) = object else {
        return Err(CuePointError::OtherKind(None));
    };
    let kind = object.get("type").and_then(Amf0Value::as_str);
    if kind != Some(YOUTUBE_CUE_POINT) {
        return Err(CuePointError::OtherKind(kind.map(str::to_string)));
    }
    let ms = |key: &'static str, max: u64| -> Result<Option<u64>, CuePointError> {
        match object.get(key) {
            None => Ok(None),
            Some(v) => {
                let s = v.as_f64().ok_or(CuePointError::Field(key))?;
                let ms = s * 1000.0;
                if ms.is_finite() && (0.0..=max as f64).contains(&ms) {
                    Ok(Some(ms.round() as u64))
                } else {
                    Err(CuePointError::Field(key))
                }
            }
        }
    };
    let event_id = match object.get("splice_event_id") {
        None => 0,
        Some(v) => {
            let n = v.as_f64().ok_or(CuePointError::Field("splice_event_id"))?;
            if n.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&n) {
                return Err(CuePointError::Field("splice_event_id"));
            }
            n as u32
        }
    };
    let start = match object.get("cue_point_start") {
        None => true,
        Some(v) => v.as_bool().ok_or(CuePointError::Field("cue_point_start"))?,
    };
    Ok(CuePoint {
        event_id,
        start,
        pre_roll_ms: ms("pre_roll_time_sec", MAX_PRE_ROLL_MS)?.unwrap_or(0),
        break_ms: ms("break_duration_sec", MAX_BREAK_MS)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn youtube(fields: &[(&str, Amf0Value)]) -> Vec<Amf0Value> {
        let mut object = vec![("type".to_string(), Amf0Value::from(YOUTUBE_CUE_POINT))];
        object.extend(fields.iter().map(|(k, v)| (k.to_string(), v.clone())));
        vec![Amf0Value::from("onCuePoint"), Amf0Value::Object(object)]
    }

    #[test]
    fn youtubes_form_is_read() {
        let cue = read_cue_point(&youtube(&[
            ("version", Amf0Value::from("0.1")),
            ("pre_roll_time_sec", Amf0Value::Number(2.56)),
            ("cue_point_start", Amf0Value::Boolean(true)),
            ("break_duration_sec", Amf0Value::Number(30.0)),
            ("splice_event_id", Amf0Value::Number(7.0)),
        ]));
        assert_eq!(
            cue,
            Ok(CuePoint {
                event_id: 7,
                start: true,
                pre_roll_ms: 2560,
                break_ms: Some(30_000),
            })
        );
        let bare = read_cue_point(&youtube(&[])).expect("defaults");
        assert_eq!((bare.event_id, bare.start, bare.pre_roll_ms), (0, true, 0));
    }

    #[test]
    fn other_kinds_and_bad_fields_are_errors() {
        let navigation = vec![
            Amf0Value::from("onCuePoint"),
            Amf0Value::Object(vec![("type".into(), Amf0Value::from("navigation"))]),
        ];
        assert_eq!(
            read_cue_point(&navigation),
            Err(CuePointError::OtherKind(Some("navigation".into())))
        );
        assert!(read_cue_point(&[Amf0Value::from("onCuePoint")]).is_err());
        for (key, bad) in [
            ("pre_roll_time_sec", Amf0Value::Number(-1.0)),
            ("pre_roll_time_sec", Amf0Value::Number(61.0)),
            ("break_duration_sec", Amf0Value::Number(f64::NAN)),
            ("break_duration_sec", Amf0Value::from("30")),
            ("splice_event_id", Amf0Value::Number(1.5)),
            ("splice_event_id", Amf0Value::Number(4_294_967_296.0)),
            ("cue_point_start", Amf0Value::Number(1.0)),
        ] {
            assert!(
                matches!(read_cue_point(&youtube(&[(key, bad.clone())])), Err(CuePointError::Field(k)) if k == key),
                "{key} = {bad:?}"
            );
        }
    }
}
