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
