//! macOS blocked-traffic sources of the daemon (Linux reads each sandbox's NFLOG socket instead):
//!
//! - Seatbelt's refusals of sandgate sandboxes, from `log stream` (every deny rule of the profile
//!   carries `sandgate:<id>`), parsed by [`sandgate_monitor::seatbelt_log`]; network refusals
//!   become `blocked` events of that sandbox;
//! - the guest-user firewall's refusals on `pflog0` (created by `sandgate firewall apply`; reading
//!   it needs root), attributed by the socket's uid to the scope `sandgate.u<UID>`;
//! - as root, each guest-user fence checked again every
//!   [`sandgate_firewall::pf::fence::RECHECK_INTERVAL`] (`pfctl -d`, `-F all`, a reloaded
//!   pf.conf, a reboot remove it silently): the answers go to `status`, launches and `doctor`,
//!   and a fence that opens is logged.
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
    let fences = s.clone();
    let _ = std::thread::Builder::new().name("sandgate-pflog".into()).spawn(move || pflog(&s));
    if nix::unistd::geteuid().is_root() {
        let _ = std::thread::Builder::new()
            .name("sandgate-fence-check".into())
            .spawn(move || fence_check(&fences));
    }
}

/// Checks every installed fence, now and every `RECHECK_INTERVAL` (a timer, not a wait for an
/// event: pf announces none of the changes that open a fence).
fn fence_check(s: &Shared) {
    use crate::fences::FenceState;
    let fw = sandgate_firewall::system_backend();
    loop {
        let states: Vec<FenceState> = match fw.list() {
            Ok(installed) => installed
                .iter()
                .map(|i| FenceState {
                    anchor: i.name.clone(),
                    uid: i.scope.uid,
                    findings: fw
                        .findings(&i.scope)
                        .unwrap_or_else(|e| vec![format!("cannot be checked: {e}")]),
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the guest-user fences");
                Vec::new()
            }
        };
        for line in crate::fences::warnings(&s.fences.set(states)) {
            tracing::warn!("{line}");
        }
        std::thread::sleep(sandgate_firewall::pf::fence::RECHECK_INTERVAL);
    }
}

fn seatbelt_log(s: &Shared) {
    use sandgate_monitor::seatbelt_log::{LOG_STREAM_ARGS, SeatbeltLog};
    let child = std::process::Command::new("/usr/bin/log")
        .args(LOG_STREAM_ARGS)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let why = format!("Seatbelt refusals are not reported: cannot run `log stream`: {e}");
            tracing::warn!("{why}");
            *s.monitor_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            return;
        }
    };
    // Read on a thread of its own, so a full stderr pipe never stalls the stream.
    let stderr = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut e, &mut text);
            text
        })
    });
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
    let code = child.wait().ok().and_then(|st| st.code());
    let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let why = sandgate_monitor::seatbelt_log::stream_ended(&said, code);
    tracing::warn!("{why}");
    *s.monitor_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
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
