#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(req)) = sluice_http::parse_request(data) {
        assert!(req.head_len + req.body.len() <= data.len());
        let _ = req.keep_alive();
        let _ = req.is_websocket_upgrade();
    }
});
