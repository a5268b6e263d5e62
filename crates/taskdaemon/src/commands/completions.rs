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
    let mut cmd = crate::cli::Cli::command();
    cmd.build();
    let mut buf = Vec::new();
    let page = clap_mangen::Man::new(cmd.clone());
    page.render_title(&mut buf)?;
    page.render_name_section(&mut buf)?;
    buf.extend_from_slice(synopsis(&cmd).as_bytes());
    page.render_description_section(&mut buf)?;
    page.render_options_section(&mut buf)?;
    page.render_subcommands_section(&mut buf)?;
    page.render_extra_section(&mut buf)?;
    page.render_version_section(&mut buf)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("taskdaemon {}", sub.get_name());
        let sub = sub
            .clone()
            .bin_name(name.clone())
            .display_name(name.clone());
        let mut part = Vec::new();
        let m = clap_mangen::Man::new(sub.clone());
        m.render_name_section(&mut part)?;
        part.extend_from_slice(synopsis(&sub).as_bytes());
        m.render_description_section(&mut part)?;
        m.render_options_section(&mut part)?;
        // Each part starts a section of its own: make them sub-sections of this page.
        let text = String::from_utf8_lossy(&part).replace(".SH ", ".SS ");
        buf.extend_from_slice(format!(".SH \"{}\"\n{text}", name.to_uppercase()).as_bytes());
    }
    emit(&String::from_utf8_lossy(&buf))?;
    Ok(0)
}

/// A SYNOPSIS section in roff, with each option's value placeholder (`--dir DIR`), which
/// clap_mangen leaves out.
fn synopsis(cmd: &clap::Command) -> String {
    let esc = |t: &str| t.replace('\\', "\\e").replace('-', "\\-");
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let mut line = format!("\\fB{}\\fR", esc(name));
    for a in cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
    {
        let flag = match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("\\fB\\-{s}\\fR|\\fB\\-\\-{}\\fR", esc(l)),
            (Some(s), None) => format!("\\fB\\-{s}\\fR"),
            (None, Some(l)) => format!("\\fB\\-\\-{}\\fR", esc(l)),
            (None, None) => continue,
        };
        let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
        let value = match a.get_value_names() {
            Some(v) if takes_value => format!(" \\fI{}\\fR", esc(&v.join(" "))),
            _ => String::new(),
        };
        let (l, r) = if a.is_required_set() {
            ("", "")
        } else {
            ("[", "]")
        };
        line.push_str(&format!(" {l}{flag}{value}{r}"));
    }
    for a in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let v = a
            .get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| a.get_id().to_string());
        let (l, r) = if a.is_required_set() {
            ("<", ">")
        } else {
            ("[", "]")
        };
        line.push_str(&format!(" {l}\\fI{}\\fR{r}", esc(&v)));
    }
    if cmd.has_subcommands() {
        line.push_str(" <\\fISUBCOMMAND\\fR>");
    }
    format!(".SH SYNOPSIS\n{line}\n")
}
