//! Policy commands: `sandgate check`, `sandgate config ...`, `sandgate tiers`. What they
//! report is `sandgate_config`'s ([`NetCheck`], `Config::tier_summaries`,
//! `Config::writable_paths`, `sandgate_config::edit`); this parses the options and prints.

use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sandgate_config::edit::{CheckError, Edit};
use sandgate_config::{
    Config, ConfigError, ConfigPaths, Decision, NetCheck, NetMode, Overrides, Target,
};
use sandgate_daemon::UsageError;
use serde_json::json;

/// Exit status of `check`: allowed.
const EXIT_ALLOW: u8 = 0;
/// Exit status of `check`: denied.
const EXIT_DENY: u8 = 1;
/// Exit status for usage and configuration errors.
pub const EXIT_USAGE: u8 = 2;
/// Exit status of `check`: a person would be asked.
const EXIT_ASK: u8 = 3;

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
}

/// Parses `--net`.
pub fn parse_net(s: &str) -> Result<NetMode, String> {
    NetMode::parse(s).ok_or_else(|| format!("unknown network mode {s:?}: use `none` or `proxy`"))
}

fn config_error(e: ConfigError) -> anyhow::Error {
    UsageError(format!("invalid configuration:\n{e}")).into()
}

/// `sandgate check`: prints the decision and the rule that made it.
pub fn check(args: CheckArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.path {
        return crate::hook_cmd::check_path(
            path,
            args.write,
            &args.tier,
            args.allow_write,
            args.json,
        );
    }
    let target = match Target::parse(&args.target) {
        Ok(t) => t,
        Err(e) => {
            if args.json {
                println!("{}", json!({ "target": args.target, "error": e.to_string() }));
            } else {
                eprintln!("sandgate: invalid target {:?}: {e}", args.target);
                eprintln!("help: give host[:port] or a URL, e.g. `sandgate check crates.io:443`");
            }
            return Ok(EXIT_USAGE);
        }
    };
    let config = sandgate_daemon::setup::load_config()?;
    let flags =
        Overrides { allow: args.allow, deny: args.deny, net: args.net, ..Overrides::default() };
    let policy = config.policy(&args.tier, &flags).map_err(|e| UsageError(e.to_string()))?;
    // As the proxy does: what no rule decides, a live grant (global, or this directory's
    // project) may; a deny grant first.
    let r = NetCheck::new(&args.tier, &policy.net, target, |t| stored_grant(&config, t));
    let code = match &r.decision {
        Decision::Allow(_) => EXIT_ALLOW,
        Decision::Deny(_) => EXIT_DENY,
        Decision::Ask => EXIT_ASK,
    };
    if args.json {
        println!("{}", serde_json::to_value(&r)?);
        return Ok(code);
    }
    let target = &r.target;
    println!("{} {target}", r.decision.verb());
    if r.intercepted {
        println!(
            "  intercepted: TLS is terminated by sandgate's CA (secrets: {}; http_rules: {})",
            if r.secrets.is_empty() { "none".into() } else { r.secrets.join(", ") },
            r.http_rules.as_ref().map_or("none", |h| h.origin.as_str())
        );
    }
    match &r.decision {
        Decision::Allow(rule) | Decision::Deny(rule) => println!("  rule: {rule}"),
        Decision::Ask => println!(
            "  no rule matches: the request would be held until a person answers \
             (`sandgate allow {}`)",
            target.host
        ),
    }
    if let Some(rule) = &r.narrowed_by_default_ports {
        let ports: Vec<String> = r.default_ports.iter().flatten().map(u16::to_string).collect();
        println!(
            "  not matched: {rule} has no port, and [network] default_ports = [{}] narrows such \
             patterns to those ports; allow {} to open this one",
            ports.join(", "),
            target
        );
    }
    Ok(code)
}

/// The live grant (global or of this directory's project) that decides `target`, read from the
/// store; `None` when there is no store or no grant covers it. Grants of one sandbox are not
/// considered: `check` runs outside any sandbox.
fn stored_grant(config: &Config, target: &Target) -> Option<Decision> {
    use sandgate_daemon::adapters::GrantCache;
    let path = sandgate_store::Store::default_path().ok()?;
    if !path.exists() {
        return None;
    }
    let store = match sandgate_store::Store::open(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandgate: warning: stored grants not consulted: {e}");
            return None;
        }
    };
    let cache = GrantCache::new(store);
    if let Err(e) = cache.reload() {
        eprintln!("sandgate: warning: stored grants not consulted: {e}");
        return None;
    }
    let p = &config.paths;
    let project = sandgate_config::project_root(&p.project_dir, &p.dir, p.home.as_deref());
    let project = project.to_string_lossy();
    let find = |e| cache.find(e, "", Some(&project), &target.host, target.port);
    if let Some(rule) = find(sandgate_store::Effect::Deny) {
        return Some(Decision::Deny(rule));
    }
    find(sandgate_store::Effect::Allow).map(Decision::Allow)
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
        ConfigCommand::ListPaths { allow_write, json } => list_paths(paths, allow_write, json),
        ConfigCommand::AddPath { path, global } => {
            let path = absolute(&cwd, &path);
            let file = file_for(global);
            if std::fs::symlink_metadata(&path).is_err() {
                eprintln!(
                    "sandgate: warning: {} does not exist; launches skip it (with a warning) \
                     until it does",
                    path.display()
                );
            }
            if sandgate_config::add_path(&file, &path).map_err(config_error)? {
                println!("added {} to {}", path.display(), file.display());
            } else {
                println!("{} is already in {}", path.display(), file.display());
            }
            Ok(0)
        }
        ConfigCommand::RemovePath { path, global } => {
            let path = absolute(&cwd, &path);
            let file = file_for(global);
            if sandgate_config::remove_path(&file, &path).map_err(config_error)? {
                println!("removed {} from {}", path.display(), file.display());
                Ok(0)
            } else {
                eprintln!("sandgate: {} is not in {}", path.display(), file.display());
                Ok(1)
            }
        }
        ConfigCommand::Edit { global } => edit(&file_for(global), global, &paths),
        ConfigCommand::Check => {
            for (what, file) in [("global", &paths.global), ("per-directory", &paths.project)] {
                let state = if file.exists() { "present" } else { "absent" };
                println!("{what:14} {state:8} {}", file.display());
            }
            match sandgate_config::edit::check(paths) {
                Ok(config) => {
                    for w in &config.missing_writable() {
                        println!("warning: {}", sandgate_daemon::launch::missing_path_notice(w));
                    }
                    for w in sandgate_approvals::telegram::config_warnings(&config) {
                        eprintln!("warning: {w}");
                    }
                    println!("ok: configuration is valid");
                    Ok(0)
                }
                Err(CheckError::File(e)) => Err(config_error(e)),
                Err(CheckError::Tiers(e)) => Err(UsageError(e.to_string()).into()),
            }
        }
    }
}

/// `p` made absolute against `cwd`, canonical when it exists.
pub fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    let abs = if p.is_absolute() { p.to_owned() } else { cwd.join(p) };
    abs.canonicalize().unwrap_or(abs)
}

fn list_paths(paths: ConfigPaths, extra: Vec<PathBuf>, json: bool) -> anyhow::Result<u8> {
    let config = Config::load(paths).map_err(config_error)?;
    let writable = config.writable_paths(extra).map_err(|e| UsageError(e.to_string()))?;
    if json {
        println!("{}", serde_json::to_value(&writable)?);
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "Writable paths in tier `build` (and tiers based on it):")?;
    let mut last: Option<String> = None;
    for w in &writable {
        let heading = match &w.file {
            Some(f) => format!("{} ({f})", w.source),
            None => w.source.clone(),
        };
        if last.as_ref() != Some(&heading) {
            writeln!(out, "  {heading}")?;
            last = Some(heading);
        }
        writeln!(out, "    {}", w.path.display())?;
    }
    writeln!(out, "Everything else is read-only; tiers `run` and `net` write nowhere but /tmp.")?;
    Ok(0)
}

fn edit(file: &Path, global: bool, paths: &ConfigPaths) -> anyhow::Result<u8> {
    let header = if global {
        String::new()
    } else {
        format!("# Per-directory configuration for {}\n", paths.project_dir.display())
    };
    let session = Edit::begin(file, &header)?;
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
    let config = sandgate_daemon::setup::load_config()?;
    let tiers = config.tier_summaries().map_err(|e| UsageError(e.to_string()))?;
    if args.json {
        println!("{}", serde_json::to_value(&tiers)?);
        return Ok(0);
    }
    for t in tiers {
        let fs = if t.writable_cwd { "cwd + configured paths writable" } else { "read-only" };
        let net = match t.net {
            NetMode::None => "no network",
            NetMode::Proxy => "network via the allowlist proxy",
        };
        println!("{:<14} {fs}; {net}", t.name);
        println!("{:<14} {} [{}]", "", t.description, t.defined_in);
        if t.net == NetMode::Proxy {
            let show =
                |v: Vec<String>| if v.is_empty() { "(none)".to_owned() } else { v.join(", ") };
            println!("{:<14} allow: {}", "", show(t.allow));
            if !t.deny.is_empty() {
                println!("{:<14} deny:  {}", "", show(t.deny));
            }
        }
    }
    Ok(0)
}
