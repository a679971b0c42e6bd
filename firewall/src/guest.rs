//! The backend-independent model: scopes, policies, plans, and the [`Firewall`] trait.

use std::fmt;
use std::net::SocketAddr;

use serde::Serialize;

use crate::FirewallError;
use crate::subid::SubIds;

/// Whose traffic a set of host-wide rules governs, and who owns the rules.
///
/// The scope is encoded in the table / anchor name (`sandgate_u1001_p4242`,
/// `com.apple/sandgate.u1001.p4242`) so that [`Firewall::gc`] can find rules whose owner is gone
/// without any other state: rules are stale when the user no longer exists, or when an owner
/// process was named and has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct GuestScope {
    /// The guest user whose outgoing traffic is filtered.
    pub uid: u32,
    /// The process that owns the rules (e.g. the daemon); `None` = kept until removed or the
    /// user is deleted.
    pub owner_pid: Option<u32>,
}

impl GuestScope {
    /// Rules for `uid` that stay until removed (what `sandgate firewall apply` installs).
    pub fn user(uid: u32) -> Self {
        GuestScope { uid, owner_pid: None }
    }

    /// Rules for `uid` that `gc` removes once process `pid` has exited.
    pub fn owned_by(uid: u32, pid: u32) -> Self {
        GuestScope { uid, owner_pid: Some(pid) }
    }

    /// The scope's label with `sep` between parts: `u1001`, `u1001<sep>p4242`.
    pub(crate) fn label(&self, sep: char) -> String {
        match self.owner_pid {
            Some(pid) => format!("u{}{sep}p{pid}", self.uid),
            None => format!("u{}", self.uid),
        }
    }

    /// Parses a label made by [`GuestScope::label`] with the same separator.
    pub(crate) fn parse_label(label: &str, sep: char) -> Option<GuestScope> {
        let rest = label.strip_prefix('u')?;
        let (uid, pid) = match rest.split_once(sep) {
            Some((uid, pid)) => (uid, Some(pid.strip_prefix('p')?)),
            None => (rest, None),
        };
        let number = |s: &str| -> Option<u32> {
            // Canonical decimal only, so that name -> scope -> name round-trips.
            if s.is_empty() || (s.len() > 1 && s.starts_with('0')) {
                return None;
            }
            if !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        Some(GuestScope {
            uid: number(uid)?,
            owner_pid: match pid {
                Some(p) => Some(number(p)?),
                None => None,
            },
        })
    }

    /// The NFLOG prefix / log label of this scope: `sandgate.u1001` or `sandgate.u1001.p4242`.
    ///
    /// The monitor attributes blocked packets to the scope by this string.
    pub fn log_prefix(&self) -> String {
        format!("sandgate.{}", self.label('.'))
    }

    /// Whether the owner of these rules is gone (user deleted, or owner process exited).
    pub fn is_stale(&self, owners: &dyn OwnerCheck) -> bool {
        !owners.user_exists(self.uid) || self.owner_pid.is_some_and(|p| !owners.process_alive(p))
    }
}

impl fmt::Display for GuestScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.owner_pid {
            Some(pid) => write!(f, "uid {} (owner pid {pid})", self.uid),
            None => write!(f, "uid {}", self.uid),
        }
    }
}

/// What the guest user may reach, and where blocked attempts are reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuestPolicy {
    /// Proxy endpoints the user may connect to (TCP). Everything else is rejected and logged.
    pub proxies: Vec<SocketAddr>,
    /// NFLOG group blocked packets are logged to (nftables; pf always logs to `pflog0`).
    pub nflog_group: u16,
    /// The user's subordinate uid/gid ranges, fenced like the uid itself (nftables; macOS has
    /// none). Read them with [`SubIds::read_system`].
    pub subids: SubIds,
    /// Keep the host's SYN-cookie fallback (nftables). By default the fence drops every SYN-ACK
    /// that has no owning socket: the kernel sends SYN-cookie SYN-ACKs without one, so an outside
    /// host could connect to the user's listeners through them (and their window carries the
    /// listener's receive buffer size out). `true` keeps SYN cookies working host-wide, and that
    /// hole open.
    pub allow_syncookies: bool,
    /// Let the host send IGMP/MLD membership reports (nftables). By default the fence drops every
    /// IGMP packet and MLD report or done message that has no owning socket: the kernel sends
    /// them for the user's group joins, and a group address carries up to 14 chosen bytes out.
    /// `true` keeps multicast membership reporting working host-wide, and that channel open.
    pub allow_multicast_reports: bool,
}

/// Rules generated for one scope by [`Firewall::plan`], ready for [`Firewall::apply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Whose rules these are.
    pub scope: GuestScope,
    /// Table (nftables) or anchor (pf) the rules go into.
    pub name: String,
    /// The exact text handed to `nft -f -` / `pfctl -a ANCHOR -f -`.
    pub text: String,
}

/// Rules found installed by [`Firewall::list`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Installed {
    /// Whose rules these are (decoded from the name).
    pub scope: GuestScope,
    /// Table or anchor name.
    pub name: String,
    /// The rules as the kernel reports them.
    pub rules: String,
}

/// A host-wide firewall backend for guest-user scopes.
///
/// Lifecycle: [`plan`](Firewall::plan) (pure) → [`apply`](Firewall::apply) (atomic replace of the
/// scope's rules; applying the same plan twice changes nothing) → [`allow`](Firewall::allow) /
/// [`disallow`](Firewall::disallow) for proxy endpoints while running (set elements, not
/// reloads) → [`remove`](Firewall::remove). [`gc`](Firewall::gc) at start-up removes scopes whose
/// owner is gone.
pub trait Firewall {
    /// Generates the rules for `scope` under `policy`. Pure: no command is run.
    fn plan(&self, scope: &GuestScope, policy: &GuestPolicy) -> Result<Plan, FirewallError>;
    /// Installs the plan, replacing the scope's previous rules in one transaction.
    fn apply(&self, plan: &Plan) -> Result<(), FirewallError>;
    /// Adds an allowed proxy endpoint to an applied scope.
    fn allow(&self, scope: &GuestScope, addr: SocketAddr) -> Result<(), FirewallError>;
    /// Removes an allowed proxy endpoint from an applied scope.
    fn disallow(&self, scope: &GuestScope, addr: SocketAddr) -> Result<(), FirewallError>;
    /// What [`remove`](Firewall::remove) would run for `scope`, as text (for `--dry-run`). Pure.
    fn remove_plan(&self, scope: &GuestScope) -> String;
    /// Removes the scope's rules; `Ok(false)` when there were none.
    fn remove(&self, scope: &GuestScope) -> Result<bool, FirewallError>;
    /// Lists the sandgate scopes currently installed.
    fn list(&self) -> Result<Vec<Installed>, FirewallError>;

    /// What lets `scope`'s traffic past its fence now, each naming the rule or setting (empty:
    /// it holds). The pf backend reads what pf evaluates before the anchor
    /// ([`crate::pf::fence`]); an nftables table has no such order to lose and says nothing.
    fn findings(&self, scope: &GuestScope) -> Result<Vec<String>, FirewallError> {
        let _ = scope;
        Ok(Vec::new())
    }
    /// Removes every installed scope whose owner is gone; returns the scopes removed.
    fn gc(&self, owners: &dyn OwnerCheck) -> Result<Vec<GuestScope>, FirewallError> {
        let mut removed = Vec::new();
        for installed in self.list()? {
            if installed.scope.is_stale(owners) && self.remove(&installed.scope)? {
                removed.push(installed.scope);
            }
        }
        Ok(removed)
    }
}

/// NFLOG group of host-wide guest-user rules when none is given (the daemon's monitor binds it).
pub const DEFAULT_NFLOG_GROUP: u16 = 2323;

/// Proxy address of host-wide guest-user rules when none is given.
pub const DEFAULT_PROXY: &str = "127.0.0.1:3128";

/// Whether this process runs with euid 0 (needed to change firewall rules).
pub fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Answers whether the owners named in a [`GuestScope`] still exist.
pub trait OwnerCheck {
    /// Whether a user with this uid exists.
    fn user_exists(&self, uid: u32) -> bool;
    /// Whether a process with this pid is running.
    fn process_alive(&self, pid: u32) -> bool;
}

/// [`OwnerCheck`] against the running system (passwd database, `kill(pid, 0)`).
///
/// When the answer cannot be known (lookup error), the owner counts as present: gc never removes
/// rules it is unsure about.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemOwnerCheck;

impl OwnerCheck for SystemOwnerCheck {
    fn user_exists(&self, uid: u32) -> bool {
        !matches!(nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)), Ok(None))
    }

    fn process_alive(&self, pid: u32) -> bool {
        let Ok(raw) = i32::try_from(pid) else { return false };
        if raw <= 0 {
            return false;
        }
        !matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
            Err(nix::errno::Errno::ESRCH)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip() {
        for (scope, label) in [
            (GuestScope::user(1001), "u1001"),
            (GuestScope::owned_by(0, 4242), "u0_p4242"),
            (GuestScope::owned_by(u32::MAX, 1), "u4294967295_p1"),
        ] {
            assert_eq!(scope.label('_'), label);
            assert_eq!(GuestScope::parse_label(label, '_'), Some(scope));
        }
    }

    #[test]
    fn foreign_labels_are_not_scopes() {
        for label in [
            "",
            "u",
            "x1",
            "u01",
            "u1_",
            "u1_p",
            "u1_x2",
            "u1.p2",
            "u-1",
            "u1_p2_p3",
            "u99999999999",
        ] {
            assert_eq!(GuestScope::parse_label(label, '_'), None, "{label}");
        }
    }

    struct Fake;
    impl OwnerCheck for Fake {
        fn user_exists(&self, uid: u32) -> bool {
            uid != 7
        }
        fn process_alive(&self, pid: u32) -> bool {
            pid != 9
        }
    }

    #[test]
    fn staleness() {
        assert!(!GuestScope::user(1).is_stale(&Fake));
        assert!(GuestScope::user(7).is_stale(&Fake));
        assert!(GuestScope::owned_by(1, 9).is_stale(&Fake));
        assert!(!GuestScope::owned_by(1, 8).is_stale(&Fake));
    }

    #[test]
    fn system_owner_check_sees_root_and_self() {
        assert!(SystemOwnerCheck.user_exists(0));
        assert!(SystemOwnerCheck.process_alive(std::process::id()));
        assert!(!SystemOwnerCheck.process_alive(0));
    }
}
