//! Policy commands: `sandgate check`, `sandgate config ...`, `sandgate tiers`: their flags, and
//! the editor loop of `config edit`; what they print is [`sandgate_daemon::policy_report`]'s.

use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sandgate_config::edit::Edit;
use sandgate_config::{ConfigPaths, NetMode};
use sandgate_daemon::hook::{self, absolute};
use sandgate_daemon::policy_report::{self, CheckQuery, config_error};

use crate::emit;

/// Options of `sandgate check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// `host[:port]` or a URL (`https://crates.io/...`); the port defaults to 443 (80 for http://).
    #[arg(default_value = "", hide_default_value = true, conflicts_with = "path")]
    pub target: String,
    /// Check a file path instead (what a file tool may do there): exit 0 allowed, 1 refused.
    #[arg(long, value_name = "PATH")]
    pub path: Option<String>,
    /// With --path: reading (the default).
    #[arg(long, requires = "path", conflicts_with = "write")]
    pub read: bool,
    /// With --path: writing.
    #[arg(long, requires = "path")]
    pub write: bool,
    /// With --path: narrow the tier's writable paths to these (never widen).
    #[arg(long = "allow-write", value_name = "DIR", requires = "path")]
    pub allow_write: Vec<PathBuf>,
    /// The tier whose policy decides.
    #[arg(long, default_value = "net")]
    pub tier: String,
    /// Also allow this domain pattern (as `--allow` on a launch would).
    #[arg(long = "allow", value_name = "PATTERN")]
    pub allow: Vec<String>,
    /// Also deny this domain pattern.
    #[arg(long = "deny", value_name = "PATTERN")]
    pub deny: Vec<String>,
    /// Override the tier's network mode.
    #[arg(long, value_name = "none|proxy", value_parser = parse_net)]
    pub net: Option<NetMode>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not resolve the name (by default a name the proxy would resolve is, and what the
    /// address guard does with its addresses is said: a name that resolves to a loopback or
    /// private address is refused however it is allowed).
    #[arg(long = "no-resolve")]
    pub no_resolve: bool,
}

/// Parses `--net`.
pub fn parse_net(s: &str) -> Result<NetMode, String> {
    NetMode::parse(s).ok_or_else(|| format!("unknown network mode {s:?}: use `none` or `proxy`"))
}

/// `sandgate check`: prints the decision and the rule that made it.
pub fn check(args: CheckArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.path {
        let r = hook::check_path(path, args.write, &args.tier, args.allow_write);
        return emit(r, args.json);
    }
    let query = CheckQuery {
        target: args.target,
        tier: args.tier,
        allow: args.allow,
        deny: args.deny,
        net: args.net,
        resolve: !args.no_resolve,
    };
    emit(policy_report::check(query), args.json)
}

/// Options of `sandgate config`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ConfigCommand {
    /// Show each writable path grouped by where it comes from.
    ListPaths {
        /// Also show a path given with --allow-write on a launch.
        #[arg(long = "allow-write", value_name = "PATH")]
        allow_write: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make PATH writable in tiers with a writable current directory (`build`).
    AddPath {
        /// The path (made absolute).
        path: PathBuf,
        /// Edit the global file instead of this directory's.
        #[arg(long)]
        global: bool,
    },
    /// Remove PATH from the writable paths.
    RemovePath {
        /// The path (made absolute).
        path: PathBuf,
        /// Edit the global file instead of this directory's.
        #[arg(long)]
        global: bool,
    },
    /// Open the configuration file in $VISUAL / $EDITOR, then check it.
    Edit {
        /// Edit the global file instead of this directory's.
        #[arg(long)]
        global: bool,
    },
    /// Check both configuration files and say where each is.
    Check,
}

/// `sandgate config ...`.
pub fn config(args: ConfigArgs) -> anyhow::Result<u8> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let paths = ConfigPaths::discover(&cwd).map_err(config_error)?;
    let file_for = |global: bool| if global { paths.global.clone() } else { paths.project.clone() };
    match args.command {
        ConfigCommand::ListPaths { allow_write, json } => {
            emit(policy_report::list_paths(paths, allow_write), json)
        }
        ConfigCommand::AddPath { path, global } => {
            emit(policy_report::add_path(&file_for(global), &absolute(&cwd, &path)), false)
        }
        ConfigCommand::RemovePath { path, global } => {
            emit(policy_report::remove_path(&file_for(global), &absolute(&cwd, &path)), false)
        }
        ConfigCommand::Edit { global } => edit(&file_for(global), global, &paths),
        ConfigCommand::Check => emit(policy_report::config_check(paths), false),
    }
}

fn edit(file: &Path, global: bool, paths: &ConfigPaths) -> anyhow::Result<u8> {
    let header = if global {
        "# Global sandgate configuration: every directory's launches read it.\n".to_owned()
    } else {
        format!(
            "# Per-directory configuration for {} and its subdirectories\n",
            paths.project_root.display()
        )
    };
    let session =
        Edit::begin(file, &format!("{header}{}", sandgate_config::edit::template(global)))?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let interactive = std::io::stdin().is_terminal();
    // As visudo and crontab -e do: a file that does not load is not left in place silently.
    loop {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{editor} \"$1\""))
            .arg("sh")
            .arg(file)
            .status()
            .with_context(|| {
                format!("cannot start the editor {editor:?} (set $VISUAL or $EDITOR)")
            })?;
        if !status.success() {
            session.restore()?;
            bail!("the editor {editor:?} failed ({status}); {} is unchanged", file.display());
        }
        let Err(error) = sandgate_config::edit::check(paths.clone()) else {
            println!("ok: {} is valid", file.display());
            return Ok(0);
        };
        eprintln!("sandgate: {error}");
        if interactive && ask_edit_again()? {
            continue;
        }
        let rejected = session.reject()?;
        eprintln!(
            "sandgate: {} is unchanged; your edit is in {}",
            file.display(),
            rejected.display()
        );
        return Ok(1);
    }
}

/// Asks whether to edit a broken file again (`e`, the default) or drop the edit (`d`).
fn ask_edit_again() -> anyhow::Result<bool> {
    loop {
        eprint!("What now? (e)dit again, (d)iscard the edit [e]: ");
        std::io::stderr().flush()?;
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line)? == 0 {
            return Ok(false);
        }
        match line.trim() {
            "" | "e" | "E" => return Ok(true),
            "d" | "D" => return Ok(false),
            _ => {}
        }
    }
}

/// Options of `sandgate tiers`.
#[derive(Debug, clap::Args)]
pub struct TiersArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `sandgate tiers`: lists the tiers and what each allows.
pub fn tiers(args: TiersArgs) -> anyhow::Result<u8> {
    emit(policy_report::tiers(), args.json)
}
