//! The policy a sandbox runs under, and how a child policy is derived from its parent.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::decision::{Decision, Rule, RuleSource};
use crate::host::{Host, Target};
use crate::matcher::PatternSet;
use crate::pattern::DomainPattern;
use crate::roots::{RootRefusal, RootRule};

/// How a sandbox reaches the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetMode {
    /// Loopback only.
    None,
    /// Only through the allowlist proxy.
    Proxy,
}

impl NetMode {
    /// Parses `none` or `proxy`.
    pub fn parse(s: &str) -> Option<NetMode> {
        match s {
            "none" => Some(NetMode::None),
            "proxy" => Some(NetMode::Proxy),
            _ => None,
        }
    }
}

impl fmt::Display for NetMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetMode::None => "none",
            NetMode::Proxy => "proxy",
        })
    }
}

/// A path in a filesystem rule and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRule {
    /// Absolute path.
    pub path: PathBuf,
    /// Where it came from.
    pub source: RuleSource,
}

/// Filesystem rules. Everything is readable except `hidden`; nothing is writable except
/// `writable` (plus the sandbox's private `/tmp`); inside writable paths, entries named in
/// `protected` stay read-only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsPolicy {
    /// Paths the sandbox may write below.
    pub writable: Vec<PathRule>,
    /// Paths the sandbox may not read (credentials).
    pub hidden: Vec<PathRule>,
    /// Names relative to each writable path that stay read-only (`.git/hooks`, `.envrc`, ...).
    pub protected: Vec<String>,
    /// Pathname unix sockets the sandbox may connect to (none by default).
    pub unix_sockets: Vec<PathRule>,
    /// Whether a repository's `.git` directory at the top of a writable path stays writable
    /// (commits from inside; its hooks and config stay read-only). Off by default: with `.git`
    /// writable, a command can plant `.git/commondir` and point git at hooks of its own.
    pub git_writable: bool,
    /// Home directory entries readable beyond the built-in allowlist (`[filesystem]
    /// readable_home`, relative to the home directory); every other dot-entry there is hidden.
    pub readable_home: Vec<String>,
    /// Entries at the top of each writable path that stay writable although their name starts
    /// with a dot (the built-in allowlist and `[filesystem] writable_dotfiles`; patterns may
    /// start or end with `*`). Every other dot-entry there, and the names of
    /// [`crate::top_autorun`], are read-only, and new ones are taken away.
    pub writable_dotfiles: Vec<String>,
    /// How package caches are layered in tiers that write or reach the network
    /// (`[filesystem] caches`): copy-on-write, never the host's own (see [`crate::CacheMode`]).
    pub caches: crate::CacheMode,
    /// How many directories the scan of a `build` launch's writable trees reads at most
    /// (`[filesystem] scan_directories`; `None`: the launcher's default). What it does not read
    /// is read-only for that launch.
    pub scan_directories: Option<usize>,
}

impl FsPolicy {
    /// Whether `path` is at or below a writable path (lexically; callers canonicalise).
    pub fn is_writable(&self, path: &Path) -> bool {
        self.writable.iter().any(|w| path.starts_with(&w.path))
    }

    /// Why the working directory may not be writable here ([`RootRule`]), or `None`: the tier
    /// does not make it writable, the rule accepts it, or an `--allow-write` path is that
    /// directory or holds it (a person named it, so it is writable by name anyway).
    pub fn cwd_refusal(&self, rule: &RootRule) -> Option<RootRefusal> {
        let cwd = self.writable.iter().find(|w| w.source == RuleSource::CurrentDirectory)?;
        let refusal = rule.refusal(&cwd.path)?;
        let named = self
            .writable
            .iter()
            .any(|w| w.source == RuleSource::CommandLine && cwd.path.starts_with(&w.path));
        (!named).then_some(refusal)
    }
}

/// Network rules. Precedence, first match wins:
/// 1. mode `none` denies everything;
/// 2. the managed layer's deny patterns (`/etc/sandgate/managed.toml`);
/// 3. deny patterns (deny wins over allow);
/// 4. allow patterns;
/// 5. under the managed allow ceiling (`allow_only_managed`), everything else is denied;
/// 6. otherwise [`Decision::Ask`] (grants from the store are consulted by the proxy after this).
///
/// With [`default ports`](NetworkPolicy::with_default_ports), an allow pattern written without a
/// port matches only those ports; deny patterns are never narrowed.
#[derive(Clone, Debug)]
pub struct NetworkPolicy {
    /// Network mode.
    pub mode: NetMode,
    allow: PatternSet,
    /// The allow rules written with a port: what still matches a port outside the defaults.
    allow_ported: PatternSet,
    deny: PatternSet,
    no_network: Arc<Rule>,
    default_ports: Option<Arc<[u16]>>,
    intercept: Arc<crate::InterceptSettings>,
    managed: Option<Arc<ManagedNet>>,
}

impl NetworkPolicy {
    /// Builds a network policy for `tier` from allow and deny rules.
    pub fn new(tier: &str, mode: NetMode, allow: Vec<Rule>, deny: Vec<Rule>) -> NetworkPolicy {
        let ported: Vec<Rule> = allow
            .iter()
            .filter(|r| r.pattern.as_ref().is_some_and(|p| p.port.is_some()))
            .cloned()
            .collect();
        NetworkPolicy {
            mode,
            allow: PatternSet::new(allow),
            allow_ported: PatternSet::new(ported),
            deny: PatternSet::new(deny),
            no_network: Arc::new(Rule {
                pattern: None,
                source: RuleSource::NoNetwork(tier.into()),
            }),
            default_ports: None,
            intercept: Arc::default(),
            managed: None,
        }
    }

    /// Puts the managed layer's deny list and allow ceiling above every other rule (the allow
    /// list given to [`NetworkPolicy::new`] must already be within the ceiling).
    pub(crate) fn with_managed(mut self, managed: Option<Arc<ManagedNet>>) -> NetworkPolicy {
        self.managed = managed;
        self
    }

    /// Whether the managed layer's allow ceiling holds: nothing outside its allow list may be
    /// allowed, by a rule, a flag or a person's answer.
    pub fn under_ceiling(&self) -> bool {
        self.managed.as_ref().is_some_and(|m| m.ceiling.is_some())
    }

    /// Sets what the proxy intercepts for this sandbox (secrets, HTTP rules, upstream roots).
    pub fn with_intercept(mut self, intercept: Arc<crate::InterceptSettings>) -> NetworkPolicy {
        self.intercept = intercept;
        self
    }

    /// What the proxy intercepts for this sandbox.
    pub fn intercept(&self) -> &Arc<crate::InterceptSettings> {
        &self.intercept
    }

    /// Narrows allow patterns written without a port to `ports` (`[network] default_ports`);
    /// `None` leaves them matching every port.
    pub fn with_default_ports(mut self, ports: Option<Vec<u16>>) -> NetworkPolicy {
        self.default_ports = ports.map(Into::into);
        self
    }

    /// The ports allow patterns without a port are narrowed to, when set.
    pub fn default_ports(&self) -> Option<&[u16]> {
        self.default_ports.as_deref()
    }

    /// The allow rule written without a port that would match `target` but for the default
    /// ports (for `sandgate check` to explain why it does not).
    pub fn narrowed_by_default_ports(&self, target: &Target) -> Option<Arc<Rule>> {
        let ports = self.default_ports.as_deref()?;
        if ports.contains(&target.port) {
            return None;
        }
        self.allow
            .find(&target.host, target.port)
            .filter(|r| r.pattern.as_ref().is_some_and(|p| p.port.is_none()))
            .cloned()
    }

    /// Whether a port-less allow pattern matches `port` under the default ports.
    fn default_port_ok(&self, port: u16) -> bool {
        self.default_ports.as_deref().is_none_or(|p| p.contains(&port))
    }

    /// Decides a destination.
    pub fn decide(&self, target: &Target) -> Decision {
        self.decide_host(&target.host, target.port)
    }

    /// Decides `host:port`.
    pub fn decide_host(&self, host: &Host, port: u16) -> Decision {
        if self.mode == NetMode::None {
            return Decision::Deny(self.no_network.clone());
        }
        let managed = self.managed.as_deref();
        if let Some(rule) = managed.and_then(|m| m.deny.find(host, port)) {
            return Decision::Deny(rule.clone());
        }
        if let Some(rule) = self.deny.find(host, port) {
            return Decision::Deny(rule.clone());
        }
        let allow = if self.default_port_ok(port) { &self.allow } else { &self.allow_ported };
        match allow.find(host, port) {
            Some(rule) => Decision::Allow(rule.clone()),
            None => managed.map_or(Decision::Ask, ManagedNet::unmatched),
        }
    }

    /// Decides a name (or address) looked up without a port, as the DNS stub must: denied by a
    /// deny rule that covers every port (`example.com`, not `example.com:25`); allowed by an
    /// allow rule for any port (`example.com:22` lets the name resolve, the proxy still decides
    /// each connection by its port); otherwise [`Decision::Ask`].
    pub fn decide_name(&self, host: &Host) -> Decision {
        if self.mode == NetMode::None {
            return Decision::Deny(self.no_network.clone());
        }
        let managed = self.managed.as_deref();
        if let Some(rule) = managed.and_then(|m| m.deny.find_on_every_port(host)) {
            return Decision::Deny(rule.clone());
        }
        if let Some(rule) = self.deny.find_on_every_port(host) {
            return Decision::Deny(rule.clone());
        }
        match self.allow.find_on_some_port(host) {
            Some(rule) => Decision::Allow(rule.clone()),
            None => managed.map_or(Decision::Ask, ManagedNet::unmatched),
        }
    }

    /// The allow rules, in order.
    pub fn allow_rules(&self) -> &[Arc<Rule>] {
        self.allow.rules()
    }

    /// The deny rules, in order.
    pub fn deny_rules(&self) -> &[Arc<Rule>] {
        self.deny.rules()
    }
}

/// The managed layer's part of a network policy: what it decides before and after the other
/// rules (see [`NetworkPolicy`]'s precedence), made by [`crate::Managed`].
#[derive(Debug)]
pub(crate) struct ManagedNet {
    /// Denied first, whatever else says.
    pub(crate) deny: PatternSet,
    /// Under `allow_only_managed`: the rule that denies what no allow rule matched.
    pub(crate) ceiling: Option<Arc<Rule>>,
}

impl ManagedNet {
    /// The decision for a destination that no allow rule matched: denied under the ceiling,
    /// otherwise asked.
    pub(crate) fn unmatched(&self) -> Decision {
        match &self.ceiling {
            Some(rule) => Decision::Deny(rule.clone()),
            None => Decision::Ask,
        }
    }
}

/// A complete sandbox policy: the tier it came from, filesystem and network rules.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Tier name.
    pub tier: String,
    /// Filesystem rules.
    pub fs: FsPolicy,
    /// Network rules.
    pub net: NetworkPolicy,
    /// Secret-looking environment variables passed to the command anyway (`[env] pass`, names or
    /// `*` patterns); the others are removed.
    pub env_pass: Vec<String>,
}

/// What a child sandbox asks for when derived from a parent. `None` means "as the parent".
#[derive(Clone, Debug, Default)]
pub struct Narrowing {
    /// Network mode for the child.
    pub net: Option<NetMode>,
    /// Writable paths for the child (each must lie within a parent writable path).
    pub writable: Option<Vec<PathBuf>>,
    /// Allow patterns for the child (each must be covered by a parent allow pattern).
    pub allow: Option<Vec<DomainPattern>>,
    /// Extra deny patterns (always accepted).
    pub deny: Vec<DomainPattern>,
    /// Extra hidden paths (always accepted).
    pub hidden: Vec<PathBuf>,
}

/// A child asked for more than its parent has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "permission escalation: the child asked for {requested}, but the parent allows {parent_allows}; {instead}"
)]
pub struct PermissionEscalation {
    /// What was asked for.
    pub requested: String,
    /// What the parent allows in that respect.
    pub parent_allows: String,
    /// What to do instead.
    pub instead: String,
}

impl Policy {
    /// Derives a child policy that can only be narrower than `self`.
    ///
    /// The child keeps every parent deny rule and hidden path, may replace the allow list and the
    /// writable paths only by subsets, and may go from `proxy` to `none` but not back.
    pub fn derive(&self, n: &Narrowing) -> Result<Policy, PermissionEscalation> {
        let mode = n.net.unwrap_or(self.net.mode);
        if mode == NetMode::Proxy && self.net.mode == NetMode::None {
            return Err(PermissionEscalation {
                requested: "network through the proxy".into(),
                parent_allows: "no network".into(),
                instead: "run the child with `--net none`, or start it from a tier with network"
                    .into(),
            });
        }
        let writable = match &n.writable {
            None => self.fs.writable.clone(),
            Some(paths) => {
                let mut out = Vec::new();
                for p in paths {
                    // Lexical containment is only sound for absolute paths without `..`.
                    let plain = p.is_absolute()
                        && !p.components().any(|c| c == std::path::Component::ParentDir);
                    if !plain || !self.fs.is_writable(p) {
                        return Err(PermissionEscalation {
                            requested: format!("write access to {}", p.display()),
                            parent_allows: list(self.fs.writable.iter().map(|w| w.path.display())),
                            instead: "ask for a path inside one of those, or change the parent's \
                                      configuration outside the sandbox"
                                .into(),
                        });
                    }
                    out.push(PathRule { path: p.clone(), source: RuleSource::CommandLine });
                }
                out
            }
        };
        let allow: Vec<Rule> = match &n.allow {
            None => self.net.allow_rules().iter().map(|r| (**r).clone()).collect(),
            Some(patterns) => {
                let mut out = Vec::new();
                for p in patterns {
                    // Under default ports a parent pattern without a port covers only those
                    // ports: the child's pattern must then stay within them too.
                    let within_defaults = |parent: &DomainPattern| {
                        parent.port.is_some()
                            || match p.port {
                                Some(port) => self.net.default_port_ok(port),
                                None => true,
                            }
                    };
                    let covered = self.net.allow_rules().iter().any(|r| {
                        r.pattern.as_ref().is_some_and(|parent| {
                            p.is_covered_by(parent) && within_defaults(parent)
                        })
                    });
                    if !covered {
                        return Err(PermissionEscalation {
                            requested: format!("access to {p}"),
                            parent_allows: list(
                                self.net.allow_rules().iter().filter_map(|r| r.pattern.as_ref()),
                            ),
                            instead: format!(
                                "ask a person to approve it (`sandgate allow {p}`) instead of \
                                 allowing it in the child"
                            ),
                        });
                    }
                    out.push(Rule { pattern: Some(p.clone()), source: RuleSource::CommandLine });
                }
                out
            }
        };
        let mut deny: Vec<Rule> = self.net.deny_rules().iter().map(|r| (**r).clone()).collect();
        deny.extend(
            n.deny
                .iter()
                .map(|p| Rule { pattern: Some(p.clone()), source: RuleSource::CommandLine }),
        );
        let mut hidden = self.fs.hidden.clone();
        hidden.extend(
            n.hidden.iter().map(|p| PathRule { path: p.clone(), source: RuleSource::CommandLine }),
        );
        Ok(Policy {
            tier: self.tier.clone(),
            fs: FsPolicy {
                writable,
                hidden,
                protected: self.fs.protected.clone(),
                unix_sockets: self.fs.unix_sockets.clone(),
                git_writable: self.fs.git_writable,
                readable_home: self.fs.readable_home.clone(),
                writable_dotfiles: self.fs.writable_dotfiles.clone(),
                caches: self.fs.caches,
                scan_directories: self.fs.scan_directories,
            },
            net: NetworkPolicy::new(&self.tier, mode, allow, deny)
                .with_default_ports(self.net.default_ports().map(<[u16]>::to_vec))
                .with_managed(self.net.managed.clone()),
            env_pass: self.env_pass.clone(),
        })
    }
}

fn list<T: fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let v: Vec<String> = items.map(|i| i.to_string()).collect();
    if v.is_empty() { "nothing".into() } else { v.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::PatternUse;

    fn rules(patterns: &[&str], usage: PatternUse) -> Vec<Rule> {
        patterns
            .iter()
            .map(|p| Rule {
                pattern: Some(DomainPattern::parse(p, usage).unwrap()),
                source: RuleSource::CommandLine,
            })
            .collect()
    }

    fn policy(allow: &[&str], deny: &[&str], ports: Option<Vec<u16>>) -> NetworkPolicy {
        NetworkPolicy::new(
            "net",
            NetMode::Proxy,
            rules(allow, PatternUse::Allow),
            rules(deny, PatternUse::Deny),
        )
        .with_default_ports(ports)
    }

    fn verb(p: &NetworkPolicy, t: &str) -> &'static str {
        p.decide(&Target::parse(t).unwrap()).verb()
    }

    /// The working directory is judged only when the tier makes it writable, and an
    /// `--allow-write` path that is it (or holds it) is the way out; a configured path is not.
    #[test]
    fn the_working_directory_is_refused_unless_a_flag_names_it() {
        let rule = RootRule::new([PathBuf::from("/home/u")]);
        let at = |path: &str, source: RuleSource| PathRule { path: path.into(), source };
        let cwd = |p: &str| at(p, RuleSource::CurrentDirectory);
        let flag = |p: &str| at(p, RuleSource::CommandLine);
        let file = |p: &str| at(p, RuleSource::File { path: "/c.toml".into(), line: 1 });
        let rows: Vec<(Vec<PathRule>, bool, &str)> = vec![
            (vec![cwd("/home/u")], true, "build in the home"),
            (vec![cwd("/")], true, "build in /"),
            (vec![cwd("/home/u/proj")], false, "a project"),
            (vec![], false, "run: the directory is not writable"),
            (vec![flag("/home/u")], false, "run --allow-write ~ (no working directory rule)"),
            (vec![cwd("/home/u"), flag("/home/u")], false, "--allow-write names it"),
            (vec![cwd("/home/u"), flag("/")], false, "--allow-write / holds it"),
            (vec![cwd("/home/u"), flag("/home/u/proj")], true, "a flag below it is not it"),
            (vec![cwd("/home/u"), file("/home/u")], true, "a configured path is not the flag"),
        ];
        for (writable, refused, why) in rows {
            let fs = FsPolicy { writable, ..FsPolicy::default() };
            assert_eq!(fs.cwd_refusal(&rule).is_some(), refused, "{why}");
        }
    }

    #[test]
    fn default_ports_narrow_only_allow_patterns_without_a_port() {
        let allow = ["example.com", "*.example.org", "10.0.0.0/8", "git.example.com:22"];
        let off = policy(&allow, &["bad.example.org"], None);
        let on = policy(&allow, &["bad.example.org"], Some(vec![80, 443]));
        for (target, without, with) in [
            ("example.com:443", "allow", "allow"),
            ("example.com:80", "allow", "allow"),
            ("example.com:22", "allow", "ask"),
            ("a.example.org:5432", "allow", "ask"),
            ("10.1.2.3:6379", "allow", "ask"),
            ("10.1.2.3:443", "allow", "allow"),
            // written with a port: untouched
            ("git.example.com:22", "allow", "allow"),
            ("git.example.com:443", "ask", "ask"),
            // deny patterns are never narrowed (that would widen)
            ("bad.example.org:22", "deny", "deny"),
            ("bad.example.org:443", "deny", "deny"),
        ] {
            assert_eq!(verb(&off, target), without, "{target} without default_ports");
            assert_eq!(verb(&on, target), with, "{target} with default_ports");
        }
        let why = on.narrowed_by_default_ports(&Target::parse("example.com:22").unwrap());
        assert_eq!(why.unwrap().pattern.as_ref().unwrap().to_string(), "example.com");
        assert!(on.narrowed_by_default_ports(&Target::parse("example.com:443").unwrap()).is_none());
        assert!(off.narrowed_by_default_ports(&Target::parse("example.com:22").unwrap()).is_none());
    }

    #[test]
    fn names_are_decided_without_a_port() {
        let p = policy(
            &["example.com", "*.example.org", "git.example.net:22", "10.0.0.0/8"],
            &["bad.example.org", "mail.example.com:25", "*.evil.example.com"],
            Some(vec![443]),
        );
        for (host, want) in [
            ("example.com", "allow"),
            ("a.example.org", "allow"),
            // an allow rule for one port lets the name resolve; the proxy decides the port
            ("git.example.net", "allow"),
            ("bad.example.org", "deny"),
            // a deny rule for one port does not deny the name
            ("mail.example.com", "ask"),
            ("x.evil.example.com", "deny"),
            ("example.org", "ask"),
            ("unknown.test", "ask"),
            ("10.9.8.7", "allow"),
            ("192.0.2.1", "ask"),
        ] {
            let got = p.decide_name(&Host::parse(host).unwrap()).verb();
            assert_eq!(got, want, "{host}");
        }
        let none = NetworkPolicy::new(
            "run",
            NetMode::None,
            rules(&["example.com"], PatternUse::Allow),
            vec![],
        );
        assert_eq!(none.decide_name(&Host::parse("example.com").unwrap()).verb(), "deny");
    }

    fn parent(mode: NetMode, writable: &[&str]) -> Policy {
        let fs = FsPolicy {
            writable: writable
                .iter()
                .map(|p| PathRule { path: p.into(), source: RuleSource::CommandLine })
                .collect(),
            ..FsPolicy::default()
        };
        let net = NetworkPolicy::new(
            "t",
            mode,
            rules(&["example.com"], PatternUse::Allow),
            rules(&["evil.test"], PatternUse::Deny),
        );
        Policy { tier: "t".into(), fs, net, env_pass: Vec::new() }
    }

    /// Each row: a path a child asks to write, whether the parent (writing `/p` and `/srv/x`)
    /// lets it. Containment is by whole components, on absolute paths without `..` only.
    #[test]
    fn a_child_writes_only_inside_what_its_parent_writes() {
        let parent = parent(NetMode::Proxy, &["/p", "/srv/x"]);
        for (path, ok) in [
            ("/p", true),
            ("/p/sub/deeper", true),
            ("/srv/x/y", true),
            ("/srv", false),
            ("/pp", false),
            ("/", false),
            ("/p/../etc", false),
            ("/p/sub/..", false),
            ("p/sub", false),
            ("sub", false),
        ] {
            let n = Narrowing { writable: Some(vec![path.into()]), ..Narrowing::default() };
            let got = parent.derive(&n);
            assert_eq!(got.is_ok(), ok, "{path}: {got:?}");
            match got {
                Ok(child) => {
                    assert_eq!(child.fs.writable.len(), 1);
                    assert!(child.fs.is_writable(Path::new(path)), "{path}");
                    assert!(!child.fs.is_writable(Path::new("/srv/x/other")), "{path}");
                }
                Err(e) => {
                    assert_eq!(e.requested, format!("write access to {path}"));
                    assert_eq!(e.parent_allows, "/p, /srv/x");
                }
            }
        }
        // A parent that writes nothing says so.
        let n = Narrowing { writable: Some(vec!["/p".into()]), ..Narrowing::default() };
        let e = parent_none_writable().derive(&n).unwrap_err();
        assert_eq!(e.parent_allows, "nothing");
        // Not narrowing keeps the parent's paths.
        let same = parent.derive(&Narrowing::default()).unwrap();
        assert!(same.fs.is_writable(Path::new("/srv/x/a")));
        assert!(!same.fs.is_writable(Path::new("/srv/y")));
    }

    fn parent_none_writable() -> Policy {
        parent(NetMode::Proxy, &[])
    }

    /// A child may give up the network, never get it back; every parent deny rule stays.
    #[test]
    fn a_child_cannot_regain_the_network_and_keeps_the_denials() {
        let proxy = parent(NetMode::Proxy, &[]);
        let none = parent(NetMode::None, &[]);
        let to = |mode| Narrowing { net: Some(mode), ..Narrowing::default() };
        assert_eq!(proxy.derive(&to(NetMode::None)).unwrap().net.mode, NetMode::None);
        assert_eq!(proxy.derive(&to(NetMode::Proxy)).unwrap().net.mode, NetMode::Proxy);
        assert_eq!(none.derive(&to(NetMode::None)).unwrap().net.mode, NetMode::None);
        assert_eq!(none.derive(&Narrowing::default()).unwrap().net.mode, NetMode::None);
        let e = none.derive(&to(NetMode::Proxy)).unwrap_err();
        assert_eq!(e.requested, "network through the proxy");
        let child = proxy.derive(&Narrowing::default()).unwrap();
        assert_eq!(verb(&child.net, "evil.test:443"), "deny");
        assert_eq!(verb(&child.net, "example.com:443"), "allow");
        let texts = |p: &NetworkPolicy| -> Vec<String> {
            p.deny_rules().iter().map(|r| r.to_string()).collect()
        };
        assert_eq!(texts(&child.net), ["evil.test (command line)"]);
        assert_eq!(texts(&proxy.net), ["evil.test (command line)"]);
    }

    #[test]
    fn net_modes_parse_and_print() {
        for (text, mode) in [("none", NetMode::None), ("proxy", NetMode::Proxy)] {
            assert_eq!(NetMode::parse(text), Some(mode));
            assert_eq!(mode.to_string(), text);
        }
        assert_eq!(NetMode::parse("host"), None);
        assert_eq!(NetMode::parse("Proxy"), None);
    }

    /// What the proxy intercepts is what the launcher set, not a default.
    #[test]
    fn the_intercept_settings_are_the_ones_given() {
        let settings = Arc::new(crate::InterceptSettings::default());
        let p = policy(&[], &[], None).with_intercept(settings.clone());
        assert!(Arc::ptr_eq(p.intercept(), &settings));
    }

    #[test]
    fn a_derived_policy_keeps_default_ports_and_cannot_widen_past_them() {
        let parent = Policy {
            tier: "net".into(),
            fs: FsPolicy::default(),
            net: policy(&["example.com"], &[], Some(vec![443])),
            env_pass: Vec::new(),
        };
        let p = |s: &str| DomainPattern::parse(s, PatternUse::Allow).unwrap();
        let child = parent.derive(&Narrowing::default()).unwrap();
        assert_eq!(child.net.default_ports(), Some(&[443][..]));
        assert_eq!(verb(&child.net, "example.com:22"), "ask");
        // `example.com:22` is "covered" by `example.com` only if port 22 were a default port.
        let widen = Narrowing { allow: Some(vec![p("example.com:22")]), ..Narrowing::default() };
        assert!(parent.derive(&widen).is_err());
        let narrow = Narrowing { allow: Some(vec![p("example.com:443")]), ..Narrowing::default() };
        assert_eq!(verb(&parent.derive(&narrow).unwrap().net, "example.com:443"), "allow");
        let same = Narrowing { allow: Some(vec![p("example.com")]), ..Narrowing::default() };
        assert_eq!(verb(&parent.derive(&same).unwrap().net, "example.com:22"), "ask");
    }
}
