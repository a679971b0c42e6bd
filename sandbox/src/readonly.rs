//! Recognising "Read-only file system" in what a sandboxed command writes to its stderr, so that
//! the launcher's exit message can name the path and the way to make it writable.
//!
//! # Why read the command's stderr
//!
//! The launcher has to learn which write failed with `EROFS` and where. The alternatives:
//!
//! - **seccomp user notification** (`SECCOMP_RET_USER_NOTIF` on `openat`/`mkdir`/`rename`/…)
//!   would see every failing call exactly, but it stops the calling thread for a round trip to
//!   the launcher on *every* filtered call, failing or not (a build opens tens of thousands of
//!   files: measurable at once), it cannot filter on the result (the notification comes before
//!   the call), and its path arguments are in the command's memory, racy to read (TOCTOU).
//! - **fanotify / inotify** report successful events only, not refused writes.
//! - **an `LD_PRELOAD` shim** misses static binaries (Go) and is the sandbox's to remove.
//!
//! What the person or agent reads is the command's own message, and every tool that fails on
//! `EROFS` prints one (`strerror` text "Read-only file system", Python's `[Errno 30]`, Rust's
//! `(os error 30)`, Node's `EROFS: read-only file system, mkdir '…'`, Go's `…: read-only file
//! system`). So the launcher reads the copy of stderr it already relays (the pty's output on a
//! terminal; a pipe in between otherwise, see `linux::stderr_tap`) through this scanner: a few
//! byte comparisons per line, nothing when nothing matches, and the bytes themselves are passed
//! on unchanged. What a tool does not print is not found; and since the text comes from the
//! sandbox, it may lie: see [`ReadOnlyScanner::paths`] and the CLI, which never suggests making
//! writable what is protected on purpose, and shows the text only through a sanitiser.
//!
//! Some tools test before they write and say so in their own words: the version managers'
//! `pyenv: cannot rehash: ~/.pyenv/shims isn't writable` (rbenv, nodenv alike) is read as an
//! `EROFS` message naming the path before "isn't writable".
//!
//! The same scanner, in a tier without network ([`ReadOnlyScanner::watching_network`]), notes
//! whether the end of the output looked like a network failure (name resolution, a refused or
//! unreachable connection: [`NETWORK_FAILURES`]), so that the launcher's "this tier has no
//! network" note follows such a failure and not any failing command.

use std::sync::{Arc, Mutex};

/// The phrase every `EROFS` message carries, lower case.
const PHRASE: &[u8] = b"read-only file system";

/// A tool's own words for a directory it tested and found read-only (`pyenv: cannot rehash:
/// PATH isn't writable`): the path is the word before.
const NOT_WRITABLE: &[u8] = b"isn't writable";

/// What tools print when a connection cannot be made for want of a network: name resolution
/// (glibc's `EAI_*` texts, curl, git, wget, ssh, urllib3, Node, Go, Rust), refused and
/// unreachable connections (`strerror`, curl, Node, Go). Matched as is (case included).
pub const NETWORK_FAILURES: &[&[u8]] = &[
    b"name resolution",
    b"Name or service not known",
    b"No address associated with hostname",
    b"resolve host",
    b"Failed to resolve",
    b"getaddrinfo",
    b"EAI_AGAIN",
    b"ENOTFOUND",
    b"failed to lookup address",
    b"no such host",
    b"Connection refused",
    b"connection refused",
    b"ECONNREFUSED",
    b"Network is unreachable",
    b"network is unreachable",
    b"ENETUNREACH",
    b"Couldn't connect to server",
    b"Failed to connect to",
];

/// Most distinct paths kept.
pub const MAX_PATHS: usize = 16;

/// How many earlier lines may name the path of an `EROFS` line that names none (cargo prints the
/// path in `error: failed to …` and the cause three lines later).
const LOOKBACK: usize = 6;

/// Reads a byte stream and keeps the paths of `EROFS` messages, in order, distinct.
///
/// The common case — no such message in a chunk — costs one `memmem` over the chunk (glibc's,
/// vectorised whatever this crate's optimisation level) and a copy of at most 8 KiB
/// into the look-back window; nothing per line. Only when the phrase shows up are the lines of
/// the window decoded and searched for a path (on that line, or a few lines above for cargo).
#[derive(Debug, Default)]
pub struct ReadOnlyScanner {
    /// The last bytes of the stream (at most [`TAIL`]), ending with the current partial line.
    tail: Vec<u8>,
    /// Stream offset of `tail[0]`.
    tail_start: u64,
    /// Lines ending at or before this stream offset have been looked at.
    examined: u64,
    /// The current partial line holds the phrase: look again when it ends.
    pending: bool,
    paths: Vec<String>,
    /// EROFS lines whose path could not be told.
    unnamed: usize,
    /// Look for [`NETWORK_FAILURES`] too.
    watch_network: bool,
    /// One of them was seen.
    network_failure: bool,
}

/// Bytes of look-back kept: enough for the [`LOOKBACK`] lines before a message.
const TAIL: usize = 8 * 1024;

impl ReadOnlyScanner {
    /// A scanner that has seen nothing.
    pub fn new() -> ReadOnlyScanner {
        ReadOnlyScanner::default()
    }

    /// A scanner that also notes whether the output looked like a network failure (for a tier
    /// without network; see the module docs).
    pub fn watching_network() -> ReadOnlyScanner {
        ReadOnlyScanner { watch_network: true, ..ReadOnlyScanner::default() }
    }

    /// Whether the end of the output (its last [`TAIL`] bytes, where the error that ended a
    /// failed command is) held a message of [`NETWORK_FAILURES`]; known once the stream ended
    /// ([`finish`](Self::finish)), always `false` unless
    /// [`watching_network`](Self::watching_network). Only the end is looked at: the note it
    /// is for follows a failed command, and reading every byte for some twenty phrases doubled
    /// the relay's cost of a command writing much to stderr.
    pub fn network_failure(&self) -> bool {
        self.network_failure
    }

    /// Looks at the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        // The phrase may start in the bytes already kept (the longer one: it covers both).
        let overlap = self.tail.len().min(PHRASE.len());
        let mut probe_hit = self.pending;
        if !probe_hit {
            let mut seam = self.tail[self.tail.len() - overlap..].to_vec();
            seam.extend_from_slice(&bytes[..bytes.len().min(PHRASE.len())]);
            probe_hit = has_phrase(&seam) || has_phrase(bytes);
        }
        if probe_hit {
            // The whole chunk is looked at before the window is cut back.
            self.tail.extend_from_slice(bytes);
            self.examine(false);
            self.trim();
        } else {
            // Nothing here: every line that ended so far is done.
            self.examined = self.examined.max(self.end());
            self.keep(bytes);
        }
    }

    /// The stream ended: looks at a last line without a newline (and, when watching for one,
    /// for a network failure in the last [`TAIL`] bytes).
    pub fn finish(&mut self) {
        if self.watch_network {
            self.network_failure = has_network_failure(&self.tail);
        }
        if self.pending || has_phrase(self.partial()) {
            self.examine(true);
        }
    }

    /// The paths as the command wrote them (relative ones relative to where it ran), at most
    /// [`MAX_PATHS`]. Sandbox-controlled text: sanitise before showing it.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }

    /// How many `EROFS` lines named no path that could be told.
    pub fn unnamed(&self) -> usize {
        self.unnamed
    }

    /// Stream offset just past the last byte seen.
    fn end(&self) -> u64 {
        self.tail_start + self.tail.len() as u64
    }

    /// The current line, not yet ended.
    fn partial(&self) -> &[u8] {
        let start = self.tail.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        &self.tail[start..]
    }

    fn keep(&mut self, bytes: &[u8]) {
        if bytes.len() >= TAIL {
            self.tail_start = self.end() + (bytes.len() - TAIL) as u64;
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[bytes.len() - TAIL..]);
            return;
        }
        self.tail.extend_from_slice(bytes);
        self.trim();
    }

    fn trim(&mut self) {
        if self.tail.len() > TAIL {
            let cut = self.tail.len() - TAIL;
            self.tail.drain(..cut);
            self.tail_start += cut as u64;
        }
    }

    /// Looks at the lines of the window that ended after `examined` (and the partial one too
    /// when `last`).
    fn examine(&mut self, last: bool) {
        let tail = std::mem::take(&mut self.tail);
        let mut lines: Vec<(u64, &[u8])> = Vec::new(); // (stream offset of the line's end, line)
        let mut start = 0;
        while let Some(i) = bytes::find_byte(b'\n', &tail[start..]) {
            lines.push((self.tail_start + (start + i) as u64, &tail[start..start + i]));
            start += i + 1;
        }
        let partial = &tail[start..];
        if last && !partial.is_empty() {
            lines.push((self.end_of(&tail), partial));
        }
        for k in 0..lines.len() {
            let (ends, line) = lines[k];
            if ends < self.examined || !has_phrase(line) {
                continue;
            }
            // A progress line may hold several `\r`-separated lines; look at each.
            for seg in line.split(|&b| b == b'\r') {
                if has_phrase(seg) {
                    let above = &lines[k.saturating_sub(LOOKBACK)..k];
                    self.report(seg, above);
                }
            }
        }
        let done = lines.last().map_or(self.examined, |(e, _)| e + 1);
        self.examined = self.examined.max(done);
        self.pending = !last && has_phrase(partial);
        self.tail = tail;
    }

    fn end_of(&self, tail: &[u8]) -> u64 {
        self.tail_start + tail.len() as u64
    }

    fn report(&mut self, seg: &[u8], above: &[(u64, &[u8])]) {
        let text = String::from_utf8_lossy(&strip_escapes(seg)).into_owned();
        let lower = text.to_ascii_lowercase();
        let at = [find(lower.as_bytes(), PHRASE), find(lower.as_bytes(), NOT_WRITABLE)]
            .into_iter()
            .flatten()
            .min();
        let Some(at) = at else { return };
        let path = path_in(&text, at).or_else(|| {
            // The nearest line above that names a path, stopping at an earlier message (a line
            // that reported an error names nothing for the next one).
            for (_, l) in above.iter().rev() {
                if has_phrase(l) {
                    return None;
                }
                let found = l
                    .split(|&b| b == b'\r')
                    .rev()
                    .find_map(|seg| last_path_token(&String::from_utf8_lossy(&strip_escapes(seg))));
                if found.is_some() {
                    return found;
                }
            }
            None
        });
        match path {
            Some(p) if !self.paths.contains(&p) && self.paths.len() < MAX_PATHS => {
                self.paths.push(p);
            }
            Some(_) => {}
            None => self.unnamed += 1,
        }
    }
}

/// Whether `line` holds a message of [`NETWORK_FAILURES`].
fn has_network_failure(line: &[u8]) -> bool {
    NETWORK_FAILURES.iter().any(|n| bytes::find(line, n).is_some())
}

/// Whether `line` holds "Read-only file system" / "read-only file system", or "isn't writable".
fn has_phrase(line: &[u8]) -> bool {
    has_erofs(line) || bytes::find(line, NOT_WRITABLE).is_some()
}

/// Whether `line` holds "Read-only file system" / "read-only file system".
fn has_erofs(line: &[u8]) -> bool {
    let tail = &PHRASE[1..];
    let mut from = 0;
    while let Some(i) = bytes::find(&line[from..], tail) {
        let at = from + i;
        if at > 0 && matches!(line[at - 1], b'r' | b'R') {
            return true;
        }
        from = at + 1;
    }
    false
}

/// glibc's `memchr` and `memmem`: vectorised even in a debug build, where a byte loop in Rust
/// would cost the relay (`bench/stderr-tap.sh`).
#[allow(unsafe_code)]
mod bytes {
    /// The first `b` in `hay`.
    pub(super) fn find_byte(b: u8, hay: &[u8]) -> Option<usize> {
        // SAFETY: `hay` is valid for `hay.len()` bytes; the result points into it or is null.
        let p = unsafe { libc::memchr(hay.as_ptr().cast(), i32::from(b), hay.len()) };
        (!p.is_null()).then(|| p as usize - hay.as_ptr() as usize)
    }

    /// The first `needle` in `hay`.
    pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        // SAFETY: both slices are valid for their lengths; the result points into `hay` or is
        // null.
        let p = unsafe {
            libc::memmem(hay.as_ptr().cast(), hay.len(), needle.as_ptr().cast(), needle.len())
        };
        (!p.is_null()).then(|| p as usize - hay.as_ptr() as usize)
    }
}

/// A scanner shared between the thread that relays the stream and the launcher.
pub type SharedScanner = Arc<Mutex<ReadOnlyScanner>>;

/// Removes ANSI escape sequences (colours of cargo, npm, pip) so they do not stick to paths.
fn strip_escapes(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] == 0x1b {
            i += 1;
            if line.get(i) == Some(&b'[') {
                i += 1;
                while i < line.len() && !(0x40..=0x7e).contains(&line[i]) {
                    i += 1;
                }
            }
            i += 1;
            continue;
        }
        out.push(line[i]);
        i += 1;
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    bytes::find(hay, needle)
}

/// Quote pairs tools put around paths.
const QUOTES: &[(char, char)] = &[('\'', '\''), ('"', '"'), ('`', '`'), ('‘', '’'), ('“', '”')];

/// The quoted strings of `s`, with their start offsets.
fn quoted(s: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut it = s.char_indices();
    while let Some((i, c)) = it.next() {
        let Some(&(_, close)) = QUOTES.iter().find(|(o, _)| *o == c) else { continue };
        let rest = &s[i + c.len_utf8()..];
        if let Some(end) = rest.find(close) {
            let inner = &rest[..end];
            if !inner.is_empty() {
                out.push((i, inner.to_owned()));
            }
            // Continue after the closing quote.
            let skip = inner.chars().count() + 1;
            for _ in 0..skip {
                it.next();
            }
        }
    }
    out
}

/// Whether a token looks like a path rather than a word of the message.
fn pathlike(t: &str) -> bool {
    !t.is_empty()
        && t.len() < 4096
        && !t.chars().any(char::is_whitespace)
        && (t.contains('/') || t.starts_with('.') || t.contains('.'))
}

/// The path an `EROFS` line names, the phrase starting at byte `at`: a quoted string after the
/// phrase (Python `…: 'x'`, Node `…, mkdir 'x'`), else the last quoted string before it
/// (coreutils `cannot touch 'x': …`, git, cargo), else the word just before `: Read-only`
/// (Go `open /x: read-only …`, sh `cannot create /x: …`, bash `x: …`).
fn path_in(text: &str, at: usize) -> Option<String> {
    let q = quoted(text);
    if let Some((_, p)) = q.iter().find(|(i, _)| *i > at) {
        return Some(p.clone());
    }
    if let Some((_, p)) = q.iter().rev().find(|(i, _)| *i < at) {
        return Some(p.clone());
    }
    let before = text[..at].trim_end();
    let before = before.strip_suffix(':').unwrap_or(before).trim_end();
    let word = before.rsplit(char::is_whitespace).next()?;
    let word = word.trim_end_matches(':');
    // A bare word (`bash: x: …`) counts too, unless it is the tool's own name (`bash:`) or an
    // error label.
    let before_word = before[..before.len() - word.len()].trim_end();
    let labelled = before_word.is_empty() || word.eq_ignore_ascii_case("error");
    (!word.is_empty() && !labelled && !word.chars().any(char::is_whitespace) && word.len() < 4096)
        .then(|| word.to_owned())
}

/// The last path-looking token of a line (quoted first), for a later `EROFS` line without one.
fn last_path_token(text: &str) -> Option<String> {
    if let Some((_, p)) = quoted(text).into_iter().rev().find(|(_, p)| pathlike(p)) {
        return Some(p);
    }
    text.split_whitespace()
        .rev()
        .map(|w| w.trim_end_matches([':', ',', ';']))
        .find(|w| w.starts_with('/') || w.starts_with("~/"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> Vec<String> {
        let mut s = ReadOnlyScanner::new();
        s.feed(text.as_bytes());
        s.finish();
        s.paths().to_vec()
    }

    /// Messages as the tools print them (captured inside `sandgate run`/`build`, or from the
    /// tools' sources where noted).
    #[test]
    fn finds_the_path_in_each_tools_message() {
        let rows: &[(&str, &str)] = &[
            ("touch: cannot touch 'x': Read-only file system\n", "x"),
            ("mkdir: cannot create directory ‘d’: Read-only file system\n", "d"),
            ("sh: 1: cannot create /usr/q: Read-only file system\n", "/usr/q"),
            ("bash: line 1: out.txt: Read-only file system\n", "out.txt"),
            ("bash: notes: Read-only file system\n", "notes"),
            (
                "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n\
                 OSError: [Errno 30] Read-only file system: 'y'\n",
                "y",
            ),
            (
                "ERROR: Could not install packages due to an OSError: [Errno 30] Read-only file \
                 system: '/usr/lib/python3/dist-packages/x'\n",
                "/usr/lib/python3/dist-packages/x",
            ),
            // npm 10 (`npm error`) and older (`npm ERR!`).
            (
                "npm error code EROFS\nnpm error syscall mkdir\nnpm error path /root/.npm/_cacache\n\
                 npm error errno -30\nnpm error rofs EROFS: read-only file system, mkdir \
                 '/root/.npm/_cacache'\n",
                "/root/.npm/_cacache",
            ),
            // cargo: the path in the error, the cause lines later.
            (
                "error: failed to create directory `/root/.cargo/registry/cache/index.crates.io-1`\n\
                 \nCaused by:\n  Read-only file system (os error 30)\n",
                "/root/.cargo/registry/cache/index.crates.io-1",
            ),
            (
                "\x1b[1m\x1b[31merror\x1b[0m: failed to open: /root/.cargo/.package-cache\n\n\
                 Caused by:\n  Read-only file system (os error 30)\n",
                "/root/.cargo/.package-cache",
            ),
            (
                "fatal: Unable to create '/p/.git/index.lock': Read-only file system\n",
                "/p/.git/index.lock",
            ),
            (
                "error: could not lock config file .git/config: Read-only file system\n",
                ".git/config",
            ),
            (
                "go: creating work dir: mkdir /root/go/pkg/mod: read-only file system\n",
                "/root/go/pkg/mod",
            ),
            ("cp: cannot create regular file 'b': Read-only file system\r\n", "b"),
            // pyenv (libexec/pyenv-rehash) and rbenv test the shims directory first.
            ("pyenv: cannot rehash: /root/.pyenv/shims isn't writable\n", "/root/.pyenv/shims"),
            ("rbenv: cannot rehash: /home/u/.rbenv/shims isn't writable\n", "/home/u/.rbenv/shims"),
        ];
        for (text, want) in rows {
            assert_eq!(scan(text), [*want], "{text:?}");
        }
    }

    /// The run tier's note follows a network failure, not any failure (issue 32, part 3):
    /// messages as the tools print them without a network, and failures that are not about one.
    #[test]
    fn network_failures_are_told_from_other_failures() {
        let failures = [
            "curl: (6) Could not resolve host: example.org\n",
            "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com\n",
            "ssh: Could not resolve hostname github.com: Temporary failure in name resolution\r\n",
            "socket.gaierror: [Errno -3] Temporary failure in name resolution\n",
            "socket.gaierror: [Errno -2] Name or service not known\n",
            "WARNING: Retrying ... Failed to resolve 'pypi.org' ([Errno -3] ...)\n",
            "npm error request to https://registry.npmjs.org/x failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org\n",
            "dial tcp: lookup proxy.golang.org on [::1]:53: no such host\n",
            "error: failed to lookup address information: Temporary failure in name resolution\n",
            "curl: (7) Failed to connect to 127.0.0.1 port 8080 after 0 ms: Couldn't connect to server\n",
            "ConnectionRefusedError: [Errno 111] Connection refused\n",
            "OSError: [Errno 101] Network is unreachable\n",
            "wget: unable to resolve host address 'example.org'\n",
        ];
        let seen = |s: &mut ReadOnlyScanner| {
            s.finish();
            s.network_failure()
        };
        for text in failures {
            let mut s = ReadOnlyScanner::watching_network();
            s.feed(text.as_bytes());
            assert!(seen(&mut s), "{text:?}");
            // Split anywhere, after much other output: the same.
            for cut in 1..text.len() {
                let mut s = ReadOnlyScanner::watching_network();
                s.feed(&b"compiling x v1.0\n".repeat(4000));
                s.feed(&text.as_bytes()[..cut]);
                s.feed(&text.as_bytes()[cut..]);
                assert!(seen(&mut s), "{text:?} cut at {cut}");
            }
            // Only when asked to watch.
            let mut s = ReadOnlyScanner::new();
            s.feed(text.as_bytes());
            assert!(!seen(&mut s), "{text:?}");
            // Only at the end: a failure that a retry got over is no reason for the note.
            let mut s = ReadOnlyScanner::watching_network();
            s.feed(text.as_bytes());
            s.feed(&b"retrying... then another failure\n".repeat(1000));
            assert!(!seen(&mut s), "{text:?}");
        }
        for text in [
            "",
            "false\n",
            "error[E0425]: cannot find value `x` in this scope\n",
            "FAILED tests/test_x.py::test_y - AssertionError\n",
            "touch: cannot touch 'x': Read-only file system\n",
            "npm error code ERESOLVE\nnpm error ERESOLVE unable to resolve dependency tree\n\
             npm error Could not resolve dependency:\n",
        ] {
            let mut s = ReadOnlyScanner::watching_network();
            s.feed(text.as_bytes());
            assert!(!seen(&mut s), "{text:?}");
        }
    }

    #[test]
    fn no_message_no_path() {
        for text in [
            "",
            "all good\n",
            "touch: cannot touch 'x': Permission denied\n",
            "the file system is read-only, they said\n",
        ] {
            assert!(scan(text).is_empty(), "{text:?}");
        }
        let mut s = ReadOnlyScanner::new();
        s.feed(b"Read-only file system\n");
        assert_eq!((s.paths().len(), s.unnamed()), (0, 1));
    }

    #[test]
    fn bytes_in_any_pieces_give_the_same_paths() {
        let text = "touch: cannot touch 'a': Read-only file system\nmkdir: cannot create \
                    directory 'b': Read-only file system\ntouch: cannot touch 'a': Read-only file \
                    system\n";
        for size in [1, 2, 7, 64] {
            let mut s = ReadOnlyScanner::new();
            for piece in text.as_bytes().chunks(size) {
                s.feed(piece);
            }
            s.finish();
            assert_eq!(s.paths(), ["a", "b"], "pieces of {size}");
        }
    }

    /// The fast path (no phrase in a chunk) must not lose a message split over chunks, nor the
    /// line above it that names the path.
    #[test]
    fn messages_split_anywhere_after_much_other_output_are_found() {
        let filler: String = (0..3000).map(|i| format!("Compiling crate{i} v0.1.0\n")).collect();
        let text = format!(
            "{filler}error: failed to open: /root/.cargo/.package-cache\n\nCaused by:\n  \
             Read-only file system (os error 30)\n{filler}touch: cannot touch 'z': Read-only \
             file system"
        );
        for size in [1, 3, 17, 4096, 65536] {
            let mut s = ReadOnlyScanner::new();
            for piece in text.as_bytes().chunks(size) {
                s.feed(piece);
            }
            s.finish();
            assert_eq!(s.paths(), ["/root/.cargo/.package-cache", "z"], "pieces of {size}");
            assert_eq!(s.unnamed(), 0);
        }
    }

    #[test]
    fn memory_is_bounded() {
        let mut s = ReadOnlyScanner::new();
        for i in 0..100 {
            s.feed(format!("touch: cannot touch 'f{i}': Read-only file system\n").as_bytes());
        }
        s.feed(&vec![b'x'; 1 << 20]);
        assert_eq!(s.paths().len(), MAX_PATHS);
        assert!(s.tail.len() <= TAIL);
    }
}
