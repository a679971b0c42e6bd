//! The tier commands' command line (`run`, `net`, `build` and the `sandbox-*` names): their
//! flags, the fast parse that reads them without the other subcommands' definitions, and how a
//! launch's result becomes an exit status. Shared by the `sandgate` binary and the small
//! launcher (`sandgate-launch`), which includes this file as a module of its own.

use std::ffi::OsString;
use std::path::PathBuf;

use sandgate_daemon::launch::{LaunchOptions, ServeHere};

/// Options shared by the tier commands.
#[derive(Debug, Default, clap::Args)]
pub struct LaunchArgs {
    /// Make this path writable inside the sandbox (repeatable).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// Allow this domain through the proxy for this run (repeatable).
    #[arg(long = "allow", value_name = "DOMAIN")]
    pub allow: Vec<String>,
    /// Deny this domain at the proxy for this run (repeatable).
    #[arg(long = "deny", value_name = "DOMAIN")]
    pub deny: Vec<String>,
    /// Network mode: `none` (only loopback) or `proxy` (only through the allowlist proxy).
    #[arg(long, value_name = "MODE")]
    pub net: Option<NetArg>,
    /// Fail instead of warning when the kernel cannot enforce every restriction.
    #[arg(long)]
    pub require_full: bool,
    /// Print one line per blocked direct connection attempt to stderr (`sandgate: blocked ...`).
    #[arg(long)]
    pub report_blocked: bool,
    /// No notices on stderr (held and denied requests, hints after a failure); warnings and
    /// errors still print. Also `SANDGATE_QUIET=1`.
    #[arg(long, short = 'q', env = "SANDGATE_QUIET", value_parser = clap::builder::BoolishValueParser::new())]
    pub quiet: bool,
    /// Nobody is there to answer (CI): destinations no rule allows are refused at once with a
    /// 403 and recorded; `sandgate log --summary` lists them afterwards. Also `[daemon] ask =
    /// "deny"`.
    #[arg(long)]
    pub no_ask: bool,
    /// The command to run and its arguments (default: an interactive `$SHELL`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// `--net` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetArg {
    /// Only loopback.
    None,
    /// Only through the allowlist proxy.
    Proxy,
}

impl LaunchArgs {
    /// The launcher's options; `serve_here` serves a proxy in this process when no daemon does
    /// (the `sandgate` binary's; `None` in the small launcher).
    pub fn options(self, serve_here: Option<ServeHere>) -> LaunchOptions {
        LaunchOptions {
            allow_write: self.allow_write,
            allow: self.allow,
            deny: self.deny,
            net: self.net.map(|n| match n {
                NetArg::None => sandgate_config::NetMode::None,
                NetArg::Proxy => sandgate_config::NetMode::Proxy,
            }),
            require_full: self.require_full,
            report_blocked: self.report_blocked,
            quiet: self.quiet,
            no_ask: self.no_ask,
            approver: None,
            serve_here,
            command: self.command,
        }
    }
}

/// Maps the name the binary was started under to the tier subcommand it stands for.
pub fn tier_from_argv0(argv0: &std::ffi::OsStr) -> Option<&'static str> {
    let name = std::path::Path::new(argv0).file_name()?.to_str()?;
    match name {
        "sandbox-run" => Some("run"),
        "sandbox-net" => Some("net"),
        "sandbox-build" => Some("build"),
        _ => None,
    }
}

/// The command line with a `sandbox-*` name read as its tier: `sandbox-net curl ...` is
/// `sandgate net curl ...`.
pub fn normalized(mut args: Vec<OsString>) -> Vec<OsString> {
    if let Some(tier) = args.first().and_then(|a| tier_from_argv0(a)) {
        let rest = args.split_off(1);
        args = vec!["sandgate".into(), tier.into()];
        args.extend(rest);
    }
    args
}

/// `sandgate run|net|build ARGS...` parsed with [`LaunchArgs`] alone: the same argument
/// definitions as the subcommand's in `sandgate`'s whole parser. `None` for any other command line, and for one
/// these definitions refuse or answer themselves (`--help`, `--version`, a typo): the whole
/// parser then handles it as it always did.
pub fn parse_tier(args: &[OsString]) -> Option<(&'static str, LaunchArgs)> {
    let tier = match args.get(1)?.to_str()? {
        "run" => "run",
        "net" => "net",
        "build" => "build",
        _ => return None,
    };
    // Clap reads `SANDGATE_QUIET` as the `--quiet` flag.
    if std::env::var_os("SANDGATE_QUIET").is_none()
        && let Some(command) = plain_command(&args[2..])
    {
        return Some((tier, LaunchArgs { command, ..LaunchArgs::default() }));
    }
    clap_tier(args).map(|a| (tier, a))
}

/// The command of a tier command line without flags (`sandbox-run make test`, `sandgate run --
/// make`), as clap reads it, without building clap's parser (~0.1 ms of every launch): the first
/// word not starting with `-` starts the command (and with it every word after, flags too), or a
/// leading `--` does. `None` for anything else: clap then parses.
fn plain_command(rest: &[OsString]) -> Option<Vec<OsString>> {
    let first = rest.first()?;
    if first == "--" {
        // `--` then nothing is an interactive shell, as clap reads it.
        return Some(rest[1..].to_vec());
    }
    let hyphen = first.as_encoded_bytes().first() == Some(&b'-');
    (!hyphen).then(|| rest.to_vec())
}

/// [`parse_tier`] through clap.
fn clap_tier(args: &[OsString]) -> Option<LaunchArgs> {
    use clap::{Args, FromArgMatches};
    // The version flag too (the whole parser propagates it to every subcommand): without it,
    // `-V` would be taken as the command to run.
    let command =
        LaunchArgs::augment_args(clap::Command::new("sandgate").version(env!("CARGO_PKG_VERSION")));
    // `args[1]`, the tier, stands where the program name goes.
    let matches = command.try_get_matches_from(&args[1..]).ok()?;
    LaunchArgs::from_arg_matches(&matches).ok()
}

/// The exit status of a command's result (errors said on stderr).
pub fn finish(result: anyhow::Result<u8>) -> u8 {
    match result {
        Ok(code) => code,
        Err(err) => {
            // A caller's mistake, on its own or as the launcher's (`run`, `explain`).
            let usage = err
                .downcast_ref::<sandgate_daemon::UsageError>()
                .or_else(|| err.downcast_ref::<sandgate_daemon::launch::LaunchError>()?.usage());
            match usage {
                Some(usage) => eprintln!("sandgate: {usage}"),
                None => eprintln!("sandgate: error: {}", error_text(&err)),
            }
            sandgate_daemon::policy_report::EXIT_USAGE
        }
    }
}

/// The error and its causes joined by ": " (anyhow's `{:#}`). Error types do not quote their
/// source in their own message (rustls style), so every cause appears once.
pub fn error_text(err: &anyhow::Error) -> String {
    format!("{err:#}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &[&str]) -> Vec<OsString> {
        line.iter().map(OsString::from).collect()
    }

    /// The fast reading of a command line without flags is clap's, word for word; a line it does
    /// not take is left to clap.
    #[test]
    fn a_command_line_without_flags_reads_as_clap_reads_it() {
        let taken = [
            &["sandgate", "run", "true"][..],
            &["sandgate", "net", "curl", "-fsS", "--max-time", "3", "http://x/"],
            &["sandgate", "build", "make", "--", "-j2"],
            &["sandgate", "run", "--", "true", "--help"],
            &["sandgate", "run", "--", "--", "x"],
            &["sandgate", "run", "--"],
            &["sandgate", "run", "sh", "-c", "echo -q --quiet"],
            &["sandgate", "run", "true", "-V"],
        ];
        for line in taken {
            let args = words(line);
            let fast = plain_command(&args[2..]).unwrap_or_else(|| panic!("{line:?} not taken"));
            let clap = clap_tier(&args).unwrap_or_else(|| panic!("clap refuses {line:?}"));
            assert_eq!(fast, clap.command, "{line:?}");
            let parsed = LaunchArgs { command: fast, ..LaunchArgs::default() };
            assert_eq!(format!("{parsed:?}"), format!("{clap:?}"), "{line:?}");
        }
        for line in [
            &["sandgate", "run"][..],
            &["sandgate", "run", "--quiet", "true"],
            &["sandgate", "net", "--allow", "x.org", "curl"],
            &["sandgate", "run", "-q", "true"],
            &["sandgate", "run", "-", "x"],
            &["sandgate", "run", "--help"],
            &["sandgate", "run", "-V"],
        ] {
            assert_eq!(plain_command(&words(line)[2..]), None, "{line:?} taken");
        }
    }
}
