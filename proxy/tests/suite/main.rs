//! The proxy's integration tests, as ONE test binary: a module per area (each was once a binary
//! of its own) and the shared harness in `common`.
//!
//! Why one binary: each test file is linked as its own executable against tokio, hyper and
//! rustls, and on a 2-core machine linking eleven of them dominated the build of the tests. The
//! modules share one process, so a test must not change process-wide state (the environment,
//! the working directory); names of host-global things a test makes (addresses, ports) must be
//! unique within the process, not just per pid.
//!
//! A new area is a new module here (`mod name;` below and `name.rs` beside this file), not a new
//! file in `proxy/tests/`.

mod common;

mod attribution_e2e;
mod dns_e2e;
mod dns_fuzz;
mod intercept_e2e;
mod proxy_e2e;
mod proxy_load;
mod redteam_ca;
mod redteam_dns;
mod redteam_forward;
mod redteam_guard;
mod redteam_intercept;
mod redteam_relay;
mod redteam_sni;
mod redteam_tunnel_http;
mod relay_e2e;
mod sni_bypass;
mod socks_e2e;
mod socks_fuzz;
mod upstream_e2e;
