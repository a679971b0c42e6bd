//! The id of one sandbox, one type for the launcher (which makes ids), the daemon and the proxy
//! (which key their state by them).

use std::fmt;
use std::sync::Arc;

/// Identifier of one sandbox.
///
/// Ids the launcher makes are checked ([`SandboxId::try_from`]): 1–64 characters from
/// `[A-Za-z0-9._-]`, because the id is the NFLOG prefix and a store key and must never need
/// quoting. [`SandboxId::new`] wraps an id without that check, for ids that arrive already
/// accepted (the daemon's registry applies the store's own rule) and for tests. Cheap to clone:
/// the proxy copies it into every connection's context.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxId(Arc<str>);

impl SandboxId {
    /// Wraps an id as it is (no check: see the type's documentation).
    pub fn new(id: impl Into<Arc<str>>) -> SandboxId {
        SandboxId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A sandbox id that is empty, too long or has characters outside `[A-Za-z0-9._-]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid sandbox id {id:?}: use 1-64 characters from [A-Za-z0-9._-]")]
pub struct InvalidSandboxId {
    /// The rejected id.
    pub id: String,
}

impl TryFrom<String> for SandboxId {
    type Error = InvalidSandboxId;

    fn try_from(id: String) -> Result<Self, Self::Error> {
        let ok = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if ok { Ok(SandboxId(id.into())) } else { Err(InvalidSandboxId { id }) }
    }
}

impl TryFrom<&str> for SandboxId {
    type Error = InvalidSandboxId;

    fn try_from(id: &str) -> Result<Self, Self::Error> {
        SandboxId::try_from(id.to_owned())
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        for (id, ok) in [
            ("sg-1", true),
            ("a.b_c-9", true),
            ("", false),
            ("has space", false),
            ("quote\"", false),
            ("x/y", false),
            (&"a".repeat(64), true),
            (&"a".repeat(65), false),
        ] {
            assert_eq!(SandboxId::try_from(id).is_ok(), ok, "{id:?}");
        }
    }
}
