//! Compiles the TC programs in `progs/` with clang (`-target bpf`) into `OUT_DIR`; the crate
//! embeds the objects with `include_bytes!`. Needs Debian's `clang` and `libbpf-dev` (the
//! `bpf/bpf_helpers.h` headers), both installed by `.ci/setup`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (source, output object, CALI_DEBUG).
const OBJECTS: &[(&str, &str, u8)] = &[
    ("tc_preamble.c", "tc_preamble.o", 0),
    ("tc_main.c", "tc_main.o", 0),
    ("tc_main.c", "tc_main_debug.o", 1),
    ("policy.c", "policy.o", 0),
    ("policy.c", "policy_debug.o", 1),
    ("pol_rules.c", "pol_rules.o", 0),
    ("pol_rules.c", "pol_rules_debug.o", 1),
];

fn main() {
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let progs = manifest.join("progs");
    println!("cargo:rerun-if-changed={}", progs.display());
    for entry in std::fs::read_dir(&progs).expect("bpf/progs is readable") {
        let entry = entry.expect("bpf/progs entry");
        println!("cargo:rerun-if-changed={}", entry.path().display());
    }
    let clang = std::env::var("BPF_CLANG").unwrap_or_else(|_| "clang".to_string());
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    let multiarch = multiarch_include();
    for (src, obj, debug) in OBJECTS {
        compile(
            &clang,
            &progs.join(src),
            &out.join(obj),
            *debug,
            multiarch.as_deref(),
        );
    }
}

/// Debian keeps `asm/types.h` under `/usr/include/<triplet>`, which `-target bpf` does not
/// search.
fn multiarch_include() -> Option<PathBuf> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").ok()?;
    let dir = PathBuf::from(format!("/usr/include/{arch}-linux-gnu"));
    dir.is_dir().then_some(dir)
}

fn compile(clang: &str, src: &Path, obj: &Path, debug: u8, multiarch: Option<&Path>) {
    let mut cmd = Command::new(clang);
    cmd.args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
        .arg(format!("-DCALI_DEBUG={debug}"));
    if let Some(dir) = multiarch {
        cmd.arg("-I").arg(dir);
    }
    cmd.arg("-c").arg(src).arg("-o").arg(obj);
    let status = cmd.status().unwrap_or_else(|e| {
        panic!(
            "running {clang} for {}: {e} (install clang: .ci/setup)",
            src.display()
        )
    });
    assert!(
        status.success(),
        "{clang} failed to compile {} ({status})",
        src.display()
    );
}
