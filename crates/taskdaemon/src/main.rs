mod cli;
mod commands;
mod render;

fn main() -> std::process::ExitCode {
    cli::main()
}
