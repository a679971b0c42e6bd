//! The guest-user fence on this host, as `sandgate firewall` runs it: the system's backend, the
//! user's subordinate ids (by passwd name and by number), the accounts a fence would cover by
//! mistake, what `gc --dry-run` would run, and whether an installed fence still covers its
//! user's whole identity. Printing and the root check are the command's.

use std::path::Path;

use crate::subid::accounts_in_ranges;
use crate::{Firewall, FirewallError, Installed, OwnerCheck, SubIdError, SubIds};

/// The guest-user backend of this system: nftables tables (Linux) or pf anchors (macOS).
pub fn system_backend() -> Box<dyn Firewall> {
    #[cfg(target_os = "macos")]
    {
        use crate::pf::{FileTokenStore, GuestAnchors};
        Box::new(GuestAnchors::system(FileTokenStore::new("/var/run/sandgate/pf-tokens")))
    }
    #[cfg(not(target_os = "macos"))]
    {
        Box::new(crate::nft::GuestTables::system())
    }
}

/// The subordinate ids of a user cannot be read, so a fence would not cover all of it.
#[derive(Debug, thiserror::Error)]
#[error("cannot fence all of uid {uid}")]
pub struct UnfenceableUser {
    /// The user.
    pub uid: u32,
    /// Why its subordinate ids are unknown.
    #[source]
    pub source: SubIdError,
}

impl SubIds {
    /// The subordinate ids of `uid` in this system's files, by its passwd name and by number.
    pub fn of_user(uid: u32) -> Result<SubIds, UnfenceableUser> {
        let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name);
        SubIds::read_system(uid, name.as_deref()).map_err(|source| UnfenceableUser { uid, source })
    }
}

/// An account whose id lies inside the subordinate id ranges being fenced: it is fenced too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedAccount {
    /// `user` (from /etc/passwd, inside the subuid ranges) or `group` (/etc/group, subgid).
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: u32,
}

/// The accounts of `passwd` and `group` (the files' text) inside `subids`' ranges, other than
/// the fenced user `uid` itself.
pub fn fenced_accounts(passwd: &str, group: &str, subids: &SubIds, uid: u32) -> Vec<FencedAccount> {
    let mut out = Vec::new();
    for (kind, text, ranges, own) in
        [("user", passwd, &subids.uids, uid), ("group", group, &subids.gids, u32::MAX)]
    {
        for (name, id) in accounts_in_ranges(text, ranges, own) {
            out.push(FencedAccount { kind, name, id });
        }
    }
    out
}

/// [`fenced_accounts`] of this system's /etc/passwd and /etc/group (an unreadable file counts
/// as empty).
pub fn fenced_system_accounts(subids: &SubIds, uid: u32) -> Vec<FencedAccount> {
    let read = |f: &str| std::fs::read_to_string(Path::new(f)).unwrap_or_default();
    fenced_accounts(&read("/etc/passwd"), &read("/etc/group"), subids, uid)
}

/// What `gc` would run: the removal plans of every installed scope whose owner is gone.
pub fn gc_plan(fw: &dyn Firewall, owners: &dyn OwnerCheck) -> Result<String, FirewallError> {
    Ok(fw
        .list()?
        .iter()
        .filter(|i| i.scope.is_stale(owners))
        .map(|i| fw.remove_plan(&i.scope))
        .collect())
}

impl FirewallError {
    /// What to add to a failure's message: missing root, a missing `nft`/`pfctl`, or nothing
    /// (`Missing` already names the package).
    pub fn hint(&self) -> &'static str {
        if self.is_permission_denied() {
            "; this needs root (CAP_NET_ADMIN)"
        } else if matches!(self, FirewallError::Spawn { .. }) {
            "; is nftables (`nft`) / pfctl installed?"
        } else {
            ""
        }
    }
}

/// Why an installed fence no longer covers its user's whole identity, if it does not: the
/// subordinate ids changed since it was applied, or it was applied by a sandgate that fenced the
/// uid only. macOS has no subordinate ids; an anchor fences the uid, which is all there is.
pub fn identity_warning(installed: &Installed) -> Option<String> {
    if cfg!(target_os = "macos") {
        return None;
    }
    identity_warning_with(installed, SubIds::of_user(installed.scope.uid))
}

/// [`identity_warning`] against the subordinate ids `now` (or why they are unknown).
pub fn identity_warning_with(
    installed: &Installed,
    now: Result<SubIds, UnfenceableUser>,
) -> Option<String> {
    let uid = installed.scope.uid;
    let again = format!("run `sandgate firewall apply --uid {uid}` again");
    let recorded = crate::nft::recorded_identity(&installed.rules);
    let now = match now {
        Ok(now) => now,
        Err(e) => return Some(format!("{}: {}", installed.scope, chain(&e))),
    };
    match recorded {
        None => Some(format!(
            "{} was applied by an older sandgate that fenced the uid only (not its {now}); {again}",
            installed.scope
        )),
        Some(fp) if fp != now.fingerprint(uid) => Some(format!(
            "the subordinate ids of {} changed since the fence was applied (now {now}); \
             processes in its user namespaces may be outside the fence: {again}",
            installed.scope
        )),
        Some(_) => None,
    }
}

/// An error and its causes joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuestScope, IdRange, RecordingRunner, nft::GuestTables};

    fn installed(uid: u32, rules: &str) -> Installed {
        Installed { scope: GuestScope::user(uid), name: "t".into(), rules: rules.into() }
    }

    #[test]
    fn identity_warnings() {
        let uid = 4_000_000_000;
        let fp = SubIds::default().fingerprint(uid);
        let current = format!("table inet t {{\n\tcomment \"sandgate identity {fp}\"\n}}\n");
        assert_eq!(identity_warning_with(&installed(uid, &current), Ok(SubIds::default())), None);
        let changed = "table inet t {\n\tcomment \"sandgate identity 0000000000000000\"\n}\n";
        let w = identity_warning_with(&installed(uid, changed), Ok(SubIds::default())).unwrap();
        assert!(w.contains("changed") && w.contains(&format!("apply --uid {uid}")), "{w}");
        let w =
            identity_warning_with(&installed(uid, "table inet t {\n}\n"), Ok(SubIds::default()))
                .unwrap();
        assert!(w.contains("older sandgate"), "{w}");
        let unreadable = UnfenceableUser {
            uid,
            source: SubIdError::Read {
                path: "/etc/subuid".into(),
                source: std::io::Error::from_raw_os_error(13),
            },
        };
        let w = identity_warning_with(&installed(uid, &current), Err(unreadable)).unwrap();
        assert!(
            w.starts_with(&format!(
                "uid {uid}: cannot fence all of uid {uid}: cannot read /etc/subuid"
            )),
            "{w}"
        );
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn the_system_identity_of_a_user_nobody_has_is_empty() {
        // A uid nobody has subordinate ids for.
        let uid = 4_000_000_000;
        let fp = SubIds::default().fingerprint(uid);
        let current = format!("table inet t {{\n\tcomment \"sandgate identity {fp}\"\n}}\n");
        assert_eq!(identity_warning(&installed(uid, &current)), None);
    }

    #[test]
    fn accounts_inside_the_ranges_are_named_but_not_the_user_itself() {
        let subids = SubIds {
            uids: vec![IdRange { first: 100_000, last: 100_009 }],
            gids: vec![IdRange { first: 200_000, last: 200_009 }],
        };
        let passwd =
            "me:x:100001:100:x:/h:/bin/sh\nsvc:x:100005:1:x:/:/bin/false\nout:x:5:5::/:/\n";
        let group = "grp:x:200003:\nusers:x:100:\n";
        let found = fenced_accounts(passwd, group, &subids, 100_001);
        assert_eq!(
            found,
            [
                FencedAccount { kind: "user", name: "svc".into(), id: 100_005 },
                FencedAccount { kind: "group", name: "grp".into(), id: 200_003 },
            ]
        );
    }

    #[test]
    fn gc_plans_only_the_stale_scopes() {
        struct Gone(u32);
        impl OwnerCheck for Gone {
            fn user_exists(&self, uid: u32) -> bool {
                uid != self.0
            }
            fn process_alive(&self, _pid: u32) -> bool {
                true
            }
        }
        let runner = RecordingRunner::new();
        runner.reply(
            "nft list tables inet",
            "table inet filter\ntable inet sandgate_u7\ntable inet sandgate_u8\n",
            "",
        );
        let fw = GuestTables::new(runner);
        let plan = gc_plan(&fw, &Gone(8)).unwrap();
        assert!(plan.contains("sandgate_u8") && !plan.contains("sandgate_u7"), "{plan}");
    }

    #[test]
    fn hints_name_what_to_fix() {
        let denied = FirewallError::Command {
            command: "nft".into(),
            code: Some(1),
            stderr: "Operation not permitted".into(),
        };
        assert_eq!(denied.hint(), "; this needs root (CAP_NET_ADMIN)");
        let spawn = FirewallError::Spawn {
            program: "nft".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(spawn.hint().contains("installed"));
        assert_eq!(FirewallError::Invalid { what: "x".into() }.hint(), "");
    }
}
