//! Terminal modes (termios), shared by the launcher's relay (raw mode while it relays a
//! sandbox's pty) and the CLI's key reader (`sandgate watch`: single keys, output unchanged).

use std::io;
use std::os::fd::AsFd;

/// Terminal settings, as [`settings`] reads them and [`apply`] sets them.
pub use nix::sys::termios::Termios;
use nix::sys::termios::{LocalFlags, SetArg};

/// How a terminal reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `cfmakeraw(3)`: every byte passes as it is, no echo, no signals from keys, no output
    /// processing (a relay to another terminal, which does all of that itself).
    Raw,
    /// Single key presses without echo, Ctrl-C and Ctrl-Z read as keys; output processing
    /// (`\n` to `\r\n`) kept.
    Keys,
    /// Line editing, echo and signal keys on again (the usual shell settings).
    Lines,
}

/// `settings` switched to `mode`; the other settings are kept.
pub fn with_mode(settings: &Termios, mode: Mode) -> Termios {
    let mut t = settings.clone();
    let keys = LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG;
    match mode {
        Mode::Raw => nix::sys::termios::cfmakeraw(&mut t),
        Mode::Keys => t.local_flags.remove(keys),
        Mode::Lines => t.local_flags.insert(keys),
    }
    t
}

/// The settings of the terminal on `fd`.
pub fn settings(fd: impl AsFd) -> io::Result<Termios> {
    nix::sys::termios::tcgetattr(fd).map_err(io::Error::from)
}

/// Applies `settings` to the terminal on `fd` at once (`TCSANOW`), retried on `EINTR`.
pub fn apply(fd: impl AsFd, settings: &Termios) -> io::Result<()> {
    loop {
        match nix::sys::termios::tcsetattr(fd.as_fd(), SetArg::TCSANOW, settings) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Puts the terminal on `fd` in `mode`; returns the settings it had, to [`apply`] again later.
pub fn enter(fd: impl AsFd, mode: Mode) -> io::Result<Termios> {
    let saved = settings(fd.as_fd())?;
    apply(fd, &with_mode(&saved, mode))?;
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use nix::sys::termios::{InputFlags, OutputFlags};

    use super::*;

    fn cooked() -> Termios {
        // A pty's default settings: line editing, echo, signals, output processing.
        let pty = nix::pty::openpty(None, None).expect("openpty");
        settings(&pty.slave).expect("tcgetattr")
    }

    #[test]
    fn modes_change_only_what_they_name() {
        let t = cooked();
        let keys = LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG;
        assert!(t.local_flags.contains(keys), "{:?}", t.local_flags);
        let k = with_mode(&t, Mode::Keys);
        assert!(!k.local_flags.intersects(keys));
        assert_eq!(k.output_flags, t.output_flags, "output processing kept");
        assert_eq!(k.input_flags, t.input_flags);
        let r = with_mode(&t, Mode::Raw);
        assert!(!r.local_flags.intersects(keys | LocalFlags::IEXTEN));
        assert!(!r.output_flags.contains(OutputFlags::OPOST));
        assert!(!r.input_flags.contains(InputFlags::ICRNL));
        assert_eq!(with_mode(&k, Mode::Lines).local_flags, t.local_flags);
    }

    #[test]
    fn enter_returns_what_was_there() {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let before = settings(&pty.slave).unwrap();
        let saved = enter(&pty.slave, Mode::Raw).unwrap();
        assert_eq!(saved.local_flags, before.local_flags);
        assert!(!settings(&pty.slave).unwrap().local_flags.contains(LocalFlags::ICANON));
        apply(&pty.slave, &saved).unwrap();
        assert_eq!(settings(&pty.slave).unwrap().local_flags, before.local_flags);
    }
}
