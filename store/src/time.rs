//! Wall-clock instants as stored: milliseconds since the Unix epoch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A point in time, in milliseconds since the Unix epoch (UTC), as the store keeps it.
///
/// Callers pass `now` explicitly to the queries that depend on it, so tests can move time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current time of the system clock (the epoch if the clock is before it).
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    /// Converts a [`SystemTime`], saturating at the epoch and at `i64::MAX` milliseconds.
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(_) => Timestamp(0),
        }
    }

    /// Milliseconds since the epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// This instant plus `d`, saturating.
    pub fn plus(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    /// This instant minus `d`, saturating.
    pub fn minus(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(ms))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Timestamp(i64::MAX).plus(Duration::from_secs(1)), Timestamp(i64::MAX));
        assert_eq!(Timestamp(i64::MIN).minus(Duration::from_secs(1)), Timestamp(i64::MIN));
        assert_eq!(Timestamp(1000).plus(Duration::from_millis(500)), Timestamp(1500));
        assert_eq!(Timestamp::from_system_time(UNIX_EPOCH - Duration::from_secs(5)), Timestamp(0));
    }
}
