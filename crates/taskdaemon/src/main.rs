// Shadow std's printing macros (textual scope wins over the prelude) with ones that do not
// panic on a closed pipe; see `out.rs`.
macro_rules! println {
    () => {{ let _ = $crate::out::write_out("\n"); }};
    ($($arg:tt)*) => {{ let _ = $crate::out::write_out(&format!("{}\n", format_args!($($arg)*))); }};
}
macro_rules! print {
    ($($arg:tt)*) => {{ let _ = $crate::out::write_out(&format!($($arg)*)); }};
}
macro_rules! eprintln {
    () => {{ $crate::out::write_err("\n"); }};
    ($($arg:tt)*) => {{ $crate::out::write_err(&format!("{}\n", format_args!($($arg)*))); }};
}
#[allow(unused_macros)] // kept so a future `eprint!` cannot panic either
macro_rules! eprint {
    ($($arg:tt)*) => {{ $crate::out::write_err(&format!($($arg)*)); }};
}

mod cli;
mod commands;
mod out;
mod render;
mod tui;

fn main() -> std::process::ExitCode {
    cli::main()
}
