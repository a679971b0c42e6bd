//! `sandgate firewall`: host-wide guest-user firewall rules (root).
//!
//! Linux: an nftables table `inet sandgate_u<UID>` matching `meta skuid`; macOS: a pf anchor
//! `com.apple/sandgate.u<UID>`. Both accept the proxy, log the rest (NFLOG group / pflog0) and
//! reject it.

use std::net::SocketAddr;

use anyhow::bail;
use sandgate_pf::{
    DEFAULT_NFLOG_GROUP, DEFAULT_PROXY, Firewall, FirewallError, GuestPolicy, Scope,
    SystemOwnerCheck,
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
    fn scope(&self) -> Scope {
        Scope { uid: self.uid, owner_pid: self.owner_pid }
    }
}

/// Applies, removes, shows or garbage-collects firewall rules.
pub fn run(args: FirewallArgs) -> anyhow::Result<u8> {
    let fw = backend();
    match args.action {
        Action::Apply { scope, proxy, nflog_group, dry_run } => {
            let scope = scope.scope();
            let plan = fw.plan(&scope, &GuestPolicy { proxies: proxy, nflog_group })?;
            if dry_run {
                print!("{}", plan.text);
                return Ok(0);
            }
            require_root("apply")?;
            // The proxy runs as the user who started the daemon (the one sudo ran this for).
            #[cfg(target_os = "macos")]
            sandgate_pf::pf::refuse_own_uid(scope.uid, &own_uids())?;
            fw.apply(&plan).map_err(|e| explain(e, "apply"))?;
            eprintln!("sandgate: {scope} fenced in ({}); blocked traffic is logged", plan.name);
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
                for i in installed {
                    println!("# {} ({})\n{}", i.name, i.scope, i.rules.trim_end());
                }
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

#[cfg(target_os = "macos")]
fn backend() -> Box<dyn Firewall> {
    use sandgate_pf::pf::{FileTokenStore, PfFirewall};
    Box::new(PfFirewall::system(FileTokenStore::new("/var/run/sandgate/pf-tokens")))
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
    Box::new(sandgate_pf::nft::NftFirewall::system())
}

fn require_root(what: &str) -> anyhow::Result<()> {
    if !sandgate_pf::running_as_root() {
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
        let Action::Apply { scope, proxy, nflog_group, dry_run } = t.a.action else { panic!() };
        assert_eq!(
            (scope.uid, scope.owner_pid, nflog_group, dry_run),
            (7, None, DEFAULT_NFLOG_GROUP, true)
        );
        assert_eq!(proxy, [DEFAULT_PROXY.parse::<SocketAddr>().unwrap()]);
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
}
