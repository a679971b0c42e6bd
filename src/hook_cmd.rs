//! `sandgate hook claude` and `sandgate check --path`: the I/O around `sandgate_hook` (its
//! [`tier`](sandgate_hook::tier) module finds the walls and reports; this reads standard input
//! and prints).

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sandgate_hook::tier::{PathCheck, Places};
use sandgate_hook::{Access, HookSettings, RealFs, Verdict, Walls};

use sandgate_daemon::UsageError;

/// Options of `sandgate hook`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    agent: HookAgent,
}

#[derive(Debug, clap::Subcommand)]
enum HookAgent {
    /// Claude Code `PermissionRequest` hook: reads the hook JSON on stdin; prints an allow
    /// decision for calls that stay inside the tier, nothing otherwise (the normal prompt).
    Claude {
        /// The tier file-tool paths are checked against.
        #[arg(long, default_value = "build")]
        tier: String,
        /// Deny a refused file-tool path with a message for the model, instead of leaving the
        /// decision to the person.
        #[arg(long)]
        deny: bool,
    },
}

/// The walls of `tier` for `cwd`, narrowed by `allow_write`, with the git metadata the launcher
/// keeps read-only (`spec_from_policy`): a link on the way to it is refused by the launcher;
/// here the link itself stays read-only.
fn walls_for(cwd: &Path, tier: &str, allow_write: Option<Vec<PathBuf>>) -> Result<Walls, String> {
    let paths = sandgate_daemon::Paths::discover();
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
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    Ok(RealFs::new(std::env::var_os("PATH"), &exe))
}

/// `sandgate hook claude`: one decision, printed; always exits 0 (a failing hook would show the
/// agent an error instead of the prompt).
pub fn run(args: HookArgs) -> anyhow::Result<u8> {
    let HookAgent::Claude { tier, deny } = args.agent;
    let mut input = Vec::new();
    // One byte over the limit is enough to know the input is too long.
    let read =
        std::io::stdin().lock().take(sandgate_hook::MAX_INPUT as u64 + 1).read_to_end(&mut input);
    let verdict = match read.map_err(anyhow::Error::from).and_then(|_| real_fs()) {
        // A wrapper in a place a sandboxed command can write may be swapped after this decision.
        Ok(fs) => Ok(fs.with_untrusted(sandgate_hook::tier::writable_anywhere(
            &input,
            std::env::current_dir().ok(),
        ))),
        Err(e) => Err(e),
    };
    let verdict = match verdict {
        Ok(fs) => sandgate_hook::decide_claude(
            &input,
            &HookSettings { deny_refused_paths: deny },
            &fs,
            &|cwd| walls_for(cwd, &tier, None),
        ),
        Err(e) => Verdict::Abstain { tool: None, reason: format!("cannot decide: {e:#}") },
    };
    if let Some(out) = sandgate_hook::verdict_json(&verdict) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{out}");
        let _ = stdout.flush();
    }
    let socket = sandgate_daemon::Paths::discover().socket;
    sandgate_hook::tier::report_to(&socket, &sandgate_hook::tier::decision_line(&verdict));
    Ok(0)
}

/// `sandgate check --path`: the file-tool answer for any agent framework.
pub fn check_path(
    path: &str,
    write: bool,
    tier: &str,
    allow_write: Vec<PathBuf>,
    json_out: bool,
) -> anyhow::Result<u8> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let narrowing = if allow_write.is_empty() {
        None
    } else {
        Some(allow_write.iter().map(|p| crate::policy_cmd::absolute(&cwd, p)).collect())
    };
    let walls = walls_for(&cwd, tier, narrowing).map_err(UsageError)?;
    let access = if write { Access::Write } else { Access::Read };
    let r = PathCheck::new(&walls, &real_fs()?, &cwd, path, access);
    if json_out {
        println!("{}", serde_json::to_value(&r)?);
    } else {
        println!("{}", r.text());
    }
    Ok(if r.result.is_ok() { 0 } else { 1 })
}
