//! The words a grant is made of, shared by the approvals broker (which derives grants from a
//! person's answers) and the store (which keeps them): one definition, so no glue code converts
//! between twins. Their serde forms (`"allow"`, `{"sandbox": "sb1"}`, `"global"`) are the
//! control protocol's and the store's JSON.

use serde::{Deserialize, Serialize};

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Let matching requests through.
    Allow,
    /// Refuse matching requests without asking.
    Deny,
}

impl Effect {
    /// The word the store and the output use: `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
        }
    }

    /// Reads [`Effect::as_str`]'s words back.
    pub fn parse(s: &str) -> Option<Effect> {
        match s {
            "allow" => Some(Effect::Allow),
            "deny" => Some(Effect::Deny),
            _ => None,
        }
    }
}

/// Whom a grant applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantTarget {
    /// One sandbox (by id).
    Sandbox(String),
    /// Every sandbox of one project (by project key).
    Project(String),
    /// Every sandbox.
    Global,
}

impl GrantTarget {
    /// The kind as a word: `sandbox`, `project` or `global` (the store's `target` column).
    pub fn kind(&self) -> &'static str {
        match self {
            GrantTarget::Sandbox(_) => "sandbox",
            GrantTarget::Project(_) => "project",
            GrantTarget::Global => "global",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effect_words_round_trip() {
        for e in [Effect::Allow, Effect::Deny] {
            assert_eq!(Effect::parse(e.as_str()), Some(e));
        }
        assert_eq!(Effect::parse("Allow"), None);
    }
}
