//! Reading a secret's value from its source, on the host, outside every sandbox.
//!
//! Files and variables are read at each use (rotating them needs no restart); a command's output
//! is kept for the secret's `ttl`. The value is held in [`SecretValue`], whose `Debug` and
//! `Display` never show it, and no error here ever contains it (a command's output and error
//! stream are never quoted).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sandgate_config::{Secret, SecretSource};
use tokio::io::AsyncReadExt as _;

/// Largest value read (from a file or a command's output).
const MAX_VALUE: usize = 64 * 1024;

/// A secret's value. Shown as `SecretValue(..)`; [`SecretValue::expose`] is the only way in.
#[derive(Clone)]
pub struct SecretValue(Arc<str>);

impl SecretValue {
    /// The value itself: only for the header it is injected into.
    pub fn expose(&self) -> &str {
        &self.0
    }

    #[cfg(test)]
    pub(crate) fn for_test(v: &str) -> SecretValue {
        SecretValue(v.into())
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(..)")
    }
}

/// Why a secret could not be read; names the secret and where it is configured, never the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("secret {name:?} ({origin}) could not be read: {why}")]
pub struct SecretError {
    /// The secret.
    pub name: String,
    /// `file:line` of its `[[secrets]]` entry.
    pub origin: String,
    /// What went wrong.
    pub why: String,
}

/// Reads secrets, caching command output for its `ttl`.
#[derive(Default)]
pub struct SecretReader {
    cache: Mutex<HashMap<String, (Instant, SecretValue)>>,
}

impl std::fmt::Debug for SecretReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretReader(..)")
    }
}

impl SecretReader {
    /// The value of `secret` now.
    pub async fn read(&self, secret: &Secret) -> Result<SecretValue, SecretError> {
        let fail = |why: String| SecretError {
            name: secret.name.clone(),
            origin: secret.origin.to_string(),
            why,
        };
        let raw = match &secret.source {
            SecretSource::Env(var) => std::env::var(var)
                .map_err(|_| fail(format!("${var} is not set in the daemon's environment")))?,
            SecretSource::File(path) => {
                let bytes = tokio::fs::read(path)
                    .await
                    .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
                if bytes.len() > MAX_VALUE {
                    return Err(fail(format!(
                        "{} is larger than {MAX_VALUE} bytes",
                        path.display()
                    )));
                }
                String::from_utf8(bytes)
                    .map_err(|_| fail(format!("{} is not UTF-8 text", path.display())))?
            }
            SecretSource::Command { argv, timeout, ttl } => {
                let key = secret.name.clone();
                if let Some((at, v)) =
                    self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned()
                    && at.elapsed() < *ttl
                {
                    return Ok(v);
                }
                let out = run(argv, *timeout).await.map_err(fail)?;
                let value = check(&out).map_err(fail)?;
                self.cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, (Instant::now(), value.clone()));
                return Ok(value);
            }
        };
        check(&raw).map_err(fail)
    }
}

/// The value trimmed; refused when empty or when it holds what a header cannot carry (the
/// message says which, without the value).
fn check(raw: &str) -> Result<SecretValue, String> {
    let v = raw.trim();
    if v.is_empty() {
        return Err("the value is empty".into());
    }
    if v.chars().any(|c| c.is_control() || !c.is_ascii()) {
        return Err("the value has control or non-ASCII characters, which a header cannot carry \
                    (only its first line is not taken: the whole value must be one line)"
            .into());
    }
    Ok(SecretValue(v.into()))
}

/// Runs `argv` (no shell) in its own process group; the group is killed at `timeout`.
async fn run(argv: &[String], timeout: std::time::Duration) -> Result<String, String> {
    let (prog, args) = argv.split_first().ok_or("from_command is empty")?;
    let mut child = tokio::process::Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {prog:?}: {e}"))?;
    let pid = child.id();
    let mut stdout = child.stdout.take().ok_or("no output pipe")?;
    let work = async {
        let mut buf = Vec::new();
        (&mut stdout)
            .take(MAX_VALUE as u64 + 1)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| format!("reading {prog:?}'s output: {e}"))?;
        let status = child.wait().await.map_err(|e| format!("waiting for {prog:?}: {e}"))?;
        Ok::<_, String>((buf, status))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok((buf, status))) => {
            if !status.success() {
                return Err(format!("{prog:?} failed ({status})"));
            }
            if buf.len() > MAX_VALUE {
                return Err(format!("{prog:?} wrote more than {MAX_VALUE} bytes"));
            }
            String::from_utf8(buf).map_err(|_| format!("{prog:?} wrote something not UTF-8"))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => {
            // The whole group: a shell's children would otherwise outlive it.
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err(format!("{prog:?} did not finish within {}s and was killed", timeout.as_secs_f64()))
        }
    }
}

/// What every placeholder starts with (see [`sandgate_config::placeholder`]).
const PLACEHOLDER_PREFIX: &str = "sandgate-placeholder-";

/// The names of placeholders a request carries (headers, target), sorted, once each.
pub(crate) fn placeholders_seen(req: &hyper::http::request::Parts) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let uri = req.uri.to_string();
    let texts = req.headers.values().filter_map(|v| v.to_str().ok()).chain([uri.as_str()]);
    for t in texts {
        for name in placeholders_in(t) {
            if !seen.iter().any(|s| s == name) {
                seen.push(name.to_owned());
            }
        }
    }
    seen.sort();
    seen
}

/// The note an event gets when placeholders went out as they are.
pub(crate) fn placeholder_note(names: &[String]) -> String {
    format!(" [placeholder of secret {} seen, sent as is]", names.join(", "))
}

/// The secrets' names of the placeholders in `text`, in order.
pub(crate) fn placeholders_in(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices(PLACEHOLDER_PREFIX).map(move |(i, _)| {
        let rest = &text[i + PLACEHOLDER_PREFIX.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
            .unwrap_or(rest.len());
        &rest[..end]
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sandgate_config::Origin;

    use super::*;

    fn secret(source: SecretSource) -> Secret {
        Secret {
            name: "t".into(),
            hosts: Vec::new(),
            header: "Authorization".into(),
            format: "Bearer {}".into(),
            env: None,
            anywhere: false,
            source,
            origin: Origin { path: "/c.toml".into(), line: 3 },
        }
    }

    #[tokio::test]
    async fn sources_are_read_and_errors_never_show_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k");
        std::fs::write(&f, "sk-live-123\n").unwrap();
        let r = SecretReader::default();
        let v = r.read(&secret(SecretSource::File(f.clone()))).await.unwrap();
        assert_eq!(v.expose(), "sk-live-123");
        assert_eq!(format!("{v:?}"), "SecretValue(..)");
        // Rotation: the next read sees the new content.
        std::fs::write(&f, "sk-live-456").unwrap();
        let v = r.read(&secret(SecretSource::File(f.clone()))).await.unwrap();
        assert_eq!(v.expose(), "sk-live-456");
        std::fs::write(&f, "sk-live-789\nsecond line").unwrap();
        let e = r.read(&secret(SecretSource::File(f))).await.unwrap_err();
        assert!(!e.to_string().contains("sk-live"), "{e}");
        assert!(e.to_string().contains("/c.toml:3"), "{e}");
        let e = r.read(&secret(SecretSource::File(dir.path().join("missing")))).await.unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        let cmd = |argv: &[&str], timeout| SecretSource::Command {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            timeout,
            ttl: Duration::from_secs(60),
        };
        let v = r.read(&secret(cmd(&["echo", "from-cmd"], Duration::from_secs(5)))).await.unwrap();
        assert_eq!(v.expose(), "from-cmd");
        // Cached for its ttl: the same secret with a failing command still reads the old output.
        let failing = secret(cmd(&["sh", "-c", "echo sk-live-x; exit 3"], Duration::from_secs(5)));
        assert_eq!(r.read(&failing).await.unwrap().expose(), "from-cmd");
        let e = SecretReader::default().read(&failing).await.unwrap_err();
        assert!(e.why.contains("failed") && !e.to_string().contains("sk-live"), "{e}");
    }

    #[tokio::test]
    async fn a_hanging_command_is_killed_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("alive");
        let script = format!("sleep 30 & echo $! > {}; wait", marker.display());
        let s = secret(SecretSource::Command {
            argv: vec!["sh".into(), "-c".into(), script],
            timeout: Duration::from_millis(300),
            ttl: Duration::from_secs(60),
        });
        let e = SecretReader::default().read(&s).await.unwrap_err();
        assert!(e.why.contains("killed"), "{e}");
        // The grandchild went with the group.
        let pid = std::fs::read_to_string(&marker).unwrap();
        let pid = pid.trim();
        for _ in 0..100 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.contains(") Z ") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("sleep {pid} outlived the timeout");
    }
}
