//! Interactive use: the sandbox gets a pseudo-terminal of its own.
//!
//! The command never receives a descriptor of the caller's terminal. Without one (none of the
//! descriptors 0, 1, 2 is a terminal) it runs in a new session with no controlling terminal.
//! When the launcher's stdin and stdout are both terminals (interactive mode), the sandbox's init
//! allocates a pty in the sandbox's private devpts instance, the command becomes the leader of a
//! new session with the pty's slave as its controlling terminal, and the launcher relays bytes
//! between the caller's terminal (in raw mode, restored on exit and on suspension) and the
//! master, copying the window size on every `SIGWINCH`.
//!
//! When only some of them are terminals (`sandbox-run cmd | tee`, `sandbox-run cmd < file`,
//! `sandbox-run cmd > log` with stderr on the terminal), the terminal descriptors among stdout and
//! stderr go to a pty too, whose output the launcher copies to the caller's terminal, and a
//! terminal stdin is replaced by `/dev/null`. The caller's terminal is never read nor put in raw
//! mode then: a pager at the end of the pipeline (`sandbox-run git log | less`) keeps every key
//! and its own terminal settings. Handing the command the caller's terminal instead (as before)
//! let it set the terminal's line discipline (`TIOCSETD` N_NULL: input dead), exclusive mode
//! (`TIOCEXCL`), termios and `O_NONBLOCK` on the shared open file, all of which outlived the
//! sandbox; seccomp could refuse the ioctls but not `fcntl(F_SETFL)` on a duplicated descriptor.
//!
//! Why a pty (design "a") rather than handing the caller's terminal to the command in a
//! foreground process group of its own (design "b"): with (b) the command holds the caller's
//! real terminal, so its safety rests on seccomp catching every dangerous terminal ioctl
//! (TIOCSTI, TIOCLINUX, and also TIOCSETD, TIOCCONS, termios changes that outlive the command,
//! foreground-group games in the caller's session) and on the kernel's TIOCSTI policy. With (a)
//! the command never receives a descriptor of the caller's terminal: TIOCSTI (still refused by
//! seccomp) could at most push input into the sandbox's own pty, job control is entirely the
//! sandbox's (Ctrl-C, Ctrl-Z and `jobs` act on the pty's foreground group, with the launcher's
//! terminal in raw mode passing the bytes through), and the caller's terminal settings are the
//! launcher's to restore. This is what ssh, docker `-t` and podman `-t` do.
//!
//! Why input is relayed only when stdin *and* stdout are terminals: with stdout redirected
//! (`sandbox-run git log | less`) the relay would read the terminal concurrently with the pager
//! and steal its keys. Standard error is put on the pty only when it is a terminal too.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::sys;

/// The caller's terminal, captured before the sandbox starts.
#[derive(Clone, Copy)]
pub struct Outer {
    /// Its settings (the sandbox's pty starts with the same, and they are restored at the end).
    pub termios: Option<libc::termios>,
    /// Its window size.
    pub winsize: Option<libc::winsize>,
    /// Which of the descriptors 0, 1, 2 go to the pty.
    pub on_tty: [bool; 3],
    /// Stdin and stdout are the terminal: keys are relayed in raw mode, with job control.
    pub interactive: bool,
    /// The caller's descriptor that the pty's output goes to and whose size it takes.
    pub fd: RawFd,
}

/// What the command gets instead of the caller's terminal.
#[derive(Debug, Clone, Copy, Default)]
pub struct Detected {
    /// A pty of its own, for the descriptors that are terminals.
    pub tty: Option<Outer>,
    /// Stdin is a terminal that is not relayed: the command reads `/dev/null` instead.
    pub null_stdin: bool,
}

/// Looks at the launcher's descriptors 0, 1, 2 (see the module docs).
pub fn detect() -> Detected {
    let is = [sys::isatty(0), sys::isatty(1), sys::isatty(2)];
    let interactive = is[0] && is[1];
    let on_tty = if interactive { is } else { [false, is[1], is[2]] };
    let null_stdin = is[0] && !interactive;
    let Some(fd) = (0..3).find(|&i| on_tty[i]) else {
        return Detected { tty: None, null_stdin };
    };
    let fd = if interactive { STDOUT } else { fd as RawFd };
    let tty = Outer {
        termios: sys::tcgetattr(fd).ok(),
        winsize: sys::get_winsize(fd).ok(),
        on_tty,
        interactive,
        fd,
    };
    Detected { tty: Some(tty), null_stdin }
}

impl fmt::Debug for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outer")
            .field("winsize", &self.winsize.map(|w| (w.ws_row, w.ws_col)))
            .field("on_tty", &self.on_tty)
            .field("interactive", &self.interactive)
            .field("fd", &self.fd)
            .finish_non_exhaustive()
    }
}

/// The inside half, run by the sandbox's init: a new pty with the caller's settings and size.
/// Returns `(master, slave)`.
pub fn open_inside(outer: &Outer) -> io::Result<(OwnedFd, OwnedFd)> {
    let (master, slave) = sys::open_pty()?;
    if let Some(t) = &outer.termios {
        let mut t = *t;
        if !outer.interactive {
            // The caller's terminal, not in raw mode, does the output processing (`\n` to
            // `\r\n`) itself: doing it here too would double it.
            t.c_oflag &= !libc::OPOST;
        }
        sys::tcsetattr(slave.as_raw_fd(), &t)?;
    }
    if let Some(w) = &outer.winsize {
        sys::set_winsize(slave.as_raw_fd(), w)?;
    }
    Ok((master, slave))
}

const STDIN: RawFd = 0;
const STDOUT: RawFd = 1;

/// The launcher's half: copies between the caller's terminal and the pty master.
#[derive(Debug)]
pub struct Relay {
    master: OwnedFd,
    outer: Outer,
    raw: bool,
    /// Typed bytes not yet accepted by the master.
    pending: Vec<u8>,
    stdin_open: bool,
    master_open: bool,
    /// Looks at the output for "Read-only file system" (see [`crate::readonly`]).
    scanner: Option<crate::readonly::SharedScanner>,
    /// The pty carries the command's stderr: the launcher's notices go through this relay
    /// ([`crate::notice`]).
    gated: bool,
}

impl Relay {
    /// A relay over `master` for the terminal described by `outer`.
    pub fn new(master: OwnedFd, outer: Outer) -> Relay {
        let _ = sys::set_nonblocking(master.as_raw_fd());
        let gated = outer.on_tty[2];
        if gated {
            let fd = outer.fd;
            crate::notice::attach(Box::new(move |b| {
                write_all(fd, b);
                true
            }));
        }
        Relay {
            master,
            outer,
            raw: false,
            pending: Vec::new(),
            // Outside interactive mode the caller's terminal is never read.
            stdin_open: outer.interactive,
            master_open: true,
            scanner: None,
            gated,
        }
    }

    /// Lets `scanner` see the output, after it is written to the caller's terminal.
    pub fn scan_with(&mut self, scanner: Option<crate::readonly::SharedScanner>) {
        self.scanner = scanner;
    }

    /// Puts the caller's terminal in raw mode: every key goes to the sandbox's pty, whose line
    /// discipline turns Ctrl-C / Ctrl-Z into signals for the sandbox's foreground job. From a
    /// background process group this stops the launcher (SIGTTOU) until it is brought back.
    pub fn enter_raw(&mut self) {
        let Some(t) = self.outer.termios.filter(|_| self.outer.interactive) else { return };
        self.take_canonical_input();
        if sys::tcsetattr(STDIN, &sys::raw_termios(&t)).is_ok() {
            self.raw = true;
            if self.gated {
                crate::notice::set_crlf(true);
            }
        }
    }

    /// Reads what the caller's terminal has ready while it is still in canonical mode: lines
    /// typed ahead are kept for the command, and an end of file already sent is taken as the end
    /// of input. That end of file is why: a harness whose input is closed (`script < /dev/null`,
    /// an agent's pty) sends Ctrl-D at once, the line discipline keeps it in its buffer as a NUL
    /// placeholder, and once the terminal is in raw mode the placeholder reads as a NUL byte,
    /// which went to the command, and its echo (`^@`) to the start of the output. (A Ctrl-D sent
    /// between this read and the switch still arrives as a NUL: a window of microseconds instead
    /// of the whole start-up.) The end of file goes on to the command as one.
    fn take_canonical_input(&mut self) {
        let Some(t) = self.outer.termios.filter(|t| t.c_lflag & libc::ICANON != 0) else {
            return;
        };
        let mut buf = [0u8; 4096];
        while self.stdin_open {
            let mut p = [libc::pollfd { fd: STDIN, events: libc::POLLIN, revents: 0 }];
            if !matches!(sys::poll(&mut p, 0), Ok(n) if n > 0) {
                return;
            }
            // Canonical mode: one whole line, or 0 for the end of file, which the command gets
            // as its own pty's end-of-file key (its pty has the caller's settings).
            match sys::read(STDIN, &mut buf) {
                Ok(0) => {
                    self.pending.push(t.c_cc[libc::VEOF]);
                    self.stdin_open = false;
                }
                Err(_) => self.stdin_open = false,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Gives the caller's terminal its settings back.
    pub fn restore(&mut self) {
        if self.raw
            && let Some(t) = &self.outer.termios
        {
            let _ = sys::tcsetattr(STDIN, t);
            self.raw = false;
            if self.gated {
                crate::notice::set_crlf(false);
            }
        }
    }

    /// Copies the caller's window size to the pty (the kernel then sends SIGWINCH inside).
    pub fn sync_winsize(&self) {
        if let Ok(w) = sys::get_winsize(self.outer.fd) {
            let _ = sys::set_winsize(self.master.as_raw_fd(), &w);
        }
    }

    /// The two descriptors to poll: the caller's terminal (when there is room to take input)
    /// and the master. A negative fd is ignored by `poll`.
    pub fn poll_set(&self) -> [libc::pollfd; 2] {
        let stdin = if self.stdin_open && self.pending.is_empty() { STDIN } else { -1 };
        let master = if self.master_open { self.master.as_raw_fd() } else { -1 };
        let mut events = libc::POLLIN;
        if !self.pending.is_empty() {
            events |= libc::POLLOUT;
        }
        [
            libc::pollfd { fd: stdin, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: master, events, revents: 0 },
        ]
    }

    /// Moves what `poll` said is ready.
    pub fn on_ready(&mut self, ready: &[libc::pollfd; 2]) {
        let mut buf = [0u8; 16 * 1024];
        if ready[0].fd >= 0 && ready[0].revents != 0 {
            match sys::read(STDIN, &mut buf) {
                Ok(0) | Err(_) => self.stdin_open = false,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
            }
        }
        if ready[1].fd >= 0 && ready[1].revents != 0 {
            if ready[1].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                self.copy_out(&mut buf, 4);
            }
            if !self.pending.is_empty() {
                self.push_input();
            }
        }
    }

    fn push_input(&mut self) {
        match sys::write(self.master.as_raw_fd(), &self.pending) {
            Ok(n) => {
                self.pending.drain(..n);
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(_) => {
                self.pending.clear();
                self.master_open = false;
            }
        }
    }

    /// Copies the master's output to the caller's terminal: at most `rounds` reads, so that a
    /// command printing without pause cannot starve the keyboard and the signals.
    fn copy_out(&mut self, buf: &mut [u8], rounds: usize) {
        for _ in 0..rounds {
            match sys::read(self.master.as_raw_fd(), buf) {
                Ok(0) => {
                    self.master_open = false;
                    return;
                }
                Ok(n) => {
                    if self.gated {
                        crate::notice::relay(&buf[..n]);
                    } else {
                        write_all(self.outer.fd, &buf[..n]);
                    }
                    if let Some(s) = &self.scanner {
                        s.lock().unwrap_or_else(|e| e.into_inner()).feed(&buf[..n]);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return,
                // EIO: every slave descriptor is closed.
                Err(_) => {
                    self.master_open = false;
                    return;
                }
            }
        }
    }

    /// After the sandbox ended: copies what it wrote last, then restores the terminal.
    pub fn finish(&mut self) {
        if self.master_open {
            // Finite now: every writer is gone.
            let mut buf = [0u8; 16 * 1024];
            self.copy_out(&mut buf, usize::MAX);
        }
        if self.gated {
            crate::notice::end();
        }
        if let Some(s) = &self.scanner {
            s.lock().unwrap_or_else(|e| e.into_inner()).finish();
        }
        self.restore();
    }
}

fn write_all(fd: RawFd, mut data: &[u8]) {
    while !data.is_empty() {
        match sys::write(fd, data) {
            Ok(0) => return,
            Ok(n) => data = &data[n..],
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                let mut p = [libc::pollfd { fd, events: libc::POLLOUT, revents: 0 }];
                let _ = sys::poll(&mut p, 1000);
            }
            Err(_) => return,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.restore();
    }
}
