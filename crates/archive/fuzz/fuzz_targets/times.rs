//! The API's `from`/`to` and recording file names: never a panic; a parsed RFC 3339
//! time formats back to a time that parses to itself, and a parsed file name is the
//! name its id makes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_archive::{time, FileId};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ms) = time::parse(text) {
        if (0..253_402_300_800_000).contains(&ms) {
            assert_eq!(time::parse(&time::format_rfc3339(ms)), Ok(ms));
        }
    }
    if let Some(id) = FileId::parse("cam", text) {
        assert_eq!(id.file_name("cam"), text);
    }
});
