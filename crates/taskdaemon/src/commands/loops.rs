//! `taskdaemon loops`: the loop types and where each came from.

use clap::Args;
use taskdaemon_core::loops::Registry;

use super::{Ctx, print_json, print_list};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(after_help = "Loop types are YAML files whose key is the name:\n\n  \
myloop:\n    prompt-template: |\n      {{task-description}}\n    validation-command: \"cargo test\"\n    \
success-exit-code: 0\n    max-iterations: 20\n\n\
Optional: description, iteration-timeout-ms, inputs, outputs, system-prompt.\n\
Template variables: iteration, max-iterations, previous-errors, git-status, git-diff, progress,\n\
task-description, current-state, working-directory, decision, completion-promise.\n\
Search order (later wins): built-in, ~/.config/taskdaemon/loops/*.yaml, .taskdaemon/loops/*.yaml.")]
pub struct LoopsArgs {
    /// Show one loop type's full definition.
    pub name: Option<String>,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Row<'a> {
    name: &'a str,
    source: String,
    overrides: Vec<String>,
    description: Option<&'a str>,
    validation_command: &'a str,
    max_iterations: u32,
}

pub fn run(args: LoopsArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = ctx.workdir()?;
    let reg = Registry::for_repo(&dir).map_err(user)?;
    super::util::warn_untrusted_loops(&reg);
    if let Some(name) = &args.name {
        let e = reg.get(name).map_err(user)?;
        if args.json {
            print_json(&e.def)?;
        } else {
            // YAML a person can paste into .taskdaemon/loops/NAME.yaml (`--json` keeps JSON).
            let one = std::collections::BTreeMap::from([(e.name.as_str(), &e.def)]);
            let yaml = taskdaemon_core::yaml::to_yaml(&one).map_err(anyhow::Error::msg)?;
            println!(
                "# {} ({})\n# paste into .taskdaemon/loops/{}.yaml to change it for this project",
                e.name, e.source, e.name
            );
            print!("{yaml}");
        }
        return Ok(0);
    }
    let rows: Vec<Row> = reg
        .entries()
        .map(|e| Row {
            name: &e.name,
            source: e.source.to_string(),
            overrides: e.overrides.iter().map(ToString::to_string).collect(),
            description: e.def.description.as_deref(),
            validation_command: &e.def.validation_command,
            max_iterations: e.def.max_iterations,
        })
        .collect();
    if args.json {
        print_list("loops", &rows)?;
        return Ok(0);
    }
    for r in &rows {
        println!("{:<10} {}", r.name, r.source);
        if let Some(d) = r.description {
            println!("{:<10} {d}", "");
        }
        for o in &r.overrides {
            println!("{:<10} (overrides {o})", "");
        }
    }
    Ok(0)
}
