//! The `sandgate` command line: argument parsing and output over the workspace crates (the
//! daemon and the launcher are `sandgate-daemon`).
//!
//! `sandbox-run`, `sandbox-net` and `sandbox-build` (links made by `sandgate install`) run the
//! small launcher next to this binary (`sandgate-launch`, `src/launcher.rs`), or this binary when
//! there is none; the name either was started under picks the tier, busybox-style.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sandgate_daemon::control_report;
use sandgate_daemon::report::Report;

mod agent_cmd;
mod cache_cmd;
mod connect;
mod control;
mod docs_cmd;
mod doctor_cmd;
mod firewall_cmd;
mod hook_cmd;
mod intercept_cmd;
mod launch;
mod learn_cmd;
mod log_cmd;
mod policy_cmd;
mod proxy_cmd;
mod tier_cli;

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
    Run(launch::LaunchArgs),
    /// Run a command read-only with network only through the allowlist proxy (tier `net`).
    Net(launch::LaunchArgs),
    /// Run a command with the current directory writable and network through the proxy (tier `build`).
    Build(launch::LaunchArgs),
    /// Create the `sandbox-run`, `sandbox-net` and `sandbox-build` links to the small launcher
    /// next to this binary, `sandgate-launch` (and, with --claude, register the Claude Code hook
    /// and skill).
    Install(launch::InstallArgs),
    /// Remove the links, the completions and man pages (and, with --claude, the Claude Code
    /// hook and skill).
    Uninstall(agent_cmd::UninstallArgs),
    /// Print what a tier allows and what this kernel can enforce.
    Explain(launch::ExplainArgs),
    /// Check what a launch needs and say how to fix each failure.
    ///
    /// User namespaces, Landlock, seccomp, overlayfs in a user namespace, a net/build network
    /// (tun, nf_tables, NFLOG), the sandbox-* links on PATH and whether the Claude hook trusts
    /// them, the daemon, every configuration file, the cache layers, Telegram (when
    /// configured), the Claude Code hook and shell completions. Exit status: 0 when a launch
    /// here would work (warnings included), 1 when one would fail.
    Doctor(doctor_cmd::DoctorArgs),
    /// Show or free the copy-on-write layers of package caches (`ls`, `clear`).
    Cache(cache_cmd::CacheArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to standard output.
    Completions(docs_cmd::CompletionsArgs),
    /// Print the man page (or write every page into --dir).
    Man(docs_cmd::ManArgs),
    /// Run the allowlist proxy alone, in the foreground.
    Proxy(proxy_cmd::ProxyArgs),
    /// Manage host-wide firewall rules for a guest user (root).
    Firewall(firewall_cmd::FirewallArgs),
    /// Explain the decision for a destination and the rule that made it.
    ///
    /// Exit status: 0 allow, 1 deny, 3 ask, 2 usage or configuration error.
    Check(policy_cmd::CheckArgs),
    /// List the secrets the proxy injects, or test one's source (values are never shown).
    Secrets(intercept_cmd::SecretsArgs),
    /// Show or change the configuration (this directory's file, or --global).
    Config(policy_cmd::ConfigArgs),
    /// List the tiers and what each allows.
    Tiers(policy_cmd::TiersArgs),
    /// Run the proxy, approvals, monitor and store (launchers start it when needed).
    #[command(after_help = "It also keeps sandbox networks made ahead, so that launches do not \
        wait for them (a process of its own, `sandgate-netns`; `status` shows them). \
        Environment: SANDGATE_NETWORK_POOL=0 turns that off; SANDGATE_LOG=debug logs more.")]
    Daemon(control::DaemonArgs),
    /// Answer pending requests for a host (or question id) with allow, or add an allow grant.
    Allow(control::AnswerArgs),
    /// Answer pending requests for a host (or question id) with deny, or add a deny grant.
    Deny(control::AnswerArgs),
    /// List requests waiting for a person.
    Pending(control::JsonArg),
    /// List grants (answers that outlive the request).
    Rules(control::RulesArgs),
    /// Remove a grant.
    Revoke(control::RevokeArgs),
    /// Live view of pending approvals and blocked traffic; keys answer.
    ///
    /// One line per event: questions, answers, time-outs, blocked direct connections, sandboxes
    /// starting and ending (-v: every proxied request too). On a terminal a key answers the
    /// oldest open question, and the line it prints says which: o once, s this session, h one
    /// hour, a always (the project), d deny; q or Ctrl-C quits.
    Watch(control::WatchArgs),
    /// Show the daemon, live sandboxes and pending approvals (exit 3 when it is not running).
    Status(control::JsonArg),
    /// List sandboxes.
    Ls(control::LsArgs),
    /// The traffic log: every proxied connection (allowed and refused) and blocked packet.
    ///
    /// One line per connection or request: time (UTC), sandbox, decision, method, host:port,
    /// bytes up and down, duration, and the rule that decided; one per burst of blocked direct
    /// packets. --follow tails it live; --summary groups by host; --json prints JSON lines
    /// (instants in epoch milliseconds). Kept for [daemon] event_retention (30 days).
    Log(log_cmd::LogArgs),
    /// Run a command and propose the allowlist it needs (unknown hosts answered by a policy).
    ///
    /// By default every destination nothing allows is refused and recorded
    /// (--deny-and-record); --allow-all-but-private lets public hosts through while learning
    /// (the command can then send what it reads anywhere: use it on commands you trust).
    /// Prints the proposal as TOML; --write adds it to this directory's configuration file.
    /// --from-log [--since D] proposes from traffic already recorded, without a re-run.
    Learn(learn_cmd::LearnArgs),
    /// Stop the daemon.
    Stop(control::JsonArg),
    /// Relay standard input and output to HOST PORT through the sandbox's proxy (an ssh
    /// ProxyCommand: `ssh -o ProxyCommand='sandgate connect %h %p'`).
    ///
    /// Exit status: 0 when the connection ran, 1 when the proxy refused it (the rule is printed),
    /// 2 usage error.
    Connect(connect::ConnectArgs),
    /// Agent permission hooks: allow tool calls that stay inside a tier (Claude Code).
    Hook(hook_cmd::HookArgs),
}

fn main() -> ExitCode {
    sandgate_sandbox::timing_begin();
    let args = tier_cli::normalized(std::env::args_os().collect());
    // The tier commands are what an agent runs hundreds of times a session: parsed with their
    // own arguments alone (building every subcommand's definitions was ~0.6 million
    // instructions per launch, a fifth of the launcher's own work before the sandbox starts).
    // Anything that does not parse that way (help, version, a mistake) goes through the whole
    // command line below, so its messages and exit codes are unchanged.
    if let Some((tier, a)) = tier_cli::parse_tier(&args) {
        return ExitCode::from(tier_cli::finish(launch::run(tier, a)));
    }
    let cli = Cli::parse_from(args);
    if matches!(
        cli.command,
        Command::Status(_)
            | Command::Ls(_)
            | Command::Pending(_)
            | Command::Rules(_)
            | Command::Watch(_)
            | Command::Log(_)
            | Command::Tiers(_)
            | Command::Check(_)
            | Command::Explain(_)
    ) {
        // Listing commands end quietly when the reader goes away (`sandgate ls | head`), like
        // other command-line tools; launchers and the daemon keep SIGPIPE ignored.
        sandgate_daemon::restore_default_sigpipe();
    }
    let result = match cli.command {
        Command::Run(a) => launch::run("run", a),
        Command::Net(a) => launch::run("net", a),
        Command::Build(a) => launch::run("build", a),
        Command::Install(a) => launch::install(a),
        Command::Explain(a) => launch::explain(a),
        Command::Doctor(a) => doctor_cmd::run(a),
        Command::Cache(a) => cache_cmd::run(a),
        Command::Completions(a) => docs_cmd::completions(a),
        Command::Man(a) => docs_cmd::man(a),
        Command::Proxy(a) => proxy_cmd::run(a),
        Command::Firewall(a) => firewall_cmd::run(a),
        Command::Check(a) => policy_cmd::check(a),
        Command::Config(a) => policy_cmd::config(a),
        Command::Secrets(a) => intercept_cmd::secrets(a),
        Command::Tiers(a) => policy_cmd::tiers(a),
        Command::Daemon(a) => control::daemon(a),
        Command::Allow(a) => control::answer(a, true),
        Command::Deny(a) => control::answer(a, false),
        Command::Pending(a) => emit(control_report::pending(), a.json),
        Command::Rules(a) => emit(control_report::rules(a.all), a.json),
        Command::Revoke(a) => emit(control_report::revoke(&a.id), a.json),
        Command::Watch(a) => control::watch(a),
        Command::Status(a) => emit(control_report::status(), a.json),
        Command::Ls(a) => emit(control_report::ls(a.all), a.json),
        Command::Log(a) => log_cmd::log(a),
        Command::Learn(a) => learn_cmd::learn(a),
        Command::Stop(a) => emit(control_report::stop(), a.json),
        Command::Connect(a) => connect::run(a),
        Command::Hook(a) => hook_cmd::run(a),
        Command::Uninstall(a) => agent_cmd::uninstall(a),
    };
    ExitCode::from(tier_cli::finish(result))
}

/// Prints a command's report as text or JSON (and its notes on stderr); returns its exit status.
fn emit(report: anyhow::Result<impl Report>, json: bool) -> anyhow::Result<u8> {
    let r = report?;
    print!("{}", if json { r.json() } else { r.text() });
    eprint!("{}", r.notes(json));
    Ok(r.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use tier_cli::{error_text, parse_tier, tier_from_argv0};

    #[test]
    fn the_name_picks_the_tier() {
        for (argv0, tier) in [
            ("sandbox-run", Some("run")),
            ("sandbox-net", Some("net")),
            ("sandbox-build", Some("build")),
            ("/home/u/.local/bin/sandbox-net", Some("net")),
            ("./sandbox-build", Some("build")),
            ("sandgate", None),
            ("/usr/bin/sandgate", None),
            ("sandbox-runx", None),
            ("", None),
        ] {
            assert_eq!(tier_from_argv0(std::ffi::OsStr::new(argv0)), tier, "{argv0:?}");
        }
    }

    /// The tier fast path reads a command line exactly as the whole parser does, and leaves
    /// to it every line it does not take (help, version, mistakes, other commands).
    #[test]
    fn the_tier_fast_path_parses_as_the_whole_command_line_does() {
        let line = |s: &str| -> Vec<OsString> { s.split(' ').map(OsString::from).collect() };
        for taken in [
            "sandgate run",
            "sandgate run -- true",
            "sandgate net curl https://example.com",
            "sandgate build --allow-write /tmp/x --allow-write /tmp/y -- make -j2",
            "sandgate net --allow a.example --deny b.example --net none -q -- sh -c x",
            "sandgate build --require-full --report-blocked cargo --version",
            "sandgate run ls --help",
            "sandgate run -- --help",
            "sandgate run --allow-writ /x -- true",
            "sandgate net ls -V",
        ] {
            let args = line(taken);
            let (tier, fast) = parse_tier(&args).unwrap_or_else(|| panic!("not taken: {taken}"));
            let full = match Cli::try_parse_from(&args).unwrap().command {
                Command::Run(a) | Command::Net(a) | Command::Build(a) => a,
                other => panic!("{taken}: {other:?}"),
            };
            assert_eq!(tier, taken.split(' ').nth(1).unwrap());
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{taken}");
        }
        for left in [
            "sandgate run --help",
            "sandgate net -h",
            "sandgate build --version",
            "sandgate run -V",
            "sandgate net --net sideways -- true",
            "sandgate build --allow-write",
            "sandgate net --quiet=true -- true",
            "sandgate status",
            "sandgate explain --tier run",
            "sandgate",
        ] {
            assert!(parse_tier(&line(left)).is_none(), "{left}");
        }
    }

    #[test]
    fn every_cause_is_said_once() {
        #[cfg(target_os = "linux")]
        {
            // The user namespace refusal: its message, then the kernel's answer, once.
            let refused = anyhow::Error::new(sandgate_sandbox::SandboxError::UserNamespaceDenied {
                source: std::io::Error::from_raw_os_error(1),
            });
            let text = error_text(&refused);
            assert!(text.starts_with("cannot create a user namespace: "), "{text}");
            assert!(text.ends_with("(or an AppArmor profile allowing `userns`): Operation not permitted (os error 1)"), "{text}");
            assert_eq!(text.matches("Operation not permitted").count(), 1, "{text}");
            let setup = anyhow::Error::new(sandgate_sandbox::SandboxError::Setup {
                step: sandgate_sandbox::SetupStep::Bind("/h/p".into()),
                source: std::io::Error::from_raw_os_error(13),
            });
            assert_eq!(
                error_text(&setup),
                "sandbox setup failed at bind /h/p: Permission denied (os error 13)"
            );
        }
        let quoting = anyhow::Error::new(sandgate_firewall::FirewallError::Spawn {
            program: "nft".into(),
            source: std::io::Error::from_raw_os_error(2),
        });
        assert_eq!(
            error_text(&quoting),
            "cannot run `nft`: No such file or directory (os error 2)"
        );
        let layered = anyhow::anyhow!("disk full").context("cannot write the store");
        assert_eq!(error_text(&layered), "cannot write the store: disk full");
    }
}
