//! `taskdaemon answer "TEXT"`: reply to the agent's DECIDE question.

use std::io::Read;

use anyhow::Context as _;
use clap::Args;

use super::{Ctx, print_json};
use crate::cli::user;

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// Your decision (`-` reads it from stdin).
    pub text: String,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: AnswerArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (_, ws) = ctx.workspace()?;
    let text = if args.text == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the answer from stdin")?;
        s
    } else {
        args.text
    };
    if text.trim().is_empty() {
        return Err(user(
            "the answer is empty\n  hint: `taskdaemon answer \"use polling for now\"`",
        ));
    }
    let d = ws.answer(&text).map_err(user)?;
    if args.json {
        print_json(&serde_json::json!({
            "question": d.question,
            "answer": d.answer,
            "file": ws.decide_file(),
            "task_message": d.task_message,
            "next": if d.task_message.is_some() { "taskdaemon task" } else { d.stopped.continue_command() },
        }))?;
        return Ok(0);
    }
    println!("question: {}", d.question);
    println!("answer:   {}", d.answer.unwrap_or_default());
    if d.task_message.is_some() {
        println!(
            "\nwritten to {}. Start the task with `taskdaemon task` (no message needed): the task parser reads the answer.",
            ws.decide_file().display()
        );
    } else {
        println!(
            "\nwritten to {}. Continue with `{}`: the answer goes into the next prompt.",
            ws.decide_file().display(),
            d.stopped.continue_command()
        );
    }
    Ok(0)
}
