//! What the daemon knows of the host's guest-user fences (macOS: pf anchors, checked again
//! every [`sandgate_firewall::pf::fence::RECHECK_INTERVAL`] by the daemon when it runs as root),
//! and how `status`, a launch and `doctor` say that one is gone. The checks are
//! `sandgate_firewall`'s; this keeps their last answers and words them.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The last check of one fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceState {
    /// The fence (`com.apple/0.sandgate.u501`).
    pub anchor: String,
    /// The fenced user.
    pub uid: u32,
    /// What lets the user's traffic past it (empty: it holds), or why it could not be checked.
    pub findings: Vec<String>,
}

/// The daemon's fences, replaced as a whole by each round of checks.
#[derive(Debug, Default)]
pub struct Fences(Mutex<Vec<FenceState>>);

impl Fences {
    /// The last round's answers.
    pub fn get(&self) -> Vec<FenceState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the answers; returns the fences that were holding (or new) and are open now.
    pub fn set(&self, now: Vec<FenceState>) -> Vec<FenceState> {
        let mut old = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let opened = now
            .iter()
            .filter(|n| !n.findings.is_empty())
            .filter(|n| !old.iter().any(|o| o.anchor == n.anchor && o.findings == n.findings))
            .cloned()
            .collect();
        *old = now;
        opened
    }
}

/// One line per open fence, for stderr at a launch and for `doctor`.
pub fn warnings(states: &[FenceState]) -> Vec<String> {
    states
        .iter()
        .filter(|s| !s.findings.is_empty())
        .map(|s| {
            format!(
                "the guest-user fence of uid {} ({}) is OPEN: {}; `sudo sandgate firewall check` \
                 says more, `sudo sandgate firewall apply --uid {}` puts it back",
                s.uid,
                s.anchor,
                s.findings.join("; "),
                s.uid
            )
        })
        .collect()
}

/// `status` lines: each fence, holding or open.
pub fn status_lines(states: &[FenceState]) -> Vec<String> {
    states
        .iter()
        .map(|s| match s.findings.as_slice() {
            [] => format!("  guest fence {} (uid {}): holds", s.anchor, s.uid),
            f => format!("  guest fence {} (uid {}): OPEN: {}", s.anchor, s.uid, f.join("; ")),
        })
        .collect()
}

/// The fences in a `status` (or `register`) reply's `fences` value.
pub fn from_value(v: &serde_json::Value) -> Vec<FenceState> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(uid: u32, findings: &[&str]) -> FenceState {
        FenceState {
            anchor: format!("com.apple/0.sandgate.u{uid}"),
            uid,
            findings: findings.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn a_fence_that_opens_is_reported_once() {
        let f = Fences::default();
        assert_eq!(f.set(vec![state(501, &[])]), []);
        let open = state(501, &["pf is disabled"]);
        assert_eq!(f.set(vec![open.clone()]), std::slice::from_ref(&open));
        assert_eq!(f.set(vec![open.clone()]), [], "the same finding again: already said");
        assert_eq!(f.get(), [open]);
    }

    #[test]
    fn lines_name_the_fence_and_the_fix() {
        let states = [state(501, &[]), state(502, &["`pass out quick all`: it passes"])];
        let w = warnings(&states);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("uid 502") && w[0].contains("OPEN") && w[0].contains("apply --uid 502")
        );
        let s = status_lines(&states);
        assert!(s[0].ends_with("holds") && s[1].contains("OPEN: `pass out quick all`"), "{s:?}");
        let v = serde_json::to_value(&states).unwrap();
        assert_eq!(from_value(&v), states);
        assert_eq!(from_value(&serde_json::Value::Null), []);
    }
}
