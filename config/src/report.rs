//! What the policy commands report, as values: the decision for one destination with the rule
//! that made it ([`NetCheck`], `sandgate check`), the tiers and their lists ([`TierSummary`],
//! `sandgate tiers`), the writable paths by origin ([`WritablePath`], `sandgate config
//! list-paths`), the files that apply ([`ConfigFile`]) and configured paths that do not exist ([`Config::missing_writable`]).
//!
//! Each serialises to the command's `--json` document (keys in alphabetical order, as the
//! commands have always printed them); the text forms are the command's.

use std::path::PathBuf;

use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::{
    Config, Decision, NetMode, NetworkPolicy, Overrides, PathRule, PolicyError, RuleSource, Target,
};

/// The decision for one destination under one tier, and what else applies to it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetCheck {
    /// The destination.
    pub target: Target,
    /// The tier whose policy decided.
    pub tier: String,
    /// The decision and the rule that made it.
    pub decision: Decision,
    /// `[network] default_ports`, when set.
    pub default_ports: Option<Vec<u16>>,
    /// The allow rule that would have matched but for `default_ports` (shown as text).
    pub narrowed_by_default_ports: Option<String>,
    /// Whether TLS to it is terminated by sandgate's CA.
    pub intercepted: bool,
    /// The secrets injected into its requests (names).
    pub secrets: Vec<String>,
    /// Its `[[http_rules]]`: where they are defined, and what they allow.
    pub http_rules: Option<HttpRulesInfo>,
    /// The configuration files of the directory asked about (empty until the caller, who
    /// loaded them, sets them).
    pub config_files: Vec<ConfigFile>,
}

/// The `[[http_rules]]` entry of a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRulesInfo {
    /// Where the entry is (file and line).
    pub origin: String,
    /// What it allows (`GET /path/*`, ...).
    pub allow: Vec<String>,
}

impl NetCheck {
    /// Decides `target` with `policy` (the policy of `tier`). What no rule decides, a stored
    /// grant may (as in the proxy): `grant` is asked only then, and only when the tier's network
    /// goes through the proxy.
    pub fn new(
        tier: &str,
        policy: &NetworkPolicy,
        target: Target,
        grant: impl FnOnce(&Target) -> Option<Decision>,
    ) -> NetCheck {
        let mut decision = policy.decide(&target);
        if matches!(decision, Decision::Ask) && policy.mode == NetMode::Proxy {
            decision = grant(&target).unwrap_or(Decision::Ask);
        }
        let intercept = policy.intercept();
        NetCheck {
            tier: tier.to_owned(),
            decision,
            default_ports: policy.default_ports().map(<[u16]>::to_vec),
            narrowed_by_default_ports: policy
                .narrowed_by_default_ports(&target)
                .map(|r| r.to_string()),
            intercepted: intercept.intercepts(&target),
            secrets: intercept.secrets_for(&target).map(|s| s.name.clone()).collect(),
            http_rules: intercept.rules_for(&target).map(|r| HttpRulesInfo {
                origin: r.origin.to_string(),
                allow: r.allow.iter().map(ToString::to_string).collect(),
            }),
            target,
            config_files: Vec::new(),
        }
    }
}

impl Serialize for NetCheck {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct RuleJson {
            pattern: Option<String>,
            source: String,
        }
        let rule = self.decision.rule().map(|r| RuleJson {
            pattern: r.pattern.as_ref().map(|p| p.to_string()),
            source: r.source.to_string(),
        });
        let mut st = s.serialize_struct("NetCheck", 12)?;
        st.serialize_field("config_files", &self.config_files)?;
        st.serialize_field("decision", self.decision.verb())?;
        st.serialize_field("default_ports", &self.default_ports)?;
        st.serialize_field("host", &self.target.host.to_string())?;
        st.serialize_field("http_rules", &self.http_rules.as_ref().map(|r| &r.allow))?;
        st.serialize_field("intercepted", &self.intercepted)?;
        st.serialize_field("narrowed_by_default_ports", &self.narrowed_by_default_ports)?;
        st.serialize_field("port", &self.target.port)?;
        st.serialize_field("rule", &rule)?;
        st.serialize_field("secrets", &self.secrets)?;
        st.serialize_field("target", &self.target.to_string())?;
        st.serialize_field("tier", &self.tier)?;
        st.end()
    }
}

/// One tier as `sandgate tiers` lists it, with the allow and deny lists in force for it here.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TierSummary {
    /// Allow patterns (configuration and presets); empty for a tier without the proxy.
    pub allow: Vec<String>,
    /// Where it is defined (`built-in` or a file).
    pub defined_in: String,
    /// Deny patterns; empty for a tier without the proxy.
    pub deny: Vec<String>,
    /// One line on what it is for.
    pub description: String,
    /// Its name.
    pub name: String,
    /// Its network mode.
    #[serde(rename = "network", serialize_with = "as_text")]
    pub net: NetMode,
    /// Whether the current directory and the configured paths are writable.
    pub writable_cwd: bool,
}

fn as_text<S: Serializer>(v: &NetMode, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// A writable path and where it comes from, as `sandgate config list-paths` groups them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WritablePath {
    /// The file that made it writable, for paths from a configuration file.
    pub file: Option<String>,
    /// The path.
    pub path: PathBuf,
    /// The rule, as text (file and line, flag, ...).
    pub rule: String,
    /// The group: `current directory`, `global`, `per-directory`, `command line`, or the
    /// rule's own text.
    pub source: String,
}

/// One configuration file of a directory and whether it applies, as `check`, `explain` and
/// `config check` name it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigFile {
    /// For the per-directory file: the directory it is for (the project, which may be an
    /// ancestor of the working directory); `None` for the global file.
    pub directory: Option<PathBuf>,
    /// `system`, `global`, `per-directory` or `managed`.
    pub layer: &'static str,
    /// Whether it exists and was loaded.
    pub loaded: bool,
    /// Where it is.
    pub path: PathBuf,
}

impl ConfigFile {
    /// One line: `global /x/config.toml`, `per-directory /x/projects/K.toml (for /code/demo)`,
    /// with `(absent)` for a file that does not exist.
    pub fn line(&self) -> String {
        let mut out = format!("{} {}", self.layer, self.path.display());
        if let Some(d) = &self.directory {
            out.push_str(&format!(" (for {})", d.display()));
        }
        if !self.loaded {
            out.push_str(" (absent)");
        }
        out
    }
}

impl Config {
    /// The files of this directory, each with whether it applies: the global and the
    /// per-directory file, and the system layers (defaults, and the managed layer) when present.
    pub fn file_report(&self) -> Vec<ConfigFile> {
        let system = self.system.iter().map(|f| ConfigFile {
            directory: None,
            layer: "system",
            loaded: true,
            path: f.path.clone(),
        });
        let managed = self.managed.iter().map(|m| ConfigFile {
            directory: None,
            layer: "managed",
            loaded: true,
            path: m.path.clone(),
        });
        let mut files: Vec<ConfigFile> = system.collect();
        files.extend(self.user_files());
        files.extend(managed);
        files
    }

    fn user_files(&self) -> Vec<ConfigFile> {
        vec![
            ConfigFile {
                directory: None,
                layer: "global",
                loaded: self.global.is_some(),
                path: self.paths.global.clone(),
            },
            ConfigFile {
                directory: Some(self.paths.project_root.clone()),
                layer: "per-directory",
                loaded: self.project.is_some(),
                path: self.paths.project.clone(),
            },
        ]
    }

    /// Every tier, with its allow and deny lists here.
    pub fn tier_summaries(&self) -> Result<Vec<TierSummary>, PolicyError> {
        Ok(self
            .tiers()?
            .into_iter()
            .map(|t| {
                let (allow, deny) = match self.policy(&t.name, &Overrides::default()) {
                    Ok(p) if p.net.mode == NetMode::Proxy => (
                        p.net.allow_rules().iter().map(|r| r.to_string()).collect(),
                        p.net.deny_rules().iter().map(|r| r.to_string()).collect(),
                    ),
                    _ => (Vec::new(), Vec::new()),
                };
                TierSummary {
                    allow,
                    defined_in: t.defined_in,
                    deny,
                    description: t.description,
                    name: t.name,
                    net: t.net,
                    writable_cwd: t.writable_cwd,
                }
            })
            .collect())
    }

    /// The writable paths of tier `build` (and tiers based on it), with `extra` as if given by
    /// `--allow-write`, each with the group it is listed under.
    pub fn writable_paths(&self, extra: Vec<PathBuf>) -> Result<Vec<WritablePath>, PolicyError> {
        let flags = Overrides { allow_write: extra, ..Overrides::default() };
        let policy = self.policy("build", &flags)?;
        let global = self.global.as_ref().map(|f| &f.path);
        Ok(policy
            .fs
            .writable
            .into_iter()
            .map(|w| {
                let (source, file) = match &w.source {
                    RuleSource::CurrentDirectory => ("current directory".into(), None),
                    RuleSource::File { path, .. } if Some(path) == global => {
                        ("global".into(), Some(path.display().to_string()))
                    }
                    RuleSource::File { path, .. } => {
                        ("per-directory".into(), Some(path.display().to_string()))
                    }
                    RuleSource::CommandLine => ("command line".into(), None),
                    other => (other.to_string(), None),
                };
                WritablePath { file, rule: w.source.to_string(), path: w.path, source }
            })
            .collect())
    }

    /// Configured writable paths (of the `build` tier, where they apply) that do not exist:
    /// launches skip them with a warning.
    pub fn missing_writable(&self) -> Vec<PathRule> {
        let Ok(policy) = self.policy("build", &Overrides::default()) else { return Vec::new() };
        policy
            .fs
            .writable
            .into_iter()
            .filter(|w| matches!(w.source, RuleSource::File { .. }))
            .filter(|w| std::fs::symlink_metadata(&w.path).is_err())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::ConfigPaths;

    /// A configuration whose global file is `global` and per-directory file `project`, for a
    /// project directory inside `dir`.
    fn config(dir: &Path, global: &str, project: &str) -> Config {
        let project_dir = dir.join("proj");
        std::fs::create_dir_all(&project_dir).unwrap();
        let paths = ConfigPaths {
            global: dir.join("global.toml"),
            project: dir.join("project.toml"),
            project_root: project_dir.clone(),
            project_dir,
            dir: dir.join("cfg"),
            home: None,
        };
        std::fs::write(&paths.global, global).unwrap();
        std::fs::write(&paths.project, project).unwrap();
        Config::load(paths).unwrap()
    }

    #[test]
    fn a_check_names_the_rule_and_asks_the_grants_only_when_no_rule_decides() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path(), "[network]\nallow = [\"a.test\"]\ndeny = [\"d.test\"]\n", "");
        let policy = c.policy("net", &Overrides::default()).unwrap().net;
        let check = |t: &str, grant: Option<Decision>| {
            NetCheck::new("net", &policy, Target::parse(t).unwrap(), |_| grant)
        };
        let granted = Decision::Allow(std::sync::Arc::new(crate::Rule {
            pattern: None,
            source: RuleSource::Grant("g1".into()),
        }));
        assert_eq!(check("a.test", None).decision.verb(), "allow");
        assert_eq!(check("d.test", Some(granted.clone())).decision.verb(), "deny");
        assert_eq!(check("x.test", None).decision, Decision::Ask);
        assert_eq!(check("x.test", Some(granted.clone())).decision, granted);
        // No network: nothing to ask a grant about.
        let none = c.policy("run", &Overrides::default()).unwrap().net;
        let r = NetCheck::new("run", &none, Target::parse("x.test").unwrap(), |_| {
            panic!("a tier without network asked the grants")
        });
        assert_eq!(r.decision.verb(), "deny");
    }

    #[test]
    fn the_check_json_has_every_key_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path(), "[network]\nallow = [\"a.test\"]\n", "");
        let policy = c.policy("net", &Overrides::default()).unwrap().net;
        let r = NetCheck::new("net", &policy, Target::parse("a.test:443").unwrap(), |_| None);
        let text = serde_json::to_string(&r).unwrap();
        let keys = [
            "decision",
            "default_ports",
            "host",
            "http_rules",
            "intercepted",
            "narrowed_by_default_ports",
            "port",
            "rule",
            "secrets",
            "target",
            "tier",
        ];
        let mut at = 0;
        for k in keys {
            let i = text.find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("{k}: {text}"));
            assert!(i >= at, "{k} out of order: {text}");
            at = i;
        }
        assert!(text.contains("\"rule\":{\"pattern\":\"a.test\",\"source\":"), "{text}");
        assert!(text.contains("\"target\":\"a.test:443\""), "{text}");
    }

    #[test]
    fn tiers_list_their_patterns_only_with_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path(), "[network]\nallow = [\"a.test\"]\n", "");
        let tiers = c.tier_summaries().unwrap();
        let run = tiers.iter().find(|t| t.name == "run").unwrap();
        let net = tiers.iter().find(|t| t.name == "net").unwrap();
        assert!(run.allow.is_empty() && run.net == NetMode::None);
        assert!(net.allow.iter().any(|a| a.starts_with("a.test")), "{:?}", net.allow);
        let v = serde_json::to_value(net).unwrap();
        assert_eq!(v["network"], "proxy");
        assert_eq!(v["defined_in"], "built-in");
    }

    #[test]
    fn writable_paths_are_grouped_by_origin_and_missing_ones_found() {
        let dir = tempfile::tempdir().unwrap();
        let there = dir.path().join("there");
        std::fs::create_dir(&there).unwrap();
        let gone = dir.path().join("gone");
        std::fs::create_dir(dir.path().join("flag")).unwrap();
        let c = config(
            dir.path(),
            &format!("[filesystem]\nallow_write = [{:?}]\n", there.display().to_string()),
            &format!("[filesystem]\nallow_write = [{:?}]\n", gone.display().to_string()),
        );
        let paths = c.writable_paths(vec![dir.path().join("flag")]).unwrap();
        let group = |p: &Path| paths.iter().find(|w| w.path == p).map(|w| w.source.as_str());
        assert_eq!(group(&dir.path().join("proj")), Some("current directory"));
        assert_eq!(group(&there), Some("global"));
        assert_eq!(group(&gone), Some("per-directory"));
        assert_eq!(group(&dir.path().join("flag")), Some("command line"));
        let global = paths.iter().find(|w| w.path == there).unwrap();
        assert_eq!(global.file.as_deref(), Some(dir.path().join("global.toml").to_str().unwrap()));
        let missing: Vec<PathBuf> = c.missing_writable().into_iter().map(|w| w.path).collect();
        assert_eq!(missing, [gone]);
    }
}
