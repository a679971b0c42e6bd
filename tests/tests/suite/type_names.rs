//! One type, one name (issue 21, item 2): no `pub struct`/`pub enum`/`pub type`/`pub trait`/
//! `pub union` name is defined in two crates of the workspace.
//!
//! Two crates each defining `Effect` (or `SandboxId`, `Question`, ...) either mean the same thing
//! — then the glue code converts between twins and they drift apart — or they mean different
//! things under one name, and a reader of the glue code (which imports both) cannot tell which is
//! which. Either way the fix is in the source: one definition in the lowest crate that needs it,
//! or a name that says what the thing is. This test lists the names per crate by reading the
//! sources (the workspace members from the root `Cargo.toml`, so a new crate is covered without
//! editing this file) and fails on every name found in two crates.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Names a crate may define although another crate does too, each with the reason. Keep it
/// short: an entry is only for a name that is a convention of every crate (one per crate by
/// design), never for two types that happen to collide.
///
/// It is empty: each crate names its error type after itself (`ConfigError`, `StoreError`,
/// `SandboxError`, ...), so not even `Error` needs an entry.
const CONVENTIONAL: &[(&str, &str)] = &[];

const KINDS: &[&str] = &["struct", "enum", "type", "trait", "union"];

/// The workspace root (this crate lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// The member directories listed in the root manifest's `[workspace] members`, plus the root
/// package itself (`.`).
fn members(root: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("root Cargo.toml");
    let start = manifest.find("members").expect("[workspace] members");
    let list = &manifest[start..];
    let list = &list[list.find('[').expect("members list")..=list.find(']').expect("members end")];
    let mut members: Vec<String> = list.split('"').skip(1).step_by(2).map(str::to_owned).collect();
    assert!(members.len() >= 5, "read too few workspace members from {list:?}");
    members.push(".".to_owned());
    members
}

/// The sources of one crate's library or binary: `src/` (for the `tests` crate, whose library is
/// `lib.rs` at its top, that file and its support modules). Test, bench, example and fuzz
/// targets are not the crate's vocabulary and are left out.
fn sources(root: &Path, member: &str) -> Vec<PathBuf> {
    let dir = root.join(member);
    let mut files = Vec::new();
    if dir.join("src").is_dir() {
        walk(&dir.join("src"), &mut files);
    } else if dir.join("lib.rs").is_file() {
        files.push(dir.join("lib.rs"));
    }
    files.sort();
    files
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The names of the `pub` (not `pub(crate)`) types and traits defined in `text`, with the line.
fn pub_names(text: &str) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("pub ") else { continue };
        let rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
        for kind in KINDS {
            if let Some(after) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
                let name: String =
                    after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    names.push((name, n + 1));
                }
            }
        }
    }
    names
}

#[test]
fn pub_names_are_read_from_source_lines() {
    let text = "pub struct A;\n  pub enum B {\npub(crate) struct C;\n/// pub struct D\n\
                pub type E<T> = T;\npub trait F: Send {\npub unsafe trait G {}\npub fn h() {}\n\
                pub use x::I;\n";
    let names: Vec<String> = pub_names(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["A", "B", "E", "F", "G"]);
}

#[test]
fn no_type_name_is_defined_in_two_crates() {
    let root = root();
    // name → crate → first place it is defined there
    let mut seen: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for member in members(&root) {
        let files = sources(&root, &member);
        assert!(!files.is_empty(), "no sources found for workspace member {member}");
        for file in files {
            let text = fs::read_to_string(&file).expect("read source");
            let shown = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
            for (name, line) in pub_names(&text) {
                seen.entry(name)
                    .or_default()
                    .entry(member.clone())
                    .or_insert_with(|| format!("{shown}:{line}"));
            }
        }
    }
    let allowed: BTreeSet<&str> = CONVENTIONAL.iter().map(|(name, _)| *name).collect();
    let twice: Vec<String> = seen
        .iter()
        .filter(|(name, crates)| crates.len() > 1 && !allowed.contains(name.as_str()))
        .map(|(name, crates)| {
            let places: Vec<&str> = crates.values().map(String::as_str).collect();
            format!("  {name}: {}", places.join(", "))
        })
        .collect();
    assert!(
        twice.is_empty(),
        "{} type names are defined in more than one crate (merge the twins into the lowest \
         crate that needs them, or rename the one whose name misleads):\n{}",
        twice.len(),
        twice.join("\n")
    );
    assert!(seen.len() > 100, "found only {} type names: is the source walk broken?", seen.len());
}
