//! Package caches: where each tool keeps the files it downloads and extracts, found the way the
//! tool itself finds them (its variables first, then its default), and how a sandbox may use them.
//!
//! A sandbox never writes a cache the host's tools execute from: an extracted crate's `build.rs`
//! or a package under `~/.npm/_npx` runs on the host's next build without being checked again.
//! So each cache is *copy-on-write* inside (the launcher mounts an overlay: the host's cache
//! read-only below, a layer of sandgate's above, which no host tool reads). This module only
//! decides which directories are caches; the layers and mounts are the launcher's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// How a sandbox's package caches are layered (`[filesystem] caches`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// One layer per project (the repository around the working directory): what an agent puts
    /// in one project's caches is never seen by another project's builds. The default.
    #[default]
    Project,
    /// One layer shared by every project: warmer, but an agent in one project can then affect
    /// builds in another (a planted package in the shared layer runs in the next sandboxed build
    /// anywhere). Never the host's cache either way.
    Shared,
    /// No layer: the caches are read-only inside, as every other home directory is.
    Off,
}

impl CacheMode {
    /// Its name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Project => "project",
            CacheMode::Shared => "shared",
            CacheMode::Off => "off",
        }
    }

    /// The mode named `name`.
    pub fn from_name(name: &str) -> Option<CacheMode> {
        [CacheMode::Project, CacheMode::Shared, CacheMode::Off]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// Where a cache's default lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    /// Relative to the home directory.
    Home,
    /// Relative to `$XDG_CACHE_HOME` (or `~/.cache`).
    XdgCache,
    /// Relative to `$XDG_DATA_HOME` (or `~/.local/share`).
    XdgData,
    /// Relative to the first entry of `$GOPATH` (or `~/go`).
    GoPath,
}

/// One package cache of one tool: the variables that name it (first set one wins, as the tool
/// reads them), the default, the programs whose presence makes a missing cache worth creating,
/// and why it is a cache.
struct Known {
    /// The layer's name (`cargo`, `npm-cache`, ...): unique, a plain file name.
    name: &'static str,
    vars: &'static [&'static str],
    default: (Base, &'static str),
    programs: &'static [&'static str],
    /// Files in the cache that hold credentials: hidden inside, wherever the cache lives.
    secrets: &'static [&'static str],
}

/// The package caches sandgate layers. Each is a directory the tool writes on an ordinary build
/// or install and reads back later, on the host too.
///
/// - cargo: the whole `CARGO_HOME` (registry index and sources, git checkouts, the
///   `.package-cache` lock files at its top, `cargo install`'s `bin`); its credentials stay hidden
///   on top of the layer.
/// - Gradle: the whole `GRADLE_USER_HOME` (caches, wrapper distributions, the daemon registry);
///   `gradle.properties` stays hidden on top.
const KNOWN: &[Known] = &[
    Known {
        name: "cargo",
        vars: &["CARGO_HOME"],
        default: (Base::Home, ".cargo"),
        programs: &["cargo"],
        secrets: &["credentials.toml", "credentials"],
    },
    Known {
        name: "npm",
        vars: &["npm_config_cache", "NPM_CONFIG_CACHE"],
        default: (Base::Home, ".npm"),
        programs: &["npm", "npx", "node"],
        secrets: &[],
    },
    Known {
        name: "pip",
        vars: &["PIP_CACHE_DIR"],
        default: (Base::XdgCache, "pip"),
        programs: &["pip", "pip3", "python3"],
        secrets: &[],
    },
    Known {
        name: "uv",
        vars: &["UV_CACHE_DIR"],
        default: (Base::XdgCache, "uv"),
        programs: &["uv"],
        secrets: &[],
    },
    Known {
        name: "yarn",
        vars: &["YARN_CACHE_FOLDER"],
        default: (Base::XdgCache, "yarn"),
        programs: &["yarn", "yarnpkg"],
        secrets: &[],
    },
    Known {
        name: "yarn-berry",
        vars: &["YARN_GLOBAL_FOLDER"],
        default: (Base::Home, ".yarn/berry"),
        programs: &[],
        secrets: &[],
    },
    Known {
        name: "pnpm-store",
        vars: &["PNPM_STORE_DIR"],
        default: (Base::XdgData, "pnpm/store"),
        programs: &["pnpm"],
        secrets: &[],
    },
    Known {
        name: "pnpm-cache",
        vars: &[],
        default: (Base::XdgCache, "pnpm"),
        programs: &["pnpm"],
        secrets: &[],
    },
    Known {
        name: "go-mod",
        vars: &["GOMODCACHE"],
        default: (Base::GoPath, "pkg/mod"),
        programs: &["go"],
        secrets: &[],
    },
    Known {
        name: "go-build",
        vars: &["GOCACHE"],
        default: (Base::XdgCache, "go-build"),
        programs: &["go"],
        secrets: &[],
    },
    Known {
        name: "maven",
        vars: &[],
        default: (Base::Home, ".m2/repository"),
        programs: &["mvn"],
        secrets: &[],
    },
    Known {
        name: "gradle",
        vars: &["GRADLE_USER_HOME"],
        default: (Base::Home, ".gradle"),
        programs: &["gradle"],
        secrets: &["gradle.properties"],
    },
    Known {
        name: "bun",
        vars: &["BUN_INSTALL_CACHE_DIR"],
        default: (Base::Home, ".bun/install/cache"),
        programs: &["bun"],
        secrets: &[],
    },
    Known {
        name: "deno",
        vars: &["DENO_DIR"],
        default: (Base::XdgCache, "deno"),
        programs: &["deno"],
        secrets: &[],
    },
];

/// A package cache found for a launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageCache {
    /// The layer's name (`cargo`, `npm`, `go-mod`, ...).
    pub name: &'static str,
    /// The cache directory as the tool finds it (absolute, not resolved).
    pub path: PathBuf,
    /// Programs whose presence on `PATH` makes a missing cache directory worth creating (empty:
    /// only an existing one is layered).
    pub programs: &'static [&'static str],
    /// Files in the cache that hold credentials (relative): hidden inside.
    pub secrets: &'static [&'static str],
}

/// Directories of programs that tools install and the host then runs by name (`GOBIN`, or
/// `bin` of the first `GOPATH` entry, `~/go/bin`): kept read-only when they lie in a writable
/// path, like the directories of `PATH`.
pub fn program_dirs(var: impl Fn(&str) -> Option<OsString>, home: &Path) -> Vec<PathBuf> {
    let gobin = var("GOBIN").map(PathBuf::from).filter(|p| p.is_absolute()).unwrap_or_else(|| {
        var("GOPATH")
            .and_then(|p| std::env::split_paths(&p).next())
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join("go"))
            .join("bin")
    });
    let mut dirs: Vec<PathBuf> = var("PATH")
        .map(|p| std::env::split_paths(&p).filter(|d| d.is_absolute()).collect())
        .unwrap_or_default();
    dirs.push(gobin);
    dirs
}

/// The names of every cache sandgate knows, in order.
pub fn cache_names() -> impl Iterator<Item = &'static str> {
    KNOWN.iter().map(|k| k.name)
}

/// The package caches of a launch with environment `var` (a variable's value, `None` when unset
/// or empty) and home directory `home`, in [`KNOWN`]'s order, each once: a cache inside another
/// one is left out (the outer layer holds it), and so is a relative path (a tool would resolve it
/// against its working directory, which is the project's business).
pub fn package_caches(var: impl Fn(&str) -> Option<OsString>, home: &Path) -> Vec<PackageCache> {
    let base = |b: Base| -> PathBuf {
        let xdg = |v: &str, fallback: &str| {
            var(v)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| home.join(fallback))
        };
        match b {
            Base::Home => home.to_path_buf(),
            Base::XdgCache => xdg("XDG_CACHE_HOME", ".cache"),
            Base::XdgData => xdg("XDG_DATA_HOME", ".local/share"),
            Base::GoPath => var("GOPATH")
                .and_then(|p| std::env::split_paths(&p).next())
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| home.join("go")),
        }
    };
    let mut found: Vec<PackageCache> = KNOWN
        .iter()
        .map(|k| {
            let named = k.vars.iter().find_map(|v| var(v)).map(PathBuf::from);
            let path = named.unwrap_or_else(|| base(k.default.0).join(k.default.1));
            PackageCache { name: k.name, path, programs: k.programs, secrets: k.secrets }
        })
        .filter(|c| c.path.is_absolute())
        .collect();
    // (Compared as lists of components, made once: `Path::starts_with` walks both paths'
    // components at each call, and this is on every launch's path.)
    let parts: Vec<Vec<std::path::Component<'_>>> =
        found.iter().map(|c| c.path.components().collect()).collect();
    let keep: Vec<bool> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let inside_another = parts.iter().any(|o| o != p && p.starts_with(o));
            let first = !parts[..i].contains(p);
            !inside_another && first
        })
        .collect();
    let mut keep = keep.into_iter();
    found.retain(|_| keep.next().unwrap_or(false));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caches(vars: &[(&str, &str)]) -> Vec<(&'static str, String)> {
        let var = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
                .filter(|v| !v.is_empty())
        };
        package_caches(var, Path::new("/home/u"))
            .into_iter()
            .map(|c| (c.name, c.path.display().to_string()))
            .collect()
    }

    fn path_of(all: &[(&'static str, String)], name: &str) -> Option<String> {
        all.iter().find(|(n, _)| *n == name).map(|(_, p)| p.clone())
    }

    #[test]
    fn caches_are_found_where_the_tools_look() {
        // (variables, cache, where)
        type Row<'a> = (&'a [(&'a str, &'a str)], &'a str, Option<&'a str>);
        let rows: &[Row<'_>] = &[
            (&[], "cargo", Some("/home/u/.cargo")),
            (&[("CARGO_HOME", "/opt/cargo")], "cargo", Some("/opt/cargo")),
            (&[], "npm", Some("/home/u/.npm")),
            (&[("npm_config_cache", "/c/npm")], "npm", Some("/c/npm")),
            (&[("NPM_CONFIG_CACHE", "/c/npm2")], "npm", Some("/c/npm2")),
            (&[], "pip", Some("/home/u/.cache/pip")),
            (&[("XDG_CACHE_HOME", "/x")], "pip", Some("/x/pip")),
            (&[("PIP_CACHE_DIR", "/p"), ("XDG_CACHE_HOME", "/x")], "pip", Some("/p")),
            (&[("XDG_CACHE_HOME", "relative")], "uv", Some("/home/u/.cache/uv")),
            (&[], "go-mod", Some("/home/u/go/pkg/mod")),
            (&[("GOPATH", "/g1:/g2")], "go-mod", Some("/g1/pkg/mod")),
            (&[("GOMODCACHE", "/m")], "go-mod", Some("/m")),
            (&[], "go-build", Some("/home/u/.cache/go-build")),
            (&[], "pnpm-store", Some("/home/u/.local/share/pnpm/store")),
            (&[], "maven", Some("/home/u/.m2/repository")),
            (&[], "gradle", Some("/home/u/.gradle")),
            (&[], "bun", Some("/home/u/.bun/install/cache")),
            // A relative value: the tool would resolve it in its working directory; not layered.
            (&[("CARGO_HOME", "rel/cargo")], "cargo", None),
            // Inside another cache: the outer layer holds it.
            (&[("PIP_CACHE_DIR", "/home/u/.cargo/pip")], "pip", None),
        ];
        for (vars, name, want) in rows {
            let all = caches(vars);
            assert_eq!(path_of(&all, name).as_deref(), *want, "{vars:?} {name}");
        }
    }

    #[test]
    fn every_cache_has_a_plain_unique_name_and_modes_round_trip() {
        let names: Vec<&str> = cache_names().collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'), "{n}");
            assert!(!names[..i].contains(n), "{n} twice");
        }
        for m in [CacheMode::Project, CacheMode::Shared, CacheMode::Off] {
            assert_eq!(CacheMode::from_name(m.name()), Some(m));
        }
        assert_eq!(CacheMode::from_name("on"), None);
    }
}
