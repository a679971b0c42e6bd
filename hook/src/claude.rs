//! Claude Code's `PermissionRequest` hook: the JSON it sends, the JSON it accepts back.

use std::path::Path;

use sandgate_config::RootRule;
use serde_json::{Value, json};

use crate::fs::Filesystem;
use crate::paths::{Access, Walls, check_path};
use crate::shell::check_command;

/// Longest hook input accepted (bytes); a longer one gets no decision.
pub const MAX_INPUT: usize = 1024 * 1024;

/// How the hook is configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSettings {
    /// Answer a refused file-tool path with `deny` and a message for the model, instead of no
    /// decision (the person's prompt). Off by default.
    pub deny_refused_paths: bool,
}

/// The hook's answer. Every variant carries a one-line reason for the event log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The call stays inside a tier: no person needed.
    Allow {
        /// The tool.
        tool: String,
        /// Why (the tiers of a command line, or the checked path).
        reason: String,
    },
    /// Let the agent ask the person as usual.
    Abstain {
        /// The tool, when the input named one.
        tool: Option<String>,
        /// Why the hook did not decide.
        reason: String,
    },
    /// Refuse the call, with a message the model can act on (only when configured).
    Deny {
        /// The tool.
        tool: String,
        /// The message for the model.
        message: String,
    },
}

impl Verdict {
    /// `allow`, `none` or `deny`.
    pub fn verb(&self) -> &'static str {
        match self {
            Verdict::Allow { .. } => "allow",
            Verdict::Abstain { .. } => "none",
            Verdict::Deny { .. } => "deny",
        }
    }
}

/// What to print on stdout for a verdict (nothing for no decision).
pub fn verdict_json(v: &Verdict) -> Option<String> {
    let decision = match v {
        Verdict::Allow { .. } => json!({ "behavior": "allow" }),
        Verdict::Deny { message, .. } => json!({ "behavior": "deny", "message": message }),
        Verdict::Abstain { .. } => return None,
    };
    Some(
        json!({ "hookSpecificOutput": { "hookEventName": "PermissionRequest", "decision": decision } })
            .to_string(),
    )
}

/// Decides one hook input. `walls` gives the walls of the configured tier for a working
/// directory (the per-directory configuration depends on it); an error there is no decision.
/// `roots` says where a `build` stage may start (the launcher's rule for its working directory).
pub fn decide_claude(
    input: &[u8],
    settings: &HookSettings,
    fs: &dyn Filesystem,
    walls: &dyn Fn(&Path) -> Result<Walls, String>,
    roots: &RootRule,
) -> Verdict {
    let abstain = |tool: Option<&str>, reason: String| Verdict::Abstain {
        tool: tool.map(str::to_owned),
        reason,
    };
    if input.len() > MAX_INPUT {
        return abstain(None, format!("input over {MAX_INPUT} bytes"));
    }
    let Ok(v) = serde_json::from_slice::<Value>(input) else {
        return abstain(None, "input is not JSON".into());
    };
    let field = |name: &str| v.get(name).and_then(Value::as_str);
    if field("hook_event_name") != Some("PermissionRequest") {
        return abstain(None, "not a PermissionRequest event".into());
    }
    let Some(tool) = field("tool_name") else {
        return abstain(None, "no tool_name".into());
    };
    let Some(input) = v.get("tool_input").and_then(Value::as_object) else {
        return abstain(Some(tool), "no tool_input object".into());
    };
    let Some(cwd) = field("cwd").map(Path::new).filter(|c| c.is_absolute()) else {
        return abstain(Some(tool), "no absolute cwd".into());
    };
    let string = |name: &str| input.get(name).and_then(Value::as_str);
    let (access, paths): (Access, Vec<&str>) = match tool {
        "Bash" => {
            let Some(command) = string("command") else {
                return abstain(Some(tool), "no command".into());
            };
            return match check_command(command, cwd, fs, roots) {
                Ok(tiers) => Verdict::Allow {
                    tool: tool.into(),
                    reason: format!("runs inside sandbox ({})", tiers.join(" | ")),
                },
                Err(e) => abstain(Some(tool), e.to_string()),
            };
        }
        "Read" => match string("file_path") {
            Some(p) => (Access::Read, vec![p]),
            None => return abstain(Some(tool), "no file_path".into()),
        },
        "Write" | "Edit" | "MultiEdit" => match string("file_path") {
            Some(p) => (Access::Write, vec![p]),
            None => return abstain(Some(tool), "no file_path".into()),
        },
        "NotebookEdit" => match string("notebook_path") {
            Some(p) => (Access::Write, vec![p]),
            None => return abstain(Some(tool), "no notebook_path".into()),
        },
        "Glob" | "Grep" => {
            // The directory searched (default: cwd); a pattern that climbs out of it or names an
            // absolute path would read elsewhere.
            for key in ["pattern", "glob"] {
                let Some(p) = input.get(key) else { continue };
                let Some(p) = p.as_str() else {
                    return abstain(Some(tool), format!("{key} is not a string"));
                };
                let file_pattern = tool == "Glob" || key == "glob";
                if file_pattern && (p.starts_with('/') || p.starts_with('~') || p.contains("..")) {
                    return abstain(Some(tool), format!("{key} {p:?} leaves the directory"));
                }
            }
            match input.get("path") {
                None | Some(Value::Null) => (Access::Search, vec!["."]),
                Some(Value::String(p)) => (Access::Search, vec![p.as_str()]),
                Some(_) => return abstain(Some(tool), "path is not a string".into()),
            }
        }
        other => return abstain(Some(other), "not a tool the hook knows".into()),
    };
    let walls = match walls(cwd) {
        Ok(w) => w,
        Err(e) => return abstain(Some(tool), format!("no policy: {e}")),
    };
    let mut checked = Vec::new();
    for p in paths {
        match check_path(&walls, fs, cwd, p, access) {
            Ok(real) => checked.push(real.display().to_string()),
            Err(refusal) => {
                return if settings.deny_refused_paths {
                    Verdict::Deny { tool: tool.into(), message: refusal.to_string() }
                } else {
                    abstain(Some(tool), refusal.to_string())
                };
            }
        }
    }
    Verdict::Allow {
        tool: tool.into(),
        reason: format!("{access} {} allowed in tier `{}`", checked.join(", "), walls.tier),
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::PathBuf;

    use super::*;
    use crate::fs::{FileInfo, Wrapper};
    use crate::paths::normalise;

    /// Every path exists (a directory unless its name has a dot); our wrappers live in
    /// `/opt/bin`, the project is `/p`, the home `/h`.
    struct Fake;

    impl Filesystem for Fake {
        fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
            Ok(normalise(p))
        }
        fn symlink_metadata(&self, p: &Path) -> io::Result<FileInfo> {
            let is_dir = !p.file_name().is_some_and(|n| n.to_string_lossy().contains('.'));
            Ok(FileInfo { is_symlink: false, is_dir, nlink: 1 })
        }
        fn lookup_command(&self, name: &str) -> Option<PathBuf> {
            Some(Path::new("/opt/bin").join(name))
        }
        fn wrapper(&self, p: &Path, _: &[PathBuf]) -> Wrapper {
            if p.starts_with("/opt/bin") { Wrapper::Ours } else { Wrapper::Foreign }
        }
        fn searches_cdpath(&self) -> bool {
            false
        }
    }

    fn walls(cwd: &Path) -> Result<Walls, String> {
        if cwd.starts_with("/broken") {
            return Err("a broken configuration".into());
        }
        Ok(Walls {
            tier: "build".into(),
            writable: vec!["/p".into()],
            hidden: vec!["/h/.ssh".into()],
            read_only: vec![],
            protected: vec![".envrc".into()],
            homes: vec!["/h".into()],
            top_protected: vec![],
        })
    }

    fn input(tool: &str, tool_input: Value) -> String {
        json!({
            "hook_event_name": "PermissionRequest",
            "tool_name": tool,
            "tool_input": tool_input,
            "cwd": "/p",
        })
        .to_string()
    }

    fn decide(input: &str, deny: bool) -> Verdict {
        let settings = HookSettings { deny_refused_paths: deny };
        decide_claude(input.as_bytes(), &settings, &Fake, &walls, &RootRule::new(["/h".into()]))
    }

    /// Each row: a tool, its input, the verdict's verb without and with `deny_refused_paths`.
    /// Every tool has a row that is allowed and one that is not.
    #[test]
    fn each_tool_is_allowed_inside_the_tier_only() {
        let rows: &[(&str, Value, &str, &str)] = &[
            ("Bash", json!({"command": "sandbox-run ls"}), "allow", "allow"),
            ("Bash", json!({"command": "sandbox-build make"}), "allow", "allow"),
            ("Bash", json!({"command": "rm -rf /"}), "none", "none"), // never deny a command
            ("Bash", json!({"command": 7}), "none", "none"),
            ("Bash", json!({}), "none", "none"),
            ("Read", json!({"file_path": "/p/src/a.rs"}), "allow", "allow"),
            ("Read", json!({"file_path": "src/a.rs"}), "allow", "allow"),
            ("Read", json!({"file_path": "/h/notes.txt"}), "allow", "allow"),
            ("Read", json!({"file_path": "/h/.ssh/id.key"}), "none", "deny"),
            ("Read", json!({"path": "/p/a.rs"}), "none", "none"),
            ("Write", json!({"file_path": "/p/a.rs"}), "allow", "allow"),
            ("Write", json!({"file_path": "/h/notes.txt"}), "none", "deny"),
            ("Write", json!({"file_path": "/p/.envrc"}), "none", "deny"),
            ("Write", json!({}), "none", "none"),
            ("Edit", json!({"file_path": "/p/a.rs"}), "allow", "allow"),
            ("Edit", json!({"file_path": "/h/notes.txt"}), "none", "deny"),
            ("MultiEdit", json!({"file_path": "/p/a.rs"}), "allow", "allow"),
            ("MultiEdit", json!({"file_path": "/h/notes.txt"}), "none", "deny"),
            ("NotebookEdit", json!({"notebook_path": "/p/n.ipynb"}), "allow", "allow"),
            ("NotebookEdit", json!({"notebook_path": "/h/n.ipynb"}), "none", "deny"),
            ("NotebookEdit", json!({"file_path": "/p/n.ipynb"}), "none", "none"),
            ("Glob", json!({"pattern": "**/*.rs"}), "allow", "allow"),
            ("Glob", json!({"pattern": "*.rs", "path": "/p/src"}), "allow", "allow"),
            ("Glob", json!({"pattern": "*.rs", "path": null}), "allow", "allow"),
            ("Glob", json!({"pattern": "/etc/*"}), "none", "none"),
            ("Glob", json!({"pattern": "~/.ssh/*"}), "none", "none"),
            ("Glob", json!({"pattern": "src/../../h/*"}), "none", "none"),
            ("Glob", json!({"pattern": 3}), "none", "none"),
            ("Glob", json!({"pattern": "*.rs", "path": 3}), "none", "none"),
            ("Glob", json!({"pattern": "*", "path": "/h"}), "none", "deny"), // dot-entries
            ("Grep", json!({"pattern": "/etc/passwd|~|a..b"}), "allow", "allow"), // a regex
            ("Grep", json!({"pattern": "x", "glob": "*.rs"}), "allow", "allow"),
            ("Grep", json!({"pattern": "x", "glob": "/etc/*"}), "none", "none"),
            ("Grep", json!({"pattern": "x", "glob": "../*"}), "none", "none"),
            ("Grep", json!({"pattern": "x", "path": "/h/.ssh"}), "none", "deny"),
            ("WebFetch", json!({"url": "https://example.com"}), "none", "none"),
        ];
        for (tool, tool_input, plain, denying) in rows {
            let line = input(tool, tool_input.clone());
            let got = decide(&line, false);
            assert_eq!(got.verb(), *plain, "{tool} {tool_input}: {got:?}");
            let got = decide(&line, true);
            assert_eq!(got.verb(), *denying, "{tool} {tool_input} (deny): {got:?}");
            let named = match &got {
                Verdict::Allow { tool, .. } | Verdict::Deny { tool, .. } => Some(tool.as_str()),
                Verdict::Abstain { tool, .. } => tool.as_deref(),
            };
            assert_eq!(named, Some(*tool), "{tool} {tool_input}");
        }
    }

    /// Input the hook does not fully understand gets no decision, never an allow or a deny.
    #[test]
    fn malformed_input_gets_no_decision() {
        let ok = input("Bash", json!({"command": "sandbox-run ls"}));
        assert_eq!(decide(&ok, true).verb(), "allow", "the control");
        let with = |key: &str, value: Value| {
            let mut v: Value = serde_json::from_str(&ok).unwrap();
            v[key] = value;
            v.to_string()
        };
        let without = |key: &str| {
            let mut v: Value = serde_json::from_str(&ok).unwrap();
            v.as_object_mut().unwrap().remove(key);
            v.to_string()
        };
        for bad in [
            "not json".to_owned(),
            with("hook_event_name", json!("PreToolUse")),
            without("hook_event_name"),
            without("tool_name"),
            with("tool_name", json!(1)),
            with("tool_input", json!("sandbox-run ls")),
            without("tool_input"),
            with("cwd", json!("p")),
            without("cwd"),
            with("cwd", json!("/broken")).replace("Bash", "Read").replace("command", "file_path"),
        ] {
            assert_eq!(decide(&bad, true).verb(), "none", "{bad}");
        }
    }

    /// The size limit: the longest accepted input is decided, one byte more is not.
    #[test]
    fn input_longer_than_the_limit_gets_no_decision() {
        let ok = input("Bash", json!({"command": "sandbox-run ls"}));
        let padded = format!("{ok}{}", " ".repeat(MAX_INPUT - ok.len()));
        assert_eq!(padded.len(), MAX_INPUT);
        assert_eq!(decide(&padded, false).verb(), "allow");
        assert_eq!(decide(&format!("{padded} "), false).verb(), "none");
    }

    /// The limit is a mebibyte: a command line of half a mebibyte (a long here-document, a
    /// generated file) is still decided.
    #[test]
    fn a_long_input_under_the_limit_is_decided() {
        let long = format!("sandbox-run echo '{}'", "x".repeat(512 * 1024));
        assert_eq!(decide(&input("Bash", json!({ "command": long })), false).verb(), "allow");
        assert_eq!(MAX_INPUT, 1 << 20);
    }

    #[test]
    fn reasons_name_the_tiers_and_the_path() {
        let got =
            decide(&input("Bash", json!({"command": "sandbox-run a | sandbox-net b"})), false);
        let Verdict::Allow { reason, .. } = got else { panic!("{got:?}") };
        assert_eq!(reason, "runs inside sandbox (run | net)");
        let got = decide(&input("Write", json!({"file_path": "src/a.rs"})), false);
        let Verdict::Allow { reason, .. } = got else { panic!("{got:?}") };
        assert!(reason.contains("/p/src/a.rs allowed in tier `build`"), "{reason}");
        let got = decide(&input("Read", json!({"file_path": "/h/.ssh/id.key"})), true);
        let Verdict::Deny { message, .. } = got else { panic!("{got:?}") };
        assert!(message.contains("/h/.ssh"), "{message}");
    }

    #[test]
    fn only_a_decision_is_printed() {
        let allow = Verdict::Allow { tool: "Bash".into(), reason: "r".into() };
        let v: Value = serde_json::from_str(&verdict_json(&allow).unwrap()).unwrap();
        assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PermissionRequest");
        assert_eq!(v["hookSpecificOutput"]["decision"], json!({"behavior": "allow"}));
        let deny = Verdict::Deny { tool: "Read".into(), message: "m".into() };
        let v: Value = serde_json::from_str(&verdict_json(&deny).unwrap()).unwrap();
        assert_eq!(
            v["hookSpecificOutput"]["decision"],
            json!({"behavior": "deny", "message": "m"})
        );
        let none = Verdict::Abstain { tool: None, reason: "r".into() };
        assert_eq!(verdict_json(&none), None);
        assert_eq!((allow.verb(), deny.verb(), none.verb()), ("allow", "deny", "none"));
    }
}
