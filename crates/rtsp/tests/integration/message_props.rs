//! Property tests of the wire layer: requests survive encode → parse whatever their
//! header order, name case and body; a byte stream of requests and interleaved frames
//! reads back the same whatever the read boundaries.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_rtsp::{encode_interleaved, Incoming, MessageReader, Method, Request};

fn arb_method() -> impl Strategy<Value = Method> {
    prop_oneof![
        proptest::sample::select(Method::SUPPORTED.to_vec()),
        "[A-Z_]{1,12}".prop_map(|s| Method::from_token(&s)),
    ]
}

/// A header name in random case.
fn arb_name() -> impl Strategy<Value = String> {
    (
        proptest::sample::select(vec![
            "CSeq",
            "Session",
            "Transport",
            "User-Agent",
            "Accept",
            "Range",
            "X-Custom-Thing",
        ]),
        any::<u64>(),
    )
        .prop_map(|(name, bits)| {
            name.chars()
                .enumerate()
                .map(|(i, c)| {
                    if bits >> (i % 64) & 1 == 1 {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    }
                })
                .collect()
        })
}

fn arb_request() -> impl Strategy<Value = Request> {
    (
        arb_method(),
        "rtsp://[a-z0-9.]{1,20}(:[0-9]{1,5})?(/[A-Za-z0-9._=-]{1,12}){0,4}(\\?[a-z0-9=&]{0,12})?",
        proptest::collection::vec((arb_name(), "[ -~]{0,40}"), 0..12),
        proptest::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(|(method, uri, headers, body)| {
            let mut req = Request::new(method, uri);
            for (n, v) in headers {
                // Values are trimmed on parse; content-length is ours to write.
                if !n.eq_ignore_ascii_case("content-length") {
                    req.headers.append(n, v.trim().to_string());
                }
            }
            if !body.is_empty() {
                req.headers.append("content-LENGTH", body.len().to_string());
            }
            req.body = Bytes::from(body);
            req
        })
}

#[derive(Debug, Clone)]
enum Item {
    Request(Request),
    Frame(u8, Vec<u8>),
}

fn arb_item() -> impl Strategy<Value = Item> {
    prop_oneof![
        arb_request().prop_map(Item::Request),
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..1500))
            .prop_map(|(c, p)| Item::Frame(c, p)),
    ]
}

proptest! {
    #[test]
    fn request_round_trips(req in arb_request()) {
        let mut buf = BytesMut::new();
        req.encode(&mut buf);
        let got = MessageReader::default().read(&mut buf).expect("valid").expect("complete");
        prop_assert_eq!(got, Incoming::Request(req));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn mixed_stream_reads_back_at_any_split(
        items in proptest::collection::vec(arb_item(), 1..12),
        cuts in proptest::collection::vec(1usize..700, 1..40),
    ) {
        let mut wire = BytesMut::new();
        for item in &items {
            match item {
                Item::Request(r) => r.encode(&mut wire),
                Item::Frame(c, p) => encode_interleaved(*c, p, &mut wire).expect("fits"),
            }
        }
        let wire = wire.freeze();
        let mut reader = MessageReader::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        let mut cut = cuts.iter().cycle();
        while at < wire.len() {
            let n = (*cut.next().expect("cycle")).min(wire.len() - at);
            buf.extend_from_slice(&wire[at..at + n]);
            at += n;
            while let Some(m) = reader.read(&mut buf).expect("valid stream") {
                got.push(m);
            }
        }
        prop_assert!(buf.is_empty());
        let want: Vec<Incoming> = items
            .into_iter()
            .map(|i| match i {
                Item::Request(r) => Incoming::Request(r),
                Item::Frame(channel, p) => Incoming::Interleaved { channel, payload: Bytes::from(p) },
            })
            .collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_reader(bytes in proptest::collection::vec(any::<u8>(), 0..4096), split in 1usize..300) {
        let mut reader = MessageReader::default();
        let mut buf = BytesMut::new();
        'outer: for part in bytes.chunks(split) {
            buf.extend_from_slice(part);
            loop {
                match reader.read(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'outer,
                }
            }
        }
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = MessageReader::default().read_response(&mut buf);
    }
}
