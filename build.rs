//! Links GCC's unwinder into the binaries statically on Linux with glibc (what `gcc
//! -static-libgcc` does), so that they load one shared library fewer: without this, every start
//! of `sandgate-launch` (each `sandbox-*` command) has the dynamic loader find, map and relocate
//! `libgcc_s.so.1` only for Rust's unwinding, ~0.2 ms of a ~4.5 ms launch (see the README's
//! "The small launcher").
//!
//! The archive is named before the Rust libraries that need it; the linker Rust uses on
//! x86_64 Linux (`rust-lld`) resolves archives in any order, so `libgcc_s` is then not needed
//! and `--as-needed` leaves it out. A linker that reads archives in order (GNU ld) takes nothing
//! from it and links `libgcc_s` as before: slower, never broken.

fn main() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let static_crt = var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static");
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !static_crt
    {
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
