//! `sandgate proxy`: the allowlist proxy alone, in the foreground.
//!
//! Without the daemon there is nobody to ask, so destinations the policy does not allow are
//! denied with a body that says so. The server is [`sandgate_proxy::Standalone`]; this reads
//! the configuration, logs to stderr and waits for the signal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sandgate_config::{Config, ConfigPaths, Overrides};
use sandgate_proxy::{Standalone, TunnelMode};

/// How `sandgate proxy` runs.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Tier whose network policy applies.
    pub tier: String,
    /// Extra allow patterns.
    pub allow: Vec<String>,
    /// Extra deny patterns.
    pub deny: Vec<String>,
    /// A file to use instead of the global configuration file.
    pub config: Option<PathBuf>,
    /// How long to hold a request for an unknown destination.
    pub ask_timeout: Duration,
    /// The token required in Proxy-Authorization.
    pub token: Option<String>,
    /// How tunnels move bytes.
    pub tunnel: TunnelMode,
}

/// Runs the proxy until SIGINT/SIGTERM.
pub fn run(args: ProxyOptions) -> anyhow::Result<u8> {
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
    let upstream = crate::setup::upstream(&config)?;

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
            true => crate::setup::interceptor(),
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
