//! `sandgate proxy`: the allowlist proxy alone, in the foreground.
//!
//! Without the daemon there is nobody to ask, so destinations the policy does not allow are
//! denied with a body that says so. The server is [`sandgate_proxy::Standalone`]; this reads
//! the options and the configuration, and waits for the signal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sandgate_config::{Config, ConfigPaths, Overrides};
use sandgate_proxy::{Standalone, TunnelMode};

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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let mut paths = ConfigPaths::discover(&cwd)?;
    if let Some(file) = &args.config {
        if !file.is_file() {
            bail!("--config {}: no such file", file.display());
        }
        paths.global = file.clone();
    }
    let config = Config::load(paths)?;
    let overrides =
        Overrides { allow: args.allow.clone(), deny: args.deny.clone(), ..Overrides::default() };
    let policy = config.policy(&args.tier, &overrides)?;
    let upstream = sandgate_daemon::setup::upstream(&config)?;

    match sandgate_proxy::raise_nofile_limit() {
        Ok(n) => tracing::debug!(nofile = n, "open-file limit raised"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let interceptor = match policy.net.intercept().in_use() {
            true => sandgate_daemon::setup::interceptor(),
            false => None,
        };
        tracing::info!(
            listen = %args.listen,
            tier = %args.tier,
            allowed = policy.net.allow_rules().len(),
            denied = policy.net.deny_rules().len(),
            "sandgate proxy listening"
        );
        let standalone = Standalone {
            policy: policy.net,
            ask_timeout: args.ask_timeout,
            tunnel_mode: args.tunnel,
            upstream,
            interceptor,
            token: args.token,
            grace: Duration::from_secs(5),
        };
        let mut signalled = Ok(());
        let left = standalone.serve(listener, async { signalled = shutdown_signal().await }).await;
        signalled?;
        if left > 0 {
            tracing::warn!(connections = left, "closing connections still open");
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
