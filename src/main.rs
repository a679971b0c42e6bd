//! The `sandgate` command line: a thin layer over the workspace crates.
//!
//! The binary is also installed as `sandbox-run`, `sandbox-net` and `sandbox-build` (links made by
//! `sandgate install`); the name it was started under picks the tier, busybox-style.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod firewall_cmd;
mod launch_cmd;
mod proxy_cmd;

/// Run AI coding agents and the commands they run in a tiered sandbox whose only way to the
/// network is an allowlist proxy.
#[derive(Debug, Parser)]
#[command(name = "sandgate", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command read-only with no network (tier `run`).
    Run(launch_cmd::LaunchArgs),
    /// Run a command read-only with network only through the allowlist proxy (tier `net`).
    Net(launch_cmd::LaunchArgs),
    /// Run a command with the current directory writable and network through the proxy (tier `build`).
    Build(launch_cmd::LaunchArgs),
    /// Create the `sandbox-run`, `sandbox-net` and `sandbox-build` links.
    Install(launch_cmd::InstallArgs),
    /// Print what a tier allows and what this kernel can enforce.
    Explain(launch_cmd::ExplainArgs),
    /// Run the allowlist proxy alone, in the foreground.
    Proxy(proxy_cmd::ProxyArgs),
    /// Manage host-wide firewall rules for a guest user (root).
    Firewall(firewall_cmd::FirewallArgs),
}

/// Maps the name the binary was started under to the tier subcommand it stands for.
fn tier_from_argv0(argv0: &std::ffi::OsStr) -> Option<&'static str> {
    let name = std::path::Path::new(argv0).file_name()?.to_str()?;
    match name {
        "sandbox-run" => Some("run"),
        "sandbox-net" => Some("net"),
        "sandbox-build" => Some("build"),
        _ => None,
    }
}

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    if let Some(tier) = args.first().and_then(|a| tier_from_argv0(a)) {
        // `sandbox-net curl ...` is `sandgate net -- curl ...`.
        let rest = args.split_off(1);
        args = vec!["sandgate".into(), tier.into()];
        args.extend(rest);
    }
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Run(a) => launch_cmd::run("run", a),
        Command::Net(a) => launch_cmd::run("net", a),
        Command::Build(a) => launch_cmd::run("build", a),
        Command::Install(a) => launch_cmd::install(a),
        Command::Explain(a) => launch_cmd::explain(a),
        Command::Proxy(a) => proxy_cmd::run(a),
        Command::Firewall(a) => firewall_cmd::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("sandgate: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
