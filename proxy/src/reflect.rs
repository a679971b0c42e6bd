//! An injected value that a response header carries back, found and put back as its placeholder
//! (part of the `intercept` stage): the sandbox must never read a value it was given a
//! placeholder for, also when the origin reflects it.
//!
//! What is found, in every response header value:
//! - the value as sent, each byte as itself or percent-encoded (a redirect keeping the query
//!   string, a header reflecting the credential) — the span is replaced by the placeholder;
//! - the value base64-encoded (standard or URL alphabet, padded or not, also at any byte offset
//!   inside a longer encoded run such as `base64("user:" + value)` or an encoded cookie) and
//!   hex-encoded (lower or upper case), each character again as itself or percent-encoded — the
//!   whole run of the encoding's characters that holds it is replaced by the placeholder, since
//!   what the run decodes to would hold the value.
//!
//! Values shorter than [`MIN_ENCODED`] bytes are looked for as sent only: their encodings are
//! too short to tell from chance. Bodies are not read (the README's threat model says what that
//! leaves).
//!
//! Pure: no I/O; [`redact`] is called on each intercepted response's head.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use hyper::header::HeaderValue;

use crate::secret::SecretValue;

/// Values at least this long (in bytes) are also looked for encoded.
pub(crate) const MIN_ENCODED: usize = 8;

/// The characters an encoded run is made of (padding aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Alphabet {
    /// `A-Z a-z 0-9 + /`, `=` padding.
    Base64,
    /// `A-Z a-z 0-9 - _`, `=` padding.
    Base64Url,
    /// `0-9 a-f A-F`.
    Hex,
}

impl Alphabet {
    fn holds(self, b: u8) -> bool {
        match self {
            Alphabet::Base64 => b.is_ascii_alphanumeric() || b == b'+' || b == b'/',
            Alphabet::Base64Url => b.is_ascii_alphanumeric() || b == b'-' || b == b'_',
            Alphabet::Hex => b.is_ascii_hexdigit(),
        }
    }

    fn padded(self) -> bool {
        match self {
            Alphabet::Base64 | Alphabet::Base64Url => true,
            Alphabet::Hex => false,
        }
    }
}

/// One encoded spelling of a value: text that only the value makes, in an alphabet.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Spelling {
    text: Vec<u8>,
    alphabet: Alphabet,
}

/// The encoded spellings of `value` looked for (none below [`MIN_ENCODED`] bytes).
///
/// Base64 writes 6 bits a character, so what a value turns into depends on where it starts in
/// the encoded data (its byte offset modulo 3): for each of the three offsets, the characters
/// made of the value's bits alone (those sharing bits with a neighbour byte are left out). A
/// value encoded by itself, padded or not, holds the offset-0 spelling.
fn spellings(value: &[u8]) -> Vec<Spelling> {
    let mut out: Vec<Spelling> = Vec::new();
    if value.len() < MIN_ENCODED {
        return out;
    }
    for offset in 0..3usize {
        let mut data = vec![0u8; offset];
        data.extend_from_slice(value);
        // Character c covers bits [6c, 6c + 6); the value's bits are [8 offset, 8 len).
        let first = (8 * offset).div_ceil(6);
        let end = 8 * data.len() / 6;
        for (engine, alphabet) in
            [(&STANDARD_NO_PAD, Alphabet::Base64), (&URL_SAFE_NO_PAD, Alphabet::Base64Url)]
        {
            let text = engine.encode(&data).into_bytes()[first..end].to_vec();
            // Without `+ /` (or `- _`) both alphabets spell it alike: one search will do.
            if !out.iter().any(|s| s.text == text) {
                out.push(Spelling { text, alphabet });
            }
        }
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let lower: Vec<u8> =
        value.iter().flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]).collect();
    out.push(Spelling { text: lower.to_ascii_uppercase(), alphabet: Alphabet::Hex });
    out.push(Spelling { text: lower, alphabet: Alphabet::Hex });
    out
}

/// Puts the placeholder back wherever a header value carries an injected value (see the module
/// doc for the spellings). `injected` holds each value and its placeholder.
pub(crate) fn redact(headers: &mut hyper::HeaderMap, injected: &[(SecretValue, String)]) {
    if injected.is_empty() || headers.is_empty() {
        return;
    }
    let spelled: Vec<(&[u8], &[u8], Vec<Spelling>)> = injected
        .iter()
        .map(|(v, ph)| (v.expose().as_bytes(), ph.as_bytes(), spellings(v.expose().as_bytes())))
        .collect();
    for value in headers.values_mut() {
        let mut bytes = value.as_bytes().to_vec();
        let mut changed = false;
        for (secret, ph, encoded) in &spelled {
            if let Some(out) = replace_sent(&bytes, secret, ph) {
                bytes = out;
                changed = true;
            }
            if let Some(out) = replace_encoded(&bytes, encoded, ph) {
                bytes = out;
                changed = true;
            }
        }
        if changed {
            // The placeholder is header-safe text, so the result is a valid value; if not, the
            // header goes empty rather than with the value.
            *value = HeaderValue::from_bytes(&bytes).unwrap_or(HeaderValue::from_static(""));
        }
    }
}

/// `text` with each spelling of `secret` as sent replaced by `ph`; `None` when there is none.
/// One pass, left to right: a placeholder put in is never searched again (a value could be part
/// of its own placeholder).
fn replace_sent(text: &[u8], secret: &[u8], ph: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut changed = false;
    let mut i = 0;
    while i < text.len() {
        match echoed_at(&text[i..], secret) {
            Some(len) => {
                out.extend_from_slice(ph);
                i += len;
                changed = true;
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    changed.then_some(out)
}

/// `text` with each encoded run that holds one of `spellings` replaced by `ph`; `None` when
/// there is none.
fn replace_encoded(text: &[u8], spellings: &[Spelling], ph: &[u8]) -> Option<Vec<u8>> {
    if spellings.is_empty() {
        return None;
    }
    // Most positions start none of the spellings: one table look-up tells (every response head
    // of an intercepted host is searched).
    let mut starts = [false; 256];
    starts[usize::from(b'%')] = true;
    for s in spellings {
        starts[usize::from(s.text[0])] = true;
    }
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        if !starts[usize::from(text[i])] {
            i += 1;
            continue;
        }
        let hit = spellings.iter().find_map(|s| echoed_at(&text[i..], &s.text).map(|n| (s, n)));
        let Some((s, n)) = hit else {
            i += 1;
            continue;
        };
        let run = run_around(text, i, i + n, s.alphabet);
        match runs.last_mut() {
            // A run reaching back over the previous one (two alphabets, one stretch): one.
            Some(last) if run.start <= last.end => last.end = last.end.max(run.end),
            _ => runs.push(run.clone()),
        }
        i = run.end;
    }
    if runs.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    for r in runs {
        out.extend_from_slice(&text[at..r.start]);
        out.extend_from_slice(ph);
        at = r.end;
    }
    out.extend_from_slice(&text[at..]);
    Some(out)
}

/// The run of `alphabet`'s characters (each as itself or percent-encoded, padding included)
/// around `text[start..end]`.
fn run_around(
    text: &[u8],
    mut start: usize,
    mut end: usize,
    alphabet: Alphabet,
) -> std::ops::Range<usize> {
    loop {
        if start >= 1 && alphabet.holds(text[start - 1]) {
            start -= 1;
        } else if start >= 3
            && text[start - 3] == b'%'
            && percent(&text[start - 3..]).is_some_and(|b| alphabet.holds(b))
        {
            start -= 3;
        } else {
            break;
        }
    }
    let mut padding = 0;
    loop {
        let (byte, len) = match text.get(end) {
            Some(b'%') => match percent(&text[end..]) {
                Some(b) => (b, 3),
                None => break,
            },
            Some(&b) => (b, 1),
            None => break,
        };
        if padding == 0 && alphabet.holds(byte) {
            end += len;
        } else if byte == b'=' && alphabet.padded() && padding < 2 {
            padding += 1;
            end += len;
        } else {
            break;
        }
    }
    start..end
}

/// The byte a `%XX` at the start of `text` stands for.
fn percent(text: &[u8]) -> Option<u8> {
    let hex = |k: usize| text.get(k).and_then(|c| (*c as char).to_digit(16));
    match (text.first(), hex(1), hex(2)) {
        (Some(b'%'), Some(hi), Some(lo)) => Some((hi * 16 + lo) as u8),
        _ => None,
    }
}

/// The length of `secret` at the start of `text`, each byte as itself or percent-encoded (either
/// case of hex digits), if it is there.
fn echoed_at(text: &[u8], secret: &[u8]) -> Option<usize> {
    if secret.is_empty() {
        return None;
    }
    let mut j = 0;
    for &b in secret {
        if text.get(j) == Some(&b) {
            j += 1;
            continue;
        }
        match percent(&text[j.min(text.len())..]) {
            Some(p) if p == b => j += 3,
            _ => return None,
        }
    }
    Some(j)
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    use super::*;

    const PH: &str = "sandgate-placeholder-k";

    fn redacted(value: &str, header: &str) -> String {
        let mut h = hyper::HeaderMap::new();
        h.insert("x-echo", HeaderValue::from_str(header).unwrap());
        redact(&mut h, &[(SecretValue::for_test(value), PH.to_owned())]);
        h["x-echo"].to_str().unwrap().to_owned()
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn echoed_values_in_response_headers_become_placeholders() {
        let mut h = hyper::HeaderMap::new();
        h.insert("location", HeaderValue::from_static("/x?k=a%2Bb%2fc&j=a+b/c"));
        h.insert("x-echo", HeaderValue::from_static("placeholder placeholder"));
        let injected = [
            (SecretValue::for_test("a+b/c"), "sandgate-placeholder-k".to_owned()),
            // A value that is part of its own placeholder: replaced once, no loop.
            (SecretValue::for_test("placeholder"), "sandgate-placeholder-p".to_owned()),
        ];
        redact(&mut h, &injected);
        assert_eq!(
            h["location"],
            "/x?k=sandgate-sandgate-placeholder-p-k&j=sandgate-sandgate-placeholder-p-k"
        );
        assert_eq!(h["x-echo"], "sandgate-placeholder-p sandgate-placeholder-p");
    }

    /// Every encoding the module doc names, by itself and inside other text; the value has bytes
    /// whose base64 differs between the alphabets (`>` and `?` make `+`/`-` and `/`/`_`).
    #[test]
    fn encoded_values_become_placeholders() {
        let value = "sk-live>>>???-0123456789abcde";
        let v = value.as_bytes();
        let std_pad = STANDARD.encode(v);
        let std_raw = STANDARD_NO_PAD.encode(v);
        let url_pad = URL_SAFE.encode(v);
        let url_raw = URL_SAFE_NO_PAD.encode(v);
        assert!(std_pad.ends_with('=') && std_raw != url_raw, "the table tests what it says");
        let user = |prefix: &str| STANDARD.encode(format!("{prefix}{value}"));
        let rows: Vec<(&str, String, String)> = vec![
            ("base64", std_pad.clone(), PH.into()),
            ("base64 unpadded", std_raw.clone(), PH.into()),
            ("base64url", url_pad.clone(), PH.into()),
            ("base64url unpadded", url_raw.clone(), PH.into()),
            ("hex", hex(v), PH.into()),
            ("HEX", hex(v).to_uppercase(), PH.into()),
            ("in a scheme", format!("Basic {std_pad}"), format!("Basic {PH}")),
            ("a cookie", format!("s={url_raw}; Path=/"), format!("s={PH}; Path=/")),
            ("offset 2 in a run", user("u:"), PH.into()),
            ("offset 0 in a run", user("us:"), PH.into()),
            ("offset 1 in a run", user("usr:"), PH.into()),
            ("json in a run", STANDARD.encode(format!("{{\"t\":\"{value}\"}}")), PH.into()),
            (
                "percent-encoded base64 in a URL",
                format!(
                    "/cb?t={}&n=1",
                    std_pad.replace('+', "%2B").replace('/', "%2f").replace('=', "%3D")
                ),
                format!("/cb?t={PH}&n=1"),
            ),
            ("two of them", format!("{} {}", hex(v), url_raw), format!("{PH} {PH}")),
            ("as sent", format!("Bearer {value}"), format!("Bearer {PH}")),
        ];
        for (what, header, want) in rows {
            assert_eq!(redacted(value, &header), want, "{what}: {header}");
        }
    }

    /// The same rows with another value in them stay as they are (the search is for the value,
    /// not for anything that looks encoded), and so do values too short to be told from chance.
    #[test]
    fn other_encoded_text_and_short_values_are_left_alone() {
        let value = "sk-live-0123456789abcdef";
        let other = "sk-live-0123456789abcdeX";
        for header in [
            STANDARD.encode(other),
            URL_SAFE_NO_PAD.encode(other),
            hex(other.as_bytes()),
            format!("Basic {}", STANDARD.encode(format!("u:{other}"))),
            "max-age=31536000; includeSubDomains".into(),
        ] {
            assert_eq!(redacted(value, &header), header);
        }
        let short = "s3cr3t";
        assert!(short.len() < MIN_ENCODED);
        let enc = STANDARD.encode(short);
        assert_eq!(redacted(short, &enc), enc);
        assert_eq!(redacted(short, &format!("t={short}")), format!("t={PH}"));
    }

    /// Control: matching the value as sent (what was there before) does not find any encoded
    /// form, so the rows above test the encoded search and nothing else.
    #[test]
    fn the_value_as_sent_is_not_found_in_its_encodings() {
        let value = b"sk-live>>>???-0123456789abcde";
        for enc in [STANDARD.encode(value), URL_SAFE_NO_PAD.encode(value), hex(value)] {
            assert_eq!(replace_sent(enc.as_bytes(), value, PH.as_bytes()), None, "{enc}");
        }
    }

    #[test]
    fn runs_stop_at_characters_outside_the_alphabet_and_after_padding() {
        let rows: &[(&str, Alphabet, usize, usize, &str)] = &[
            ("a=QUJD; b", Alphabet::Base64, 2, 6, "QUJD"),
            ("x:QUI=QUJD", Alphabet::Base64, 2, 4, "QUI="),
            ("x:QQ==, y", Alphabet::Base64, 2, 4, "QQ=="),
            ("/t=a%2Bb%3D&n", Alphabet::Base64, 3, 4, "a%2Bb%3D"),
            ("zz00ff.", Alphabet::Hex, 2, 4, "00ff"),
            ("a-b_c+d", Alphabet::Base64Url, 2, 3, "a-b_c"),
        ];
        for (text, alphabet, start, end, want) in rows {
            let r = run_around(text.as_bytes(), *start, *end, *alphabet);
            assert_eq!(&text[r], *want, "{text}");
        }
    }
}
