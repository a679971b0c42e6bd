//! `sandgate firewall apply|remove|show|check|gc`: the operations are `sandgate_firewall`'s;
//! this checks for root and says what was done.

use anyhow::bail;
use sandgate_firewall::{
    FirewallError, GuestPolicy, GuestScope, SystemOwnerCheck, identity_warning,
};

use crate::report::{Printed, lines};

/// `apply`: fences the user of `scope` in (with `dry_run`, prints the rules instead). On macOS it
/// also writes the LaunchDaemon that applies the fence again at boot (unless `at_boot`: run by
/// that job).
pub fn apply(
    scope: GuestScope,
    policy: GuestPolicy,
    dry_run: bool,
    at_boot: bool,
) -> anyhow::Result<Printed> {
    let fw = sandgate_firewall::system_backend();
    let subids = policy.subids.clone();
    let (allow_syncookies, allow_multicast_reports) =
        (policy.allow_syncookies, policy.allow_multicast_reports);
    let plan = fw.plan(&scope, &policy)?;
    if dry_run {
        return Ok(Printed::new(plan.text.clone(), plan.text));
    }
    require_root("apply")?;
    let mut r = Printed::default();
    for a in sandgate_firewall::fenced_system_accounts(&subids, scope.uid) {
        r = r.note(format!(
            "sandgate: warning: {} {} ({}) is inside the subordinate id ranges of {scope} \
             and is fenced too; fix /etc/sub{}id",
            a.kind,
            a.name,
            a.id,
            if a.kind == "user" { "u" } else { "g" }
        ));
    }
    // The proxy runs as the user who started the daemon (the one sudo ran this for).
    #[cfg(target_os = "macos")]
    sandgate_firewall::pf::refuse_own_uid(scope.uid, &own_uids())?;
    fw.apply(&plan).map_err(|e| explain(e, "apply"))?;
    r = r.note(format!(
        "sandgate: {scope} fenced in with {subids} ({}); blocked traffic is logged; \
         apply again when /etc/subuid or /etc/subgid change (`sandgate firewall check`)",
        plan.name
    ));
    // The unowned-packet drops reach every user of the host: say so on each apply.
    #[cfg(not(target_os = "macos"))]
    for (kept, what, flag) in [
        (allow_syncookies, "SYN cookies (unowned SYN-ACKs)", "--allow-syncookies"),
        (allow_multicast_reports, "IGMP/MLD membership reports", "--allow-multicast-reports"),
    ] {
        r = r.note(if kept {
            format!("sandgate: warning: {what} kept ({flag}): that channel is open")
        } else {
            format!("sandgate: {what} are dropped for the whole host ({flag} keeps them)")
        });
    }
    #[cfg(target_os = "macos")]
    let _ = (allow_syncookies, allow_multicast_reports);
    #[cfg(target_os = "macos")]
    if !at_boot && sandgate_firewall::pf::boot::wanted(&scope) {
        r = r.note(boot_job(&scope, &policy.proxies));
    }
    #[cfg(not(target_os = "macos"))]
    let _ = at_boot;
    Ok(r)
}

/// Writes the LaunchDaemon that applies the fence of `scope` again at boot, when this
/// executable is root's to change; says what it did.
#[cfg(target_os = "macos")]
fn boot_job(scope: &GuestScope, proxies: &[std::net::SocketAddr]) -> String {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use sandgate_firewall::pf::boot;
    let exe = match std::env::current_exe().and_then(|e| e.canonicalize()) {
        Ok(e) => e,
        Err(e) => return format!("sandgate: warning: no boot job (cannot find this program: {e})"),
    };
    let mut chain = Vec::new();
    for p in exe.ancestors().collect::<Vec<_>>().into_iter().rev() {
        match std::fs::metadata(p) {
            Ok(m) => {
                chain.push(boot::PathOwner { path: p.to_owned(), uid: m.uid(), mode: m.mode() })
            }
            Err(e) => return format!("sandgate: warning: no boot job ({}: {e})", p.display()),
        }
    }
    if let Err(why) = boot::check_boot_executable(&chain) {
        return format!(
            "sandgate: warning: the fence is NOT applied again at boot (pf forgets it): {why}"
        );
    }
    let path = boot::plist_path(scope);
    let text = boot::launch_daemon_plist(&exe, scope, proxies);
    let written = std::fs::write(&path, text)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)));
    match written {
        Ok(()) => format!("sandgate: {} applies the fence again at boot", path.display()),
        Err(e) => format!(
            "sandgate: warning: the fence is NOT applied again at boot: {}: {e}",
            path.display()
        ),
    }
}

/// `remove`: the rules of `scope` (with `dry_run`, what would be run).
pub fn remove(scope: GuestScope, dry_run: bool) -> anyhow::Result<Printed> {
    let fw = sandgate_firewall::system_backend();
    if dry_run {
        let text = fw.remove_plan(&scope).to_string();
        return Ok(Printed::new(text.clone(), text));
    }
    require_root("remove")?;
    let mut r = if fw.remove(&scope).map_err(|e| explain(e, "remove"))? {
        Printed::default().note(format!("sandgate: removed the rules of {scope}"))
    } else {
        Printed::default().note(format!("sandgate: {scope} had no rules"))
    };
    #[cfg(target_os = "macos")]
    {
        let plist = sandgate_firewall::pf::boot::plist_path(&scope);
        if std::fs::remove_file(&plist).is_ok() {
            r = r.note(format!("sandgate: removed the boot job {}", plist.display()));
        }
    }
    #[cfg(not(target_os = "macos"))]
    let _ = &mut r;
    Ok(r)
}

/// `show`: the sandgate rules installed on this host, with a warning for each fence whose
/// user's subordinate ids changed since.
pub fn show() -> anyhow::Result<Printed> {
    require_root("show")?;
    let installed = sandgate_firewall::system_backend().list().map_err(|e| explain(e, "show"))?;
    let text = if installed.is_empty() {
        lines(["no sandgate firewall rules installed"])
    } else {
        lines(
            installed.iter().map(|i| format!("# {} ({})\n{}", i.name, i.scope, i.rules.trim_end())),
        )
    };
    let json = format!("{}\n", serde_json::to_string_pretty(&installed)?);
    let mut r = Printed::new(text, json);
    for i in &installed {
        if let Some(warning) = identity_warning(i) {
            r = r.note(format!("sandgate: warning: {warning}"));
        }
    }
    Ok(r)
}

/// `check`: each installed fence against its user's subordinate ids now, and (pf) against what
/// pf evaluates before it (exit 1 when one changed or is open).
pub fn check() -> anyhow::Result<Printed> {
    require_root("check")?;
    let fw = sandgate_firewall::system_backend();
    let installed = fw.list().map_err(|e| explain(e, "check"))?;
    let mut changed = 0;
    let mut out = Vec::new();
    for i in &installed {
        let open = fw.findings(&i.scope).map_err(|e| explain(e, "check"))?;
        match identity_warning(i) {
            Some(warning) => {
                changed += 1;
                out.push(format!("{}: {warning}", i.name));
            }
            None if open.is_empty() => {
                out.push(format!("{}: {} fenced as applied", i.name, i.scope))
            }
            None => {}
        }
        if !open.is_empty() {
            changed += 1;
            out.extend(open.iter().map(|f| format!("{}: OPEN: {f}", i.name)));
        }
    }
    let text = lines(out);
    Ok(Printed::new(text.clone(), text).exit(if changed > 0 { 1 } else { 0 }))
}

/// `gc`: removes rules whose user or owner process is gone (with `dry_run`, what would be).
pub fn gc(dry_run: bool) -> anyhow::Result<Printed> {
    require_root("gc")?;
    let fw = sandgate_firewall::system_backend();
    if dry_run {
        let plan =
            sandgate_firewall::gc_plan(&*fw, &SystemOwnerCheck).map_err(|e| explain(e, "gc"))?;
        let text = plan.to_string();
        return Ok(Printed::new(text.clone(), text));
    }
    let removed = fw.gc(&SystemOwnerCheck).map_err(|e| explain(e, "gc"))?;
    let text = lines(removed.iter().map(|s| format!("removed {s}")));
    Ok(Printed::new(text.clone(), text)
        .note(format!("sandgate: {} stale rule set(s) removed", removed.len())))
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
