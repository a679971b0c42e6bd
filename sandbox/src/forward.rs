//! Which signals a launcher passes on to its command, and the exit code it reports: pure rules,
//! tested on every platform. Both launchers forward the signals of `FORWARDED`; `step` and
//! `exit_code` serve the macOS launcher, whose command shares its process group (on Linux the
//! command has a session of its own, init forwards every signal, and `sys::Ended::code` gives
//! the exit code from the wait status).

/// Signals passed on to the command: the ones people send to stop, reload or resize it.
pub(crate) const FORWARDED: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGWINCH,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// What a launcher waiting for its command does with a signal it took.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send it on to the command.
    Forward(libc::c_int),
    /// A child changed state: see whether the command ended.
    Reap,
    /// The command already had it: the terminal sends these to its whole foreground process
    /// group, and the command is in it (forwarding would deliver it twice).
    Skip(libc::c_int),
}

/// Decides the [`Step`] for `sig`. `shares_foreground`: the command runs in the launcher's process
/// group and that group is the foreground of the launcher's terminal (the macOS launcher; on Linux
/// the command has a session of its own, so this is always false there).
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub(crate) fn step(sig: libc::c_int, shares_foreground: bool) -> Step {
    let from_terminal = [libc::SIGINT, libc::SIGQUIT, libc::SIGWINCH].contains(&sig);
    if sig == libc::SIGCHLD {
        Step::Reap
    } else if shares_foreground && from_terminal {
        Step::Skip(sig)
    } else {
        Step::Forward(sig)
    }
}

/// The shell convention: the exit code (low 8 bits), or 128 + the number of the killing signal.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub(crate) fn exit_code(code: Option<i32>, signal: Option<i32>) -> u8 {
    match (code, signal) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        (None, None) => 255,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_forwarded_unless_the_terminal_already_sent_them() {
        for sig in FORWARDED {
            assert_eq!(step(sig, false), Step::Forward(sig), "{sig}");
        }
        for (sig, shared) in [
            (libc::SIGINT, Step::Skip(libc::SIGINT)),
            (libc::SIGQUIT, Step::Skip(libc::SIGQUIT)),
            (libc::SIGWINCH, Step::Skip(libc::SIGWINCH)),
            (libc::SIGTERM, Step::Forward(libc::SIGTERM)),
            (libc::SIGHUP, Step::Forward(libc::SIGHUP)),
            (libc::SIGUSR1, Step::Forward(libc::SIGUSR1)),
        ] {
            assert_eq!(step(sig, true), shared, "{sig}");
        }
        assert_eq!(step(libc::SIGCHLD, false), Step::Reap);
        assert_eq!(step(libc::SIGCHLD, true), Step::Reap);
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(Some(0), None), 0);
        assert_eq!(exit_code(Some(7), None), 7);
        assert_eq!(exit_code(Some(256 + 3), None), 3);
        assert_eq!(exit_code(None, Some(libc::SIGTERM)), 143);
        assert_eq!(exit_code(None, Some(libc::SIGKILL)), 137);
        assert_eq!(exit_code(None, None), 255);
    }
}
