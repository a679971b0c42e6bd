//! `sandgate firewall`: host-wide guest-user firewall rules (root).
//!
//! Linux: an nftables table `inet sandgate_u<UID>` matching the user's uid and its subordinate
//! uid/gid ranges (`/etc/subuid`, `/etc/subgid`); macOS: a pf anchor `com.apple/sandgate.u<UID>`.
//! Both accept the proxy, log the rest (NFLOG group / pflog0) and reject it. `show` and `check`
//! compare the ranges recorded at apply time with the files now. The operations are
//! `sandgate_firewall`'s; this checks for root and prints.

use std::net::SocketAddr;

use anyhow::bail;
use sandgate_firewall::{
    DEFAULT_NFLOG_GROUP, DEFAULT_PROXY, FirewallError, GuestPolicy, GuestScope, SubIds,
    SystemOwnerCheck, identity_warning,
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
    let fw = sandgate_firewall::system_backend();
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
            let subids = SubIds::of_user(scope.uid)?;
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
            for a in sandgate_firewall::fenced_system_accounts(&subids, scope.uid) {
                eprintln!(
                    "sandgate: warning: {} {} ({}) is inside the subordinate id ranges of {scope} \
                     and is fenced too; fix /etc/sub{}id",
                    a.kind,
                    a.name,
                    a.id,
                    if a.kind == "user" { "u" } else { "g" }
                );
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
                let plan = sandgate_firewall::gc_plan(&*fw, &SystemOwnerCheck)
                    .map_err(|e| explain(e, "gc"))?;
                print!("{plan}");
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

/// The uids whose traffic the daemon's proxy is: this process's and the `sudo` caller's.
#[cfg(target_os = "macos")]
fn own_uids() -> Vec<u32> {
    let mut own = vec![nix::unistd::getuid().as_raw(), nix::unistd::geteuid().as_raw()];
    own.extend(std::env::var("SUDO_UID").ok().and_then(|u| u.parse::<u32>().ok()));
    own
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
    let hint = err.hint();
    anyhow::Error::new(err).context(format!("firewall {what} failed{hint}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `sandgate firewall`'s options as a command of their own.
    #[derive(Debug, Parser)]
    struct FirewallCli {
        #[command(flatten)]
        a: FirewallArgs,
    }

    #[test]
    fn parses_apply_with_defaults_and_proxies() {
        let t = FirewallCli::try_parse_from(["x", "apply", "--uid", "7", "--dry-run"]).unwrap();
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
        let t = FirewallCli::try_parse_from([
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
        assert!(FirewallCli::try_parse_from(["x", "remove"]).is_err());
        assert!(FirewallCli::try_parse_from(["x", "apply", "--uid", "-1"]).is_err());
    }

    #[test]
    fn parses_check() {
        let t = FirewallCli::try_parse_from(["x", "check"]).unwrap();
        assert!(matches!(t.a.action, Action::Check));
        assert!(FirewallCli::try_parse_from(["x", "check", "--uid", "1"]).is_err());
    }
}
