//! Arbitrary bytes as a configuration file: an error or a checked file, never a panic; an error
//! always renders with a position inside the text.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match sandgate_config::parse_config(Path::new("fuzz.toml"), text, Some(Path::new("/home/f"))) {
        Ok(_) => {}
        Err(e) => {
            let _ = e.to_string();
            assert!(e.line <= text.lines().count() + 1);
        }
    }
});
