//! `taskstore-merge %O %A %B %P`: the git merge driver for taskstore collection files.

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let code = taskstore::merge::driver(&args, &mut std::io::stderr());
    std::process::ExitCode::from(code as u8)
}
