//! The hook's edge to the machine: the walls of a tier for a directory (from its configuration
//! files), the places sandgate keeps its own state, the directories a sandboxed command could
//! write, the `sandgate check --path` report, and the fire-and-forget line to the daemon's event
//! log. The decisions themselves stay pure ([`crate::decide_claude`], [`crate::check_path`]).

use std::path::{Path, PathBuf};

use sandgate_config::{Config, ConfigPaths, Narrowing, Overrides, Policy, RootRule, RuleSource};
use serde::ser::{Serialize, SerializeStruct, Serializer};
use serde_json::json;

use crate::{Access, PathRefusal, Verdict, Walls};

/// The home directories (`$HOME` and the passwd entry's) and where sandgate's own state lives:
/// hidden from file tools, or read-only, as inside sandboxes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Places {
    /// `$HOME` (when set) then the passwd entry's home.
    pub homes: Vec<PathBuf>,
    /// Hidden: the daemon's runtime directories, the data directory, the configuration.
    pub hidden: Vec<PathBuf>,
    /// The configuration directory: it may hold secrets (the Telegram bot's token); inside a
    /// sandbox it is a sanitised copy, so a file tool outside may neither read nor write it.
    pub config: Vec<PathBuf>,
}

impl Places {
    /// The places of this process's user: homes from `$HOME` and the passwd entry, the data and
    /// configuration directories from `$XDG_DATA_HOME` / `$XDG_CONFIG_HOME` (or their defaults
    /// under `$HOME`), and `runtime`, the daemon's directories.
    pub fn discover(runtime: Vec<PathBuf>) -> Places {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let passwd_home =
            nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.dir);
        let xdg = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        Places::of(home, passwd_home, xdg("XDG_DATA_HOME"), xdg("XDG_CONFIG_HOME"), runtime)
    }

    /// The launcher's rule for writable roots, with these homes (resolved).
    pub fn roots(&self) -> RootRule {
        RootRule::resolved(self.homes.iter().cloned())
    }

    /// [`Places::discover`] from the values given.
    pub fn of(
        home: Option<PathBuf>,
        passwd_home: Option<PathBuf>,
        data_home: Option<PathBuf>,
        config_home: Option<PathBuf>,
        runtime: Vec<PathBuf>,
    ) -> Places {
        let homes: Vec<PathBuf> = home.iter().chain(passwd_home.iter()).cloned().collect();
        let under_home = |d: Option<PathBuf>, fallback: &str| {
            d.or_else(|| home.as_ref().map(|h| h.join(fallback)))
        };
        let mut hidden = runtime;
        hidden.extend(under_home(data_home, ".local/share").map(|d| d.join("sandgate")));
        let config: Vec<PathBuf> =
            under_home(config_home, ".config").map(|d| d.join("sandgate")).into_iter().collect();
        hidden.extend(config.iter().cloned());
        Places { homes, hidden, config }
    }
}

/// The walls of `tier` for `cwd` (its per-directory configuration), narrowed to `allow_write`
/// when given. `git_read_only` names what must stay read-only in the writable paths because git
/// would run it on the host (hooks, `core.hooksPath`, ...), as the launcher computes it.
pub fn walls_for(
    cwd: &Path,
    tier: &str,
    allow_write: Option<Vec<PathBuf>>,
    places: &Places,
    git_read_only: impl FnOnce(&Policy) -> Vec<PathBuf>,
) -> Result<Walls, String> {
    let paths = ConfigPaths::discover(cwd).map_err(|e| e.to_string())?;
    let config = Config::load(paths).map_err(|e| e.to_string())?;
    let mut policy = config.policy(tier, &Overrides::default()).map_err(|e| e.to_string())?;
    // Where the launcher refuses to start this tier (the home, `/`, ...), the working directory
    // is not writable for the file tools either.
    if policy.fs.cwd_refusal(&places.roots()).is_some() {
        policy.fs.writable.retain(|w| w.source != RuleSource::CurrentDirectory);
    }
    if let Some(writable) = allow_write {
        policy = policy
            .derive(&Narrowing { writable: Some(writable), ..Narrowing::default() })
            .map_err(|e| e.to_string())?;
    }
    let mut read_only = places.config.clone();
    read_only.extend(git_read_only(&policy));
    Ok(Walls::from_policy(&policy, places.homes.clone(), places.hidden.clone(), read_only))
}

/// What some tier makes writable when started in `cwd`, besides `cwd` itself: every tier's
/// configured writable paths there (nothing when the configuration cannot be read: file tools
/// then get no decision anyway, and a wrapper is still checked for ownership and modes).
pub fn writable_in(cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(paths) = ConfigPaths::discover(cwd) else { return out };
    let Ok(config) = Config::load(paths) else { return out };
    for tier in config.tiers().unwrap_or_default() {
        if let Ok(policy) = config.policy(&tier.name, &Overrides::default()) {
            out.extend(
                policy
                    .fs
                    .writable
                    .iter()
                    .filter(|w| w.source != RuleSource::CurrentDirectory)
                    .map(|w| w.path.clone()),
            );
        }
    }
    out
}

/// The answer of `sandgate check --path`: what a file tool may do at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathCheck {
    /// The path as given.
    pub path: String,
    /// Reading or writing.
    pub access: Access,
    /// The tier asked about.
    pub tier: String,
    /// Where it resolved to, or why it is refused.
    pub result: Result<PathBuf, Box<PathRefusal>>,
    /// The tier's writable paths.
    pub writable: Vec<PathBuf>,
}

impl PathCheck {
    /// Checks `path` (relative to `cwd`) for `access` against `walls`.
    pub fn new(
        walls: &Walls,
        fs: &dyn crate::Filesystem,
        cwd: &Path,
        path: &str,
        access: Access,
    ) -> PathCheck {
        PathCheck {
            path: path.to_owned(),
            access,
            tier: walls.tier.clone(),
            result: crate::check_path(walls, fs, cwd, path, access),
            writable: walls.writable.clone(),
        }
    }

    /// One line: `allow reading /x in tier `net`` or `deny ` and the refusal.
    pub fn text(&self) -> String {
        match &self.result {
            Ok(real) => format!("allow {} {} in tier `{}`", self.access, real.display(), self.tier),
            Err(r) => format!("deny {r}"),
        }
    }
}

impl Serialize for PathCheck {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let writable: Vec<String> = self.writable.iter().map(|w| w.display().to_string()).collect();
        let mut st = s.serialize_struct("PathCheck", 7)?;
        st.serialize_field("access", if self.access == Access::Write { "write" } else { "read" })?;
        match &self.result {
            Ok(real) => {
                st.serialize_field("decision", "allow")?;
                st.serialize_field("path", &self.path)?;
                st.serialize_field("resolved", real)?;
            }
            Err(r) => {
                st.serialize_field("decision", "deny")?;
                st.serialize_field("path", &self.path)?;
                st.serialize_field("reason", &r.to_string())?;
                st.serialize_field("resolved", &r.resolved)?;
            }
        }
        st.serialize_field("tier", &self.tier)?;
        st.serialize_field("writable", &writable)?;
        st.end()
    }
}

/// The control-protocol line that records a hook decision in the daemon's event log.
pub fn decision_line(v: &Verdict) -> String {
    let (tool, reason) = match v {
        Verdict::Allow { tool, reason } => (Some(tool.clone()), reason.clone()),
        Verdict::Abstain { tool, reason } => (tool.clone(), reason.clone()),
        Verdict::Deny { tool, message } => (Some(tool.clone()), message.clone()),
    };
    let mut line = json!({
        "op": "hook_decision",
        "agent": "claude",
        "tool": tool,
        "decision": v.verb(),
        "reason": reason.chars().take(2000).collect::<String>(),
    })
    .to_string();
    line.push('\n');
    line
}

/// Sends `line` to the daemon's control socket, if a daemon listens there: fire and forget,
/// never waiting (a full or absent socket drops the line; no decision depends on it).
pub fn report_to(socket: &Path, line: &str) {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket as open};
    use std::os::fd::AsRawFd as _;
    #[cfg(target_os = "linux")]
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    // macOS has no socket(2) flags: non-blocking is set with fcntl below.
    #[cfg(not(target_os = "linux"))]
    let flags = SockFlag::empty();
    let Ok(fd) = open(AddressFamily::Unix, SockType::Stream, flags, None) else { return };
    #[cfg(not(target_os = "linux"))]
    if nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .is_err()
    {
        return;
    }
    let Ok(addr) = UnixAddr::new(socket) else { return };
    // Non-blocking: a daemon whose backlog is full answers EAGAIN instead of making us wait.
    if connect(fd.as_raw_fd(), &addr).is_err() {
        return;
    }
    let _ = nix::unistd::write(&fd, line.as_bytes());
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;
    use crate::RealFs;

    #[test]
    fn places_follow_the_xdg_variables_and_fall_back_under_home() {
        let p = Places::of(
            Some("/h".into()),
            Some("/pw".into()),
            None,
            Some("/cfg".into()),
            vec!["/run/sg".into()],
        );
        assert_eq!(p.homes, [Path::new("/h"), Path::new("/pw")]);
        assert_eq!(p.config, [Path::new("/cfg/sandgate")]);
        assert_eq!(
            p.hidden,
            [
                Path::new("/run/sg"),
                Path::new("/h/.local/share/sandgate"),
                Path::new("/cfg/sandgate")
            ]
        );
        let none = Places::of(None, None, None, None, Vec::new());
        assert!(none.hidden.is_empty() && none.config.is_empty());
    }

    #[test]
    fn writable_in_names_the_configured_paths_of_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        // The directory itself is the caller's to add; a configuration that cannot be read
        // adds nothing.
        assert!(!writable_in(dir.path()).iter().any(|w| w == dir.path()));
        assert_eq!(writable_in(Path::new("/nonexistent/x")), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_path_check_answers_in_text_and_json() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        let places = Places::of(Some(dir.path().join("home")), None, None, None, Vec::new());
        let walls = walls_for(&proj, "build", None, &places, |_| Vec::new()).unwrap();
        let fs = RealFs::new(None, Path::new("/bin/sh"));
        let inside = PathCheck::new(&walls, &fs, &proj, "new.txt", Access::Write);
        assert!(inside.text().starts_with("allow writing "), "{}", inside.text());
        let v = serde_json::to_value(&inside).unwrap();
        assert_eq!((v["decision"].as_str(), v["access"].as_str()), (Some("allow"), Some("write")));
        assert!(v.get("reason").is_none());
        let outside = PathCheck::new(&walls, &fs, &proj, "/etc/passwd", Access::Write);
        assert!(outside.text().starts_with("deny "), "{}", outside.text());
        let text = serde_json::to_string(&outside).unwrap();
        assert!(
            text.starts_with(
                "{\"access\":\"write\",\"decision\":\"deny\",\"path\":\"/etc/passwd\",\"reason\":"
            ),
            "{text}"
        );
    }

    /// Where the launcher refuses `build` (here: the home), the file tools may not write the
    /// working directory either; reading it stays allowed, and a project below it is writable.
    #[test]
    fn a_refused_working_directory_is_not_writable_to_file_tools() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap().join("home");
        std::fs::create_dir_all(home.join("proj")).unwrap();
        std::fs::write(home.join("notes.txt"), "n").unwrap();
        let places = Places::of(Some(home.clone()), None, None, None, Vec::new());
        let fs = RealFs::new(None, Path::new("/bin/sh"));
        let walls = walls_for(&home, "build", None, &places, |_| Vec::new()).unwrap();
        assert!(!walls.writable.contains(&home), "{:?}", walls.writable);
        let plant = PathCheck::new(&walls, &fs, &home, "bin/ls", Access::Write);
        assert!(plant.text().contains("outside the writable area"), "{}", plant.text());
        let read = PathCheck::new(&walls, &fs, &home, "notes.txt", Access::Read);
        assert!(read.result.is_ok(), "{}", read.text());
        let proj = home.join("proj");
        let walls = walls_for(&proj, "build", None, &places, |_| Vec::new()).unwrap();
        let inside = PathCheck::new(&walls, &fs, &proj, "src.rs", Access::Write);
        assert!(inside.result.is_ok(), "{}", inside.text());
    }

    #[test]
    fn the_decision_line_is_one_bounded_json_line() {
        let v = Verdict::Abstain { tool: None, reason: "x".repeat(5000) };
        let line = decision_line(&v);
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        let j: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(j["op"], "hook_decision");
        assert_eq!(j["decision"], "none");
        assert_eq!(j["reason"].as_str().unwrap().len(), 2000);
    }

    #[test]
    fn a_report_reaches_a_listener_and_nothing_waits_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("control.sock");
        report_to(&sock, "nobody listens\n");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        report_to(&sock, "a line\n");
        let (mut c, _) = listener.accept().unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, "a line\n");
    }
}
