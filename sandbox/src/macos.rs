//! macOS backend: the command runs under `sandbox-exec` with the profile of [`crate::seatbelt`].

use std::process::{Child, Command};

use crate::SandboxError;
use crate::seatbelt;
use crate::spec::{Enforcement, PROXY_PORT, SandboxSpec};

/// A started sandbox.
#[derive(Debug)]
pub struct Launched {
    child: Child,
    tmp: std::path::PathBuf,
    /// What was enforced (Seatbelt enforces the whole profile or refuses to start).
    pub enforcement: Enforcement,
}

impl Launched {
    /// Process id of `sandbox-exec`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the command; returns its exit code (128 + signal number when killed).
    pub fn wait(mut self) -> Result<u8, SandboxError> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.wait().map_err(SandboxError::io("wait"))?;
        let _ = std::fs::remove_dir_all(&self.tmp);
        Ok(match (status.code(), status.signal()) {
            (Some(c), _) => (c & 0xff) as u8,
            (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
            (None, None) => 255,
        })
    }
}

/// Starts `spec` under `sandbox-exec`. The proxy listens on the host's `localhost:PROXY_PORT`
/// (served by the daemon); the profile allows nothing else.
pub fn launch(spec: &SandboxSpec) -> Result<Launched, SandboxError> {
    launch_with_proxy_port(spec, PROXY_PORT)
}

/// [`launch`] with the proxy on `localhost:proxy_port` (a port the launcher bound for this
/// sandbox; the profile allows only it).
pub fn launch_with_proxy_port(
    spec: &SandboxSpec,
    proxy_port: u16,
) -> Result<Launched, SandboxError> {
    let tmp = std::env::temp_dir().join(format!("sandgate-{}", spec.id));
    std::fs::create_dir_all(&tmp).map_err(SandboxError::io("create private TMPDIR"))?;
    let tmp = tmp.canonicalize().map_err(SandboxError::io("resolve private TMPDIR"))?;
    let profile = seatbelt::render(spec, &tmp, proxy_port);
    let (program, args) = spec
        .command
        .split_first()
        .ok_or(SandboxError::CommandNotFound { command: String::new() })?;
    let child = Command::new(seatbelt::SANDBOX_EXEC)
        .args(profile.args())
        .arg("--")
        .arg(program)
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env("TMPDIR", &tmp)
        .current_dir(&spec.cwd)
        .spawn()
        .map_err(SandboxError::io("start sandbox-exec"))?;
    Ok(Launched { child, tmp, enforcement: Enforcement::default() })
}
