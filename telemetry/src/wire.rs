//! Protocol Buffers' wire format, the few parts OTLP's messages need: varints, 64-bit fixed
//! numbers, doubles and length-delimited fields (strings, bytes, nested messages, packed lists).
//!
//! A message is written into a `Vec<u8>`; a nested one is written into its own buffer first and
//! then copied in behind its length, which for the small messages of a batch costs less than
//! computing every length ahead.

/// The wire types used here.
#[derive(Clone, Copy)]
enum WireType {
    Varint = 0,
    Fixed64 = 1,
    Len = 2,
}

/// Writes `v` as a base-128 varint.
pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: WireType) {
    varint(out, (u64::from(field) << 3) | wire as u64);
}

/// A `uint64`, `uint32`, `int32` (non-negative), enum or `bool` field; proto3 leaves zero out.
pub(crate) fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, WireType::Varint);
        varint(out, v);
    }
}

/// A `bool` field written even when false (inside a `oneof`, where presence matters).
pub(crate) fn bool_present(out: &mut Vec<u8>, field: u32, v: bool) {
    key(out, field, WireType::Varint);
    varint(out, u64::from(v));
}

/// An `int64` field written even when zero (inside a `oneof`).
pub(crate) fn int_present(out: &mut Vec<u8>, field: u32, v: i64) {
    key(out, field, WireType::Varint);
    varint(out, v as u64);
}

/// A `fixed64` (or `sfixed64`) field; proto3 leaves zero out.
pub(crate) fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, WireType::Fixed64);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A `fixed64` (or `sfixed64`) field written even when zero (inside a `oneof`).
pub(crate) fn fixed64_present(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, WireType::Fixed64);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A `double` field written even when zero (inside a `oneof`, or an `optional` one).
pub(crate) fn double_present(out: &mut Vec<u8>, field: u32, v: f64) {
    key(out, field, WireType::Fixed64);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A length-delimited field (`string`, `bytes`, a nested message) written even when empty.
pub(crate) fn bytes_present(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    key(out, field, WireType::Len);
    varint(out, v.len() as u64);
    out.extend_from_slice(v);
}

/// A `string` field; proto3 leaves the empty string out.
pub(crate) fn string(out: &mut Vec<u8>, field: u32, v: &str) {
    if !v.is_empty() {
        bytes_present(out, field, v.as_bytes());
    }
}

/// A nested message, written by `body` into a buffer of its own.
pub(crate) fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    body(&mut inner);
    bytes_present(out, field, &inner);
}

/// A packed `repeated fixed64` field.
pub(crate) fn packed_fixed64(out: &mut Vec<u8>, field: u32, vs: &[u64]) {
    if !vs.is_empty() {
        let inner: Vec<u8> = vs.iter().flat_map(|v| v.to_le_bytes()).collect();
        bytes_present(out, field, &inner);
    }
}

/// A packed `repeated double` field.
pub(crate) fn packed_double(out: &mut Vec<u8>, field: u32, vs: &[f64]) {
    if !vs.is_empty() {
        let inner: Vec<u8> = vs.iter().flat_map(|v| v.to_le_bytes()).collect();
        bytes_present(out, field, &inner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_keys_are_as_the_protobuf_encoding_guide_writes_them() {
        // (value, bytes) from the guide: 1, 150, 300 and the ten bytes of -1 as int64.
        for (v, bytes) in [
            (1u64, vec![0x01]),
            (150, vec![0x96, 0x01]),
            (300, vec![0xac, 0x02]),
            (u64::MAX, vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        ] {
            let mut out = Vec::new();
            varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
        }
        // Field 1 = 150: 08 96 01; field 2 = "testing": 12 07 74 65 73 74 69 6e 67.
        let mut out = Vec::new();
        uint(&mut out, 1, 150);
        string(&mut out, 2, "testing");
        assert_eq!(out, b"\x08\x96\x01\x12\x07testing");
        // Zero and empty values are left out, unless presence matters.
        let mut out = Vec::new();
        uint(&mut out, 1, 0);
        string(&mut out, 2, "");
        fixed64(&mut out, 3, 0);
        assert!(out.is_empty());
        int_present(&mut out, 3, 0);
        assert_eq!(out, [0x18, 0x00]);
    }
}
