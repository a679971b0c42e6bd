//! Where alerts go: store events, `sandgate watch`, chat — each an [`AlertSink`].

use crate::Alert;

/// Receives alerts from an [`Aggregator`](crate::Aggregator). Implementations must not block for
/// long (queue and return); a failing sink loses its own alert, never the monitor.
pub trait AlertSink {
    /// Takes one alert.
    fn deliver(&mut self, alert: &Alert);
}

impl<F: FnMut(&Alert)> AlertSink for F {
    fn deliver(&mut self, alert: &Alert) {
        self(alert)
    }
}

/// A sink that keeps every alert (tests, batching).
#[derive(Debug, Default, Clone)]
pub struct VecSink {
    /// Alerts delivered so far.
    pub alerts: Vec<Alert>,
}

impl AlertSink for VecSink {
    fn deliver(&mut self, alert: &Alert) {
        self.alerts.push(alert.clone());
    }
}
