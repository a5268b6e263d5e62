//! `taskdaemon __script-agent FILE` (hidden): the scripted agent. Plays the steps for
//! iteration `$TASKDAEMON_ITERATION` of a YAML script as a real child process: files are
//! really written, commands really run, commits really made.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use clap::Args;
use serde_json::json;
use taskdaemon_core::agent::script::{AfterLast, Script, ScriptFormat, Step};

use crate::cli::user;

#[derive(Debug, Args)]
pub struct ScriptAgentArgs {
    /// The YAML script.
    pub file: PathBuf,
}

pub fn run(args: ScriptAgentArgs) -> anyhow::Result<i32> {
    let script = Script::load(&args.file).map_err(user)?;
    // Read the prompt like a real agent would (and so the harness never blocks writing it).
    let mut prompt = String::new();
    let _ = std::io::stdin().read_to_string(&mut prompt);
    let iteration: u32 = std::env::var("TASKDAEMON_ITERATION")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut p = Player {
        stream: script.format == ScriptFormat::StreamJson,
        cost: 0.0,
        last_said: String::new(),
        tool_id: 0,
    };
    p.init();
    let Some(it) = script.steps_for(iteration) else {
        return Ok(match script.after_last {
            AfterLast::Fail => {
                eprintln!(
                    "scripted agent: the script has no iteration {iteration} (after-last: fail)"
                );
                1
            }
            _ => {
                p.say(&format!(
                    "scripted agent: the script has no iteration {iteration}; nothing to do."
                ));
                p.result();
                0
            }
        });
    };
    for step in &it.steps {
        match step {
            Step::Say(text) => p.say(text),
            Step::Stderr(text) => eprintln!("{text}"),
            Step::Write(w) | Step::Append(w) => {
                if let Some(dir) = w.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(matches!(step, Step::Append(_)))
                    .truncate(matches!(step, Step::Write(_)))
                    .open(&w.path)?;
                f.write_all(w.content.as_bytes())?;
                if w.executable {
                    f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
                }
                let name = if matches!(step, Step::Write(_)) {
                    "Write"
                } else {
                    "Edit"
                };
                p.tool(
                    name,
                    json!({ "file_path": w.path }),
                    &format!("wrote {}", w.path.display()),
                );
            }
            Step::Delete(path) => {
                let r = if path.is_dir() {
                    std::fs::remove_dir_all(path)
                } else {
                    std::fs::remove_file(path)
                };
                p.tool(
                    "Bash",
                    json!({ "command": format!("rm -rf {}", path.display()) }),
                    &r.map(|_| String::new()).unwrap_or_else(|e| e.to_string()),
                );
            }
            Step::Run(cmd) => {
                let out = Command::new("sh").arg("-c").arg(cmd).output()?;
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                p.tool("Bash", json!({ "command": cmd }), text.trim_end());
            }
            Step::Commit(msg) => {
                let text = commit(msg)?;
                p.tool(
                    "Bash",
                    json!({ "command": format!("git add -A && git commit -m {msg:?}") }),
                    text.trim_end(),
                );
            }
            Step::Tool(t) => p.tool(&t.name, t.input.clone(), &t.output),
            Step::Sleep(secs) => {
                std::thread::sleep(std::time::Duration::from_secs_f64(secs.max(0.0)))
            }
            Step::Cost(c) => p.cost += c,
            Step::Exit(code) => {
                p.result();
                return Ok(*code);
            }
        }
    }
    p.result();
    Ok(0)
}

/// `git add -A && git commit`, with a stand-in identity when none is configured.
fn commit(msg: &str) -> anyhow::Result<String> {
    let has_identity = Command::new("git")
        .args(["config", "user.email"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let git = |args: &[&str]| -> anyhow::Result<std::process::Output> {
        let mut c = Command::new("git");
        if !has_identity {
            c.args([
                "-c",
                "user.name=taskdaemon scripted agent",
                "-c",
                "user.email=script@taskdaemon.invalid",
            ]);
        }
        Ok(c.args(args).output()?)
    };
    git(&["add", "-A"])?;
    let out = git(&["commit", "-q", "-m", msg])?;
    Ok(if out.status.success() {
        format!("committed: {msg}")
    } else {
        format!(
            "nothing committed: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        )
    })
}

struct Player {
    stream: bool,
    cost: f64,
    last_said: String,
    tool_id: u32,
}

impl Player {
    fn emit(&self, v: serde_json::Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }

    fn init(&self) {
        if self.stream {
            self.emit(json!({ "type": "system", "subtype": "init", "model": "scripted" }));
        }
    }

    fn say(&mut self, text: &str) {
        self.last_said = text.to_string();
        if self.stream {
            self.emit(json!({ "type": "assistant", "parent_tool_use_id": null,
                "message": { "role": "assistant", "content": [ { "type": "text", "text": text } ] } }));
        } else {
            println!("{text}");
        }
    }

    /// A tool call: in stream-json an assistant tool_use plus the user's tool_result; in
    /// text on stderr, since plain stdout would make its input and output the agent's words.
    fn tool(&mut self, name: &str, input: serde_json::Value, output: &str) {
        self.tool_id += 1;
        let id = format!("toolu_{}", self.tool_id);
        if self.stream {
            self.emit(json!({ "type": "assistant", "parent_tool_use_id": null,
                "message": { "role": "assistant", "content": [ { "type": "tool_use", "id": id, "name": name, "input": input } ] } }));
            self.emit(json!({ "type": "user", "parent_tool_use_id": null,
                "message": { "role": "user", "content": [ { "type": "tool_result", "tool_use_id": id, "content": output } ] } }));
        } else {
            eprintln!("[{name}] {input}");
            for l in output.lines() {
                eprintln!("  {l}");
            }
        }
    }

    fn result(&self) {
        if self.stream {
            self.emit(json!({ "type": "result", "subtype": "success", "is_error": false, "result": self.last_said,
                "total_cost_usd": self.cost, "usage": { "input_tokens": 0, "output_tokens": 0 } }));
        }
    }
}
