//! Running `nft` and `pfctl`: the only I/O in this crate, behind a trait so tests can record.

use std::io::Write;
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
        let mut child = Command::new(program)
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
