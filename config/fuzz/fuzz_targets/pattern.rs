//! Arbitrary text as a pattern, host and target: never a panic; a pattern that parses prints as
//! text that parses back to the same pattern; an allowed pattern is also a valid deny pattern.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandgate_config::{DomainPattern, Host, PatternUse, Target};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for usage in [PatternUse::Allow, PatternUse::Deny] {
        if let Ok(p) = DomainPattern::parse(text, usage) {
            let shown = p.to_string();
            let again = DomainPattern::parse(&shown, usage).expect("display must parse back");
            assert_eq!(again, p, "{text:?} -> {shown:?}");
        }
    }
    if DomainPattern::parse(text, PatternUse::Allow).is_ok() {
        assert!(DomainPattern::parse(text, PatternUse::Deny).is_ok());
    }
    if let Ok(h) = Host::parse(text) {
        let shown = h.to_string();
        assert_eq!(Host::parse(&shown).expect("host display must parse back"), h);
        assert!(shown.len() <= 255);
    }
    let _ = Target::parse(text);
    let _ = Target::parse_authority(text, None);
});
