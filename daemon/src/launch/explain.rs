//! `sandgate explain`: the tier's policy, the spec a launch here would get, and what this kernel
//! enforces of it.

use std::path::PathBuf;

use sandgate_config::Policy;
use sandgate_sandbox::{NetSetup, SandboxId, SandboxSpec};

use super::*;

/// What `sandgate explain` shows: the tier's policy, the spec a launch here would get, and what
/// this kernel enforces of it.
#[derive(Debug)]
pub struct Explanation {
    /// The resolved policy (allow and deny rules).
    pub policy: Policy,
    /// The spec of a launch in this directory.
    pub spec: SandboxSpec,
    /// [`kernel_report`] of the spec.
    pub kernel: serde_json::Value,
    /// The package caches a launch here would layer copy-on-write (name, path), and where the
    /// layers are (`None`: caches stay read-only in this tier).
    pub caches: (Vec<(&'static str, PathBuf)>, Option<PathBuf>),
    /// The configuration files of this directory and whether each applies.
    pub config_files: Vec<sandgate_config::ConfigFile>,
}

impl Explanation {
    /// `explain --json`.
    pub fn json(&self) -> serde_json::Value {
        let (spec, policy) = (&self.spec, &self.policy);
        let rules = |v: &[std::sync::Arc<sandgate_config::Rule>]| {
            v.iter().map(|r| r.to_string()).collect::<Vec<_>>()
        };
        serde_json::json!({
            "tier": spec.tier_name,
            "read": "everything except hidden paths",
            "writable": shown(&spec.writable),
            "private_tmp": true,
            "hidden": shown(&spec.hidden),
            "read_only": shown(&spec.read_only),
            "replaced": spec.provided.iter().map(|d| d.path.display().to_string()).collect::<Vec<_>>(),
            "writable_dotfiles": spec.top_level.as_ref().map(|t| &t.writable),
            "protected_below_the_top": spec.top_level.as_ref().map(|t| &t.below),
            "reported_when_changed": spec.top_level.as_ref().map(|t| &t.review),
            "scan": {
                "directories_read": spec.scan.dirs_read() + spec.writable.len(),
                "bounds": { "depth": sandgate_sandbox::tree::SCAN_DEPTH,
                            "directories": spec.top_level.as_ref().and_then(|t| t.scan_directories)
                                .unwrap_or(sandgate_sandbox::tree::SCAN_DIRS) },
                "not_looked_into": spec.scan.unread.iter()
                    .map(|u| serde_json::json!({ "path": u.path, "why": u.why.to_string() }))
                    .collect::<Vec<_>>(),
                "build_output_not_entered": shown(&spec.scan.skipped),
            },
            "network": self.network(),
            "allow": rules(policy.net.allow_rules()),
            "deny": rules(policy.net.deny_rules()),
            "caches": {
                "mode": if self.caches.1.is_some() { policy.fs.caches.name() } else { "off" },
                "layers": self.caches.1,
                "layered": self.caches.0.iter()
                    .map(|(n, p)| serde_json::json!({ "name": n, "path": p }))
                    .collect::<Vec<_>>(),
            },
            "kernel": self.kernel,
            "config_files": self.config_files,
        })
    }

    /// `explain` as text, line by line.
    pub fn lines(&self) -> Vec<String> {
        let (spec, policy) = (&self.spec, &self.policy);
        let rules = |v: &[std::sync::Arc<sandgate_config::Rule>]| {
            let v: Vec<String> = v.iter().map(|r| r.to_string()).collect();
            if v.is_empty() { "(none)".to_owned() } else { v.join(", ") }
        };
        let mut out = vec![format!("tier {}", spec.tier_name)];
        out.extend(crate::policy_report::config_files_lines(&self.config_files));
        out.extend([
            "  read:       everything except hidden paths".to_owned(),
            "  write:      private /tmp and /dev/shm".to_owned(),
        ]);
        out.extend(spec.writable.iter().map(|w| format!("              {}", w.display())));
        out.push(format!("  network:    {}", self.network()));
        if spec.net != NetSetup::None {
            out.push(format!("  allow:      {}", rules(policy.net.allow_rules())));
            out.push(format!("  deny:       {}", rules(policy.net.deny_rules())));
            out.push(
                "              anything else is asked about (`sandgate check HOST` explains)"
                    .into(),
            );
        }
        out.push(format!("  hidden:     {}", shown(&spec.hidden).join(" ")));
        out.push(format!("  read-only:  {}", shown(&spec.read_only).join(" ")));
        for d in &spec.provided {
            out.push(format!(
                "  replaced:   {} (a read-only copy without secrets)",
                d.path.display()
            ));
        }
        if let Some(t) = spec.top_level.as_ref().filter(|_| !spec.writable.is_empty()) {
            out.push(format!(
                "  top of writable paths: every dot-entry and {} read-only, new ones moved to \
                 the quarantine; writable dot-entries: {}",
                t.protected.join(" "),
                t.writable.join(" ")
            ));
            out.push(format!(
                "  below the top: {} read-only wherever they are (unless writable above), new \
                 ones moved to the quarantine; build output not entered: {}; reported at the \
                 end when changed: {}",
                t.below.join(" "),
                t.skip.join(" "),
                t.review.join(" ")
            ));
            let scan = &spec.scan;
            out.push(format!(
                "  scan:       {} directories read (bounds: {} levels, {} directories), {} \
                 repositories, {} build output directories not entered",
                scan.dirs_read() + spec.writable.len(),
                sandgate_sandbox::tree::SCAN_DEPTH,
                t.scan_directories.unwrap_or(sandgate_sandbox::tree::SCAN_DIRS),
                scan.repositories.len(),
                scan.skipped.len()
            ));
            if !scan.unread.is_empty() {
                out.push(format!(
                    "  not looked into ({}; read-only for the launch):",
                    scan.unread.len()
                ));
                out.extend(
                    scan.unread
                        .iter()
                        .map(|u| format!("              {} ({})", u.path.display(), u.why)),
                );
            }
        }
        match &self.caches {
            (layered, Some(dir)) => {
                let names: Vec<String> =
                    layered.iter().map(|(n, p)| format!("{n} {}", p.display())).collect();
                out.push(format!(
                    "  caches:     copy-on-write ({}; layers in {}): {}",
                    match policy.fs.caches {
                        sandgate_config::CacheMode::Shared => "one layer shared by every project",
                        _ => "a layer for this project",
                    },
                    dir.display(),
                    if names.is_empty() { "(none found)".to_owned() } else { names.join(", ") }
                ));
            }
            (_, None) => out.push(
                "  caches:     read-only (copy-on-write only in tiers that build or reach the \
                 network, unless [filesystem] caches = \"off\")"
                    .into(),
            ),
        }
        out.push("kernel".to_owned());
        for (k, v) in self.kernel.as_object().into_iter().flatten() {
            out.push(format!("  {k}: {v}"));
        }
        out
    }

    fn network(&self) -> String {
        match &self.spec.net {
            NetSetup::None => "none: loopback only".to_owned(),
            NetSetup::Proxy { .. } => format!(
                "proxy: only http://127.0.0.1:{} inside; direct connections are refused and \
                 logged",
                sandgate_sandbox::PROXY_PORT
            ),
        }
    }
}

impl crate::report::Report for Explanation {
    fn text(&self) -> String {
        crate::report::lines(self.lines())
    }
    fn json(&self) -> String {
        format!("{}\n", serde_json::to_string_pretty(&self.json()).unwrap_or_default())
    }
}

/// Paths as text.
fn shown(v: &[PathBuf]) -> Vec<String> {
    v.iter().map(|p| p.display().to_string()).collect()
}

/// Explains `tier`: what it allows here and what this kernel can enforce.
pub fn explain(tier: &str) -> anyhow::Result<Explanation> {
    let ctx = LaunchEnv::from_process()?;
    let la =
        LaunchOptions { quiet: true, command: vec!["true".into()], ..LaunchOptions::default() };
    let policy = resolve_policy(tier, &la)?;
    refuse_writable_cwd(&policy, &ctx)?;
    let spec = spec_from_policy(&policy, &la, &ctx, SandboxId::try_from("explain")?)?;
    let kernel = kernel_report(&spec);
    let caches = match ctx.data_home.as_deref().filter(|_| crate::caches::applies(&policy)) {
        Some(data) => {
            let project = crate::caches::project_of(&ctx);
            let (found, _) = crate::caches::eligible(&policy, &ctx);
            let layered = found.into_iter().map(|c| (c.name, c.path)).collect();
            (layered, crate::caches::scope_dir(policy.fs.caches, data, &project))
        }
        None => (Vec::new(), None),
    };
    let config_files = crate::setup::load_config()?.file_report();
    Ok(Explanation { policy, spec, kernel, caches, config_files })
}
/// What this kernel enforces of `spec`: Landlock's ABI and gaps, and every wall missing for this
/// spec (Landlock's gaps, and unchecked unix socket paths when the configuration allows a socket
/// and Landlock cannot check paths), the same verdict `--require-full` acts on.
#[cfg(target_os = "linux")]
pub fn kernel_report(spec: &SandboxSpec) -> serde_json::Value {
    let k = sandgate_sandbox::kernel_support();
    let gaps = sandgate_sandbox::landlock_gaps(k.landlock_abi);
    let sockets = !sandgate_sandbox::resolved_unix_sockets(spec).is_empty();
    let assessed = sandgate_sandbox::assess(k.landlock_abi, gaps.clone(), sockets);
    let unix = if sandgate_sandbox::checks_unix_socket_paths(k.landlock_abi) {
        "checked by Landlock (connect only to allowed socket paths)"
    } else if assessed.deny_unix_sockets {
        "Landlock cannot check socket paths here: seccomp refuses every new unix socket"
    } else {
        "Landlock cannot check socket paths here and sockets are allowed: any reachable socket \
         can be connected to"
    };
    serde_json::json!({
        "landlock_abi": k.landlock_abi,
        "landlock_not_enforced": gaps,
        "not_enforced": assessed.enforcement.missing,
        "substitutes": assessed.enforcement.substitutes,
        "seccomp": k.seccomp,
        "user_namespaces": k.user_namespaces,
        "userns_settings": k.userns_settings.iter().map(|(a, b)| format!("{a}={b}")).collect::<Vec<_>>(),
        "unix_sockets": unix,
    })
}

/// Outside Linux: the backend used, and what its profile enforces of `spec` wall by wall (the
/// verdict `--require-full` acts on).
#[cfg(not(target_os = "linux"))]
pub fn kernel_report(spec: &SandboxSpec) -> serde_json::Value {
    let e = sandgate_sandbox::seatbelt::enforcement(spec);
    serde_json::json!({
        "backend": "seatbelt (sandbox-exec)",
        "not_enforced": e.missing,
        "substitutes": e.substitutes,
    })
}
