//! `sandgate firewall`: host-wide guest-user firewall rules (root).
//!
//! Linux: an nftables table `inet sandgate_u<UID>` matching the user's uid and its subordinate
//! uid/gid ranges (`/etc/subuid`, `/etc/subgid`); macOS: a pf anchor `com.apple/0.sandgate.u<UID>`, applied again at boot by a LaunchDaemon.
//! Both accept the proxy, log the rest (NFLOG group / pflog0) and reject it. `show` and `check`
//! compare the ranges recorded at apply time with the files now. The operations are
//! [`sandgate_firewall`]'s, what they print [`sandgate_daemon::firewall_report`]'s.

use std::net::SocketAddr;

use sandgate_daemon::firewall_report;
use sandgate_firewall::{DEFAULT_NFLOG_GROUP, DEFAULT_PROXY, GuestPolicy, GuestScope, SubIds};

use crate::emit;

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
        /// Run by the boot job (macOS LaunchDaemon): do not write that job again.
        #[arg(long)]
        at_boot: bool,
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
    /// Compare each installed fence with the user's subordinate ids now, and (macOS) with what
    /// pf evaluates before it; exit 1 when one changed or is open (run it from a timer, or after
    /// `usermod --add-subuids`).
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
    match args.action {
        Action::Apply {
            scope,
            proxy,
            nflog_group,
            allow_syncookies,
            allow_multicast_reports,
            dry_run,
            at_boot,
        } => {
            let scope = scope.scope();
            let policy = GuestPolicy {
                proxies: proxy,
                nflog_group,
                subids: SubIds::of_user(scope.uid)?,
                allow_syncookies,
                allow_multicast_reports,
            };
            emit(firewall_report::apply(scope, policy, dry_run, at_boot), false)
        }
        Action::Remove { scope, dry_run } => {
            emit(firewall_report::remove(scope.scope(), dry_run), false)
        }
        Action::Show { json } => emit(firewall_report::show(), json),
        Action::Check => emit(firewall_report::check(), false),
        Action::Gc { dry_run } => emit(firewall_report::gc(dry_run), false),
    }
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
            ..
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
