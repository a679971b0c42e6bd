//! `sandgate connect HOST PORT`: its flags and its refusal line; the relay is
//! [`sandgate_daemon::connect`].

use sandgate_daemon::connect::{self, Relayed};

/// Options of `sandgate connect`.
#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// Host name or IP address to reach (ssh's `%h`).
    host: String,
    /// Port (ssh's `%p`).
    port: u16,
    /// Proxy URL (`http://[user:token@]host:port` or `socks5h://...`); default: the first of
    /// HTTPS_PROXY, https_proxy, HTTP_PROXY, http_proxy, ALL_PROXY, all_proxy.
    #[arg(long, value_name = "URL")]
    proxy: Option<String>,
}

/// Runs `sandgate connect`: 0 when the connection ran, 1 when the proxy refused it.
pub fn run(args: ConnectArgs) -> anyhow::Result<u8> {
    match connect::run(&args.host, args.port, args.proxy)? {
        Relayed::Done => Ok(0),
        Relayed::Refused { target, why } => {
            eprintln!("sandgate connect: {target} refused by the proxy: {why}");
            Ok(1)
        }
    }
}
