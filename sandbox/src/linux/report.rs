//! What the sandbox's init tells the launcher when setup ends: ready (with what the kernel
//! enforced), or which step failed and why. One `SOCK_SEQPACKET` message; a failure crosses the
//! process boundary as its step's tag, the path it acted on and the errno (or the error's text
//! when it has no errno), and becomes the same [`SandboxError`] on the launcher's side.
//!
//! Fields are separated by NUL bytes, which no path, program name or message can contain.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::spec::Enforcement;
use crate::{SandboxError, SetupStep};

const READY: &[u8] = b"ok\n";
const SETUP: &[u8] = b"setup\0";
const NOT_FOUND: &[u8] = b"exec\0";
const NOT_ENFORCED: &[u8] = b"enforcement\0";

/// What init said.
#[derive(Debug)]
pub enum InitReport {
    /// Set up; the command is about to start.
    Ready(Enforcement),
    /// Setup failed.
    Failed(SandboxError),
}

/// The message saying the sandbox is ready.
pub fn ready(enforcement: &Enforcement) -> Vec<u8> {
    let mut m = READY.to_vec();
    m.extend_from_slice(enforcement.encode().as_bytes());
    m
}

/// The message carrying `e` (setup errors keep their step, path and errno).
pub fn failed(e: &SandboxError) -> Vec<u8> {
    let mut m = Vec::new();
    match e {
        SandboxError::CommandNotFound { command } => {
            m.extend_from_slice(NOT_FOUND);
            m.extend_from_slice(command.as_bytes());
        }
        SandboxError::NotFullyEnforced { missing } => {
            m.extend_from_slice(NOT_ENFORCED);
            m.extend_from_slice(missing.as_bytes());
        }
        SandboxError::Setup { step, source } => setup(&mut m, step, source),
        // Not made by init's setup; kept as text should one appear.
        other => setup(&mut m, &SetupStep::Start, &io::Error::other(other.to_string())),
    }
    m
}

fn setup(m: &mut Vec<u8>, step: &SetupStep, source: &io::Error) {
    m.extend_from_slice(SETUP);
    m.extend_from_slice(step.tag().as_bytes());
    m.push(0);
    if let Some(p) = step.path() {
        m.extend_from_slice(p.as_os_str().as_bytes());
    }
    m.push(0);
    match source.raw_os_error() {
        Some(errno) => m.extend_from_slice(errno.to_string().as_bytes()),
        None => {
            m.push(b'-');
            m.push(0);
            // A text without NUL bytes (the separator).
            m.extend(source.to_string().bytes().filter(|&b| b != 0));
        }
    }
}

/// Reads init's message; anything else (nothing at all: init ended first) is a failure at the
/// start.
pub fn parse(bytes: &[u8]) -> InitReport {
    if let Some(rest) = bytes.strip_prefix(READY) {
        return InitReport::Ready(Enforcement::decode(&String::from_utf8_lossy(rest)));
    }
    if let Some(rest) = bytes.strip_prefix(NOT_FOUND) {
        let command = String::from_utf8_lossy(rest).into_owned();
        return InitReport::Failed(SandboxError::CommandNotFound { command });
    }
    if let Some(rest) = bytes.strip_prefix(NOT_ENFORCED) {
        let missing = String::from_utf8_lossy(rest).into_owned();
        return InitReport::Failed(SandboxError::NotFullyEnforced { missing });
    }
    if let Some(e) = bytes.strip_prefix(SETUP).and_then(parse_setup) {
        return InitReport::Failed(e);
    }
    InitReport::Failed(SandboxError::Setup {
        step: SetupStep::Start,
        source: io::Error::other("the sandbox's init exited before it was ready"),
    })
}

fn parse_setup(rest: &[u8]) -> Option<SandboxError> {
    let mut fields = rest.splitn(4, |&b| b == 0);
    let tag = std::str::from_utf8(fields.next()?).ok()?;
    let path = PathBuf::from(OsStr::from_bytes(fields.next()?));
    let errno = fields.next()?;
    let source = match std::str::from_utf8(errno).ok()?.parse::<i32>() {
        Ok(n) => io::Error::from_raw_os_error(n),
        Err(_) => io::Error::other(String::from_utf8_lossy(fields.next().unwrap_or_default())),
    };
    let step = SetupStep::from_tag(tag, path)?;
    Some(SandboxError::Setup { step, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure reads the same on both sides of the socket: step, path and errno, or the text.
    #[test]
    fn failures_cross_intact() {
        let odd = PathBuf::from("/h/a dir\nwith a newline/.git");
        let table = vec![
            SandboxError::Setup {
                step: SetupStep::Bind(odd),
                source: io::Error::from_raw_os_error(13),
            },
            SandboxError::Setup {
                step: SetupStep::MakeReadOnly,
                source: io::Error::from_raw_os_error(1),
            },
            SandboxError::Setup {
                step: SetupStep::Landlock,
                source: io::Error::other("failed to create a ruleset: boom"),
            },
            SandboxError::Setup {
                step: SetupStep::Pin("/p/.git".into()),
                source: io::Error::new(io::ErrorKind::InvalidInput, "no longer a directory"),
            },
            SandboxError::CommandNotFound { command: "no-such-program".into() },
            SandboxError::NotFullyEnforced { missing: "a; b".into() },
        ];
        for e in table {
            let InitReport::Failed(back) = parse(&failed(&e)) else { panic!("{e}: read as ready") };
            assert_eq!(chain(&back), chain(&e));
            if let (
                SandboxError::Setup { step: a, source: sa },
                SandboxError::Setup { step: b, source: sb },
            ) = (&e, &back)
            {
                assert_eq!(a, b);
                assert_eq!(sa.raw_os_error(), sb.raw_os_error());
            }
        }
    }

    #[test]
    fn ready_and_garbage() {
        let enforcement = Enforcement { landlock_abi: 6, ..Default::default() };
        match parse(&ready(&enforcement)) {
            InitReport::Ready(e) => assert_eq!(e.landlock_abi, 6),
            InitReport::Failed(e) => panic!("{e}"),
        }
        for garbage in [&b""[..], b"setup\0NoSuchStep\0\x0013", b"setup\0Bind", b"what"] {
            let InitReport::Failed(e) = parse(garbage) else { panic!("{garbage:?}: ready") };
            assert_eq!(
                chain(&e),
                "sandbox setup failed at start: the sandbox's init exited before it was ready"
            );
        }
    }

    fn chain(e: &dyn std::error::Error) -> String {
        let mut text = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        text
    }
}
