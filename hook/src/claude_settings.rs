//! Claude Code's settings: the `PermissionRequest` hook entry and the skill file, added and
//! removed exactly, and the wrapper links `sandgate uninstall` removes.
//!
//! settings.json is merged (every other key kept), backed up once before the first change, and
//! left alone when nothing changes (a second install is a no-op). Uninstall removes our hook
//! entries; when the result equals the backup, the backup's bytes are put back, and a file that
//! did not exist before install is removed again. Nothing here prints: the command reports what
//! the returned values say.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// The tools the hook answers for (the others keep their normal prompt, without a hook call).
const MATCHER: &str = "Bash|Read|Write|Edit|MultiEdit|NotebookEdit|Glob|Grep";
/// Backup of settings.json as it was before the first install.
const BACKUP_SUFFIX: &str = "sandgate-backup";
/// Marker: settings.json did not exist before the first install.
const ABSENT_SUFFIX: &str = "sandgate-absent";

/// The skill file that teaches an agent to use the tiers.
pub const SKILL: &str = include_str!("skill.md");

/// Why the Claude settings could not be changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// Neither `$CLAUDE_CONFIG_DIR` nor `$HOME` is set.
    #[error("HOME is not set")]
    NoHome,
    /// The sandgate binary's path cannot be written into a hook command line.
    #[error("{0}")]
    BadExecutable(String),
    /// settings.json (or what it holds) is not what Claude Code writes.
    #[error("{0}")]
    BadSettings(String),
    /// settings.json does not parse.
    #[error("{} is not valid JSON{hint}", path.display())]
    InvalidJson {
        /// The file.
        path: PathBuf,
        /// What to do about it (empty on uninstall).
        hint: &'static str,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A file operation failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done (`read`, `write`, `back up`, ...).
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SettingsError {
    let path = path.to_owned();
    move |source| SettingsError::Io { action, path, source }
}

/// Claude Code's configuration directory: `config_dir` (`$CLAUDE_CONFIG_DIR`) when set and not
/// empty, else `home/.claude`.
pub fn claude_dir(
    config_dir: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, SettingsError> {
    if let Some(d) = config_dir.filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let home = home.filter(|h| !h.is_empty()).ok_or(SettingsError::NoHome)?;
    Ok(PathBuf::from(home).join(".claude"))
}

/// The hook's command line for the binary `exe` and the tier file-tool paths are checked against.
pub fn hook_command(exe: &Path, tier: &str) -> Result<String, SettingsError> {
    let exe = exe.to_str().ok_or_else(|| {
        SettingsError::BadExecutable("the sandgate binary's path is not UTF-8".into())
    })?;
    if exe.contains(char::is_whitespace) {
        return Err(SettingsError::BadExecutable(format!(
            "the sandgate binary's path {exe:?} holds a space; install it elsewhere"
        )));
    }
    Ok(format!("{exe} hook claude --tier {tier}"))
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

/// The commands of our hook entries in settings `v` (`sandgate doctor` names the file that
/// registers one and checks the program it runs).
pub fn our_commands(v: &Value) -> Vec<String> {
    v.get("hooks")
        .and_then(|h| h.get("PermissionRequest"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("hooks").and_then(Value::as_array))
        .flatten()
        .filter(|h| is_ours(h))
        .filter_map(|h| h.get("command").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The settings files Claude Code reads in `cwd` besides the user's ([`claude_dir`]'s
/// `settings.json`): the project's shared and local files, and the managed policy file.
pub fn project_settings_files(cwd: &Path) -> Vec<PathBuf> {
    vec![
        cwd.join(".claude/settings.json"),
        cwd.join(".claude/settings.local.json"),
        PathBuf::from("/etc/claude-code/managed-settings.json"),
    ]
}

/// The user's settings file in `dir` (`settings.json`, or the file it links to).
pub fn user_settings_file(dir: &Path) -> PathBuf {
    settings_file(dir)
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
fn with_ours(v: Value, command: &str) -> Result<Value, SettingsError> {
    let bad = |what: &str| SettingsError::BadSettings(format!("settings.json{what}"));
    let mut v = without_ours(v);
    let obj = v.as_object_mut().ok_or_else(|| bad(" is not a JSON object"))?;
    let hooks = obj.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
    let hooks = hooks.as_object_mut().ok_or_else(|| bad(": `hooks` is not an object"))?;
    let list = hooks.entry("PermissionRequest").or_insert_with(|| Value::Array(Vec::new()));
    let list =
        list.as_array_mut().ok_or_else(|| bad(": `hooks.PermissionRequest` is not an array"))?;
    list.push(json!({ "matcher": MATCHER, "hooks": [{ "type": "command", "command": command }] }));
    Ok(v)
}

fn write_json(path: &Path, v: &Value) -> Result<(), SettingsError> {
    let mut text = serde_json::to_string_pretty(v).unwrap_or_default();
    text.push('\n');
    let tmp = side(path, "sandgate-tmp");
    std::fs::write(&tmp, text).map_err(io_err("write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err("replace", path))
}

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    /// The settings file (the link's target when settings.json is a link).
    pub settings: PathBuf,
    /// The hook entry was written now (`false`: it was there already).
    pub registered: bool,
    /// The skill file, when it was written now (absent or different before).
    pub skill_written: Option<PathBuf>,
}

/// Registers the hook `command` in `dir`'s settings.json and writes the skill file.
pub fn install(dir: &Path, command: &str) -> Result<InstallReport, SettingsError> {
    std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    let settings = settings_file(dir);
    let before = match std::fs::read(&settings) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("read", &settings)(e)),
    };
    let current: Value = match &before {
        Some(bytes) => {
            serde_json::from_slice(bytes).map_err(|source| SettingsError::InvalidJson {
                path: settings.clone(),
                hint: "; fix it first (nothing changed)",
                source,
            })?
        }
        None => Value::Object(Map::new()),
    };
    let merged = with_ours(current.clone(), command)?;
    let registered = merged != current || before.is_none();
    if registered {
        let (backup, absent) = (side(&settings, BACKUP_SUFFIX), side(&settings, ABSENT_SUFFIX));
        if !backup.exists() && !absent.exists() {
            match &before {
                Some(bytes) => std::fs::write(&backup, bytes),
                None => std::fs::write(&absent, b""),
            }
            .map_err(io_err("back up", &settings))?;
        }
        write_json(&settings, &merged)?;
    }
    let skill = dir.join("skills/sandgate/SKILL.md");
    let mut skill_written = None;
    if std::fs::read(&skill).ok().as_deref() != Some(SKILL.as_bytes()) {
        let skill_dir = skill.parent().unwrap_or(dir);
        std::fs::create_dir_all(skill_dir).map_err(io_err("create", skill_dir))?;
        std::fs::write(&skill, SKILL).map_err(io_err("write", &skill))?;
        skill_written = Some(skill);
    }
    Ok(InstallReport { settings, registered, skill_written })
}

/// What [`uninstall`] did with the skill file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillRemoval {
    /// There was none.
    Absent,
    /// Removed (with the directories install made for it, when empty).
    Remove(PathBuf),
    /// Changed since install: left in place.
    Keep(PathBuf),
}

/// What [`uninstall`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UninstallReport {
    /// The settings file our entries were removed from (`None`: there was no settings file).
    pub settings: Option<PathBuf>,
    /// The skill file.
    pub skill: SkillRemoval,
}

/// Removes what [`install`] added to `dir`.
pub fn uninstall(dir: &Path) -> Result<UninstallReport, SettingsError> {
    let settings = settings_file(dir);
    let (backup, absent) = (side(&settings, BACKUP_SUFFIX), side(&settings, ABSENT_SUFFIX));
    let made_by_install = absent.exists();
    let mut report = UninstallReport { settings: None, skill: SkillRemoval::Absent };
    match std::fs::read(&settings) {
        Ok(bytes) => {
            let current: Value = serde_json::from_slice(&bytes).map_err(|source| {
                SettingsError::InvalidJson { path: settings.clone(), hint: "", source }
            })?;
            let cleaned = without_ours(current.clone());
            let original = std::fs::read(&backup).ok();
            let original_value =
                original.as_deref().and_then(|b| serde_json::from_slice::<Value>(b).ok());
            if original_value.as_ref() == Some(&cleaned) {
                std::fs::write(&settings, original.unwrap_or_default())
                    .map_err(io_err("restore", &settings))?;
            } else if absent.exists() && cleaned == Value::Object(Map::new()) {
                std::fs::remove_file(&settings).map_err(io_err("remove", &settings))?;
            } else if cleaned != current {
                // Changed since install: keep those changes, drop only our entries.
                write_json(&settings, &cleaned)?;
            }
            report.settings = Some(settings.clone());
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("read", &settings)(e)),
    }
    let _ = std::fs::remove_file(&backup);
    let _ = std::fs::remove_file(&absent);
    let skill = dir.join("skills/sandgate/SKILL.md");
    match std::fs::read(&skill) {
        Ok(b) if b == SKILL.as_bytes() => {
            std::fs::remove_file(&skill).map_err(io_err("remove", &skill))?;
            let _ = std::fs::remove_dir(dir.join("skills/sandgate"));
            let _ = std::fs::remove_dir(dir.join("skills"));
            report.skill = SkillRemoval::Remove(skill);
        }
        Ok(_) => report.skill = SkillRemoval::Keep(skill),
        Err(_) => {}
    }
    if made_by_install {
        // The directory install made, if nothing else uses it.
        let _ = std::fs::remove_dir(dir);
    }
    Ok(report)
}

/// What [`remove_links`] did with one wrapper name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkRemoval {
    /// The link pointed at the binary and is gone.
    Remove(PathBuf),
    /// The link points elsewhere: left in place.
    Keep {
        /// The link.
        link: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
}

/// Removes the wrapper links ([`crate::WRAPPERS`]) in `dir` that point at one of `ours`; names that are
/// not links are not mentioned.
pub fn remove_links(dir: &Path, ours: &[&Path]) -> Result<Vec<LinkRemoval>, SettingsError> {
    let mut out = Vec::new();
    for (name, _) in crate::WRAPPERS {
        let link = dir.join(name);
        match std::fs::read_link(&link) {
            Ok(target) if ours.contains(&target.as_path()) => {
                std::fs::remove_file(&link).map_err(io_err("remove", &link))?;
                out.push(LinkRemoval::Remove(link));
            }
            Ok(target) => out.push(LinkRemoval::Keep { link, target }),
            Err(_) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CMD: &str = "/bin/sandgate hook claude --tier build";

    #[test]
    fn merge_keeps_other_keys_and_is_idempotent() {
        let user = json!({ "model": "x", "hooks": { "PreToolUse": [{ "matcher": "Bash", "hooks": [] }],
            "PermissionRequest": [{ "matcher": "Read", "hooks": [{ "type": "command", "command": "other" }] }] } });
        let once = with_ours(user.clone(), CMD).unwrap();
        let twice = with_ours(once.clone(), CMD).unwrap();
        assert_eq!(once, twice);
        assert_eq!(once["model"], "x");
        assert_eq!(once["hooks"]["PermissionRequest"].as_array().unwrap().len(), 2);
        assert_eq!(without_ours(once), user);
        assert_eq!(without_ours(with_ours(json!({}), "sandgate hook claude").unwrap()), json!({}));
    }

    #[test]
    fn only_our_command_is_ours() {
        for (command, ours) in [
            ("/x/sandgate hook claude --tier build", true),
            ("sandgate hook claude", true),
            ("/x/sandgate-old hook claude", false),
            ("/x/sandgate hook other", false),
            ("sh -c 'sandgate hook claude'", false),
        ] {
            assert_eq!(is_ours(&json!({ "command": command })), ours, "{command}");
        }
        assert!(!is_ours(&json!({ "type": "command" })));
    }

    #[test]
    fn our_commands_are_found_among_others() {
        let v = with_ours(
            json!({ "hooks": { "PermissionRequest": [
            { "matcher": "Read", "hooks": [{ "type": "command", "command": "other" }] }] } }),
            CMD,
        )
        .unwrap();
        assert_eq!(our_commands(&v), [CMD]);
        assert!(our_commands(&without_ours(v)).is_empty());
        for odd in
            [json!([]), json!({ "hooks": 1 }), json!({ "hooks": { "PermissionRequest": {} } })]
        {
            assert!(our_commands(&odd).is_empty(), "{odd}");
        }
    }

    #[test]
    fn settings_that_are_not_objects_are_refused() {
        for bad in
            [json!([]), json!({ "hooks": 1 }), json!({ "hooks": { "PermissionRequest": {} } })]
        {
            assert!(matches!(with_ours(bad, CMD), Err(SettingsError::BadSettings(_))));
        }
    }

    #[test]
    fn the_directory_and_the_command() {
        let dir = claude_dir(Some("/c".into()), Some("/h".into())).unwrap();
        assert_eq!(dir, Path::new("/c"));
        assert_eq!(
            claude_dir(Some("".into()), Some("/h".into())).unwrap(),
            Path::new("/h/.claude")
        );
        assert!(matches!(claude_dir(None, Some("".into())), Err(SettingsError::NoHome)));
        assert_eq!(
            hook_command(Path::new("/b/sandgate"), "net").unwrap(),
            "/b/sandgate hook claude --tier net"
        );
        assert!(hook_command(Path::new("/my bin/sandgate"), "net").is_err());
    }

    #[test]
    fn install_then_uninstall_gives_back_the_exact_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".claude");
        std::fs::create_dir(&dir).unwrap();
        // Odd spacing a re-serialisation would not keep.
        let original = b"{\"model\":   \"x\"}\n";
        std::fs::write(dir.join("settings.json"), original).unwrap();
        let r = install(&dir, CMD).unwrap();
        assert!(r.registered && r.skill_written.is_some(), "{r:?}");
        let again = install(&dir, CMD).unwrap();
        assert!(!again.registered && again.skill_written.is_none(), "{again:?}");
        let u = uninstall(&dir).unwrap();
        assert_eq!(u.settings.as_deref(), Some(dir.join("settings.json").as_path()));
        assert!(matches!(u.skill, SkillRemoval::Remove(_)), "{u:?}");
        assert_eq!(std::fs::read(dir.join("settings.json")).unwrap(), original);
        let left: Vec<_> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["settings.json"]);
    }

    #[test]
    fn what_install_created_uninstall_removes_and_a_changed_skill_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".claude");
        install(&dir, CMD).unwrap();
        let skill = dir.join("skills/sandgate/SKILL.md");
        std::fs::write(&skill, "mine").unwrap();
        let u = uninstall(&dir).unwrap();
        assert_eq!(u.skill, SkillRemoval::Keep(skill.clone()));
        assert!(!dir.join("settings.json").exists());
        std::fs::remove_file(&skill).unwrap();
        let u = uninstall(&dir).unwrap();
        assert_eq!(u, UninstallReport { settings: None, skill: SkillRemoval::Absent });
    }

    #[test]
    fn invalid_settings_are_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("settings.json"), "{oops").unwrap();
        let e = install(tmp.path(), CMD).unwrap_err();
        assert!(
            e.to_string().ends_with("is not valid JSON; fix it first (nothing changed)"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(tmp.path().join("settings.json")).unwrap(), "{oops");
    }

    #[test]
    fn only_links_to_this_binary_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let exe = tmp.path().join("sandgate");
        std::fs::write(&exe, "").unwrap();
        let names: Vec<&str> = crate::WRAPPERS.iter().map(|(n, _)| *n).collect();
        std::os::unix::fs::symlink(&exe, tmp.path().join(names[0])).unwrap();
        std::os::unix::fs::symlink("/elsewhere", tmp.path().join(names[1])).unwrap();
        let launcher = tmp.path().join("sandgate-launch");
        std::os::unix::fs::symlink(&launcher, tmp.path().join(names[2])).unwrap();
        let out = remove_links(tmp.path(), &[&exe, &launcher]).unwrap();
        assert_eq!(
            out,
            [
                LinkRemoval::Remove(tmp.path().join(names[0])),
                LinkRemoval::Keep { link: tmp.path().join(names[1]), target: "/elsewhere".into() },
                LinkRemoval::Remove(tmp.path().join(names[2])),
            ]
        );
        assert!(!tmp.path().join(names[0]).exists());
        assert!(tmp.path().join(names[2]).symlink_metadata().is_err());
    }
}
