//! `taskdaemon completions bash|zsh|fish|elvish|powershell` (clap_complete) and
//! `taskdaemon man` (clap_mangen): generated at run time from the same clap definition,
//! so they never drift from the real options.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::emit;

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  source <(taskdaemon completions bash)\n  taskdaemon completions zsh > ~/.zfunc/_taskdaemon\n  taskdaemon completions fish > ~/.config/fish/completions/taskdaemon.fish"
)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon man | man -l -\n  taskdaemon man > /usr/local/share/man/man1/taskdaemon.1"
)]
pub struct ManArgs {}

pub fn completions(args: CompletionsArgs) -> anyhow::Result<i32> {
    let mut cmd = crate::cli::Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "taskdaemon", &mut buf);
    emit(&String::from_utf8_lossy(&buf))?;
    Ok(0)
}

/// The man page, taskdaemon(1), in roff: the top-level page with every subcommand's
/// options in its own section.
pub fn man(_args: ManArgs) -> anyhow::Result<i32> {
    let cmd = crate::cli::Cli::command();
    let mut buf = Vec::new();
    let page = clap_mangen::Man::new(cmd.clone());
    page.render(&mut buf)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("taskdaemon {}", sub.get_name());
        let sub = sub
            .clone()
            .bin_name(name.clone())
            .display_name(name.clone());
        let mut part = Vec::new();
        let m = clap_mangen::Man::new(sub);
        m.render_name_section(&mut part)?;
        m.render_synopsis_section(&mut part)?;
        m.render_description_section(&mut part)?;
        m.render_options_section(&mut part)?;
        // Each part starts a section of its own: make them sub-sections of this page.
        let text = String::from_utf8_lossy(&part).replace(".SH ", ".SS ");
        buf.extend_from_slice(format!(".SH \"{}\"\n{text}", name.to_uppercase()).as_bytes());
    }
    emit(&String::from_utf8_lossy(&buf))?;
    Ok(0)
}
