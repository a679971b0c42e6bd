//! What the policy commands print: `check`, `tiers`, `config list-paths|add-path|remove-path|
//! check` and `secrets list|test`. The values are `sandgate_config`'s and `sandgate_proxy`'s
//! reports; this adds the stored grants `check` consults and renders the text.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use sandgate_config::edit::CheckError;
use sandgate_config::{
    Config, ConfigError, ConfigFile, ConfigPaths, Decision, NetCheck, NetMode, Overrides, Target,
    TierSummary, WritablePath,
};
use sandgate_proxy::secret_report::{SecretInfo, SecretTest, find_secret};
use serde_json::json;

use crate::UsageError;
use crate::report::{Printed, compact, lines};

/// Exit status of `check`: allowed.
const EXIT_ALLOW: u8 = 0;
/// Exit status of `check`: denied.
const EXIT_DENY: u8 = 1;
/// Exit status for usage and configuration errors.
pub const EXIT_USAGE: u8 = 2;
/// Exit status of `check`: a person would be asked.
const EXIT_ASK: u8 = 3;

/// An invalid configuration file as a usage error.
pub fn config_error(e: ConfigError) -> anyhow::Error {
    UsageError(format!("invalid configuration:\n{e}")).into()
}

/// What `check` is asked about a destination.
#[derive(Debug, Clone)]
pub struct CheckQuery {
    /// `host[:port]` or a URL.
    pub target: String,
    /// The tier whose policy decides.
    pub tier: String,
    /// `--allow` patterns.
    pub allow: Vec<String>,
    /// `--deny` patterns.
    pub deny: Vec<String>,
    /// `--net`.
    pub net: Option<NetMode>,
    /// Resolve a name the proxy would resolve and say what the address guard does with its
    /// addresses (`--no-resolve` turns it off).
    pub resolve: bool,
}

impl Default for CheckQuery {
    fn default() -> Self {
        CheckQuery {
            target: String::new(),
            tier: String::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            net: None,
            resolve: true,
        }
    }
}

/// What the address guard does with the addresses a name resolves to, as `check` reports it
/// after the policy's decision (the proxy resolves a name it lets through, then refuses the
/// loopback, private, link-local, metadata and own addresses unless the address itself is
/// allowed: allowing the name is not enough).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GuardCheck {
    /// The addresses, each with the guard's verdict.
    pub addresses: Vec<AddressVerdict>,
    /// Why the name did not resolve (the proxy would answer 502).
    pub error: Option<String>,
    /// The guard refuses every address: the request is refused whatever allows the name.
    pub refuses: bool,
}

/// One resolved address and what the guard does with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AddressVerdict {
    /// The address.
    pub ip: IpAddr,
    /// Why the guard refuses it (`a loopback address`); `None` for a public address.
    pub refused: Option<String>,
    /// The rule that allows the address itself (the guard's exception), when one does.
    pub allowed_by: Option<String>,
}

impl GuardCheck {
    /// The verdicts for `resolved` (or its error): `forbidden` is the guard's class of an
    /// address, `allowed` the rule that allows an address itself.
    pub fn new(
        resolved: Result<Vec<IpAddr>, String>,
        forbidden: impl Fn(IpAddr) -> Option<String>,
        allowed: impl Fn(IpAddr) -> Option<String>,
    ) -> GuardCheck {
        let ips = match resolved {
            Ok(ips) => ips,
            Err(error) => {
                return GuardCheck { addresses: Vec::new(), error: Some(error), refuses: false };
            }
        };
        let mut addresses: Vec<AddressVerdict> = Vec::new();
        for ip in ips {
            let ip = sandgate_config::canonical_ip(ip);
            if addresses.iter().any(|a| a.ip == ip) {
                continue;
            }
            let refused = forbidden(ip);
            let allowed_by = refused.as_ref().and_then(|_| allowed(ip));
            addresses.push(AddressVerdict { ip, refused, allowed_by });
        }
        let refuses = !addresses.is_empty()
            && addresses.iter().all(|a| a.refused.is_some() && a.allowed_by.is_none());
        GuardCheck { addresses, error: None, refuses }
    }
}

/// `sandgate check HOST`: the decision and the rule that made it (exit 0 allow, 1 deny, 3 ask,
/// 2 for a target that does not parse).
pub fn check(q: CheckQuery) -> anyhow::Result<Printed> {
    let target = match Target::parse(&q.target) {
        Ok(t) => t,
        Err(e) => {
            return Ok(Printed::new(
                "",
                compact(&json!({ "target": q.target, "error": e.to_string() })),
            )
            .text_note(format!("sandgate: invalid target {:?}: {e}", q.target))
            .text_note("help: give host[:port] or a URL, e.g. `sandgate check crates.io:443`")
            .exit(EXIT_USAGE));
        }
    };
    let config = crate::setup::load_config()?;
    let flags = Overrides { allow: q.allow, deny: q.deny, net: q.net, ..Overrides::default() };
    let policy = config.policy(&q.tier, &flags).map_err(|e| UsageError(e.to_string()))?;
    // As the proxy does: what no rule decides, a live grant (global, or this directory's
    // project) may; a deny grant first.
    let mut warnings = Vec::new();
    let mut r =
        NetCheck::new(&q.tier, &policy.net, target, |t| stored_grant(&config, t, &mut warnings));
    r.config_files = config.file_report();
    let guard = match (&r.target.host, &r.decision) {
        (sandgate_config::Host::Name(name), Decision::Allow(_) | Decision::Ask)
            if q.resolve
                && policy.net.mode == NetMode::Proxy
                // Never resolved: the host's loopback, on the allowed port (see the proxy).
                && name.as_str() != "localhost"
                // Resolved by the upstream proxy, not here.
                && !crate::setup::upstream(&config)?.is_some_and(|u| u.applies_to(&r.target)) =>
        {
            let resolved = resolve(name, r.target.port);
            let own = sandgate_proxy::guard::OwnAddresses::default();
            let forbidden = |ip: IpAddr| {
                sandgate_proxy::guard::classify(ip)
                    .or_else(|| {
                        own.contains(ip).then_some(sandgate_proxy::guard::Forbidden::OwnAddress)
                    })
                    .map(|f| f.to_string())
            };
            let allowed = |ip: IpAddr| {
                let t = Target { host: sandgate_config::Host::Ip(ip), port: r.target.port };
                let c = NetCheck::new(&q.tier, &policy.net, t, |t| {
                    stored_grant(&config, t, &mut Vec::new())
                });
                match c.decision {
                    Decision::Allow(rule) => Some(rule.to_string()),
                    Decision::Deny(_) | Decision::Ask => None,
                }
            };
            Some(GuardCheck::new(resolved, forbidden, allowed))
        }
        _ => None,
    };
    let code = match (&r.decision, &guard) {
        (_, Some(g)) if g.refuses => EXIT_DENY,
        (Decision::Allow(_), _) => EXIT_ALLOW,
        (Decision::Deny(_), _) => EXIT_DENY,
        (Decision::Ask, _) => EXIT_ASK,
    };
    let mut json = serde_json::to_value(&r).unwrap_or_default();
    if let Some(g) = &guard {
        json["resolved"] = serde_json::to_value(g).unwrap_or_default();
    }
    let mut p = Printed::new(check_text(&r, guard.as_ref()), compact(&json)).exit(code);
    for w in warnings {
        p = p.note(format!("sandgate: warning: stored grants not consulted: {w}"));
    }
    Ok(p)
}

/// The addresses of `name` as the proxy's resolver gives them (`SANDGATE_DNS_SERVER` as in the
/// daemon), or why there are none; waits at most a few seconds.
fn resolve(name: &sandgate_config::DomainName, port: u16) -> Result<Vec<IpAddr>, String> {
    let resolver = crate::dns::resolver().map_err(|e| format!("{e:#}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot resolve here: {e}"))?;
    rt.block_on(async {
        match tokio::time::timeout(std::time::Duration::from_secs(5), resolver.resolve(name, port))
            .await
        {
            Ok(Ok(addrs)) if addrs.is_empty() => Err("no addresses".to_owned()),
            Ok(Ok(addrs)) => Ok(addrs.into_iter().map(|a| a.ip()).collect()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer within 5 s".to_owned()),
        }
    })
}

/// The text of `check` for `r`, with what the address guard does with the name's addresses
/// (`guard`, when the name was resolved).
pub fn check_text(r: &NetCheck, guard: Option<&GuardCheck>) -> String {
    let target = &r.target;
    let refused = guard.is_some_and(|g| g.refuses);
    let verb = if refused { "deny" } else { r.decision.verb() };
    let mut out = vec![format!("{verb} {target}")];
    if r.intercepted {
        out.push(format!(
            "  intercepted: TLS is terminated by sandgate's CA (secrets: {}; http_rules: {})",
            if r.secrets.is_empty() { "none".into() } else { r.secrets.join(", ") },
            r.http_rules.as_ref().map_or("none", |h| h.origin.as_str())
        ));
    }
    out.push(match &r.decision {
        Decision::Allow(rule) | Decision::Deny(rule) => format!("  rule: {rule}"),
        Decision::Ask => format!(
            "  no rule matches: the request would be held until a person answers \
             (`sandgate allow {}`)",
            target.host
        ),
    });
    if let Some(g) = guard {
        out.extend(guard_lines(target, g));
    }
    if let Some(rule) = &r.narrowed_by_default_ports {
        let ports: Vec<String> = r.default_ports.iter().flatten().map(u16::to_string).collect();
        out.push(format!(
            "  not matched: {rule} has no port, and [network] default_ports = [{}] narrows such \
             patterns to those ports; allow {} to open this one",
            ports.join(", "),
            target
        ));
    }
    out.extend(config_files_lines(&r.config_files));
    lines(out)
}

/// What `check` says about the addresses of `target`'s name.
fn guard_lines(target: &Target, g: &GuardCheck) -> Vec<String> {
    if let Some(e) = &g.error {
        return vec![format!(
            "  does not resolve here: {e} (the proxy would answer 502 Bad Gateway)"
        )];
    }
    let shown: Vec<String> = g
        .addresses
        .iter()
        .map(|a| match (&a.refused, &a.allowed_by) {
            (None, _) => a.ip.to_string(),
            (Some(why), None) => format!("{} (refused by the address guard: {why})", a.ip),
            (Some(why), Some(rule)) => format!("{} ({why}, allowed by {rule})", a.ip),
        })
        .collect();
    let mut out = vec![format!("  resolves to {}", shown.join(", "))];
    if g.refuses {
        let ip = g.addresses[0].ip;
        let ip_target = Target { host: sandgate_config::Host::Ip(ip), port: target.port };
        out.push(format!(
            "  refused: the address guard refuses every address {} resolves to, whatever \
             allows the name (a rule, a grant, a person's answer); if {ip} is meant, allow the \
             address itself: `sandgate allow {ip_target}`, or {ip} in [network] allow",
            target.host
        ));
    }
    out
}

/// The configuration files that apply (`check`, `explain`): `  config: global ...` and the
/// per-directory file with the project it is for, absent ones said so.
pub fn config_files_lines(files: &[ConfigFile]) -> Vec<String> {
    files
        .iter()
        .enumerate()
        .map(|(i, f)| format!("  {:<12}{}", if i == 0 { "config:" } else { "" }, f.line()))
        .collect()
}

/// The live grant (global or of this directory's project) that decides `target`, read from the
/// store; `None` when there is no store or no grant covers it (why the store could not be read
/// goes to `warnings`). Grants of one sandbox are not considered: `check` runs outside any
/// sandbox.
fn stored_grant(config: &Config, target: &Target, warnings: &mut Vec<String>) -> Option<Decision> {
    use crate::adapters::GrantCache;
    let path = sandgate_store::Store::default_path().ok()?;
    if !path.exists() {
        return None;
    }
    let store = match sandgate_store::Store::open(&path) {
        Ok(s) => s,
        Err(e) => {
            warnings.push(e.to_string());
            return None;
        }
    };
    let cache = GrantCache::new(store);
    if let Err(e) = cache.reload() {
        warnings.push(e.to_string());
        return None;
    }
    let project = config.paths.project_root.to_string_lossy();
    let find = |e| cache.find(e, "", Some(&project), &target.host, target.port);
    if let Some(rule) = find(sandgate_store::Effect::Deny) {
        return Some(Decision::Deny(rule));
    }
    find(sandgate_store::Effect::Allow).map(Decision::Allow)
}

/// `sandgate tiers`.
pub fn tiers() -> anyhow::Result<Printed> {
    let config = crate::setup::load_config()?;
    let tiers = config.tier_summaries().map_err(|e| UsageError(e.to_string()))?;
    Ok(Printed::new(tiers_text(&tiers), compact(&tiers)))
}

/// The text of `tiers`.
pub fn tiers_text(tiers: &[TierSummary]) -> String {
    let mut out = Vec::new();
    for t in tiers {
        let fs = if t.writable_cwd { "cwd + configured paths writable" } else { "read-only" };
        let net = match t.net {
            NetMode::None => "no network",
            NetMode::Proxy => "network via the allowlist proxy",
        };
        out.push(format!("{:<14} {fs}; {net}", t.name));
        out.push(format!("{:<14} {} [{}]", "", t.description, t.defined_in));
        if t.net == NetMode::Proxy {
            let show = |v: &[String]| if v.is_empty() { "(none)".to_owned() } else { v.join(", ") };
            out.push(format!("{:<14} allow: {}", "", show(&t.allow)));
            if !t.deny.is_empty() {
                out.push(format!("{:<14} deny:  {}", "", show(&t.deny)));
            }
        }
    }
    lines(out)
}

/// `sandgate config list-paths`, with `extra` given as --allow-write.
pub fn list_paths(paths: ConfigPaths, extra: Vec<PathBuf>) -> anyhow::Result<Printed> {
    let config = Config::load(paths).map_err(config_error)?;
    let writable = config.writable_paths(extra).map_err(|e| UsageError(e.to_string()))?;
    Ok(Printed::new(list_paths_text(&writable), compact(&writable)))
}

/// The text of `config list-paths`: each path under a heading saying where it comes from.
pub fn list_paths_text(writable: &[WritablePath]) -> String {
    let mut out = vec!["Writable paths in tier `build` (and tiers based on it):".to_owned()];
    let mut last: Option<String> = None;
    for w in writable {
        let heading = match &w.file {
            Some(f) => format!("{} ({f})", w.source),
            None => w.source.clone(),
        };
        if last.as_ref() != Some(&heading) {
            out.push(format!("  {heading}"));
            last = Some(heading);
        }
        out.push(format!("    {}", w.path.display()));
    }
    out.push(
        "Everything else is read-only; tiers `run` and `net` write nowhere but /tmp.".to_owned(),
    );
    lines(out)
}

/// `sandgate config add-path`: `path` (absolute) into `file`; refused while the managed layer
/// locks the filesystem walls (the entry would decide nothing).
pub fn add_path(file: &Path, path: &Path) -> anyhow::Result<Printed> {
    let managed = sandgate_config::system_dir().join(sandgate_config::MANAGED_FILE);
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Some(m) =
        sandgate_config::Managed::load(&managed, home.as_deref()).map_err(config_error)?
    {
        let what = format!("making {} writable", path.display());
        m.screen_writable(&what).map_err(|e| UsageError(e.to_string()))?;
    }
    let mut r = Printed::default();
    if std::fs::symlink_metadata(path).is_err() {
        r = r.note(format!(
            "sandgate: warning: {} does not exist; launches skip it (with a warning) until it does",
            path.display()
        ));
    }
    r.text = if sandgate_config::add_path(file, path).map_err(config_error)? {
        format!("added {} to {}\n", path.display(), file.display())
    } else {
        format!("{} is already in {}\n", path.display(), file.display())
    };
    Ok(r)
}

/// `sandgate config remove-path`: `path` (absolute) out of `file` (exit 1 when it was not in).
pub fn remove_path(file: &Path, path: &Path) -> anyhow::Result<Printed> {
    Ok(if sandgate_config::remove_path(file, path).map_err(config_error)? {
        Printed::new(format!("removed {} from {}\n", path.display(), file.display()), "")
    } else {
        Printed::default()
            .note(format!("sandgate: {} is not in {}", path.display(), file.display()))
            .exit(1)
    })
}

/// `sandgate config check`: where both files are and whether they load.
pub fn config_check(paths: ConfigPaths) -> anyhow::Result<Printed> {
    let mut out = Vec::new();
    for (what, file) in [("global", &paths.global), ("per-directory", &paths.project)] {
        let state = if file.exists() { "present" } else { "absent" };
        out.push(format!("{what:14} {state:8} {}", file.display()));
    }
    // Which directory the per-directory file is for: the project, perhaps above the cwd.
    out.push(format!("{:23} {}", "project", paths.project_root.display()));
    let system = sandgate_config::system_dir();
    for (what, name) in
        [("system", sandgate_config::SYSTEM_FILE), ("managed", sandgate_config::MANAGED_FILE)]
    {
        let file = system.join(name);
        let state = if file.exists() { "present" } else { "absent" };
        out.push(format!("{what:14} {state:8} {}", file.display()));
    }
    match sandgate_config::edit::check(paths) {
        Ok(config) => {
            out.extend(crate::managed::check_lines(&config));
            for w in &config.missing_writable() {
                out.push(format!("warning: {}", missing_path_notice(w)));
            }
            let mut r = Printed::default();
            for w in sandgate_approvals::telegram::config_warnings(&config) {
                r = r.note(format!("warning: {w}"));
            }
            out.push("ok: configuration is valid".to_owned());
            r.text = lines(out);
            Ok(r)
        }
        // The error as `main` would print it, after the lines above.
        Err(CheckError::File(e)) => Ok(Printed::new(lines(out), "")
            .note(format!("sandgate: invalid configuration:\n{e}"))
            .exit(EXIT_USAGE)),
        Err(CheckError::Tiers(e)) => {
            Ok(Printed::new(lines(out), "").note(format!("sandgate: {e}")).exit(EXIT_USAGE))
        }
    }
}

/// `sandgate secrets list`.
pub fn secrets_list() -> anyhow::Result<Printed> {
    let settings = intercept_settings()?;
    let items: Vec<SecretInfo> = settings.secrets.iter().map(SecretInfo::of).collect();
    let text = if items.is_empty() {
        lines(["no secrets configured ([[secrets]] in the configuration)"])
    } else {
        lines(items.iter().map(|s| {
            format!(
                "{}  hosts {}  header {}  env {}  source {}  ({})",
                s.name,
                s.hosts.join(","),
                s.header,
                s.env.as_deref().unwrap_or("-"),
                s.detail,
                s.defined_at
            )
        }))
    };
    Ok(Printed::new(text, compact(&items)))
}

/// `sandgate secrets test NAME`: reads the secret's source now (exit 1 when it fails).
pub fn secrets_test(name: &str) -> anyhow::Result<Printed> {
    let settings = intercept_settings()?;
    let secret = find_secret(&settings, name).map_err(|e| UsageError(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::Error::new(e).context("cannot start a runtime"))?;
    let test = rt.block_on(SecretTest::run(secret));
    let text = match &test.result {
        Ok(len) => format!("{name}: ok ({} source, {len} characters)\n", secret.source.kind()),
        Err(e) => format!("{name}: error: {e}\n"),
    };
    Ok(Printed::new(text, compact(&test)).exit(if test.result.is_ok() { 0 } else { 1 }))
}

fn intercept_settings() -> anyhow::Result<sandgate_config::InterceptSettings> {
    let config = crate::setup::load_config()?;
    config
        .intercept_settings()
        .map_err(|e| UsageError(format!("invalid configuration:\n{e}")).into())
}

/// What to say about writable path `w` that does not exist.
pub fn missing_path_notice(w: &sandgate_config::PathRule) -> String {
    let fix = match &w.source {
        sandgate_config::RuleSource::File { path, line } => format!(
            "from {}:{line}; remove it with `sandgate config remove-path {}`{}",
            path.display(),
            w.path.display(),
            if path.ends_with("config.toml") { " --global" } else { "" }
        ),
        other => format!("from {other}"),
    };
    format!("skipping writable path {} (it does not exist), {fix}", w.path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 32, part 3: what `check` says of a name's addresses, by the guard's verdicts.
    #[test]
    fn the_guard_refuses_a_name_only_when_it_refuses_every_address() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let forbidden = |a: IpAddr| sandgate_proxy::guard::classify(a).map(|f| f.to_string());
        let allowed_10 =
            |a: IpAddr| (a == ip("10.0.0.5")).then(|| "10.0.0.5 (command line)".to_owned());
        let target = Target::parse("svc.test:8080").unwrap();
        // (what, resolved, refused, lines)
        type Row<'a> = (&'a str, Result<Vec<IpAddr>, String>, bool, &'a [&'a str]);
        let rows: [Row<'_>; 5] = [
            (
                "loopback only",
                Ok(vec![ip("127.0.0.1"), ip("::1")]),
                true,
                &[
                    "  resolves to 127.0.0.1 (refused by the address guard: a loopback address), \
                     ::1 (refused by the address guard: a loopback address)",
                    "  refused: the address guard refuses every address svc.test resolves to, \
                     whatever allows the name (a rule, a grant, a person's answer); if 127.0.0.1 \
                     is meant, allow the address itself: `sandgate allow 127.0.0.1:8080`, or \
                     127.0.0.1 in [network] allow",
                ],
            ),
            (
                "a public address among them: it is used",
                Ok(vec![ip("10.1.1.1"), ip("93.184.216.34")]),
                false,
                &["  resolves to 10.1.1.1 (refused by the address guard: a private network \
                     address), 93.184.216.34"],
            ),
            (
                "the address itself allowed",
                Ok(vec![ip("10.0.0.5")]),
                false,
                &["  resolves to 10.0.0.5 (a private network address, allowed by 10.0.0.5 \
                     (command line))"],
            ),
            (
                "does not resolve",
                Err("no addresses".into()),
                false,
                &["  does not resolve here: no addresses (the proxy would answer 502 Bad Gateway)"],
            ),
            ("a mapped address is judged as IPv4", Ok(vec![ip("::ffff:127.0.0.1")]), true, &[]),
        ];
        for (what, resolved, refuses, want) in rows {
            let g = GuardCheck::new(resolved, forbidden, allowed_10);
            assert_eq!(g.refuses, refuses, "{what}: {g:?}");
            if !want.is_empty() {
                assert_eq!(guard_lines(&target, &g), *want, "{what}");
            }
        }
    }

    #[test]
    fn list_paths_groups_by_origin() {
        let w = |p: &str, source: &str, file: Option<&str>| WritablePath {
            path: p.into(),
            rule: String::new(),
            source: source.into(),
            file: file.map(Into::into),
        };
        let t = list_paths_text(&[
            w("/a", "global", Some("/g.toml")),
            w("/b", "global", Some("/g.toml")),
            w("/c", "--allow-write", None),
        ]);
        assert_eq!(
            t,
            "Writable paths in tier `build` (and tiers based on it):\n  global (/g.toml)\n    /a\n    /b\n  --allow-write\n    /c\nEverything else is read-only; tiers `run` and `net` write nowhere but /tmp.\n"
        );
    }
}
