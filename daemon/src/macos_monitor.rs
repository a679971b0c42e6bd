//! macOS blocked-traffic sources of the daemon (Linux reads each sandbox's NFLOG socket instead):
//!
//! - Seatbelt's refusals of sandgate sandboxes, from `log stream` (every deny rule of the profile
//!   carries `sandgate:<id>`), parsed by [`sandgate_monitor::seatbelt_log`]; network refusals
//!   become `blocked` events of that sandbox;
//! - the guest-user firewall's refusals on `pflog0` (created by `sandgate firewall apply`; reading
//!   it needs root), attributed by the socket's uid to the scope `sandgate.u<UID>`.
//!
//! Each runs on a thread of its own for the daemon's lifetime; one that cannot start says why
//! once and ends (the rest of the daemon is unaffected).

use std::io::BufRead as _;
use std::sync::Arc;

use sandgate_store::EventKind;

use super::adapters::Shared;
use crate::protocol::Event;

/// Starts both readers.
pub fn start(s: Arc<Shared>) {
    let logs = s.clone();
    let _ = std::thread::Builder::new()
        .name("sandgate-seatbelt-log".into())
        .spawn(move || seatbelt_log(&logs));
    let _ = std::thread::Builder::new().name("sandgate-pflog".into()).spawn(move || pflog(&s));
}

fn seatbelt_log(s: &Shared) {
    use sandgate_monitor::seatbelt_log::{LOG_STREAM_ARGS, SeatbeltLog};
    let child = std::process::Command::new("/usr/bin/log")
        .args(LOG_STREAM_ARGS)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot run `log stream`: Seatbelt refusals are not reported");
            return;
        }
    };
    let Some(out) = child.stdout.take() else { return };
    let mut parser = SeatbeltLog::new();
    for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
        let Some(denial) = parser.feed(&line) else { continue };
        let Some((dst, port)) = denial.destination() else {
            tracing::debug!(?denial, "Seatbelt refusal");
            continue;
        };
        // Seatbelt does not say which transport; the operation names the direction.
        let ev = Event::Blocked {
            sandbox: denial.sandbox.clone(),
            protocol: "ip".to_owned(),
            dst,
            port,
            count: 1,
        };
        s.publish(EventKind::BlockedPacket, Some(&denial.sandbox), ev);
    }
    let _ = child.wait();
    tracing::warn!("`log stream` ended: Seatbelt refusals are no longer reported");
}

fn pflog(s: &Shared) {
    use sandgate_monitor::pflog::{capture::PflogCapture, scope_name};
    let mut capture = match PflogCapture::open(sandgate_firewall::pf::PFLOG_IF) {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(
                error = %e,
                "no pflog0 capture (needs root and `sandgate firewall apply`): the guest-user \
                 firewall's refusals are not reported"
            );
            return;
        }
    };
    loop {
        match capture.recv() {
            Ok(Some(p)) => {
                let scope = scope_name(&p);
                let ev = Event::Blocked {
                    sandbox: scope.clone(),
                    protocol: format!("{:?}", p.protocol).to_lowercase(),
                    dst: p.dst.to_string(),
                    port: p.dst_port,
                    count: 1,
                };
                s.publish(EventKind::BlockedPacket, Some(&scope), ev);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "pflog0 capture failed; guest-user refusals are no longer reported");
                return;
            }
        }
    }
}
