//! `~/Library`: hidden by default, as the home dot-entries are on Linux. It holds the login
//! keychain (`Keychains`), browsers' cookie and login stores (`Application Support/Google`,
//! `Safari`, `Cookies`), editors' and chat apps' state databases with their tokens, MCP
//! configurations with API keys, and every app's `Containers` and `Group Containers`. What
//! toolchains read there is allowed back, read-only, one entry at a time, each with its reason.
//! Writes stay refused even to these (tool caches the host trusts: a compiled object planted in
//! `Caches/go-build` or a module in `org.swift.swiftpm` is loaded by the host's next build).

/// Entries of `~/Library` the sandbox may read: (path relative to `~/Library`, why).
pub const READABLE: &[(&str, &str)] = &[
    (
        "Preferences/.GlobalPreferences.plist",
        "locale, measurement units and text settings every CoreFoundation tool reads",
    ),
    (
        "Preferences/com.apple.dt.Xcode.plist",
        "xcodebuild and xcrun read the chosen toolchain and the license acceptance",
    ),
    ("Developer", "Xcode's per-user data: toolchains, platforms, simulators, DerivedData"),
    ("Java/JavaVirtualMachines", "JDKs installed per user (IntelliJ, sdkman-style installers)"),
    ("Python", "pip --user installs (bin and site-packages) that python3 imports"),
    ("pnpm", "PNPM_HOME on macOS: pnpm's global binaries and its store"),
    ("Android/sdk", "the Android SDK's default location (Gradle, adb, emulator binaries)"),
    ("Fonts", "fonts that renderers (Playwright, LaTeX, matplotlib) load"),
    ("org.swift.swiftpm", "SwiftPM's configuration: mirrors and collections"),
    ("Caches/Homebrew", "brew reads its downloads (bottles) before fetching"),
    ("Caches/pip", "pip's wheel and HTTP cache (read: installs without downloading again)"),
    ("Caches/go-build", "go's build cache (read: builds reuse it; the sandbox writes its own)"),
    ("Caches/org.swift.swiftpm", "SwiftPM's package cache (read only)"),
    ("Caches/pnpm", "pnpm's metadata cache (read only)"),
    ("Caches/Yarn", "Yarn's package cache (read only)"),
    ("Caches/ms-playwright", "browsers Playwright downloaded"),
    ("Caches/Cypress", "the Cypress binary"),
    ("Caches/com.apple.python", "bytecode of Apple's python3 (read only)"),
];

/// Entries of `~/Library` denied whatever path is writable (a writable path inside `~/Library`
/// is allowed after the hiding): (path relative to `~/Library`, operations).
pub const ALWAYS_DENIED: &[(&str, &str)] = &[
    // the login keychain and the others
    ("Keychains", "file-read* file-write*"),
    // agents launchd starts at login
    ("LaunchAgents", "file-write*"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_relative_has_a_reason_and_names_no_secret_store() {
        for (path, why) in READABLE {
            assert!(!path.starts_with('/') && !path.contains(".."), "{path}");
            assert!(why.len() > 12, "{path}: say why");
            for secret in [
                "Keychains",
                "Cookies",
                "Application Support",
                "Containers",
                "Group Containers",
                "Mail",
                "Messages",
                "Safari",
            ] {
                assert!(!path.starts_with(secret), "{path} opens {secret}");
            }
        }
        // `Caches` as a whole holds browsers' and chat apps' caches (tokens, pages): by tool only.
        assert!(!READABLE.iter().any(|(p, _)| *p == "Caches" || *p == "Preferences"));
    }
}
