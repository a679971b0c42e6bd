//! Golden files of the Seatbelt profile for each tier and option (`UPDATE_GOLDEN=1` rewrites them).

use std::path::{Path, PathBuf};

use sandgate_sandbox::{NetMode, SandboxId, SandboxSpec, seatbelt};

fn spec(tier: &str) -> SandboxSpec {
    let home = PathBuf::from("/Users/u");
    let cwd = PathBuf::from("/Users/u/project");
    let build = tier == "build";
    SandboxSpec {
        id: SandboxId::try_from("golden").unwrap(),
        tier_name: tier.to_owned(),
        cwd: cwd.clone(),
        command: vec!["true".into()],
        env: vec![],
        writable: if build { vec![cwd.clone()] } else { vec![] },
        hidden: [".ssh", ".aws", ".netrc", ".local/share/sandgate"]
            .iter()
            .map(|p| home.join(p))
            .collect(),
        top_level: None,
        read_only: {
            let mut r = vec![home.join(".config/sandgate")];
            if build {
                r.extend([".git/hooks", ".git/config", ".envrc"].iter().map(|p| cwd.join(p)));
            }
            r
        },
        net: if tier == "run" {
            NetMode::None
        } else {
            NetMode::Proxy { nflog_group: 7, ruleset: String::new() }
        },
        allowed_unix_sockets: vec![],
        require_full: false,
    }
}

fn check(name: &str, spec: &SandboxSpec) {
    let p = seatbelt::render(spec, Path::new("/private/var/folders/xx/T/sandgate-golden"), 3128);
    let mut got = p.text.clone();
    got.push_str("\n;; -D parameters\n");
    for (k, v) in &p.params {
        got.push_str(&format!(";; {k}={}\n", v.display()));
    }
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.sb"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&file, &got).unwrap();
    }
    let want = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", file.display()));
    assert_eq!(got, want, "golden {name} differs (UPDATE_GOLDEN=1 to accept)");
}

#[test]
fn run_tier() {
    check("run", &spec("run"));
}

#[test]
fn net_tier() {
    check("net", &spec("net"));
}

#[test]
fn build_tier() {
    check("build", &spec("build"));
}

#[test]
fn run_with_allow_write() {
    let mut s = spec("run");
    s.writable.push(PathBuf::from("/Users/u/out"));
    check("run-allow-write", &s);
}

#[test]
fn build_with_net_none() {
    let mut s = spec("build");
    s.net = NetMode::None;
    check("build-net-none", &s);
}

#[test]
fn net_with_unix_socket() {
    let mut s = spec("net");
    s.allowed_unix_sockets.push(PathBuf::from("/Users/u/.colima/docker.sock"));
    check("net-unix-socket", &s);
}

#[test]
fn profiles_hold_no_paths_only_params() {
    let p = seatbelt::render(&spec("build"), Path::new("/tmp/x"), 3128);
    assert!(!p.text.contains("/Users/u"), "paths must be -D parameters");
    assert!(p.text.contains("(remote tcp \"localhost:3128\")"));
    assert!(!p.text.contains("(allow network*)"));
    // denials come after the allowances they narrow (last match wins)
    let allow = p.text.find("(allow file-write* (subpath (param \"WRITABLE_0\")))").unwrap();
    let deny = p.text.find("(deny file-write* (subpath (param \"READ_ONLY_1\")))").unwrap();
    assert!(allow < deny);
}
