//! Which sandbox (or guest-user scope) a blocked packet belongs to.

use std::collections::HashMap;

use crate::BlockedPacket;

/// Maps what the kernel reports (NFLOG prefix, pf anchor, socket uid) to a scope name.
///
/// Precedence: an exact prefix/anchor match, then the socket's uid, then the raw prefix itself
/// (a sandbox id is its own prefix), then `uid N`, then `unknown`.
#[derive(Debug, Clone, Default)]
pub struct Attribution {
    by_prefix: HashMap<String, String>,
    by_uid: HashMap<u32, String>,
}

impl Attribution {
    /// No mappings: every packet is attributed to its raw prefix.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attributes packets logged with `prefix` (or pf anchor `prefix`) to `scope`.
    pub fn prefix(&mut self, prefix: impl Into<String>, scope: impl Into<String>) -> &mut Self {
        self.by_prefix.insert(prefix.into(), scope.into());
        self
    }

    /// Attributes packets from sockets of `uid` to `scope`.
    pub fn uid(&mut self, uid: u32, scope: impl Into<String>) -> &mut Self {
        self.by_uid.insert(uid, scope.into());
        self
    }

    /// The scope of `packet`.
    pub fn scope_of(&self, packet: &BlockedPacket) -> String {
        if let Some(s) = self.by_prefix.get(&packet.prefix) {
            return s.clone();
        }
        if let Some(s) = packet.uid.and_then(|u| self.by_uid.get(&u)) {
            return s.clone();
        }
        if !packet.prefix.is_empty() {
            return packet.prefix.clone();
        }
        match packet.uid {
            Some(uid) => format!("uid {uid}"),
            None => "unknown".to_owned(),
        }
    }
}
