//! The counters exported as OTLP metrics: plain atomics, so counting on the proxy's path is one
//! relaxed add, and the exporter reads a snapshot when it sends them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::otlp::{HistogramPoint, Metric, MetricData, NumberPoint, Value};

/// What became of a request the proxy decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Let through.
    Allow,
    /// Refused by policy (a rule, a person, a time-out).
    Deny,
    /// Refused before any policy applied (malformed).
    Reject,
}

impl RequestOutcome {
    const ALL: [RequestOutcome; 3] =
        [RequestOutcome::Allow, RequestOutcome::Deny, RequestOutcome::Reject];

    /// The attribute value (`allow`, `deny`, `reject`).
    pub fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Allow => "allow",
            RequestOutcome::Deny => "deny",
            RequestOutcome::Reject => "reject",
        }
    }

    /// The proxy's word for it; `None` for another word.
    pub fn parse(s: &str) -> Option<RequestOutcome> {
        RequestOutcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// What became of a question put to a person.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuestionOutcome {
    /// It was asked.
    Asked,
    /// A person allowed it.
    Allow,
    /// A person denied it.
    Deny,
    /// Nobody answered in time (denied).
    TimeOut,
    /// Its sandbox ended first.
    Withdraw,
}

impl QuestionOutcome {
    const ALL: [QuestionOutcome; 5] = [
        QuestionOutcome::Asked,
        QuestionOutcome::Allow,
        QuestionOutcome::Deny,
        QuestionOutcome::TimeOut,
        QuestionOutcome::Withdraw,
    ];

    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionOutcome::Asked => "asked",
            QuestionOutcome::Allow => "allowed",
            QuestionOutcome::Deny => "denied",
            QuestionOutcome::TimeOut => "timed_out",
            QuestionOutcome::Withdraw => "withdrawn",
        }
    }
}

/// Upper bounds (seconds) of the answer-latency histogram's buckets: a person answers in
/// seconds to minutes.
pub const ANSWER_BOUNDS: [f64; 9] = [0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// The counters. Every method is a relaxed atomic add: safe and cheap on any thread.
#[derive(Debug, Default)]
pub struct Counters {
    requests: [AtomicU64; 3],
    questions: [AtomicU64; 5],
    answer_buckets: [AtomicU64; ANSWER_BOUNDS.len() + 1],
    answer_count: AtomicU64,
    answer_sum_us: AtomicU64,
    blocked_packets: AtomicU64,
    secrets_injected: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// `n` requests decided `outcome`.
    pub fn requests(&self, outcome: RequestOutcome, n: u64) {
        add(&self.requests[outcome as usize], n);
    }

    /// A question's step.
    pub fn question(&self, outcome: QuestionOutcome) {
        add(&self.questions[outcome as usize], 1);
    }

    /// A person answered after `waited`.
    pub fn answered_after(&self, waited: Duration) {
        let secs = waited.as_secs_f64();
        let bucket = ANSWER_BOUNDS.iter().position(|b| secs <= *b).unwrap_or(ANSWER_BOUNDS.len());
        add(&self.answer_buckets[bucket], 1);
        add(&self.answer_count, 1);
        add(&self.answer_sum_us, u64::try_from(waited.as_micros()).unwrap_or(u64::MAX));
    }

    /// `n` packets the firewall blocked.
    pub fn blocked_packets(&self, n: u64) {
        add(&self.blocked_packets, n);
    }

    /// `n` secrets put into requests by the proxy.
    pub fn secrets_injected(&self, n: u64) {
        add(&self.secrets_injected, n);
    }

    /// The metrics as they stand.
    pub fn snapshot(&self) -> Vec<Metric> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let one = |value: u64| vec![NumberPoint { attributes: Vec::new(), value }];
        vec![
            Metric {
                name: "sandgate.requests",
                description: "Requests the proxy decided, by decision.",
                unit: "{request}",
                data: MetricData::Counter(
                    RequestOutcome::ALL
                        .iter()
                        .map(|o| NumberPoint {
                            attributes: vec![("sandgate.decision", Value::from(o.as_str()))],
                            value: get(&self.requests[*o as usize]),
                        })
                        .collect(),
                ),
            },
            Metric {
                name: "sandgate.questions",
                description: "Questions put to a person, by what became of them.",
                unit: "{question}",
                data: MetricData::Counter(
                    QuestionOutcome::ALL
                        .iter()
                        .map(|o| NumberPoint {
                            attributes: vec![(
                                "sandgate.question.outcome",
                                Value::from(o.as_str()),
                            )],
                            value: get(&self.questions[*o as usize]),
                        })
                        .collect(),
                ),
            },
            Metric {
                name: "sandgate.question.answer.duration",
                description: "How long a person took to answer a question.",
                unit: "s",
                data: MetricData::Histogram(vec![HistogramPoint {
                    attributes: Vec::new(),
                    count: get(&self.answer_count),
                    sum: get(&self.answer_sum_us) as f64 / 1e6,
                    bounds: ANSWER_BOUNDS.to_vec(),
                    buckets: self.answer_buckets.iter().map(get).collect(),
                }]),
            },
            Metric {
                name: "sandgate.blocked_packets",
                description: "Packets the firewall blocked (direct connection attempts).",
                unit: "{packet}",
                data: MetricData::Counter(one(get(&self.blocked_packets))),
            },
            Metric {
                name: "sandgate.secrets.injected",
                description: "Secrets the proxy put into requests in place of placeholders.",
                unit: "{secret}",
                data: MetricData::Counter(one(get(&self.secrets_injected))),
            },
            Metric {
                name: "sandgate.telemetry.dropped",
                description: "Log records dropped because the export queue was full.",
                unit: "{record}",
                data: MetricData::Counter(one(get(&self.dropped))),
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_latencies_land_in_their_bucket() {
        let c = Counters::default();
        // (waited, bucket): a bound is inclusive; past the last bound is the last bucket.
        for (ms, bucket) in [(100, 0), (500, 0), (501, 1), (4_000, 3), (299_000, 8), (900_000, 9)] {
            let before = c.answer_buckets[bucket].load(Ordering::Relaxed);
            c.answered_after(Duration::from_millis(ms));
            assert_eq!(c.answer_buckets[bucket].load(Ordering::Relaxed), before + 1, "{ms} ms");
        }
        let Some(Metric { data: MetricData::Histogram(points), .. }) =
            c.snapshot().into_iter().find(|m| m.name == "sandgate.question.answer.duration")
        else {
            panic!("no histogram")
        };
        assert_eq!(points[0].count, 6);
        assert_eq!(points[0].buckets.iter().sum::<u64>(), 6);
        assert!((points[0].sum - 1_204.101).abs() < 1e-6, "{}", points[0].sum);
    }

    #[test]
    fn outcomes_round_trip_their_words() {
        for o in RequestOutcome::ALL {
            assert_eq!(RequestOutcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(RequestOutcome::parse("blocked"), None);
    }
}
