//! Generates the C header `vfnvme.h` with cbindgen, and gives cargo's cdylib the soname
//! libvfnvme.so.0.
//!
//! The header goes to `$OUT_DIR/vfnvme.h`, or to `$VFNVME_HEADER_OUT` when set (that is how
//! `ffi/check-header.sh` regenerates it to compare with the committed `ffi/include/vfnvme.h`).

use std::path::PathBuf;

fn main() {
    // The product is libvfnvme.so.0, which ffi/build-lib.sh links from the static library with
    // the symbol versions of ffi/vfnvme.map (a version script given here would not take: rustc
    // passes the cdylib its own). Cargo's libvfnvme_capi.so carries the same soname.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvfnvme.so.0");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=VFNVME_HEADER_OUT");
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()));
    let out = match std::env::var_os("VFNVME_HEADER_OUT") {
        Some(p) => PathBuf::from(p),
        None => {
            PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("vfnvme.h")
        }
    };
    let config = match cbindgen::Config::from_file(dir.join("cbindgen.toml")) {
        Ok(c) => c,
        Err(e) => {
            println!("cargo:warning=cbindgen.toml: {e}");
            return;
        }
    };
    match cbindgen::generate_with_config(&dir, config) {
        Ok(bindings) => {
            bindings.write_to_file(&out);
        }
        Err(e) => println!("cargo:warning=vfnvme.h not generated: {e}"),
    }
}
