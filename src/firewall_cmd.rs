//! `sandgate firewall`: host-wide guest-user firewall rules (root).
//!
//! Linux: an nftables table `inet sandgate_u<UID>` matching the user's uid and its subordinate
//! uid/gid ranges (`/etc/subuid`, `/etc/subgid`); macOS: a pf anchor `com.apple/sandgate.u<UID>`.
//! Both accept the proxy, log the rest (NFLOG group / pflog0) and reject it. `show` and `check`
//! compare the ranges recorded at apply time with the files now.

use std::net::SocketAddr;

use anyhow::bail;
use sandgate_firewall::{
    DEFAULT_NFLOG_GROUP, DEFAULT_PROXY, Firewall, FirewallError, GuestPolicy, GuestScope,
    Installed, SubIds, SystemOwnerCheck,
};

/// Options of `sandgate firewall`.
#[derive(Debug, clap::Args)]
pub struct FirewallArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Fence a user in: only the proxy is reachable; everything else is logged and rejected.
    Apply {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Proxy address the user may connect to (repeatable).
        #[arg(long, value_name = "ADDR", default_value = DEFAULT_PROXY)]
        proxy: Vec<SocketAddr>,
        /// NFLOG group blocked packets are logged to (Linux).
        #[arg(long, value_name = "N", default_value_t = DEFAULT_NFLOG_GROUP)]
        nflog_group: u16,
        /// HOST-WIDE: keep the SYN-cookie fallback (Linux). By default every SYN-ACK without an
        /// owning socket is dropped, for all users: cookie SYN-ACKs let an outside host connect
        /// to the fenced user's listeners. With this flag SYN cookies work during a SYN flood
        /// and that hole is open.
        #[arg(long)]
        allow_syncookies: bool,
        /// HOST-WIDE: keep IGMP/MLD membership reports (Linux). By default reports without an
        /// owning socket are dropped, for all users: the fenced user's group joins would carry
        /// chosen bytes out in them. With this flag multicast membership (and MLD snooping
        /// switches' view of this host, IPv6 included) works and that channel is open.
        #[arg(long)]
        allow_multicast_reports: bool,
        /// Print the exact rules instead of applying them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove a user's rules.
    Remove {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Print what would be run instead of running it.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the sandgate rules installed on this host.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Compare each installed fence with the user's subordinate ids now; exit 1 when one changed
    /// (run it from a timer, or after `usermod --add-subuids`).
    Check,
    /// Remove rules whose user no longer exists or whose owner process has exited.
    Gc {
        /// Print what would be removed instead of removing it.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, clap::Args)]
struct ScopeArgs {
    /// The guest user's uid.
    #[arg(long, value_name = "UID")]
    uid: u32,
    /// Tie the rules to this process: `gc` removes them once it has exited.
    #[arg(long, value_name = "PID")]
    owner_pid: Option<u32>,
}

impl ScopeArgs {
    fn scope(&self) -> GuestScope {
        GuestScope { uid: self.uid, owner_pid: self.owner_pid }
    }
}

/// Applies, removes, shows or garbage-collects firewall rules.
pub fn run(args: FirewallArgs) -> anyhow::Result<u8> {
    let fw = backend();
    match args.action {
        Action::Apply {
            scope,
            proxy,
            nflog_group,
            allow_syncookies,
            allow_multicast_reports,
            dry_run,
        } => {
            let scope = scope.scope();
            let subids = subids_of(scope.uid)?;
            let plan = fw.plan(
                &scope,
                &GuestPolicy {
                    proxies: proxy,
                    nflog_group,
                    subids: subids.clone(),
                    allow_syncookies,
                    allow_multicast_reports,
                },
            )?;
            if dry_run {
                print!("{}", plan.text);
                return Ok(0);
            }
            require_root("apply")?;
            for (file, what, ranges, own) in [
                ("/etc/passwd", "user", &subids.uids, scope.uid),
                ("/etc/group", "group", &subids.gids, u32::MAX),
            ] {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                for (name, id) in sandgate_firewall::subid::accounts_in_ranges(&text, ranges, own) {
                    eprintln!(
                        "sandgate: warning: {what} {name} ({id}) is inside the subordinate id \
                         ranges of {scope} and is fenced too; fix /etc/sub{}id",
                        if what == "user" { "u" } else { "g" }
                    );
                }
            }
            // The proxy runs as the user who started the daemon (the one sudo ran this for).
            #[cfg(target_os = "macos")]
            sandgate_firewall::pf::refuse_own_uid(scope.uid, &own_uids())?;
            fw.apply(&plan).map_err(|e| explain(e, "apply"))?;
            eprintln!(
                "sandgate: {scope} fenced in with {subids} ({}); blocked traffic is logged; \
                 apply again when /etc/subuid or /etc/subgid change (`sandgate firewall check`)",
                plan.name
            );
            // The unowned-packet drops reach every user of the host: say so on each apply.
            #[cfg(not(target_os = "macos"))]
            for (kept, what, flag) in [
                (allow_syncookies, "SYN cookies (unowned SYN-ACKs)", "--allow-syncookies"),
                (
                    allow_multicast_reports,
                    "IGMP/MLD membership reports",
                    "--allow-multicast-reports",
                ),
            ] {
                if kept {
                    eprintln!("sandgate: warning: {what} kept ({flag}): that channel is open");
                } else {
                    eprintln!(
                        "sandgate: {what} are dropped for the whole host ({flag} keeps them)"
                    );
                }
            }
        }
        Action::Remove { scope, dry_run } => {
            let scope = scope.scope();
            if dry_run {
                print!("{}", fw.remove_plan(&scope));
                return Ok(0);
            }
            require_root("remove")?;
            if fw.remove(&scope).map_err(|e| explain(e, "remove"))? {
                eprintln!("sandgate: removed the rules of {scope}");
            } else {
                eprintln!("sandgate: {scope} had no rules");
            }
        }
        Action::Show { json } => {
            require_root("show")?;
            let installed = fw.list().map_err(|e| explain(e, "show"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&installed)?);
            } else if installed.is_empty() {
                println!("no sandgate firewall rules installed");
            } else {
                for i in &installed {
                    println!("# {} ({})\n{}", i.name, i.scope, i.rules.trim_end());
                }
            }
            for i in &installed {
                if let Some(warning) = identity_warning(i) {
                    eprintln!("sandgate: warning: {warning}");
                }
            }
        }
        Action::Check => {
            require_root("check")?;
            let installed = fw.list().map_err(|e| explain(e, "check"))?;
            let mut changed = 0;
            for i in &installed {
                match identity_warning(i) {
                    Some(warning) => {
                        changed += 1;
                        println!("{}: {warning}", i.name);
                    }
                    None => println!("{}: {} fenced as applied", i.name, i.scope),
                }
            }
            if changed > 0 {
                return Ok(1);
            }
        }
        Action::Gc { dry_run } => {
            require_root("gc")?;
            if dry_run {
                for i in fw.list().map_err(|e| explain(e, "gc"))? {
                    if i.scope.is_stale(&SystemOwnerCheck) {
                        print!("{}", fw.remove_plan(&i.scope));
                    }
                }
                return Ok(0);
            }
            let removed = fw.gc(&SystemOwnerCheck).map_err(|e| explain(e, "gc"))?;
            for s in &removed {
                println!("removed {s}");
            }
            eprintln!("sandgate: {} stale rule set(s) removed", removed.len());
        }
    }
    Ok(0)
}

/// The subordinate ids of `uid` (by its passwd name and by number).
fn subids_of(uid: u32) -> anyhow::Result<SubIds> {
    let name =
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|u| u.name);
    SubIds::read_system(uid, name.as_deref())
        .map_err(|e| anyhow::Error::new(e).context(format!("cannot fence all of uid {uid}")))
}

/// Why an installed fence no longer covers its user's whole identity, if it does not.
fn identity_warning(installed: &Installed) -> Option<String> {
    #[cfg(target_os = "macos")]
    {
        // macOS has no subordinate ids; the anchor fences the uid, which is all there is.
        let _ = installed;
        None
    }
    #[cfg(not(target_os = "macos"))]
    {
        let uid = installed.scope.uid;
        let again = format!("run `sandgate firewall apply --uid {uid}` again");
        let recorded = sandgate_firewall::nft::recorded_identity(&installed.rules);
        let now = match subids_of(uid) {
            Ok(now) => now,
            Err(e) => return Some(format!("{}: {e:#}", installed.scope)),
        };
        match recorded {
            None => Some(format!(
                "{} was applied by an older sandgate that fenced the uid only (not its {now}); \
                 {again}",
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
}

#[cfg(target_os = "macos")]
fn backend() -> Box<dyn Firewall> {
    use sandgate_firewall::pf::{FileTokenStore, GuestAnchors};
    Box::new(GuestAnchors::system(FileTokenStore::new("/var/run/sandgate/pf-tokens")))
}

/// The uids whose traffic the daemon's proxy is: this process's and the `sudo` caller's.
#[cfg(target_os = "macos")]
fn own_uids() -> Vec<u32> {
    let mut own = vec![nix::unistd::getuid().as_raw(), nix::unistd::geteuid().as_raw()];
    own.extend(std::env::var("SUDO_UID").ok().and_then(|u| u.parse::<u32>().ok()));
    own
}

#[cfg(not(target_os = "macos"))]
fn backend() -> Box<dyn Firewall> {
    Box::new(sandgate_firewall::nft::GuestTables::system())
}

fn require_root(what: &str) -> anyhow::Result<()> {
    if !sandgate_firewall::running_as_root() {
        bail!(
            "`sandgate firewall {what}` changes or reads the host firewall and must run as root \
             (try `sudo sandgate firewall {what} ...`; `--dry-run` prints the rules without root)"
        );
    }
    Ok(())
}

fn explain(err: FirewallError, what: &str) -> anyhow::Error {
    let hint = if err.is_permission_denied() {
        "; this needs root (CAP_NET_ADMIN)"
    } else if matches!(err, FirewallError::Spawn { .. }) {
        "; is nftables (`nft`) / pfctl installed?"
    } else {
        // `Missing` already names the package.
        ""
    };
    anyhow::Error::new(err).context(format!("firewall {what} failed{hint}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: FirewallArgs,
    }

    #[test]
    fn parses_apply_with_defaults_and_proxies() {
        let t = T::try_parse_from(["x", "apply", "--uid", "7", "--dry-run"]).unwrap();
        let Action::Apply {
            scope,
            proxy,
            nflog_group,
            allow_syncookies,
            allow_multicast_reports,
            dry_run,
        } = t.a.action
        else {
            panic!()
        };
        assert_eq!(
            (scope.uid, scope.owner_pid, nflog_group, dry_run),
            (7, None, DEFAULT_NFLOG_GROUP, true)
        );
        assert_eq!(proxy, [DEFAULT_PROXY.parse::<SocketAddr>().unwrap()]);
        // The host-wide drops are on unless opted out by name.
        assert_eq!((allow_syncookies, allow_multicast_reports), (false, false));
        let t = T::try_parse_from([
            "x",
            "apply",
            "--uid",
            "7",
            "--proxy",
            "127.0.0.1:1",
            "--proxy",
            "[::1]:2",
        ])
        .unwrap();
        let Action::Apply { proxy, .. } = t.a.action else { panic!() };
        assert_eq!(proxy.len(), 2);
        assert!(T::try_parse_from(["x", "remove"]).is_err());
        assert!(T::try_parse_from(["x", "apply", "--uid", "-1"]).is_err());
    }

    #[test]
    fn parses_check() {
        let t = T::try_parse_from(["x", "check"]).unwrap();
        assert!(matches!(t.a.action, Action::Check));
        assert!(T::try_parse_from(["x", "check", "--uid", "1"]).is_err());
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn identity_warnings() {
        // A uid nobody has subordinate ids for.
        let uid = 4_000_000_000;
        let installed =
            |rules: String| Installed { scope: GuestScope::user(uid), name: "t".into(), rules };
        let fp = SubIds::default().fingerprint(uid);
        let current = format!("table inet t {{\n\tcomment \"sandgate identity {fp}\"\n}}\n");
        assert_eq!(identity_warning(&installed(current)), None);
        let changed = "table inet t {\n\tcomment \"sandgate identity 0000000000000000\"\n}\n";
        let w = identity_warning(&installed(changed.into())).unwrap();
        assert!(w.contains("changed") && w.contains(&format!("apply --uid {uid}")), "{w}");
        let w = identity_warning(&installed("table inet t {\n}\n".into())).unwrap();
        assert!(w.contains("older sandgate"), "{w}");
    }
}
