//! Shared fixture of the `sandgate hook claude` tests (`hook`, `redteam_net`): a private
//! environment with a home holding credentials, a project, the wrappers as users get them
//! (`sandgate install --dir`) with `sandgate` beside them, and a runner for the hook.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sandgate_tests::{Env, sandgate_bin};

/// A home (`home/`, with a key and a shell rc), a project (`project/`) and the wrappers
/// (`bin/`); each test module adds the files its cases need.
pub struct HookProject {
    pub env: Env,
    pub project: PathBuf,
    pub bin: PathBuf,
}

/// Writes `text` to `p`, creating its parent directories.
pub fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

impl HookProject {
    pub fn new() -> HookProject {
        let env = Env::outside_tmp();
        let root = env.root.path().to_owned();
        let home = root.join("home");
        let project = root.join("project");
        write(&home.join(".ssh/id_rsa"), "KEY");
        write(&home.join(".bashrc"), "# rc");
        write(&project.join("src/main.rs"), "fn main() {}");
        let bin = root.join("bin");
        let out = env.cmd().args(["install", "--dir"]).arg(&bin).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::os::unix::fs::symlink(sandgate_bin(), bin.join("sandgate")).unwrap();
        HookProject { env, project, bin }
    }

    /// The directory that holds `home/`, `project/` and `bin/`.
    pub fn root(&self) -> &Path {
        self.env.root.path()
    }

    /// Runs `sandgate hook claude ARGS` in the project with `PATH=path` and `vars`, `input` on
    /// its stdin; returns its stdout (panics on a non-zero exit).
    pub fn hook_stdout(
        &self,
        input: &[u8],
        args: &[String],
        path: &str,
        vars: &[(&str, &str)],
    ) -> String {
        let mut child = self
            .env
            .cmd()
            .args(["hook", "claude"])
            .args(args)
            .env("PATH", path)
            .envs(vars.iter().copied())
            .current_dir(&self.project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // The hook may stop reading at its limit: a broken pipe is fine.
        let _ = stdin.write_all(input);
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "hook failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}
