//! AMF0, the value encoding of RTMP commands and FLV script data (`onMetaData`).
//!
//! Why here and not in `crates/rtmp`: FLV files and HTTP-FLV carry the same script
//! data, so the media crate owns the codec and RTMP depends on it.
//!
//! # Invariants
//! - Decoding never panics and never allocates from a count the peer wrote: arrays
//!   grow as elements actually arrive, so memory is bounded by the input length.
//! - Nesting is bounded by [`MAX_DEPTH`] and one [`decode`] call produces at most
//!   [`MAX_VALUES`] values, so a small "AMF bomb" (millions of one-byte `null`s in a
//!   strict array, or a deep chain of objects) cannot blow the stack or the heap.
//! - Encoding is total: every [`Amf0Value`] has a valid encoding (strings longer than
//!   65535 bytes become long strings; over-long object keys are cut at a char boundary).

use bytes::{BufMut, BytesMut};

/// Deepest nesting of objects/arrays we decode. Real RTMP commands nest two levels
/// (`connect`'s object, `onStatus`'s info); `onMetaData` with a keyframe index nests
/// three. 32 leaves room for odd encoders while keeping recursion far from the stack limit.
pub const MAX_DEPTH: usize = 32;

/// Most values one [`decode`] call may produce. Each decoded value costs ~48 bytes of
/// memory for as little as one input byte; 2^18 values bound that to ~12 MiB, while a
/// metadata keyframe index of 100,000 entries (a day of video) still fits.
pub const MAX_VALUES: usize = 1 << 18;

const MARKER_NUMBER: u8 = 0x00;
const MARKER_BOOLEAN: u8 = 0x01;
const MARKER_STRING: u8 = 0x02;
const MARKER_OBJECT: u8 = 0x03;
const MARKER_MOVIECLIP: u8 = 0x04;
const MARKER_NULL: u8 = 0x05;
const MARKER_UNDEFINED: u8 = 0x06;
const MARKER_REFERENCE: u8 = 0x07;
const MARKER_ECMA_ARRAY: u8 = 0x08;
const MARKER_OBJECT_END: u8 = 0x09;
const MARKER_STRICT_ARRAY: u8 = 0x0A;
const MARKER_DATE: u8 = 0x0B;
const MARKER_LONG_STRING: u8 = 0x0C;
const MARKER_UNSUPPORTED: u8 = 0x0D;
const MARKER_RECORDSET: u8 = 0x0E;
const MARKER_XML_DOCUMENT: u8 = 0x0F;
const MARKER_TYPED_OBJECT: u8 = 0x10;
const MARKER_AVMPLUS: u8 = 0x11;

/// One AMF0 value.
#[derive(Debug, Clone, PartialEq)]
pub enum Amf0Value {
    /// An IEEE-754 double (marker 0x00).
    Number(f64),
    /// A boolean (0x01).
    Boolean(bool),
    /// A string of at most 65535 UTF-8 bytes (0x02); longer ones encode as a long string.
    String(String),
    /// An anonymous object: ordered key/value pairs (0x03). Typed objects (0x10) decode to this too.
    Object(Vec<(String, Amf0Value)>),
    /// `null` (0x05).
    Null,
    /// `undefined` (0x06); the "unsupported" marker (0x0D) decodes to this as well.
    Undefined,
    /// An associative array (0x08), as `onMetaData` usually sends.
    EcmaArray(Vec<(String, Amf0Value)>),
    /// A dense array (0x0A).
    StrictArray(Vec<Amf0Value>),
    /// A date: milliseconds since the epoch and a time zone (0x0B) that encoders leave 0.
    Date {
        /// Milliseconds since 1970-01-01 UTC.
        millis: f64,
        /// Time zone offset in minutes; reserved, usually 0.
        tz: i16,
    },
    /// A string longer than 65535 bytes (0x0C); XML documents (0x0F) decode to this too.
    LongString(String),
}

/// Why AMF0 bytes could not be decoded. All of these are the sender's fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Amf0Error {
    /// The input ended inside a value.
    #[error("AMF0 input ends inside a value")]
    Truncated,
    /// A marker byte that AMF0 does not define.
    #[error("unknown AMF0 marker 0x{0:02x}")]
    UnknownMarker(u8),
    /// A marker AMF0 defines but we refuse (references, movie clips, record sets, AMF3 switch).
    #[error("unsupported AMF0 {what} (marker 0x{marker:02x})")]
    Unsupported {
        /// The marker byte.
        marker: u8,
        /// What the marker means.
        what: &'static str,
    },
    /// Objects/arrays nested deeper than [`MAX_DEPTH`].
    #[error("AMF0 nesting deeper than {MAX_DEPTH}")]
    TooDeep,
    /// More than [`MAX_VALUES`] values in one decode call.
    #[error("more than {MAX_VALUES} AMF0 values")]
    TooManyValues,
    /// An object-end marker (0x09) where a value was expected.
    #[error("AMF0 object end outside an object")]
    StrayObjectEnd,
}

impl Amf0Value {
    /// The string, for `String` and `LongString`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Amf0Value::String(s) | Amf0Value::LongString(s) => Some(s),
            _ => None,
        }
    }

    /// The number, for `Number`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Amf0Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// The boolean, for `Boolean`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Amf0Value::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The key/value pairs, for `Object` and `EcmaArray`.
    pub fn properties(&self) -> Option<&[(String, Amf0Value)]> {
        match self {
            Amf0Value::Object(p) | Amf0Value::EcmaArray(p) => Some(p),
            _ => None,
        }
    }

    /// The first value stored under `key`, for `Object` and `EcmaArray`.
    pub fn get(&self, key: &str) -> Option<&Amf0Value> {
        self.properties()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Appends the AMF0 encoding of this value to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Amf0Value::Number(n) => {
                out.put_u8(MARKER_NUMBER);
                out.put_f64(*n);
            }
            Amf0Value::Boolean(b) => {
                out.put_u8(MARKER_BOOLEAN);
                out.put_u8(u8::from(*b));
            }
            Amf0Value::String(s) => match u16::try_from(s.len()) {
                Ok(len) => {
                    out.put_u8(MARKER_STRING);
                    out.put_u16(len);
                    out.put_slice(s.as_bytes());
                }
                Err(_) => encode_long_string(s, out),
            },
            Amf0Value::Object(props) => {
                out.put_u8(MARKER_OBJECT);
                encode_properties(props, out);
            }
            Amf0Value::Null => out.put_u8(MARKER_NULL),
            Amf0Value::Undefined => out.put_u8(MARKER_UNDEFINED),
            Amf0Value::EcmaArray(props) => {
                out.put_u8(MARKER_ECMA_ARRAY);
                out.put_u32(u32::try_from(props.len()).unwrap_or(u32::MAX));
                encode_properties(props, out);
            }
            Amf0Value::StrictArray(items) => {
                out.put_u8(MARKER_STRICT_ARRAY);
                // A Vec longer than u32::MAX cannot exist in practice; saturate rather than wrap.
                out.put_u32(u32::try_from(items.len()).unwrap_or(u32::MAX));
                for item in items {
                    item.encode(out);
                }
            }
            Amf0Value::Date { millis, tz } => {
                out.put_u8(MARKER_DATE);
                out.put_f64(*millis);
                out.put_i16(*tz);
            }
            Amf0Value::LongString(s) => encode_long_string(s, out),
        }
    }
}

impl From<&str> for Amf0Value {
    fn from(s: &str) -> Self {
        Amf0Value::String(s.to_owned())
    }
}

impl From<String> for Amf0Value {
    fn from(s: String) -> Self {
        Amf0Value::String(s)
    }
}

impl From<f64> for Amf0Value {
    fn from(n: f64) -> Self {
        Amf0Value::Number(n)
    }
}

impl From<bool> for Amf0Value {
    fn from(b: bool) -> Self {
        Amf0Value::Boolean(b)
    }
}

fn encode_long_string(s: &str, out: &mut BytesMut) {
    out.put_u8(MARKER_LONG_STRING);
    // Strings over 4 GiB cannot be sent; cut them at a char boundary instead of wrapping.
    let bytes = truncate_str(s, u32::MAX as usize).as_bytes();
    out.put_u32(bytes.len() as u32);
    out.put_slice(bytes);
}

fn encode_properties(props: &[(String, Amf0Value)], out: &mut BytesMut) {
    for (key, value) in props {
        let key = truncate_str(key, u16::MAX as usize);
        out.put_u16(key.len() as u16);
        out.put_slice(key.as_bytes());
        value.encode(out);
    }
    out.put_u16(0);
    out.put_u8(MARKER_OBJECT_END);
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Decodes one value from the front of `buf` and advances `buf` past it.
///
/// On error `buf` is left somewhere inside the bad value; callers drop the message.
pub fn decode(buf: &mut &[u8]) -> Result<Amf0Value, Amf0Error> {
    let mut budget = MAX_VALUES;
    decode_value(buf, 0, &mut budget)
}

/// Decodes every value in `buf` (an RTMP command or data message body).
///
/// The [`MAX_VALUES`] budget covers the whole buffer.
pub fn decode_all(buf: &[u8]) -> Result<Vec<Amf0Value>, Amf0Error> {
    let mut rest = buf;
    let mut budget = MAX_VALUES;
    let mut values = Vec::new();
    while !rest.is_empty() {
        values.push(decode_value(&mut rest, 0, &mut budget)?);
    }
    Ok(values)
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], Amf0Error> {
    if buf.len() < n {
        return Err(Amf0Error::Truncated);
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Ok(head)
}

fn take_array<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], Amf0Error> {
    let mut a = [0u8; N];
    a.copy_from_slice(take(buf, N)?);
    Ok(a)
}

fn read_u8(buf: &mut &[u8]) -> Result<u8, Amf0Error> {
    Ok(take_array::<1>(buf)?[0])
}

fn read_u16(buf: &mut &[u8]) -> Result<u16, Amf0Error> {
    Ok(u16::from_be_bytes(take_array(buf)?))
}

fn read_u32(buf: &mut &[u8]) -> Result<u32, Amf0Error> {
    Ok(u32::from_be_bytes(take_array(buf)?))
}

fn read_f64(buf: &mut &[u8]) -> Result<f64, Amf0Error> {
    Ok(f64::from_be_bytes(take_array(buf)?))
}

/// Reads `len` bytes as text. Invalid UTF-8 is replaced, not rejected: some encoders
/// write Latin-1 stream names, and refusing them gains nothing.
fn read_text(buf: &mut &[u8], len: usize) -> Result<String, Amf0Error> {
    let bytes = take(buf, len)?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn spend(budget: &mut usize) -> Result<(), Amf0Error> {
    *budget = budget.checked_sub(1).ok_or(Amf0Error::TooManyValues)?;
    Ok(())
}

fn decode_value(buf: &mut &[u8], depth: usize, budget: &mut usize) -> Result<Amf0Value, Amf0Error> {
    spend(budget)?;
    let marker = read_u8(buf)?;
    Ok(match marker {
        MARKER_NUMBER => Amf0Value::Number(read_f64(buf)?),
        MARKER_BOOLEAN => Amf0Value::Boolean(read_u8(buf)? != 0),
        MARKER_STRING => {
            let len = usize::from(read_u16(buf)?);
            Amf0Value::String(read_text(buf, len)?)
        }
        MARKER_OBJECT => Amf0Value::Object(decode_properties(buf, depth + 1, budget, false)?),
        MARKER_TYPED_OBJECT => {
            let len = usize::from(read_u16(buf)?);
            take(buf, len)?; // the class name: we have no classes to map it to
            Amf0Value::Object(decode_properties(buf, depth + 1, budget, false)?)
        }
        MARKER_NULL => Amf0Value::Null,
        MARKER_UNDEFINED | MARKER_UNSUPPORTED => Amf0Value::Undefined,
        MARKER_ECMA_ARRAY => {
            // The count is a hint that encoders get wrong; the end marker is authoritative.
            read_u32(buf)?;
            Amf0Value::EcmaArray(decode_properties(buf, depth + 1, budget, true)?)
        }
        MARKER_STRICT_ARRAY => {
            if depth + 1 > MAX_DEPTH {
                return Err(Amf0Error::TooDeep);
            }
            let count = read_u32(buf)?;
            // No with_capacity(count): the count is the peer's word. Each element takes at
            // least one input byte, so a lying count runs into `Truncated` quickly.
            let mut items = Vec::new();
            for _ in 0..count {
                items.push(decode_value(buf, depth + 1, budget)?);
            }
            Amf0Value::StrictArray(items)
        }
        MARKER_DATE => {
            let millis = read_f64(buf)?;
            let tz = i16::from_be_bytes(take_array(buf)?);
            Amf0Value::Date { millis, tz }
        }
        MARKER_LONG_STRING | MARKER_XML_DOCUMENT => {
            let len = read_u32(buf)?;
            let len = usize::try_from(len).map_err(|_| Amf0Error::Truncated)?;
            Amf0Value::LongString(read_text(buf, len)?)
        }
        MARKER_OBJECT_END => return Err(Amf0Error::StrayObjectEnd),
        MARKER_REFERENCE => {
            return Err(Amf0Error::Unsupported {
                marker,
                what: "reference",
            });
        }
        MARKER_MOVIECLIP => {
            return Err(Amf0Error::Unsupported {
                marker,
                what: "movie clip",
            });
        }
        MARKER_RECORDSET => {
            return Err(Amf0Error::Unsupported {
                marker,
                what: "record set",
            });
        }
        MARKER_AVMPLUS => {
            return Err(Amf0Error::Unsupported {
                marker,
                what: "AMF3 value",
            });
        }
        other => return Err(Amf0Error::UnknownMarker(other)),
    })
}

/// Reads `key, value` pairs up to the empty key + 0x09 end marker.
///
/// `lenient_end`: ECMA arrays from some encoders end with the buffer instead of the end
/// marker; accept that for them (only at a key boundary).
fn decode_properties(
    buf: &mut &[u8],
    depth: usize,
    budget: &mut usize,
    lenient_end: bool,
) -> Result<Vec<(String, Amf0Value)>, Amf0Error> {
    if depth > MAX_DEPTH {
        return Err(Amf0Error::TooDeep);
    }
    let mut props = Vec::new();
    loop {
        if lenient_end && buf.is_empty() {
            return Ok(props);
        }
        let key_len = usize::from(read_u16(buf)?);
        if key_len == 0 {
            if buf.first() == Some(&MARKER_OBJECT_END) {
                take(buf, 1)?;
                return Ok(props);
            }
            if lenient_end && buf.is_empty() {
                return Ok(props);
            }
        }
        let key = read_text(buf, key_len)?;
        let value = decode_value(buf, depth, budget)?;
        props.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc(v: &Amf0Value) -> Vec<u8> {
        let mut out = BytesMut::new();
        v.encode(&mut out);
        out.to_vec()
    }

    #[test]
    fn number_and_string_bytes_match_the_spec() {
        assert_eq!(
            enc(&Amf0Value::Number(1.0)),
            [0, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(enc(&"ab".into()), [2, 0, 2, b'a', b'b']);
        assert_eq!(enc(&Amf0Value::Null), [5]);
        assert_eq!(
            enc(&Amf0Value::Object(vec![("a".into(), true.into())])),
            [3, 0, 1, b'a', 1, 1, 0, 0, 9]
        );
    }

    #[test]
    fn connect_command_round_trips() {
        let values = vec![
            Amf0Value::from("connect"),
            Amf0Value::Number(1.0),
            Amf0Value::Object(vec![
                ("app".into(), "live".into()),
                ("tcUrl".into(), "rtmp://h/live".into()),
                ("fpad".into(), false.into()),
            ]),
        ];
        let mut out = BytesMut::new();
        for v in &values {
            v.encode(&mut out);
        }
        let back = decode_all(&out).expect("decodes");
        assert_eq!(back, values);
        assert_eq!(back[2].get("app").and_then(Amf0Value::as_str), Some("live"));
    }

    #[test]
    fn decode_advances_the_slice() {
        let bytes = [5u8, 1, 1, 6];
        let mut rest = &bytes[..];
        assert_eq!(decode(&mut rest), Ok(Amf0Value::Null));
        assert_eq!(decode(&mut rest), Ok(Amf0Value::Boolean(true)));
        assert_eq!(rest, &[6]);
    }

    #[test]
    fn long_strings_encode_as_long_string() {
        let s = "x".repeat(70_000);
        let bytes = enc(&Amf0Value::String(s.clone()));
        assert_eq!(bytes[0], MARKER_LONG_STRING);
        assert_eq!(decode_all(&bytes), Ok(vec![Amf0Value::LongString(s)]));
    }

    #[test]
    fn ecma_array_without_end_marker_is_accepted() {
        let bytes = [8u8, 0, 0, 0, 1, 0, 1, b'k', 5];
        assert_eq!(
            decode_all(&bytes),
            Ok(vec![Amf0Value::EcmaArray(vec![(
                "k".into(),
                Amf0Value::Null
            )])])
        );
    }

    #[test]
    fn nesting_bomb_is_rejected() {
        // 10,000 nested strict arrays of one element each.
        let mut bytes = Vec::new();
        for _ in 0..10_000 {
            bytes.extend_from_slice(&[0x0A, 0, 0, 0, 1]);
        }
        bytes.push(5);
        assert_eq!(decode_all(&bytes), Err(Amf0Error::TooDeep));
        let mut objects = Vec::new();
        for _ in 0..10_000 {
            objects.extend_from_slice(&[0x03, 0, 1, b'a']);
        }
        assert_eq!(decode_all(&objects), Err(Amf0Error::TooDeep));
    }

    #[test]
    fn depth_limit_is_exact() {
        let mut ok = Vec::new();
        for _ in 0..MAX_DEPTH {
            ok.extend_from_slice(&[0x0A, 0, 0, 0, 1]);
        }
        ok.push(5);
        assert!(decode_all(&ok).is_ok());
        let mut deep = vec![0x0A, 0, 0, 0, 1];
        deep.extend_from_slice(&ok);
        assert_eq!(decode_all(&deep), Err(Amf0Error::TooDeep));
    }

    #[test]
    fn huge_counts_do_not_preallocate() {
        // Claims 4 billion elements, carries none.
        assert_eq!(
            decode_all(&[0x0A, 0xff, 0xff, 0xff, 0xff]),
            Err(Amf0Error::Truncated)
        );
        assert_eq!(
            decode_all(&[0x0C, 0xff, 0xff, 0xff, 0xff, b'a']),
            Err(Amf0Error::Truncated)
        );
    }

    #[test]
    fn value_count_is_bounded() {
        let mut bytes = vec![0x0A, 0xff, 0xff, 0xff, 0xff];
        bytes.extend(std::iter::repeat_n(5u8, MAX_VALUES + 10));
        assert_eq!(decode_all(&bytes), Err(Amf0Error::TooManyValues));
    }

    #[test]
    fn bad_markers_are_errors() {
        assert_eq!(
            decode_all(&[0x07, 0, 1]),
            Err(Amf0Error::Unsupported {
                marker: 7,
                what: "reference"
            })
        );
        assert_eq!(decode_all(&[0x42]), Err(Amf0Error::UnknownMarker(0x42)));
        assert_eq!(decode_all(&[0x09]), Err(Amf0Error::StrayObjectEnd));
        assert_eq!(decode_all(&[0x00, 1, 2]), Err(Amf0Error::Truncated));
        assert!(matches!(
            decode_all(&[0x11, 0]),
            Err(Amf0Error::Unsupported { .. })
        ));
    }

    fn arb_value() -> impl Strategy<Value = Amf0Value> {
        let leaf = prop_oneof![
            any::<f64>()
                .prop_filter("NaN != NaN", |f| !f.is_nan())
                .prop_map(Amf0Value::Number),
            any::<bool>().prop_map(Amf0Value::Boolean),
            ".{0,20}".prop_map(Amf0Value::String),
            Just(Amf0Value::Null),
            Just(Amf0Value::Undefined),
            (any::<i32>(), any::<i16>()).prop_map(|(m, tz)| Amf0Value::Date {
                millis: f64::from(m),
                tz
            }),
            ".{0,20}".prop_map(Amf0Value::LongString),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(("[a-z]{1,8}", inner.clone()), 0..6)
                    .prop_map(Amf0Value::Object),
                prop::collection::vec(("[a-z]{1,8}", inner.clone()), 0..6)
                    .prop_map(Amf0Value::EcmaArray),
                prop::collection::vec(inner, 0..6).prop_map(Amf0Value::StrictArray),
            ]
        })
    }

    proptest! {
        #[test]
        fn round_trip(values in prop::collection::vec(arb_value(), 0..5)) {
            let mut out = BytesMut::new();
            for v in &values {
                v.encode(&mut out);
            }
            prop_assert_eq!(decode_all(&out).expect("own encoding decodes"), values);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_all(&bytes);
        }
    }
}
