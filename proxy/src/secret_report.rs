//! What `sandgate secrets list|test` reports, as values: a secret's description (never its
//! value), the lookup of a secret by name, and the result of reading its source now (the
//! value's length, never the value). The sandbox side of interception (the placeholders and the
//! CA bundle a sandbox gets) is [`sandbox_env`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sandgate_config::{InterceptSettings, Secret, SecretSource};
use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use crate::interceptor::{CA_BUNDLE_VARS, sandbox_bundle};
use crate::secret::SecretReader;

/// Name of the bundle file in the sandbox's copy of the configuration directory.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";

/// A configured secret as `sandgate secrets list` shows it: where it goes and where its value
/// comes from, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretInfo {
    /// Where the entry is written (file and line).
    pub defined_at: String,
    /// The sandbox's variable holding the placeholder.
    pub env: Option<String>,
    /// The header the value goes in.
    pub header: String,
    /// The hosts the value is sent to.
    pub hosts: Vec<String>,
    /// The secret's name.
    pub name: String,
    /// `env`, `file` or `command`.
    pub source: &'static str,
    /// The source in words (`env $VAR`, `file PATH`, `command PROG (timeout 10s, ttl 300s)`).
    #[serde(skip)]
    pub detail: String,
}

impl SecretInfo {
    /// Describes `s`.
    pub fn of(s: &Secret) -> SecretInfo {
        SecretInfo {
            defined_at: s.origin.to_string(),
            env: s.env.clone(),
            header: s.header.clone(),
            hosts: s.hosts.iter().map(ToString::to_string).collect(),
            name: s.name.clone(),
            source: s.source.kind(),
            detail: match &s.source {
                SecretSource::Env(v) => format!("env ${v}"),
                SecretSource::File(p) => format!("file {}", p.display()),
                // The program only: its arguments may carry what the command authenticates with.
                SecretSource::Command { argv, timeout, ttl } => format!(
                    "command {} (timeout {}s, ttl {}s)",
                    argv.first().map_or("", String::as_str),
                    timeout.as_secs_f64(),
                    ttl.as_secs()
                ),
            },
        }
    }
}

/// No secret has the name asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no secret named {name:?}; configured: {}", if known.is_empty() { "none".into() } else { known.join(", ") })]
pub struct UnknownSecret {
    /// The name asked for.
    pub name: String,
    /// The names configured.
    pub known: Vec<String>,
}

/// The secret called `name`.
pub fn find_secret<'a>(
    settings: &'a InterceptSettings,
    name: &str,
) -> Result<&'a Secret, UnknownSecret> {
    settings.secrets.iter().find(|s| s.name == name).ok_or_else(|| UnknownSecret {
        name: name.to_owned(),
        known: settings.secrets.iter().map(|s| s.name.clone()).collect(),
    })
}

/// Whether a secret's source gave a value when read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretTest {
    /// The secret.
    pub name: String,
    /// The value's length in bytes, or why there is none.
    pub result: Result<usize, String>,
}

impl SecretTest {
    /// Reads `secret`'s source now (runs its command, reads its file or variable).
    pub async fn run(secret: &Secret) -> SecretTest {
        let result = SecretReader::default()
            .read(secret)
            .await
            .map(|v| v.expose().len())
            .map_err(|e| e.to_string());
        SecretTest { name: secret.name.clone(), result }
    }
}

impl Serialize for SecretTest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("SecretTest", 3)?;
        match &self.result {
            Ok(len) => st.serialize_field("length", len)?,
            Err(e) => st.serialize_field("error", e)?,
        }
        st.serialize_field("name", &self.name)?;
        st.serialize_field("ok", &self.result.is_ok())?;
        st.end()
    }
}

/// What a sandbox gets when its policy intercepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxInterception {
    /// Variables to set (replacing any of the same name): each secret's variable holding the
    /// placeholder, and [`CA_BUNDLE_VARS`] naming the bundle.
    pub env: Vec<(OsString, OsString)>,
    /// Files for the sandbox's copy of the configuration directory (the CA bundle).
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// Interception is in use but there was no configuration directory for the bundle: clients
    /// inside will not trust intercepted hosts.
    pub no_bundle: bool,
}

/// What a sandbox gets when `settings` intercept: the placeholders, and the CA bundle (the
/// system roots plus the CA certificate `ca_pem` gives, asked only when needed) as a file in the
/// sandbox's copy of the configuration directory, `config_dir` (inside the sandbox). Nothing
/// when nothing is intercepted.
pub fn sandbox_env<E>(
    settings: &InterceptSettings,
    config_dir: Option<&Path>,
    ca_pem: impl FnOnce() -> Result<String, E>,
) -> Result<SandboxInterception, E> {
    let mut out = SandboxInterception::default();
    if !settings.in_use() {
        return Ok(out);
    }
    for s in &settings.secrets {
        if let Some(var) = &s.env {
            out.env.push((var.into(), s.placeholder().into()));
        }
    }
    let Some(dir) = config_dir else {
        out.no_bundle = true;
        return Ok(out);
    };
    let ca = ca_pem()?;
    out.files.push((PathBuf::from(BUNDLE_FILE), sandbox_bundle(&ca).into_bytes()));
    let path = dir.join(BUNDLE_FILE);
    for var in CA_BUNDLE_VARS {
        out.env.push((var.into(), path.clone().into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path, toml: &str) -> InterceptSettings {
        let paths = sandgate_config::ConfigPaths {
            dir: dir.to_owned(),
            global: dir.join("config.toml"),
            project: dir.join("p.toml"),
            project_dir: dir.to_owned(),
            project_root: dir.to_owned(),
            home: None,
        };
        std::fs::write(&paths.global, toml).unwrap();
        sandgate_config::Config::load(paths).unwrap().intercept_settings().unwrap()
    }

    const TWO: &str = "[[secrets]]\nname = \"key\"\nhosts = [\"api.test\"]\nheader = \"Authorization\"\n\
        env = \"S_KEY\"\nfrom_env = \"SANDGATE_TEST_SURELY_UNSET\"\n\
        [[secrets]]\nname = \"k2\"\nhosts = [\"k2.test\"]\nheader = \"X-Key\"\n\
        from_command = [\"/bin/echo\", \"abc\"]\n";

    #[test]
    fn a_listing_names_the_source_but_never_a_command_s_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), TWO);
        let infos: Vec<SecretInfo> = s.secrets.iter().map(SecretInfo::of).collect();
        assert_eq!(infos[0].detail, "env $SANDGATE_TEST_SURELY_UNSET");
        assert_eq!(infos[1].detail, "command /bin/echo (timeout 10s, ttl 300s)");
        assert!(!format!("{:?}", serde_json::to_value(&infos[1]).unwrap()).contains("abc"));
        let v = serde_json::to_value(&infos[0]).unwrap();
        assert_eq!(v["source"], "env");
        assert_eq!(v["hosts"][0], "api.test");
        assert!(v.get("detail").is_none());
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), TWO);
        assert_eq!(find_secret(&s, "k2").unwrap().name, "k2");
        let e = find_secret(&s, "nope").unwrap_err();
        assert_eq!(e.to_string(), "no secret named \"nope\"; configured: key, k2");
        let none = settings(dir.path(), "");
        assert_eq!(
            find_secret(&none, "x").unwrap_err().to_string(),
            "no secret named \"x\"; configured: none"
        );
    }

    #[test]
    fn a_test_reports_the_length_or_the_error_never_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), TWO);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let ok = rt.block_on(SecretTest::run(&s.secrets[1]));
        assert_eq!(ok.result, Ok(3));
        assert_eq!(serde_json::to_string(&ok).unwrap(), r#"{"length":3,"name":"k2","ok":true}"#);
        let bad = rt.block_on(SecretTest::run(&s.secrets[0]));
        let json = serde_json::to_string(&bad).unwrap();
        assert!(
            json.starts_with(r#"{"error":"#) && json.ends_with(r#""name":"key","ok":false}"#),
            "{json}"
        );
    }

    #[test]
    fn a_sandbox_gets_placeholders_and_the_bundle_only_when_intercepting() {
        let dir = tempfile::tempdir().unwrap();
        let none = settings(dir.path(), "");
        let never = || -> Result<String, crate::ca::CaError> { panic!("the CA was asked for") };
        assert_eq!(
            sandbox_env(&none, Some(dir.path()), never).unwrap(),
            SandboxInterception::default()
        );
        let s = settings(dir.path(), TWO);
        let no_dir = sandbox_env(&s, None, never).unwrap();
        assert!(no_dir.no_bundle && no_dir.files.is_empty());
        assert_eq!(
            no_dir.env,
            [(OsString::from("S_KEY"), OsString::from(s.secrets[0].placeholder()))]
        );
        let ca = dir.path().join("ca");
        let full = sandbox_env(&s, Some(Path::new("/cfg")), || crate::ca::ca_certificate_pem(&ca))
            .unwrap();
        assert_eq!(full.files[0].0, Path::new(BUNDLE_FILE));
        assert!(String::from_utf8_lossy(&full.files[0].1).contains("BEGIN CERTIFICATE"));
        for var in CA_BUNDLE_VARS {
            assert!(full.env.contains(&(var.into(), "/cfg/ca-bundle.pem".into())), "{var}");
        }
    }
}
