//! The end-to-end tests of the `sandgate` binary, as ONE test binary: a module per area (each was
//! once a binary of its own) and the fixtures they share in `support`.
//!
//! Why one binary: every test file of `tests/tests/` is linked as its own executable against the
//! whole dependency tree, and on a 2-core machine linking ~28 of them dominated the build of the
//! tests. The modules share one process, so a test must not change process-wide state (the
//! environment, the working directory): it passes variables and a directory to the child
//! processes it starts instead. Names of host-global things a test creates (users, network
//! namespaces, nft tables, process markers) include the pid AND something unique within the
//! process.
//!
//! A new area is a new module here (`mod name;` below and `name.rs` beside this file), not a new
//! file in `tests/tests/`.

mod support;

mod address_guard;
mod answers;
mod attribution;
mod check;
mod ci_recipe;
mod connect_cli;
mod daemon;
mod docs;
mod doctor;
mod firewall_cli;
mod grants;
mod hook;
mod intercept;
mod json_ids;
mod launcher_cli;
mod managed;
mod module_graph;
mod netlink_setup;
mod netpool;
mod proxy_cli;
mod quick_start;
mod readonly_hint;
mod redteam_index;
mod redteam_net;
mod redteam_netpool;
mod redteam_open;
mod redteam_proxy;
mod redteam_round3;
mod redteam_telemetry;
mod redteam_transparent;
mod redteam_walls;
mod sandbox_caches;
mod sandbox_dns;
mod sandbox_escape;
mod sandbox_git;
mod sandbox_nested;
mod sandbox_proxy;
mod sandbox_secrets;
mod sandbox_socks;
mod sandbox_tools;
mod sandbox_top_level;
mod sandbox_tty;
mod sandbox_walls;
mod small_launcher;
mod telegram;
mod telemetry;
mod traffic_log;
mod transparent;
mod type_names;
