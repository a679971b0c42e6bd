//! Every command of the binary answers `--help` (this test also makes `cargo test --workspace`
//! build `target/debug/sandgate`, which the end-to-end tests in `tests/tests/suite/` run).

use std::process::Command;

#[test]
fn every_command_has_help() {
    let bin = env!("CARGO_BIN_EXE_sandgate");
    let out = Command::new(bin).arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let commands: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 10, "{text}");
    for c in commands {
        let out = Command::new(bin).args([&c, "--help"]).output().unwrap();
        assert!(out.status.success(), "sandgate {c} --help failed");
        assert!(!out.stdout.is_empty(), "sandgate {c} --help printed nothing");
    }
}
