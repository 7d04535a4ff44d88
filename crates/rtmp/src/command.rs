//! NetConnection and NetStream commands ↔ AMF0.
//!
//! Why its own file: the session reasons about requests ("publish `cam1`"), not about
//! AMF0 arrays. A command message is `name, transaction id, command object, args...`;
//! [`Command`] is that shape, [`Request`] is what a client asked for, and the builder
//! functions produce the replies real clients wait for (ffmpeg, OBS/librtmp, Flash).
//!
//! # Invariants
//! - Parsing is lenient where clients differ (a missing transaction id or object is
//!   read as 0 / null) and strict where the meaning is lost (`publish` without a name
//!   is `Malformed`).

use bytes::BytesMut;
use sluice_media::amf0::Amf0Value;

use crate::error::RtmpError;

/// One command message: `name, transaction id, command object, args...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// The command name (`connect`, `publish`, `_result`, `onStatus`, ...).
    pub name: String,
    /// Transaction id; 0 when no answer is expected.
    pub transaction_id: f64,
    /// The command object (`connect`'s properties, or null).
    pub object: Amf0Value,
    /// The remaining values.
    pub args: Vec<Amf0Value>,
}

/// What a client asks of a server, by command.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `connect`: attach to an application.
    Connect {
        /// The `app` property, as sent (may carry `?query`).
        app: String,
        /// The `tcUrl` property.
        tc_url: Option<String>,
        /// The `objectEncoding` property (0 = AMF0, 3 = AMF3).
        object_encoding: f64,
    },
    /// `releaseStream`: FMLE-style "free this name".
    ReleaseStream {
        /// The stream name.
        name: String,
    },
    /// `FCPublish`: FMLE-style publish announcement.
    FcPublish {
        /// The stream name.
        name: String,
    },
    /// `FCUnpublish`: FMLE-style end of publishing.
    FcUnpublish {
        /// The stream name.
        name: String,
    },
    /// `createStream`: allocate a message stream.
    CreateStream,
    /// `publish`: start sending media on the stream.
    Publish {
        /// Stream name, possibly with `?query`.
        name: String,
        /// `live`, `record` or `append`.
        kind: String,
    },
    /// `play`: start receiving media.
    Play {
        /// Stream name, possibly with `?query`.
        name: String,
    },
    /// `play2`: switch streams (not supported by the server).
    Play2,
    /// `deleteStream`: release a message stream.
    DeleteStream {
        /// The message stream id.
        stream_id: f64,
    },
    /// `closeStream`: stop publishing or playing on the stream.
    CloseStream,
    /// `getStreamLength`: the duration of a recorded stream.
    GetStreamLength,
    /// `pause`: pause or resume playback.
    Pause {
        /// True to pause, false to resume.
        paused: bool,
    },
    /// `receiveAudio`.
    ReceiveAudio(bool),
    /// `receiveVideo`.
    ReceiveVideo(bool),
    /// `_checkbw`/`checkBandwidth`: answered with an empty result.
    CheckBandwidth,
    /// A reply from the peer (`_result`, `_error`, `onStatus`, `onBWDone`...).
    Response,
    /// Anything else.
    Other,
}

impl Command {
    /// A command with the given parts.
    pub fn new(name: &str, transaction_id: f64, object: Amf0Value, args: Vec<Amf0Value>) -> Self {
        Command {
            name: name.to_owned(),
            transaction_id,
            object,
            args,
        }
    }

    /// Reads a command from the values of a command message.
    pub fn from_values(values: Vec<Amf0Value>) -> Result<Command, RtmpError> {
        let mut it = values.into_iter();
        let name = match it.next() {
            Some(Amf0Value::String(s) | Amf0Value::LongString(s)) => s,
            _ => {
                return Err(RtmpError::Malformed {
                    what: "command without a name",
                })
            }
        };
        let transaction_id = it.next().and_then(|v| v.as_f64()).unwrap_or(0.0);
        let object = it.next().unwrap_or(Amf0Value::Null);
        Ok(Command {
            name,
            transaction_id,
            object,
            args: it.collect(),
        })
    }

    /// Appends the AMF0 encoding to `out` (the body of a type-20 message).
    pub fn encode(&self, out: &mut BytesMut) {
        Amf0Value::String(self.name.clone()).encode(out);
        Amf0Value::Number(self.transaction_id).encode(out);
        self.object.encode(out);
        for a in &self.args {
            a.encode(out);
        }
    }

    fn arg_str(&self, i: usize) -> Option<&str> {
        self.args.get(i).and_then(Amf0Value::as_str)
    }

    fn name_arg(&self, what: &'static str) -> Result<String, RtmpError> {
        self.arg_str(0)
            .map(str::to_owned)
            .ok_or(RtmpError::Malformed { what })
    }

    /// What this command asks for.
    pub fn request(&self) -> Result<Request, RtmpError> {
        Ok(match self.name.as_str() {
            "connect" => {
                let app = self.object.get("app").and_then(Amf0Value::as_str).ok_or(
                    RtmpError::Malformed {
                        what: "connect without app",
                    },
                )?;
                Request::Connect {
                    app: app.to_owned(),
                    tc_url: self
                        .object
                        .get("tcUrl")
                        .and_then(Amf0Value::as_str)
                        .map(str::to_owned),
                    object_encoding: self
                        .object
                        .get("objectEncoding")
                        .and_then(Amf0Value::as_f64)
                        .unwrap_or(0.0),
                }
            }
            // librtmp sends an empty name for these on some paths; tolerate it.
            "releaseStream" => Request::ReleaseStream {
                name: self.arg_str(0).unwrap_or_default().to_owned(),
            },
            "FCPublish" => Request::FcPublish {
                name: self.arg_str(0).unwrap_or_default().to_owned(),
            },
            "FCUnpublish" => Request::FcUnpublish {
                name: self.arg_str(0).unwrap_or_default().to_owned(),
            },
            "createStream" => Request::CreateStream,
            "publish" => Request::Publish {
                name: self.name_arg("publish without a stream name")?,
                kind: self.arg_str(1).unwrap_or("live").to_owned(),
            },
            "play" => Request::Play {
                name: self.name_arg("play without a stream name")?,
            },
            "play2" => Request::Play2,
            "deleteStream" => Request::DeleteStream {
                stream_id: self.args.first().and_then(Amf0Value::as_f64).unwrap_or(0.0),
            },
            "closeStream" => Request::CloseStream,
            "getStreamLength" => Request::GetStreamLength,
            "pause" | "pauseRaw" => Request::Pause {
                paused: self
                    .args
                    .first()
                    .and_then(Amf0Value::as_bool)
                    .unwrap_or(true),
            },
            "receiveAudio" => Request::ReceiveAudio(
                self.args
                    .first()
                    .and_then(Amf0Value::as_bool)
                    .unwrap_or(true),
            ),
            "receiveVideo" => Request::ReceiveVideo(
                self.args
                    .first()
                    .and_then(Amf0Value::as_bool)
                    .unwrap_or(true),
            ),
            "_checkbw" | "checkBandwidth" => Request::CheckBandwidth,
            "_result" | "_error" | "onStatus" | "onBWDone" | "onFCPublish" | "onFCUnpublish"
            | "_onbwcheck" | "_onbwdone" => Request::Response,
            _ => Request::Other,
        })
    }

    /// The `info` object's `code` of an `onStatus` or `_error`, if any.
    pub fn status_code(&self) -> Option<&str> {
        self.status_field("code")
    }

    /// A field of the `info` object (the first argument) of an `onStatus`/`_result`/`_error`.
    pub fn status_field(&self, key: &str) -> Option<&str> {
        self.args
            .first()
            .and_then(|info| info.get(key))
            .and_then(Amf0Value::as_str)
    }
}

fn obj(pairs: &[(&str, Amf0Value)]) -> Amf0Value {
    Amf0Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

/// A `level, code, description` info object, as `onStatus` and `_error` carry.
pub fn status_info(level: &str, code: &str, description: &str) -> Amf0Value {
    obj(&[
        ("level", level.into()),
        ("code", code.into()),
        ("description", description.into()),
    ])
}

/// `connect` as a client sends it.
pub fn connect(transaction_id: f64, app: &str, tc_url: &str) -> Command {
    Command::new(
        "connect",
        transaction_id,
        obj(&[
            ("app", app.into()),
            ("type", "nonprivate".into()),
            ("flashVer", "FMLE/3.0 (compatible; Sluice)".into()),
            ("tcUrl", tc_url.into()),
            ("fpad", false.into()),
            ("capabilities", 15.0.into()),
            ("audioCodecs", 4071.0.into()),
            ("videoCodecs", 252.0.into()),
            ("videoFunction", 1.0.into()),
            ("objectEncoding", 0.0.into()),
        ]),
        vec![],
    )
}

/// The `_result` of a successful `connect`.
pub fn connect_result(transaction_id: f64, object_encoding: f64) -> Command {
    let mut info = vec![
        ("level".to_owned(), Amf0Value::from("status")),
        ("code".to_owned(), "NetConnection.Connect.Success".into()),
        ("description".to_owned(), "Connection succeeded.".into()),
    ];
    info.push(("objectEncoding".to_owned(), object_encoding.into()));
    Command::new(
        "_result",
        transaction_id,
        obj(&[
            ("fmsVer", "FMS/3,0,1,123".into()),
            ("capabilities", 31.0.into()),
        ]),
        vec![Amf0Value::Object(info)],
    )
}

/// `_result` with a null object and one value (`undefined` for "done", a number for createStream).
pub fn result(transaction_id: f64, value: Amf0Value) -> Command {
    Command::new("_result", transaction_id, Amf0Value::Null, vec![value])
}

/// `_error` with an error-level info object.
pub fn error(transaction_id: f64, code: &str, description: &str) -> Command {
    Command::new(
        "_error",
        transaction_id,
        Amf0Value::Null,
        vec![status_info("error", code, description)],
    )
}

/// `onStatus` with transaction id 0 and a null object.
pub fn on_status(level: &str, code: &str, description: &str) -> Command {
    Command::new(
        "onStatus",
        0.0,
        Amf0Value::Null,
        vec![status_info(level, code, description)],
    )
}

/// A client command with a null object and a string argument (`releaseStream`, `FCPublish`, `play`...).
pub fn named(command: &str, transaction_id: f64, name: &str) -> Command {
    Command::new(command, transaction_id, Amf0Value::Null, vec![name.into()])
}

/// `createStream`.
pub fn create_stream(transaction_id: f64) -> Command {
    Command::new("createStream", transaction_id, Amf0Value::Null, vec![])
}

/// `publish name live`.
pub fn publish(transaction_id: f64, name: &str) -> Command {
    Command::new(
        "publish",
        transaction_id,
        Amf0Value::Null,
        vec![name.into(), "live".into()],
    )
}

/// `play name -2` (live, or recorded if there is no live stream).
pub fn play(transaction_id: f64, name: &str) -> Command {
    Command::new(
        "play",
        transaction_id,
        Amf0Value::Null,
        vec![name.into(), Amf0Value::Number(-2.0)],
    )
}

/// `deleteStream stream_id`.
pub fn delete_stream(transaction_id: f64, stream_id: u32) -> Command {
    Command::new(
        "deleteStream",
        transaction_id,
        Amf0Value::Null,
        vec![f64::from(stream_id).into()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_media::amf0;

    fn round_trip(c: &Command) -> Command {
        let mut out = BytesMut::new();
        c.encode(&mut out);
        Command::from_values(amf0::decode_all(&out).expect("decodes")).expect("parses")
    }

    #[test]
    fn connect_parses_app_and_tc_url() {
        let c = round_trip(&connect(1.0, "live?token=x", "rtmp://h/live?token=x"));
        assert_eq!(
            c.request().expect("request"),
            Request::Connect {
                app: "live?token=x".into(),
                tc_url: Some("rtmp://h/live?token=x".into()),
                object_encoding: 0.0
            }
        );
    }

    #[test]
    fn stream_commands_parse() {
        assert_eq!(
            round_trip(&publish(5.0, "cam1?k=v")).request().expect("ok"),
            Request::Publish {
                name: "cam1?k=v".into(),
                kind: "live".into()
            }
        );
        assert_eq!(
            round_trip(&play(0.0, "cam1")).request().expect("ok"),
            Request::Play {
                name: "cam1".into()
            }
        );
        assert_eq!(
            round_trip(&create_stream(4.0)).request().expect("ok"),
            Request::CreateStream
        );
        assert_eq!(
            round_trip(&delete_stream(0.0, 1)).request().expect("ok"),
            Request::DeleteStream { stream_id: 1.0 }
        );
        assert_eq!(
            round_trip(&named("FCPublish", 3.0, "cam1"))
                .request()
                .expect("ok"),
            Request::FcPublish {
                name: "cam1".into()
            }
        );
        let s = round_trip(&on_status("status", "NetStream.Publish.Start", "ok"));
        assert_eq!(s.status_code(), Some("NetStream.Publish.Start"));
        assert_eq!(s.request().expect("ok"), Request::Response);
    }

    #[test]
    fn missing_parts_are_malformed_or_defaulted() {
        assert!(Command::from_values(vec![]).is_err());
        assert!(Command::from_values(vec![Amf0Value::Null]).is_err());
        let c = Command::from_values(vec!["publish".into()]).expect("name only");
        assert!(matches!(c.request(), Err(RtmpError::Malformed { .. })));
        let c =
            Command::from_values(vec!["connect".into(), 1.0.into(), Amf0Value::Null]).expect("ok");
        assert!(matches!(c.request(), Err(RtmpError::Malformed { .. })));
    }
}
