//! What the launcher keeps from the sandbox beyond the policy's hidden paths: the home
//! directories' dot-entries outside the allowlist, well-known secret files of the system,
//! secret-looking environment variables, and sandgate's configuration (replaced by a copy without
//! secrets). The lists are data in `sandgate_config`; this module applies them to this host.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sandgate_config::{HomeAllowlist, HomeVerdict, SYSTEM_SECRETS, data_entries};
use sandgate_sandbox::ProvidedDir;

/// The home directory of the account running the launcher, from the password database: the one
/// tools fall back to when `$HOME` points elsewhere.
pub fn passwd_home() -> Option<PathBuf> {
    let user = nix::unistd::User::from_uid(nix::unistd::getuid()).ok()??;
    Some(user.dir).filter(|d| d.is_absolute())
}

/// Everything the launch hides beyond the policy's own hidden paths: the system's secret files,
/// and in each of `homes` the built-in credential paths and the dot-entries outside the
/// allowlist (built-in plus `readable_home`). `keep`: see [`hidden_in_home`].
pub fn hidden_for_launch(
    homes: &[PathBuf],
    readable_home: &[String],
    keep: &[PathBuf],
) -> Vec<PathBuf> {
    let allow = HomeAllowlist::new(readable_home);
    let mut out = system_secrets();
    let mut seen: Vec<PathBuf> = Vec::new();
    for home in homes {
        let real = home.canonicalize().unwrap_or_else(|_| home.clone());
        if seen.contains(&real) {
            continue;
        }
        seen.push(real);
        out.extend(sandgate_config::DEFAULT_HIDDEN.iter().map(|p| home.join(p)));
        out.extend(hidden_in_home(home, &allow, keep));
    }
    out
}

/// The paths to hide in the home directory `home`: every dot-entry the allowlist does not make
/// readable (and, in directories it looks into, every entry it does not name), plus the
/// allowlist's exceptions that exist. `keep` are paths the launch needs (working directory,
/// writable paths, the launcher itself): an entry holding one is looked into instead of hidden,
/// and the entry that is one stays.
///
/// A hidden entry that is a symbolic link is hidden where it points (the secret lives there):
/// inside the home directory unless that is readable itself or holds the home directory or a kept
/// path; outside it only when the launching user owns the target and it is not a system
/// directory (`/`, a top-level directory, `/usr`, `/etc`, ...), since a planted `~/.x -> /usr/bin`
/// must not take the system away.
pub fn hidden_in_home(home: &Path, allow: &HomeAllowlist, keep: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(root) = home.canonicalize() else { return Vec::new() };
    let keep: Vec<PathBuf> = keep.iter().filter_map(|k| k.canonicalize().ok()).collect();
    let mut out = Vec::new();
    walk(&Walk { root: &root, allow, keep: &keep }, &root, &mut Vec::new(), &mut out);
    for exception in allow.exceptions() {
        exceptions(&root, exception, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

struct Walk<'a> {
    root: &'a Path,
    allow: &'a HomeAllowlist,
    keep: &'a [PathBuf],
}

/// Decides the entries of `dir`; `false` when it cannot be listed (then none were decided).
fn walk(w: &Walk<'_>, dir: &Path, rel: &mut Vec<OsString>, out: &mut Vec<PathBuf>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    for entry in entries.flatten() {
        let name = entry.file_name();
        // In the home directory itself only dot-entries are decided: `~/src`, `~/Documents`
        // stay readable (docs/threat-model/secrets.md says so).
        if rel.is_empty() && !name.as_bytes().starts_with(b".") {
            continue;
        }
        let path = dir.join(&name);
        // Resolving costs a `readlink` per component: only links need it (`dir` is resolved).
        let link = entry.file_type().is_ok_and(|t| t.is_symlink());
        rel.push(name);
        let parts: Vec<&OsStr> = rel.iter().map(OsString::as_os_str).collect();
        match w.allow.verdict(&parts) {
            HomeVerdict::Read => {}
            HomeVerdict::Descend if path.is_dir() => {
                let real = if link { path.canonicalize().ok() } else { Some(path.clone()) };
                // A directory that cannot be listed (mode 0711) may still open by name: hidden
                // whole, unless it holds what the launch needs.
                if let Some(real) = real
                    && !walk(w, &real, rel, out)
                    && !w.keep.iter().any(|k| k.starts_with(&real))
                {
                    out.push(real);
                }
            }
            HomeVerdict::Descend | HomeVerdict::Hide => {
                let real = if link { path.canonicalize().ok() } else { Some(path.clone()) };
                // A dangling link has nothing to read.
                if let Some(real) = real {
                    hide(w, &path, &real, rel, out);
                }
            }
        }
        rel.pop();
    }
    true
}

fn hide(w: &Walk<'_>, path: &Path, real: &Path, rel: &mut Vec<OsString>, out: &mut Vec<PathBuf>) {
    // A link to the home directory (or above): its entries are decided where they are (a mount
    // covers a place, whatever path leads there).
    if w.keep.iter().any(|k| k == real) || w.root.starts_with(real) {
        return;
    }
    let holds_kept = w.keep.iter().any(|k| k.starts_with(real));
    if let Ok(inside) = real.strip_prefix(w.root) {
        // A link to a readable entry (`~/.cargo-nightly -> ~/.cargo`) stays readable.
        let parts: Vec<&OsStr> = inside.iter().collect();
        if real != path && w.allow.verdict(&parts) == HomeVerdict::Read {
            return;
        }
        if !holds_kept {
            out.push(path.to_path_buf());
        } else if real.is_dir() && rel.len() < MAX_DEPTH {
            // (Unlistable: its other entries cannot be found, and hiding it would hide the kept
            // path; the launch's own directories are the user's to keep.)
            walk(w, real, rel, out);
        }
        return;
    }
    if !holds_kept && !system(real) && owned_by_caller(real) {
        out.push(real.to_path_buf());
    }
}

/// Directories of the system that a dot-link may point into (`~/.jdk -> /usr/lib/jvm/...`):
/// hiding them would break the sandbox, and they hold what any user may read anyway.
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix", "/gnu",
    "/snap", "/proc", "/sys", "/dev", "/run", "/boot", "/var/lib",
];

fn system(real: &Path) -> bool {
    real.components().count() <= 2 || SYSTEM.iter().any(|s| real.starts_with(s))
}

/// Whether the launching user owns `path`: a link out of the home directory to the user's own
/// files (`~/.aws -> /mnt/keys/aws`) leads to secrets; to someone else's, to what they share.
fn owned_by_caller(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.uid() == nix::unistd::getuid().as_raw())
}

/// How deep the walk follows directories that hold a kept path (links can make loops).
const MAX_DEPTH: usize = 16;

/// The existing paths below `root` matching `pattern` (components, `*` allowed).
fn exceptions(root: &Path, pattern: &[String], out: &mut Vec<PathBuf>) {
    let Some((first, rest)) = pattern.split_first() else { return };
    let names: Vec<OsString> = if first.contains('*') {
        let Ok(entries) = std::fs::read_dir(root) else { return };
        entries
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| sandgate_config::wildcard(first.as_bytes(), n.as_bytes()))
            .collect()
    } else {
        vec![first.into()]
    };
    for name in names {
        let path = root.join(name);
        if rest.is_empty() {
            if std::fs::symlink_metadata(&path).is_ok() {
                out.push(path);
            }
        } else if path.is_dir() {
            exceptions(&path, rest, out);
        }
    }
}

/// The well-known secret files of the system (`SYSTEM_SECRETS`) that exist and that the launching
/// user can read (for root: all; hiding what cannot be read anyway would only cost mounts).
pub fn system_secrets() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in data_entries(SYSTEM_SECRETS) {
        let path = Path::new(entry);
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { continue };
        if name.as_bytes().contains(&b'*') {
            let Ok(entries) = std::fs::read_dir(parent) else { continue };
            out.extend(
                entries
                    .flatten()
                    .filter(|e| {
                        sandgate_config::wildcard(name.as_bytes(), e.file_name().as_bytes())
                    })
                    .map(|e| e.path()),
            );
        } else if std::fs::symlink_metadata(path).is_ok() {
            out.push(path.to_path_buf());
        }
    }
    out.retain(|p| readable_by_caller(p));
    out
}

/// Whether the launching user can read `path` (or, for a directory, open names inside it).
fn readable_by_caller(path: &Path) -> bool {
    use nix::unistd::{AccessFlags, access};
    access(path, AccessFlags::R_OK).is_ok()
        || (path.is_dir() && access(path, AccessFlags::X_OK).is_ok())
}

/// Splits `env` into what the command gets and the names of the secret-looking variables
/// removed (in order, each once), in one pass: every launch matches each variable against the
/// secret patterns once.
pub fn scrub_env(
    env: &[(OsString, OsString)],
    filter: &sandgate_config::EnvFilter,
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let (mut kept, mut removed) = (Vec::with_capacity(env.len()), Vec::<String>::new());
    for (k, v) in env {
        if !filter.removes(k) {
            kept.push((k.clone(), v.clone()));
            continue;
        }
        let name = k.to_string_lossy();
        if !removed.iter().any(|r| *r == name) {
            removed.push(name.into_owned());
        }
    }
    (kept, removed)
}

/// sandgate's configuration directory as the sandbox sees it: the global file and the working
/// directory's per-directory file, each reduced to the policy (no `[telegram]` token, no
/// `[daemon]`, no comments), so that a launch nested inside finds its policy and nothing else.
pub fn config_copy(config_dir: &Path, cwd: &Path) -> ProvidedDir {
    let mut files = Vec::new();
    let mut add = |rel: PathBuf| {
        if let Ok(text) = std::fs::read_to_string(config_dir.join(&rel))
            && let Ok(clean) = sandgate_config::sanitized_config(&text)
        {
            files.push((rel, clean.into_bytes()));
        }
    };
    add(PathBuf::from("config.toml"));
    if let Ok(dir) = cwd.canonicalize() {
        let key = sandgate_config::project_key(&dir);
        add(Path::new("projects").join(format!("{key}.toml")));
    }
    ProvidedDir { path: config_dir.to_path_buf(), files }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }

    #[test]
    fn the_home_walk_hides_all_but_the_allowlist() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        for rel in [
            ".bashrc",
            ".ssh/id_rsa",
            ".cargo/bin/cargo",
            ".cargo/credentials.toml",
            ".config/nvim/init.lua",
            ".config/gh/hosts.yml",
            ".config/hub",
            ".local/share/keyrings/login.keyring",
            ".local/share/fonts/f.ttf",
            ".local/bin/tool",
            ".pgpass",
            "src/project/main.rs",
            ".work/proj/file",
            ".work/other/secret",
        ] {
            touch(&home, rel);
        }
        std::os::unix::fs::symlink(&home, home.join(".self")).unwrap();
        std::os::unix::fs::symlink("/usr", home.join(".usr")).unwrap();
        // A planted link to a system directory must not take it away from the sandbox.
        std::os::unix::fs::symlink("/usr/bin", home.join(".ubin")).unwrap();
        std::os::unix::fs::symlink("/etc/ssl", home.join(".ssl")).unwrap();
        std::os::unix::fs::symlink(home.join("src/project"), home.join(".proj")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", home.join(".dangling")).unwrap();
        std::os::unix::fs::symlink(home.join(".cargo"), home.join(".cargo-nightly")).unwrap();
        let allow = HomeAllowlist::new(&[]);
        let keep = [home.join(".work/proj")];
        let got = hidden_in_home(&home, &allow, &keep);
        let mut want: Vec<PathBuf> = [
            ".cargo/credentials.toml",
            ".config/gh",
            ".config/hub",
            ".local/share/keyrings",
            ".pgpass",
            // A link into the home directory: hidden where it points, a non-dot directory.
            ".proj",
            ".ssh",
            ".work/other",
        ]
        .iter()
        .map(|r| home.join(r))
        .collect();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn secret_variables_are_scrubbed_once_by_name() {
        let env: Vec<(OsString, OsString)> = [
            ("PATH", "/bin"),
            ("GH_TOKEN", "t"),
            ("gh_token", "u"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
        let (kept, removed) = scrub_env(&env, &sandgate_config::EnvFilter::new(&["AWS_*".into()]));
        assert_eq!(kept, vec![(OsString::from("PATH"), OsString::from("/bin")), env[3].clone()]);
        assert_eq!(removed, ["GH_TOKEN", "gh_token"]);
    }

    #[test]
    fn the_config_copy_has_no_token() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().join("p");
        std::fs::create_dir(&cwd).unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            "[network]\nallow = [\"a.com\"]\n[telegram]\ntoken = \"1:SECRET\"\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("other.key"), "SECRET").unwrap();
        let key = sandgate_config::project_key(&cwd.canonicalize().unwrap());
        std::fs::create_dir(dir.path().join("projects")).unwrap();
        std::fs::write(
            dir.path().join(format!("projects/{key}.toml")),
            "[filesystem]\nallow_write = [\"/x\"]\n",
        )
        .unwrap();
        let copy = config_copy(dir.path(), &cwd);
        let names: Vec<&Path> = copy.files.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(
            names,
            [Path::new("config.toml"), &Path::new("projects").join(format!("{key}.toml"))]
        );
        for (_, text) in &copy.files {
            assert!(!String::from_utf8_lossy(text).contains("SECRET"));
        }
    }
}
