//! `sandgate hook claude` and `sandgate check --path`: the I/O around `sandgate_hook` (its
//! [`tier`](sandgate_hook::tier) module finds the walls and reports) with this host's places
//! and git metadata walls.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sandgate_hook::tier::{PathCheck, Places};
use sandgate_hook::{Access, HookSettings, RealFs, Verdict, Walls};

use crate::UsageError;
use crate::report::{Printed, compact};

/// The walls of `tier` for `cwd`, narrowed by `allow_write`, with the git metadata the launcher
/// keeps read-only (`spec_from_policy`): a link on the way to it is refused by the launcher;
/// here the link itself stays read-only.
fn walls_for(cwd: &Path, tier: &str, allow_write: Option<Vec<PathBuf>>) -> Result<Walls, String> {
    let paths = crate::Paths::discover();
    let places =
        Places::discover(std::iter::once(paths.dir.clone()).chain(paths.others()).collect());
    let home = places.homes.first().cloned();
    sandgate_hook::tier::walls_for(cwd, tier, allow_write, &places, |policy| {
        let writable: Vec<PathBuf> = policy.fs.writable.iter().map(|w| w.path.clone()).collect();
        let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
        let git = sandgate_sandbox::gitwall::protect_git(
            &writable,
            policy.fs.git_writable,
            home.as_deref(),
            &sandgate_sandbox::gitwall::outer_config(&env),
        );
        git.read_only.into_iter().chain(git.links).collect()
    })
}

fn real_fs() -> anyhow::Result<RealFs> {
    // The links point at the small launcher next to this binary (or at this binary).
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    let launcher = exe.with_file_name(crate::LAUNCHER_NAME);
    Ok(RealFs::new(std::env::var_os("PATH"), &exe).with_launcher(&launcher))
}

/// `sandgate hook claude`: one decision for the hook JSON on standard input (printed when there
/// is one, and reported to the daemon); never fails (a failing hook would show the agent an
/// error instead of the prompt).
pub fn claude(tier: &str, deny: bool) -> Printed {
    let mut input = Vec::new();
    // One byte over the limit is enough to know the input is too long.
    let read =
        std::io::stdin().lock().take(sandgate_hook::MAX_INPUT as u64 + 1).read_to_end(&mut input);
    let verdict = match read.map_err(anyhow::Error::from).and_then(|_| real_fs()) {
        // A wrapper in a place a sandboxed command can write may be swapped after this decision:
        // this process's directory, and each directory the line runs in with what a tier
        // makes writable there.
        Ok(fs) => Ok(fs
            .with_untrusted(std::env::current_dir().into_iter().collect())
            .with_writable_in(sandgate_hook::tier::writable_in)
            .with_cdpath(std::env::var_os("CDPATH"))),
        Err(e) => Err(e),
    };
    let verdict = match verdict {
        Ok(fs) => sandgate_hook::decide_claude(
            &input,
            &HookSettings { deny_refused_paths: deny },
            &fs,
            &|cwd| walls_for(cwd, tier, None),
            &Places::discover(Vec::new()).roots(),
        ),
        Err(e) => Verdict::Abstain { tool: None, reason: format!("cannot decide: {e:#}") },
    };
    let out = sandgate_hook::verdict_json(&verdict).map(|o| format!("{o}\n")).unwrap_or_default();
    let socket = crate::Paths::discover().socket;
    sandgate_hook::tier::report_to(&socket, &sandgate_hook::tier::decision_line(&verdict));
    Printed::new(out.clone(), out)
}

/// `p` made absolute against `cwd`, canonical when it exists.
pub fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    let abs = if p.is_absolute() { p.to_owned() } else { cwd.join(p) };
    abs.canonicalize().unwrap_or(abs)
}

/// `sandgate check --path`: the file-tool answer for any agent framework (exit 0 allowed, 1
/// refused).
pub fn check_path(
    path: &str,
    write: bool,
    tier: &str,
    allow_write: Vec<PathBuf>,
) -> anyhow::Result<Printed> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let narrowing = if allow_write.is_empty() {
        None
    } else {
        Some(allow_write.iter().map(|p| absolute(&cwd, p)).collect())
    };
    let walls = walls_for(&cwd, tier, narrowing).map_err(UsageError)?;
    let access = if write { Access::Write } else { Access::Read };
    let r = PathCheck::new(&walls, &real_fs()?, &cwd, path, access);
    Ok(Printed::new(format!("{}\n", r.text()), compact(&r)).exit(if r.result.is_ok() {
        0
    } else {
        1
    }))
}
