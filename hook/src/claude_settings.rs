//! `sandgate install --claude` and `sandgate uninstall`: the Claude Code hook, the skill file
//! and the wrapper links, added and removed exactly.
//!
//! settings.json is merged (every other key kept), backed up once before the first change, and
//! left alone when nothing changes (a second install is a no-op). Uninstall removes our hook
//! entries; when the result equals the backup, the backup's bytes are put back, and a file that
//! did not exist before install is removed again.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::{Map, Value, json};

/// Options of `sandgate uninstall`.
#[derive(Debug, clap::Args)]
pub struct UninstallArgs {
    /// Directory the links were made in (default `~/.local/bin`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also remove the Claude Code hook and skill file.
    #[arg(long)]
    pub claude: bool,
}

/// The tools the hook answers for (the others keep their normal prompt, without a hook call).
const MATCHER: &str = "Bash|Read|Write|Edit|MultiEdit|NotebookEdit|Glob|Grep";
/// Backup of settings.json as it was before the first install.
const BACKUP_SUFFIX: &str = "sandgate-backup";
/// Marker: settings.json did not exist before the first install.
const ABSENT_SUFFIX: &str = "sandgate-absent";

/// The skill file that teaches an agent to use the tiers.
pub const SKILL: &str = include_str!("skill.md");

/// Claude Code's configuration directory (`$CLAUDE_CONFIG_DIR`, else `~/.claude`).
fn claude_dir() -> anyhow::Result<PathBuf> {
    if let Some(d) = std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).context("HOME is not set")?;
    Ok(PathBuf::from(home).join(".claude"))
}

/// settings.json, or the file it links to (a dotfiles repository's): written in place, so the
/// link stays a link.
fn settings_file(dir: &Path) -> PathBuf {
    let path = dir.join("settings.json");
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&path).unwrap_or(path),
        _ => path,
    }
}

fn side(settings: &Path, suffix: &str) -> PathBuf {
    let mut name = settings.file_name().unwrap_or_default().to_owned();
    name.push(format!(".{suffix}"));
    settings.with_file_name(name)
}

fn is_ours(hook: &Value) -> bool {
    hook.get("command").and_then(Value::as_str).is_some_and(|c| {
        let mut words = c.split_whitespace();
        let exe = words.next().unwrap_or("");
        Path::new(exe).file_name().is_some_and(|n| n == "sandgate")
            && words.next() == Some("hook")
            && words.next() == Some("claude")
    })
}

/// Removes our entries from `PermissionRequest` (and containers left empty by that).
fn without_ours(mut v: Value) -> Value {
    let Some(hooks) = v.get_mut("hooks").and_then(Value::as_object_mut) else { return v };
    if let Some(list) = hooks.get_mut("PermissionRequest").and_then(Value::as_array_mut) {
        list.retain(|entry| {
            !entry
                .get("hooks")
                .and_then(Value::as_array)
                .is_some_and(|hs| !hs.is_empty() && hs.iter().all(is_ours))
        });
        if list.is_empty() {
            hooks.remove("PermissionRequest");
        }
    }
    if hooks.is_empty() {
        v.as_object_mut().map(|o| o.remove("hooks"));
    }
    v
}

/// `v` with our hook entry (replacing an older one of ours).
fn with_ours(v: Value, command: &str) -> anyhow::Result<Value> {
    let mut v = without_ours(v);
    let obj = v.as_object_mut().context("settings.json is not a JSON object")?;
    let hooks = obj.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
    let hooks = hooks.as_object_mut().context("settings.json: `hooks` is not an object")?;
    let list = hooks.entry("PermissionRequest").or_insert_with(|| Value::Array(Vec::new()));
    let list =
        list.as_array_mut().context("settings.json: `hooks.PermissionRequest` is not an array")?;
    list.push(json!({ "matcher": MATCHER, "hooks": [{ "type": "command", "command": command }] }));
    Ok(v)
}

fn write_json(path: &Path, v: &Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(v)?;
    text.push('\n');
    let tmp = side(path, "sandgate-tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
}

/// Registers the hook in settings.json and writes the skill file.
pub fn install_claude(tier: &str) -> anyhow::Result<()> {
    let dir = claude_dir()?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let settings = settings_file(&dir);
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    let exe = exe.to_str().context("the sandgate binary's path is not UTF-8")?;
    if exe.contains(char::is_whitespace) {
        bail!("the sandgate binary's path {exe:?} holds a space; install it elsewhere");
    }
    let command = format!("{exe} hook claude --tier {tier}");
    let before = match std::fs::read(&settings) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", settings.display())),
    };
    let current: Value = match &before {
        Some(bytes) => serde_json::from_slice(bytes).with_context(|| {
            format!("{} is not valid JSON; fix it first (nothing changed)", settings.display())
        })?,
        None => Value::Object(Map::new()),
    };
    let merged = with_ours(current.clone(), &command)?;
    if merged != current || before.is_none() {
        let (backup, absent) = (side(&settings, BACKUP_SUFFIX), side(&settings, ABSENT_SUFFIX));
        if !backup.exists() && !absent.exists() {
            match &before {
                Some(bytes) => std::fs::write(&backup, bytes),
                None => std::fs::write(&absent, b""),
            }
            .with_context(|| format!("cannot back up {}", settings.display()))?;
        }
        write_json(&settings, &merged)?;
        println!("registered the PermissionRequest hook in {}", settings.display());
    } else {
        println!("the hook is already registered in {}", settings.display());
    }
    let skill = dir.join("skills/sandgate/SKILL.md");
    if std::fs::read(&skill).ok().as_deref() != Some(SKILL.as_bytes()) {
        std::fs::create_dir_all(skill.parent().unwrap_or(&dir))?;
        std::fs::write(&skill, SKILL)
            .with_context(|| format!("cannot write {}", skill.display()))?;
        println!("wrote {}", skill.display());
    }
    Ok(())
}

/// Removes what [`install_claude`] added.
fn uninstall_claude() -> anyhow::Result<()> {
    let dir = claude_dir()?;
    let settings = settings_file(&dir);
    let (backup, absent) = (side(&settings, BACKUP_SUFFIX), side(&settings, ABSENT_SUFFIX));
    let made_by_install = absent.exists();
    match std::fs::read(&settings) {
        Ok(bytes) => {
            let current: Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not valid JSON", settings.display()))?;
            let cleaned = without_ours(current.clone());
            let original = std::fs::read(&backup).ok();
            let original_value =
                original.as_deref().and_then(|b| serde_json::from_slice::<Value>(b).ok());
            if original_value.as_ref() == Some(&cleaned) {
                std::fs::write(&settings, original.unwrap_or_default())?;
            } else if absent.exists() && cleaned == Value::Object(Map::new()) {
                std::fs::remove_file(&settings)?;
            } else if cleaned != current {
                // Changed since install: keep those changes, drop only our entries.
                write_json(&settings, &cleaned)?;
            }
            println!("removed the hook from {}", settings.display());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", settings.display())),
    }
    let _ = std::fs::remove_file(&backup);
    let _ = std::fs::remove_file(&absent);
    let skill = dir.join("skills/sandgate/SKILL.md");
    match std::fs::read(&skill) {
        Ok(b) if b == SKILL.as_bytes() => {
            std::fs::remove_file(&skill)?;
            let _ = std::fs::remove_dir(dir.join("skills/sandgate"));
            let _ = std::fs::remove_dir(dir.join("skills"));
            println!("removed {}", skill.display());
        }
        Ok(_) => {
            eprintln!("sandgate: {} was changed since install; left in place", skill.display())
        }
        Err(_) => {}
    }
    if made_by_install {
        // The directory install made, if nothing else uses it.
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(())
}

/// `sandgate uninstall`: removes the links (those pointing at this binary) and, with --claude,
/// the hook and the skill.
pub fn uninstall(args: UninstallArgs) -> anyhow::Result<u8> {
    let dir = match args.dir {
        Some(d) => d,
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set; pass --dir")?)
            .join(".local/bin"),
    };
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    for (name, _) in sandgate_hook::WRAPPERS {
        let link = dir.join(name);
        match std::fs::read_link(&link) {
            Ok(target) if target == exe => {
                std::fs::remove_file(&link)
                    .with_context(|| format!("cannot remove {}", link.display()))?;
                println!("removed {}", link.display());
            }
            Ok(target) => eprintln!(
                "sandgate: {} points at {}, not this binary; left in place",
                link.display(),
                target.display()
            ),
            Err(_) => {}
        }
    }
    if args.claude {
        uninstall_claude()?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_other_keys_and_is_idempotent() {
        let user = json!({ "model": "x", "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [] }],
            "PermissionRequest": [{ "matcher": "Read", "hooks": [{ "type": "command", "command": "other" }] }] } });
        let once = with_ours(user.clone(), "/bin/sandgate hook claude --tier build").unwrap();
        let twice = with_ours(once.clone(), "/bin/sandgate hook claude --tier build").unwrap();
        assert_eq!(once, twice);
        assert_eq!(once["model"], "x");
        assert_eq!(once["hooks"]["PermissionRequest"].as_array().unwrap().len(), 2);
        assert_eq!(without_ours(once), user);
        assert_eq!(without_ours(with_ours(json!({}), "sandgate hook claude").unwrap()), json!({}));
    }
}
