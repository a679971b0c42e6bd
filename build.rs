//! Links GCC's unwinder into the binaries statically on Linux with glibc (what `gcc
//! -static-libgcc` does), so that they load one shared library fewer: without this, every start
//! of `sandgate-launch` (each `sandbox-*` command) has the dynamic loader find, map and relocate
//! `libgcc_s.so.1` only for Rust's unwinding, ~0.2 ms of a ~4.5 ms launch (see
//! docs/internals.md, "The small launcher").
//!
//! The archive is named among the binary's own native libraries, before the `-lgcc_s` that
//! Rust's standard library asks for; the unwinder's symbols are then taken from it and
//! `--as-needed` leaves `libgcc_s` out (rust-lld and GNU ld both, as measured). Only when the C
//! compiler that links has the archive (`cc -print-file-name=libgcc_eh.a`): a toolchain without
//! it (clang with LLVM's unwinder, zig cc) links `libgcc_s` as before — slower, never broken.

use std::path::Path;
use std::process::Command;

fn main() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    // `linux_glibc`: where the small launcher enters through a C `main` (src/launcher.rs).
    println!("cargo::rustc-check-cfg=cfg(linux_glibc)");
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if glibc {
        println!("cargo:rustc-cfg=linux_glibc");
    }
    let static_crt = var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static");
    if !glibc || static_crt {
        return;
    }
    // The compiler the `cc` crate would pick for the target; `cc` itself only when not
    // cross-compiling (rustc's default linker for the host).
    let target = var("TARGET");
    let cc = [format!("CC_{target}"), format!("CC_{}", target.replace('-', "_")), "CC".into()]
        .iter()
        .map(|k| var(k))
        .find(|v| !v.is_empty())
        .or_else(|| (target == var("HOST")).then(|| "cc".to_owned()));
    let Some(cc) = cc else { return };
    let found = Command::new(&cc).arg("-print-file-name=libgcc_eh.a").output().ok().and_then(|o| {
        let path = String::from_utf8(o.stdout).ok()?.trim().to_owned();
        (o.status.success() && Path::new(&path).is_absolute() && Path::new(&path).exists())
            .then_some(path)
    });
    if found.is_some() {
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
}
