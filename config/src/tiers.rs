//! Built-in tiers, presets and default lists.

use crate::policy::NetMode;

/// A tier definition: the data a policy is resolved from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierDef {
    /// Name (`run`, `net`, `build`, or one from config).
    pub name: String,
    /// One line on what it is for.
    pub description: String,
    /// Network mode.
    pub net: NetMode,
    /// Whether the current directory and the configured `allow_write` paths are writable.
    pub writable_cwd: bool,
    /// Where it is defined (`built-in` or a config file path).
    pub defined_in: String,
}

/// The three built-in tiers of DESIGN.md.
pub fn builtin_tiers() -> Vec<TierDef> {
    let t = |name: &str, description: &str, net, writable_cwd| TierDef {
        name: name.into(),
        description: description.into(),
        net,
        writable_cwd,
        defined_in: "built-in".into(),
    };
    vec![
        t("run", "read-only, no network, credentials hidden", NetMode::None, false),
        t("net", "read-only, network only through the allowlist proxy", NetMode::Proxy, false),
        t(
            "build",
            "current directory and configured paths writable, network through the proxy",
            NetMode::Proxy,
            true,
        ),
    ]
}

/// Credential paths hidden in every tier, relative to each home directory (`$HOME` and the
/// account's home in the password database), whatever the home allowlist and `readable_home` say.
pub const DEFAULT_HIDDEN: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".config/gh",
    ".local/share/keyrings",
];

/// Entries that stay read-only inside writable directories, because writing them makes code run
/// later outside the sandbox.
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".gitmodules",
    ".envrc",
    ".vscode",
    ".idea",
    ".mcp.json",
    ".claude",
];

/// Shell start-up files, kept read-only in `$HOME` whenever `$HOME` lies in a writable path.
pub const SHELL_RC: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".bash_logout",
    ".zlogout",
    ".config/fish",
];

/// Other entries of `$HOME` that make code run later outside the sandbox, kept read-only like
/// [`SHELL_RC`] whenever `$HOME` lies in a writable path: git's own configuration (aliases,
/// `core.hooksPath`, `core.fsmonitor`), the user's `bin` directories (`~/bin` and `~/.local/bin`,
/// early in `PATH` in many login profiles), systemd user units, desktop autostart entries and
/// macOS launch agents (run at the next login).
pub const HOME_AUTORUN: &[&str] = &[
    ".gitconfig",
    ".config/git",
    "bin",
    ".local/bin",
    ".config/systemd/user",
    ".config/autostart",
    "Library/LaunchAgents",
];

/// Named sets of allow patterns that configs can include with `presets = ["..."]`.
pub const PRESETS: &[(&str, &[&str])] = &[
    (
        "registries",
        &[
            "crates.io",
            "index.crates.io",
            "static.crates.io",
            "static.rust-lang.org",
            "pypi.org",
            "files.pythonhosted.org",
            "registry.npmjs.org",
            "registry.yarnpkg.com",
            "github.com",
            "api.github.com",
            "codeload.github.com",
            "objects.githubusercontent.com",
            "raw.githubusercontent.com",
        ],
    ),
    ("rust", &["crates.io", "index.crates.io", "static.crates.io", "static.rust-lang.org"]),
    ("python", &["pypi.org", "files.pythonhosted.org"]),
    ("node", &["registry.npmjs.org", "registry.yarnpkg.com"]),
    (
        "github",
        &[
            "github.com",
            "api.github.com",
            "codeload.github.com",
            "objects.githubusercontent.com",
            "raw.githubusercontent.com",
        ],
    ),
];

/// The patterns of a preset, if it exists.
pub fn preset(name: &str) -> Option<&'static [&'static str]> {
    PRESETS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
}
