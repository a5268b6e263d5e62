//! A release build on Linux has its debug sections compressed by the linker (zlib, which
//! the standard library's backtraces read): the line tables stay, at a fifth of their size.
fn main() {
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if linux && std::env::var("PROFILE").is_ok_and(|p| p == "release") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
