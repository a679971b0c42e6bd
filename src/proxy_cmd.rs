//! `sandgate proxy`: the allowlist proxy alone, in the foreground.
//!
//! Its flags; the server is [`sandgate_daemon::standalone`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sandgate_daemon::standalone::ProxyOptions;
use sandgate_proxy::TunnelMode;

/// Options of `sandgate proxy`.
#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3128")]
    listen: SocketAddr,
    /// Tier whose network policy applies.
    #[arg(long, default_value = "net")]
    tier: String,
    /// Also allow this domain pattern (repeatable).
    #[arg(long, value_name = "PATTERN")]
    allow: Vec<String>,
    /// Also deny this domain pattern (repeatable).
    #[arg(long, value_name = "PATTERN")]
    deny: Vec<String>,
    /// Use this file instead of the global configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// How long to hold a request for an unknown destination (e.g. `60s`, `2m`).
    #[arg(long, default_value = "60s", value_parser = sandgate_config::parse_duration)]
    ask_timeout: Duration,
    /// Require this token in Proxy-Authorization (Basic password or Bearer).
    #[arg(long, env = "SANDGATE_PROXY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// How tunnels move bytes: `splice` (zero-copy) or `copy`.
    #[arg(long, default_value = "splice", value_parser = str::parse::<TunnelMode>)]
    tunnel: TunnelMode,
}

/// Runs the proxy until SIGINT/SIGTERM.
pub fn run(args: ProxyArgs) -> anyhow::Result<u8> {
    sandgate_daemon::standalone::run(ProxyOptions {
        listen: args.listen,
        tier: args.tier,
        allow: args.allow,
        deny: args.deny,
        config: args.config,
        ask_timeout: args.ask_timeout,
        token: args.token,
        tunnel: args.tunnel,
    })
}
