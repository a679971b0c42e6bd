//! Instants on the wire as milliseconds since the Unix epoch: the one time format of every JSON
//! document sandgate prints or exchanges (the store keeps the same), instead of serde's default
//! `{"secs_since_epoch":…,"nanos_since_epoch":…}` for `SystemTime`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serializer};

/// Milliseconds since the epoch (negative before it; saturating).
pub fn to_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The instant `ms` milliseconds after (before, if negative) the epoch.
pub fn from_ms(ms: i64) -> SystemTime {
    let d = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 { UNIX_EPOCH + d } else { UNIX_EPOCH - d }
}

/// `#[serde(with = "epoch_ms")]` for a `SystemTime`.
pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(to_ms(*t))
}

/// `#[serde(with = "epoch_ms")]` for a `SystemTime`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
    i64::deserialize(d).map(from_ms)
}

/// `#[serde(with = "epoch_ms::option")]` for an `Option<SystemTime>` (`null` when absent).
pub mod option {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes `Some(t)` as milliseconds, `None` as `null`.
    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&super::to_ms(*t)),
            None => s.serialize_none(),
        }
    }

    /// Reads milliseconds or `null`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.map(super::from_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_in_milliseconds() {
        for ms in [0, 1, 1_764_000_000_123, -5_000] {
            assert_eq!(to_ms(from_ms(ms)), ms);
        }
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct T {
            #[serde(with = "super")]
            at: SystemTime,
            #[serde(with = "super::option")]
            until: Option<SystemTime>,
        }
        let t = T { at: from_ms(1_500), until: None };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(text, r#"{"at":1500,"until":null}"#);
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t);
    }
}
