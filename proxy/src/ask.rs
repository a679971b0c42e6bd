//! Held requests: one question per (sandbox, host, port), shared by every request that waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandgate_config::{Host, Target};
use tokio::sync::watch;

use crate::traits::{ApprovalRequest, Approver, DenyReason, Ruling, SandboxId};

type Key = (SandboxId, Host, u16);

/// Questions in flight.
#[derive(Clone, Default)]
pub(crate) struct Asks {
    inflight: Arc<Mutex<HashMap<Key, watch::Sender<Option<Ruling>>>>>,
}

impl Asks {
    /// Asks `approver` about `question.target`, or joins the question already in flight for it.
    /// Returns the answer, or `Deny(TimedOut)` when `timeout` passes first.
    pub(crate) async fn ask(
        &self,
        approver: &Arc<dyn Approver>,
        question: ApprovalRequest,
        timeout: Duration,
    ) -> Ruling {
        let mut rx = {
            let mut map = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            let key = key(&question.sandbox, &question.target);
            match map.get(&key) {
                Some(tx) => tx.subscribe(),
                None => {
                    let (tx, rx) = watch::channel(None);
                    map.insert(key.clone(), tx.clone());
                    let (approver, asks) = (approver.clone(), self.clone());
                    // The question lives in its own task so that it survives the request that
                    // asked it (every waiter may hang up; the answer still becomes a grant).
                    tokio::spawn(async move {
                        let answer = tokio::time::timeout(timeout, approver.ask(question))
                            .await
                            .unwrap_or(Ruling::Deny(DenyReason::TimedOut));
                        // Forget the question before answering, so a request arriving after the
                        // answer asks afresh (or finds the grant) instead of reusing it.
                        asks.inflight.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                        let _ = tx.send(Some(answer));
                    });
                    rx
                }
            }
        };
        match rx.wait_for(Option::is_some).await {
            Ok(answer) => answer.clone().unwrap_or(Ruling::Deny(DenyReason::Denied)),
            // The asking task ended without an answer (it can only panic): fail closed.
            Err(_) => Ruling::Deny(DenyReason::Denied),
        }
    }

    /// Number of requests waiting for the answer about `target`.
    pub(crate) fn waiting(&self, sandbox: &SandboxId, target: &Target) -> usize {
        let map = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&key(sandbox, target)).map_or(0, |tx| tx.receiver_count())
    }

    /// Number of questions in flight.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn key(sandbox: &SandboxId, target: &Target) -> Key {
    (sandbox.clone(), target.host.clone(), target.port)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use sandgate_config::{DomainPattern, PatternUse, Rule, RuleSource};
    use tokio::sync::Notify;

    use super::*;
    use crate::traits::BoxFuture;

    struct Gate {
        asked: AtomicUsize,
        release: Notify,
    }

    impl Approver for Gate {
        fn ask(&self, q: ApprovalRequest) -> BoxFuture<'_, Ruling> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                self.release.notified().await;
                Ruling::Allow(Arc::new(Rule {
                    pattern: Some(
                        DomainPattern::parse(&q.target.host.to_string(), PatternUse::Allow)
                            .unwrap(),
                    ),
                    source: RuleSource::Grant("g1".into()),
                }))
            })
        }
    }

    #[tokio::test]
    async fn concurrent_asks_share_one_question() {
        let gate = Arc::new(Gate { asked: AtomicUsize::new(0), release: Notify::new() });
        let approver: Arc<dyn Approver> = gate.clone();
        let asks = Asks::default();
        let q = ApprovalRequest {
            sandbox: SandboxId::new("s1"),
            target: Target::parse("pypi.org:443").unwrap(),
            method: "CONNECT".into(),
            path: None,
            process: None,
        };
        let mut waiters = Vec::new();
        for _ in 0..50 {
            let (asks, approver, q) = (asks.clone(), approver.clone(), q.clone());
            waiters.push(tokio::spawn(async move {
                asks.ask(&approver, q, Duration::from_secs(60)).await
            }));
        }
        while asks.waiting(&q.sandbox, &q.target) < 50 {
            tokio::task::yield_now().await;
        }
        gate.release.notify_one();
        for w in waiters {
            assert!(matches!(w.await.unwrap(), Ruling::Allow(_)));
        }
        assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
        assert_eq!(asks.len(), 0);
    }

    #[tokio::test]
    async fn an_unanswered_question_times_out_as_a_denial() {
        let gate = Arc::new(Gate { asked: AtomicUsize::new(0), release: Notify::new() });
        let approver: Arc<dyn Approver> = gate;
        let asks = Asks::default();
        let q = ApprovalRequest {
            sandbox: SandboxId::new("s1"),
            target: Target::parse("pypi.org:443").unwrap(),
            method: "CONNECT".into(),
            path: None,
            process: None,
        };
        let answer = asks.ask(&approver, q, Duration::from_millis(50)).await;
        assert_eq!(answer, Ruling::Deny(DenyReason::TimedOut));
    }
}
