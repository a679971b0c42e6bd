//! `sandgate cache ls | clear`: the copy-on-write layers of package caches (see
//! `sandgate_daemon::caches`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sandgate_daemon::caches;
use sandgate_daemon::launch::LaunchEnv;

/// `sandgate cache`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// List the layers (per project, or shared) with their size on disk.
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove layers: this directory's project (the default), another's, or all of them. The
    /// host's own caches are never touched; the next build of the project starts from them.
    Clear {
        /// The project whose layers to remove (default: the one around the current directory).
        #[arg(long, value_name = "DIR", conflicts_with = "all")]
        project: Option<PathBuf>,
        /// Every project's layers and the shared ones.
        #[arg(long)]
        all: bool,
        /// Only the shared layers (`[filesystem] caches = "shared"`).
        #[arg(long, conflicts_with_all = ["all", "project"])]
        shared: bool,
    },
}

/// Runs `sandgate cache ...`.
pub fn run(args: CacheArgs) -> anyhow::Result<u8> {
    let ctx = LaunchEnv::from_process()?;
    let data = ctx.data_home.clone().context("neither XDG_DATA_HOME nor HOME is set")?;
    match args.command {
        CacheCommand::Ls { json } => {
            let scopes = caches::list(&data)?;
            if json {
                println!("{}", caches::to_json(&scopes));
                return Ok(0);
            }
            if scopes.is_empty() {
                println!("no cache layers yet (they are made by the first net or build launch)");
            }
            for s in &scopes {
                let who = s.project.as_ref().map_or(s.scope.clone(), |p| p.display().to_string());
                let busy = if s.in_use { "  (in use)" } else { "" };
                println!("{who}  {}{busy}", caches::human(s.bytes));
                for (name, bytes) in &s.caches {
                    println!("  {name:<12} {}", caches::human(*bytes));
                }
            }
            Ok(0)
        }
        CacheCommand::Clear { project, all, shared } => {
            let scope = if all {
                None
            } else if shared {
                Some("shared".to_owned())
            } else {
                let mut at = ctx.clone();
                if let Some(dir) = project {
                    at.cwd = dir.canonicalize().with_context(|| format!("{}", dir.display()))?;
                }
                let project = caches::project_of(&at);
                let dir = caches::scope_dir(sandgate_config::CacheMode::Project, &data, &project);
                dir.and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            };
            let removed = caches::clear(&data, scope.as_deref())?;
            if removed.is_empty() {
                println!("no cache layers to remove");
            }
            for (scope, bytes) in removed {
                println!("removed {scope} ({})", caches::human(bytes));
            }
            Ok(0)
        }
    }
}
