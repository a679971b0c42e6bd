//! `sandgate proxy`: the allowlist proxy alone, on one listener, for one policy. Without the
//! daemon there is nobody to ask, so destinations the policy does not allow are denied (after
//! the ask timeout) with a body that says so. Also the pieces of proxy setup the daemon and the
//! launcher share: the upstream proxy from its settings, and the tunnel mode by name.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sandgate_config::{NetworkPolicy, UpstreamSettings};
use tokio::net::TcpListener;

use crate::{
    Interceptor, Proxy, ProxyConfig, ProxyToken, SandboxContext, SandboxId, TunnelMode, Upstream,
};

impl Upstream {
    /// The upstream proxy of `[proxy] upstream`, its credentials read now (from the environment
    /// or the file the settings name); the error says which.
    pub fn from_settings(s: UpstreamSettings) -> Result<Upstream, String> {
        let credentials = s.credentials.as_ref().map(|c| c.read()).transpose()?;
        Ok(Upstream { addr: s.addr, credentials, bypass: s.bypass })
    }
}

impl FromStr for TunnelMode {
    type Err = String;

    /// `splice` or `copy`.
    fn from_str(s: &str) -> Result<TunnelMode, String> {
        match s {
            "splice" => Ok(TunnelMode::Splice),
            "copy" => Ok(TunnelMode::Copy),
            _ => Err(format!("{s:?}: expected `splice` or `copy`")),
        }
    }
}

/// How the standalone proxy runs.
#[derive(Debug)]
pub struct Standalone {
    /// Its network policy.
    pub policy: NetworkPolicy,
    /// How long a request for an unknown destination is held before it is denied.
    pub ask_timeout: Duration,
    /// How tunnels move bytes.
    pub tunnel_mode: TunnelMode,
    /// Leave through this proxy.
    pub upstream: Option<Arc<Upstream>>,
    /// Terminates TLS for hosts with secrets or HTTP rules (without one those hosts are refused).
    pub interceptor: Option<Arc<Interceptor>>,
    /// Clients must present it in `Proxy-Authorization`.
    pub token: Option<String>,
    /// How long open connections may finish after `shutdown` (then they are closed).
    pub grace: Duration,
}

impl Standalone {
    /// Serves `listener` until `shutdown` completes, then lets open connections finish for
    /// [`Standalone::grace`]; returns how many were still open and closed.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) -> usize {
        let proxy = Proxy::builder().config(ProxyConfig {
            ask_timeout: self.ask_timeout,
            tunnel_mode: self.tunnel_mode,
            upstream: self.upstream,
            ..ProxyConfig::default()
        });
        let proxy = match self.interceptor {
            Some(i) if self.policy.intercept().in_use() => proxy.interceptor(i),
            _ => proxy,
        }
        .build();
        let ctx = SandboxContext {
            id: SandboxId::new("proxy"),
            policy: Arc::new(self.policy),
            token: self.token.map(ProxyToken::new),
        };
        let serving = tokio::spawn({
            let proxy = proxy.clone();
            async move { proxy.serve(listener, ctx).await }
        });
        shutdown.await;
        tracing::info!("shutting down");
        proxy.shutdown();
        let _ = serving.await;
        proxy.drain(self.grace).await
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use sandgate_config::{Config, ConfigPaths, CredentialSource, Overrides};

    use super::*;

    #[test]
    fn tunnel_modes_by_name() {
        assert_eq!("splice".parse::<TunnelMode>(), Ok(TunnelMode::Splice));
        assert_eq!("copy".parse::<TunnelMode>(), Ok(TunnelMode::Copy));
        assert_eq!(
            "Copy".parse::<TunnelMode>().unwrap_err(),
            "\"Copy\": expected `splice` or `copy`"
        );
    }

    #[test]
    fn upstream_credentials_are_read_when_it_is_set_up() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("creds");
        std::fs::write(&file, "u:p\n").unwrap();
        let settings = |credentials| UpstreamSettings {
            addr: "proxy.corp:3128".into(),
            bypass: Vec::new(),
            credentials,
        };
        let u = Upstream::from_settings(settings(Some(CredentialSource::File(file)))).unwrap();
        assert_eq!(u.credentials.as_deref(), Some("u:p"));
        assert_eq!(Upstream::from_settings(settings(None)).unwrap().credentials, None);
        let e = Upstream::from_settings(settings(Some(CredentialSource::Env(
            "SANDGATE_TEST_SURELY_UNSET".into(),
        ))))
        .unwrap_err();
        assert!(e.contains("$SANDGATE_TEST_SURELY_UNSET is not set"), "{e}");
    }

    /// A request for a destination nobody allows is denied (there is no one to ask), and
    /// shutdown ends the server.
    #[test]
    fn the_standalone_proxy_denies_what_its_policy_does_not_allow() {
        let dir = tempfile::tempdir().unwrap();
        let paths = ConfigPaths {
            dir: dir.path().to_owned(),
            global: dir.path().join("config.toml"),
            project: dir.path().join("p.toml"),
            project_dir: dir.path().to_owned(),
            project_root: dir.path().to_owned(),
            home: None,
        };
        let policy = Config::load(paths).unwrap().policy("net", &Overrides::default()).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let standalone = Standalone {
            policy: policy.net,
            ask_timeout: Duration::from_millis(1),
            tunnel_mode: TunnelMode::Copy,
            upstream: None,
            interceptor: None,
            token: None,
            grace: Duration::from_secs(1),
        };
        let server = rt.spawn(standalone.serve(listener, async {
            let _ = stopped.await;
        }));
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"CONNECT nobody.test:443 HTTP/1.1\r\nHost: nobody.test:443\r\n\r\n").unwrap();
        let mut head = [0u8; 12];
        c.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 403");
        drop(c);
        stop.send(()).unwrap();
        assert_eq!(rt.block_on(server).unwrap(), 0);
    }
}
