//! `sandgate completions SHELL` and `sandgate man`: shell completions (clap_complete) and a man
//! page (clap_mangen) generated from the same command definitions as `--help`, and their
//! installation under the user's XDG data directories by `sandgate install`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::CommandFactory as _;
use clap_complete::Shell;
use sandgate_daemon::install;

/// Options of `sandgate completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write completions for (to standard output).
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Options of `sandgate man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write `sandgate.1` and one page per subcommand (`sandgate-run.1`, ...) into this
    /// directory instead of printing `sandgate.1` to standard output.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `sandgate completions SHELL`.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<u8> {
    let mut bytes = Vec::new();
    clap_complete::generate(args.shell, &mut crate::Cli::command(), "sandgate", &mut bytes);
    // A closed pipe (`| head`) ends the output quietly.
    let _ = std::io::stdout().lock().write_all(&bytes);
    Ok(0)
}

/// `sandgate man [--dir DIR]`.
pub fn man(args: ManArgs) -> anyhow::Result<u8> {
    match args.dir {
        Some(dir) => {
            for page in write_man_pages(&dir)? {
                println!("{}", page.display());
            }
        }
        None => {
            let mut bytes = Vec::new();
            clap_mangen::Man::new(crate::Cli::command()).render(&mut bytes)?;
            let _ = std::io::stdout().lock().write_all(&bytes);
        }
    }
    Ok(0)
}

/// Writes the man pages into `dir`; returns their paths.
fn write_man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cmd = crate::Cli::command();
    let mut written = Vec::new();
    let mut page = |name: String, cmd: clap::Command| -> anyhow::Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut bytes = Vec::new();
        clap_mangen::Man::new(cmd).title(name.to_uppercase()).render(&mut bytes)?;
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("sandgate-{}", sub.get_name());
        // clap wants a static name; this process writes a handful of pages and exits.
        let display: &'static str = Box::leak(name.clone().into_boxed_str());
        page(name, sub.clone().name(display))?;
    }
    page("sandgate".into(), cmd)?;
    Ok(written)
}

/// Installs completions for bash, zsh and fish and the man pages under `data_home`
/// (`$XDG_DATA_HOME`, or `~/.local/share`) and `config_home` (fish reads its own directory);
/// returns what was written. Where each shell and `man` look by default is in docs/getting-started.md.
pub fn install_docs(data_home: &Path, config_home: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (name, path) in install::completion_paths(data_home, config_home) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let bytes = completion(name).unwrap_or_default();
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    written.extend(write_man_pages(&install::man_dir(data_home))?);
    Ok(written)
}

/// The completions this sandgate writes for shell `name` (`bash`, `zsh`, `fish`, ...).
pub fn completion(name: &str) -> Option<Vec<u8>> {
    let shell: Shell = name.parse().ok()?;
    let mut bytes = Vec::new();
    clap_complete::generate(shell, &mut crate::Cli::command(), "sandgate", &mut bytes);
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_gets_completions_that_name_the_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut bytes = Vec::new();
            clap_complete::generate(shell, &mut crate::Cli::command(), "sandgate", &mut bytes);
            let text = String::from_utf8(bytes).unwrap();
            for sub in ["run", "net", "build", "allow", "pending", "completions"] {
                assert!(text.contains(sub), "{shell}: {sub}");
            }
        }
    }

    #[test]
    fn install_writes_completions_and_a_page_per_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let (data, config) = (dir.path().join("data"), dir.path().join("config"));
        let written = install_docs(&data, &config).unwrap();
        assert!(data.join("bash-completion/completions/sandgate").is_file());
        assert!(data.join("zsh/site-functions/_sandgate").is_file());
        assert!(config.join("fish/completions/sandgate.fish").is_file());
        let run = std::fs::read_to_string(data.join("man/man1/sandgate-run.1")).unwrap();
        assert!(run.contains(".TH SANDGATE-RUN") && run.contains("allow\\-write"), "{run}");
        assert!(data.join("man/man1/sandgate.1").is_file());
        assert!(written.len() > 10, "{written:?}");
    }
}
