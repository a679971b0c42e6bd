//! Running `nft` and `pfctl`: the only I/O in this crate, behind a trait so tests can record.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::FirewallError;

/// What a finished command printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// Standard output.
    pub stdout: String,
    /// Standard error (pfctl prints its enable token here).
    pub stderr: String,
}

/// Runs a program with arguments and optional standard input.
///
/// Implementations return [`FirewallError::Command`] when the program exits unsuccessfully.
pub trait CommandRunner: Send + Sync {
    /// Runs `program args...`, feeding `stdin` if given, and waits for it.
    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<CommandOutput, FirewallError>;
}

/// Runs real processes.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemRunner;

impl CommandRunner for SystemRunner {
    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<CommandOutput, FirewallError> {
        let spawn_err =
            |source: std::io::Error| FirewallError::Spawn { program: program.to_owned(), source };
        let path = locate(program)?;
        let mut child = Command::new(path)
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A write error (EPIPE) means the program exited early; its status says why.
            let _ = pipe.write_all(text.as_bytes());
        }
        let out = child.wait_with_output().map_err(spawn_err)?;
        let output = CommandOutput {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        if out.status.success() {
            Ok(output)
        } else {
            Err(FirewallError::Command {
                command: command_line(program, args),
                code: out.status.code(),
                stderr: output.stderr.trim().to_owned(),
            })
        }
    }
}

/// Root-owned directories searched before `PATH`, in order.
///
/// A normal user's `PATH` on Debian has no `/usr/sbin` (where `nft` lives), and a program that
/// runs with `CAP_NET_ADMIN` should not be picked from a directory earlier on a `PATH` the user
/// (or a sandboxed command starting a nested sandbox) can write, so these come first.
pub const SYSTEM_DIRS: [&str; 6] =
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin"];

/// Finds `program` in [`SYSTEM_DIRS`], then in the absolute directories of `PATH`.
pub fn locate(program: &str) -> Result<PathBuf, FirewallError> {
    locate_with(program, std::env::var_os("PATH").as_deref(), &is_executable_file)
}

/// [`locate`] with the `PATH` value and the existence test given (tests inject both).
///
/// A name with a `/` is used as it is. When nothing is found the error names the places searched
/// and the package that provides the program ([`package_of`]).
pub fn locate_with(
    program: &str,
    path: Option<&OsStr>,
    is_program: &dyn Fn(&Path) -> bool,
) -> Result<PathBuf, FirewallError> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let from_path = path.map(std::env::split_paths).into_iter().flatten();
    let dirs: Vec<PathBuf> = SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .chain(from_path.filter(|d| d.is_absolute()))
        .collect();
    if let Some(found) = dirs.iter().map(|d| d.join(program)).find(|p| is_program(p)) {
        return Ok(found);
    }
    Err(FirewallError::Missing { program: program.to_owned(), package: package_of(program) })
}

/// The Debian package that provides `program`, for the not-found message.
pub fn package_of(program: &str) -> Option<&'static str> {
    match program {
        "nft" => Some("nftables"),
        "ip" => Some("iproute2"),
        _ => None,
    }
}

fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Formats a command line for messages.
pub(crate) fn command_line(program: &str, args: &[&str]) -> String {
    let mut s = program.to_owned();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// One call seen by a [`RecordingRunner`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The command line (`program arg arg`).
    pub command: String,
    /// Standard input that was fed, if any.
    pub stdin: Option<String>,
}

/// A fake runner for tests: records every call and answers from a script of replies.
///
/// Replies are matched by command-line prefix, first match wins; an unmatched call succeeds with
/// empty output.
#[derive(Debug, Default)]
pub struct RecordingRunner {
    calls: Mutex<Vec<RecordedCall>>,
    replies: Mutex<Vec<(String, Result<CommandOutput, String>)>>,
}

impl RecordingRunner {
    /// A runner that succeeds with empty output for every call.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers calls whose command line starts with `prefix` with this output.
    pub fn reply(&self, prefix: &str, stdout: &str, stderr: &str) -> &Self {
        self.lock_replies().push((
            prefix.to_owned(),
            Ok(CommandOutput { stdout: stdout.to_owned(), stderr: stderr.to_owned() }),
        ));
        self
    }

    /// Fails calls whose command line starts with `prefix` with this stderr.
    pub fn fail(&self, prefix: &str, stderr: &str) -> &Self {
        self.lock_replies().push((prefix.to_owned(), Err(stderr.to_owned())));
        self
    }

    /// The calls made so far.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The command lines of the calls made so far.
    pub fn commands(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c.command).collect()
    }

    fn lock_replies(
        &self,
    ) -> std::sync::MutexGuard<'_, Vec<(String, Result<CommandOutput, String>)>> {
        self.replies.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl CommandRunner for RecordingRunner {
    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<CommandOutput, FirewallError> {
        let command = command_line(program, args);
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(RecordedCall { command: command.clone(), stdin: stdin.map(str::to_owned) });
        let replies = self.lock_replies();
        match replies.iter().find(|(prefix, _)| command.starts_with(prefix.as_str())) {
            Some((_, Ok(out))) => Ok(out.clone()),
            Some((_, Err(stderr))) => {
                Err(FirewallError::Command { command, code: Some(1), stderr: stderr.clone() })
            }
            None => Ok(CommandOutput::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;

    /// Debian's default PATH of a normal user (`/etc/login.defs` ENV_PATH).
    const DEBIAN_USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games";

    #[test]
    fn nft_in_sbin_is_found_without_sbin_on_path() {
        let path = OsString::from(DEBIAN_USER_PATH);
        let only = |want: &'static str| move |p: &Path| p == Path::new(want);
        for at in ["/usr/sbin/nft", "/sbin/nft", "/usr/local/bin/nft"] {
            assert_eq!(locate_with("nft", Some(&path), &only(at)).unwrap(), PathBuf::from(at));
        }
        // Found on PATH only (e.g. NixOS), after the system directories.
        let nix = OsString::from("relative/bin:/run/current-system/sw/bin");
        assert_eq!(
            locate_with("nft", Some(&nix), &only("/run/current-system/sw/bin/nft")).unwrap(),
            PathBuf::from("/run/current-system/sw/bin/nft")
        );
        // A relative PATH entry is never searched.
        assert!(locate_with("nft", Some(&nix), &only("relative/bin/nft")).is_err());
        // The system copy wins over one earlier on PATH.
        let both = |p: &Path| p == Path::new("/tmp/evil/nft") || p == Path::new("/usr/sbin/nft");
        let evil = OsString::from("/tmp/evil:/usr/bin");
        assert_eq!(locate_with("nft", Some(&evil), &both).unwrap(), PathBuf::from("/usr/sbin/nft"));
    }

    #[test]
    fn a_missing_nft_names_the_package() {
        let path = OsString::from(DEBIAN_USER_PATH);
        let e = locate_with("nft", Some(&path), &|_| false).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, FirewallError::Missing { package: Some("nftables"), .. }), "{e:?}");
        assert!(msg.contains("/usr/sbin") && msg.contains("apt install nftables"), "{msg}");
        let e = locate_with("ip", None, &|_| false).unwrap_err();
        assert!(e.to_string().contains("`iproute2`"), "{e}");
        let e = locate_with("pfctl", None, &|_| false).unwrap_err();
        assert!(!e.to_string().contains("install"), "{e}");
    }

    #[test]
    fn a_path_with_a_slash_is_taken_as_is() {
        assert_eq!(locate_with("./x", None, &|_| false).unwrap(), PathBuf::from("./x"));
    }
}
