//! The launcher's notices on the command's stderr (a request held for approval, a refusal, a
//! hint after a failure), written only at line boundaries.
//!
//! # Why and how
//!
//! The command and the launcher write to one stream, and an agent reads it as the command's
//! output. A notice written while the command is in the middle of a line lands inside that line
//! (`csandgate: … denied …url: (56)`, curl's `curl: (56) …` cut after its first letter), and
//! neither the line nor the notice reads right any more. The launcher relays the command's stderr
//! itself (a pipe in between, or the sandbox's pty on a terminal: `linux::stderr_tap`,
//! `linux::terminal`), so it knows whether the last byte the command wrote was a newline:
//!
//! - at a line start, a notice is written at once;
//! - in the middle of a line, it is held until the command's next newline and written right
//!   after it (the rest of that chunk follows), or, when the command writes nothing for
//!   [`IDLE`] (a prompt waiting for input, a client waiting for the proxy, a progress line
//!   redrawn with `\r`), written after a newline that ends the command's line;
//! - held notices are written when the command ends, and notices after that (hints) start on a
//!   line of their own.
//!
//! On a terminal in raw mode (an interactive sandbox) lines end with `\r\n`. Without a relay
//! (macOS, `--quiet`, stderr closed or `/dev/null`) nothing can be known and notices go straight
//! to stderr, as lines.
//!
//! [`LineGate`] is the pure core (what to write, in which order); the rest is one process-wide
//! place the relays and the notice writers share, holding its lock while writing so that a
//! notice never interleaves with a chunk of the command's output.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long the command must have written nothing before a held notice ends its line. Long
/// enough that a client printing one line in several writes is not cut (curl writes its error
/// line in two), short enough that an agent sees "waiting for approval" while it waits.
pub const IDLE: Duration = Duration::from_millis(250);

/// Where the notices stand against the command's output (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineGate {
    /// The last byte written (the command's or a notice's) ended a line, or nothing was written.
    at_line_start: bool,
    /// Notices waiting for a line boundary, each without its line end.
    held: Vec<String>,
    /// When the command last wrote.
    last_output: Option<Instant>,
    /// Lines end with `\r\n` (a terminal in raw mode).
    crlf: bool,
    /// The command's stream ended: notices are written at once.
    ended: bool,
}

/// What to write for a chunk of the command's output, in this order: `before`, `notices`,
/// `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split<'a> {
    /// The command's bytes up to and including the first newline (all of them when no notice
    /// waits or no newline came).
    pub before: &'a [u8],
    /// Held notices, now at a line start.
    pub notices: Vec<u8>,
    /// The rest of the command's bytes.
    pub after: &'a [u8],
}

impl Default for LineGate {
    fn default() -> Self {
        LineGate::new()
    }
}

impl LineGate {
    /// At a line start, nothing held.
    pub const fn new() -> LineGate {
        LineGate {
            at_line_start: true,
            held: Vec::new(),
            last_output: None,
            crlf: false,
            ended: false,
        }
    }

    /// Lines end with `\r\n` from now on (`true`: a terminal in raw mode) or `\n`.
    pub fn set_crlf(&mut self, on: bool) {
        self.crlf = on;
    }

    fn eol(&self) -> &'static [u8] {
        if self.crlf { b"\r\n" } else { b"\n" }
    }

    /// The held notices as lines (emptied).
    fn take_held(&mut self) -> Vec<u8> {
        let eol = self.eol();
        let mut out = Vec::new();
        for n in self.held.drain(..) {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(eol);
        }
        out
    }

    /// The command wrote `bytes` at `now`: where held notices go in them.
    pub fn output<'a>(&mut self, bytes: &'a [u8], now: Instant) -> Split<'a> {
        if bytes.is_empty() {
            return Split { before: bytes, notices: Vec::new(), after: &[] };
        }
        self.last_output = Some(now);
        let cut = if self.held.is_empty() {
            None
        } else {
            bytes.iter().position(|&b| b == b'\n').map(|i| i + 1)
        };
        match cut {
            Some(i) => {
                let (before, after) = bytes.split_at(i);
                let notices = self.take_held();
                self.at_line_start = after.last().is_none_or(|&b| b == b'\n');
                Split { before, notices, after }
            }
            None => {
                self.at_line_start = bytes.last() == Some(&b'\n');
                Split { before: bytes, notices: Vec::new(), after: &[] }
            }
        }
    }

    /// A notice (one line, no line end): the bytes to write now, or `None` when it is held for
    /// a line boundary.
    pub fn notice(&mut self, line: &str) -> Option<Vec<u8>> {
        if self.ended && !self.at_line_start {
            // Nothing more comes from the command: end its last line first.
            self.at_line_start = true;
            let mut out = self.eol().to_vec();
            self.held.push(line.to_owned());
            out.extend(self.take_held());
            return Some(out);
        }
        self.held.push(line.to_owned());
        if self.at_line_start {
            return Some(self.take_held());
        }
        None
    }

    /// When held notices are due ([`IDLE`] after the command's last write), if any are held.
    pub fn due(&self) -> Option<Instant> {
        if self.held.is_empty() {
            return None;
        }
        Some(self.last_output.map_or_else(Instant::now, |t| t + IDLE))
    }

    /// The held notices, after a line end, when they are due at `now`.
    pub fn flush_idle(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.due().is_none_or(|d| now < d) {
            return None;
        }
        self.flush()
    }

    /// The command's stream ended: the held notices (after a line end when the command's last
    /// line has none); later notices are written at once.
    pub fn end(&mut self) -> Option<Vec<u8>> {
        self.ended = true;
        self.flush()
    }

    fn flush(&mut self) -> Option<Vec<u8>> {
        if self.held.is_empty() {
            return None;
        }
        let mut out = if self.at_line_start { Vec::new() } else { self.eol().to_vec() };
        out.extend(self.take_held());
        self.at_line_start = true;
        Some(out)
    }
}

/// Writes bytes where the command's stderr goes; `false` once that cannot take more.
pub type NoticeSink = Box<dyn FnMut(&[u8]) -> bool + Send>;

/// The process's gate and the stream it guards.
struct Shared {
    gate: LineGate,
    /// The relay's writer; `None`: no relay, notices go to stderr as lines.
    sink: Option<NoticeSink>,
    /// The thread writing notices held past [`IDLE`] runs.
    flusher: bool,
}

static SHARED: Mutex<Shared> =
    Mutex::new(Shared { gate: LineGate::new(), sink: None, flusher: false });
static HELD: Condvar = Condvar::new();

fn shared() -> MutexGuard<'static, Shared> {
    // Nothing panics while holding it but a sink; the state stays usable.
    SHARED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The relay of the command's stderr starts: its bytes and the notices go through `sink`.
// The stderr relay that calls it is the Linux launcher's.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn attach(sink: NoticeSink) {
    let mut s = shared();
    s.gate = LineGate::new();
    s.sink = Some(sink);
}

/// The relay writes the command's `bytes`, with any held notice at the first line end;
/// `false` once the sink cannot take more.
// The stderr relay that calls it is the Linux launcher's.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn relay(bytes: &[u8]) -> bool {
    let mut s = shared();
    let Shared { gate, sink, .. } = &mut *s;
    let split = gate.output(bytes, Instant::now());
    let Some(sink) = sink.as_mut() else { return true };
    let mut ok = sink(split.before);
    if ok && !split.notices.is_empty() {
        ok = sink(&split.notices);
    }
    if ok && !split.after.is_empty() {
        ok = sink(split.after);
    }
    ok
}

/// The terminal went in (`true`) or out of raw mode.
// The stderr relay that calls it is the Linux launcher's.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn set_crlf(on: bool) {
    shared().gate.set_crlf(on);
}

/// The command's stream ended: held notices are written.
// The stderr relay that calls it is the Linux launcher's.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn end() {
    let mut s = shared();
    let Shared { gate, sink, .. } = &mut *s;
    if let (Some(bytes), Some(sink)) = (gate.end(), sink.as_mut()) {
        sink(&bytes);
    }
}

/// Writes `line` (one line, no line end) where the command's stderr goes, at a line boundary
/// (see the module docs).
pub fn notice(line: &str) {
    let mut s = shared();
    if s.sink.is_none() {
        drop(s);
        eprintln!("{line}");
        return;
    }
    let Shared { gate, sink, flusher } = &mut *s;
    match gate.notice(line) {
        Some(bytes) => {
            if let Some(sink) = sink.as_mut() {
                sink(&bytes);
            }
        }
        None => {
            if !*flusher {
                *flusher = std::thread::Builder::new()
                    .name("sandgate-notices".into())
                    .spawn(flush_when_idle)
                    .is_ok();
            }
            HELD.notify_all();
        }
    }
}

/// Writes held notices once the command has been quiet for [`IDLE`].
fn flush_when_idle() {
    let mut s = shared();
    loop {
        s = match s.gate.due() {
            None => HELD.wait(s).unwrap_or_else(|e| e.into_inner()),
            Some(due) => {
                let now = Instant::now();
                if now < due {
                    HELD.wait_timeout(s, due - now).unwrap_or_else(|e| e.into_inner()).0
                } else {
                    let Shared { gate, sink, .. } = &mut *s;
                    if let (Some(bytes), Some(sink)) = (gate.flush_idle(now), sink.as_mut()) {
                        sink(&bytes);
                    }
                    s
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays `steps` on a gate: `Out` is the command's output at a time (ms), `Note` a notice,
    /// `Idle` the flusher waking at a time, `End` the stream's end; returns everything written.
    #[derive(Clone, Copy)]
    enum Step {
        Out(u64, &'static str),
        Note(&'static str),
        Idle(u64),
        End,
        Raw,
    }

    fn run(steps: &[Step]) -> String {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut g = LineGate::new();
        let mut out = Vec::new();
        for s in steps {
            match *s {
                Step::Out(ms, b) => {
                    let split = g.output(b.as_bytes(), at(ms));
                    out.extend_from_slice(split.before);
                    out.extend_from_slice(&split.notices);
                    out.extend_from_slice(split.after);
                }
                Step::Note(n) => out.extend(g.notice(n).unwrap_or_default()),
                Step::Idle(ms) => out.extend(g.flush_idle(at(ms)).unwrap_or_default()),
                Step::End => out.extend(g.end().unwrap_or_default()),
                Step::Raw => g.set_crlf(true),
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn notices_land_between_lines_never_inside_one() {
        use Step::*;
        let rows: &[(&str, &[Step], &str)] = &[
            ("nothing written yet: at once", &[Note("N")], "N\n"),
            ("after a full line: at once", &[Out(0, "a\n"), Note("N")], "a\nN\n"),
            (
                "the issue's case: curl writes its line in two, the notice comes between",
                &[Out(0, "c"), Note("sandgate: denied"), Out(1, "url: (56) x\n")],
                "curl: (56) x\nsandgate: denied\n",
            ),
            (
                "held until the first line end; the chunk's rest follows",
                &[Out(0, "ab"), Note("N"), Out(1, "c\nde")],
                "abc\nN\nde",
            ),
            (
                "several held notices, in order",
                &[Out(0, "x"), Note("N1"), Note("N2"), Out(1, "\n")],
                "x\nN1\nN2\n",
            ),
            (
                "a prompt waiting for input: the notice ends its line after the idle time",
                &[Out(0, "Password: "), Note("N"), Idle(100), Idle(250)],
                "Password: \nN\n",
            ),
            (
                "a progress line redrawn with \\r is not a line end",
                &[Out(0, "10%\r"), Note("N"), Out(100, "20%\r"), Idle(300), Idle(350)],
                "10%\r20%\r\nN\n",
            ),
            (
                "held at the end: written after a line end",
                &[Out(0, "tail"), Note("N"), End],
                "tail\nN\n",
            ),
            (
                "after the end, mid-line: a line end first",
                &[Out(0, "tail"), End, Note("N")],
                "tail\nN\n",
            ),
            ("after the end, at a line start: as is", &[Out(0, "a\n"), End, Note("N")], "a\nN\n"),
            (
                "a terminal in raw mode: \\r\\n",
                &[Raw, Out(0, "x"), Note("N"), Idle(300)],
                "x\r\nN\r\n",
            ),
        ];
        for (what, steps, want) in rows {
            assert_eq!(run(steps), *want, "{what}");
        }
    }

    #[test]
    fn due_only_while_something_is_held() {
        let t0 = Instant::now();
        let mut g = LineGate::new();
        assert_eq!(g.due(), None);
        let _ = g.output(b"x", t0);
        assert_eq!(g.notice("N"), None);
        assert_eq!(g.due(), Some(t0 + IDLE));
        assert_eq!(g.flush_idle(t0 + IDLE - Duration::from_millis(1)), None);
        assert_eq!(g.flush_idle(t0 + IDLE).as_deref(), Some(&b"\nN\n"[..]));
        assert_eq!(g.due(), None);
    }
}
