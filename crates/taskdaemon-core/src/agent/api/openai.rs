//! OpenAI Chat Completions with tools, streamed (SSE), for OpenAI itself and any
//! compatible server (vLLM, llama.cpp's server, Ollama) through `base-url`. Wire types
//! written by hand.

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::http::{self, ApiError};
use super::{MAX_REPLY_ARGS, MAX_REPLY_TEXT, Msg, Reply, Request, Stop, ToolCall, Usage};

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMsg>,
    tools: Vec<Value>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMsg {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

#[derive(Serialize)]
struct WireCall {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction,
}

#[derive(Serialize)]
struct WireFunction {
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<ChunkDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChunkDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

fn body<'a>(req: &'a Request<'a>, max_tokens: Option<u32>) -> ChatRequest<'a> {
    let mut messages = Vec::new();
    if let Some(s) = req.system.filter(|s| !s.trim().is_empty()) {
        messages.push(WireMsg::System {
            content: s.to_string(),
        });
    }
    for m in req.history {
        match m {
            Msg::User(text) => messages.push(WireMsg::User {
                content: text.clone(),
            }),
            Msg::Assistant { text, calls } => messages.push(WireMsg::Assistant {
                content: (!text.is_empty()).then(|| text.clone()),
                tool_calls: calls
                    .iter()
                    .map(|c| WireCall {
                        id: c.id.clone(),
                        kind: "function",
                        function: WireFunction {
                            name: c.name.clone(),
                            arguments: c.input.to_string(),
                        },
                    })
                    .collect(),
            }),
            Msg::Results(rs) => messages.extend(rs.iter().map(|r| WireMsg::Tool {
                tool_call_id: r.id.clone(),
                content: if r.is_error {
                    format!("ERROR: {}", r.content)
                } else {
                    r.content.clone()
                },
            })),
        }
    }
    let tools = req
        .tools
        .iter()
        .map(|(name, description, schema)| {
            json!({"type": "function", "function": {"name": name, "description": description, "parameters": schema}})
        })
        .collect();
    ChatRequest {
        model: req.model,
        messages,
        tools,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        max_tokens,
    }
}

/// One turn: the request, streamed back into a [`Reply`]. `max_tokens` only when
/// configured (compatible servers differ in what they accept).
pub async fn send(
    client: &reqwest::Client,
    base_url: &str,
    key: Option<&str>,
    req: &Request<'_>,
    max_tokens: Option<u32>,
) -> Result<Reply, ApiError> {
    let mut rb = client
        .post(format!("{base_url}/chat/completions"))
        .json(&body(req, max_tokens));
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let stream = http::event_stream(rb).await?;
    futures_util::pin_mut!(stream);
    let mut acc = Accumulator::default();
    while let Some(ev) = stream.next().await {
        let ev = ev?;
        if ev.data.trim() == "[DONE]" {
            return Ok(acc.finish());
        }
        if let Ok(chunk) = serde_json::from_str::<Chunk>(&ev.data) {
            acc.chunk(chunk)?;
        }
    }
    // Some servers close the stream without [DONE]: a finished choice is enough.
    if acc.finish_reason.is_some() {
        return Ok(acc.finish());
    }
    Err(ApiError::Unreachable {
        message: "the reply stream ended before [DONE]".into(),
    })
}

#[derive(Default)]
struct Accumulator {
    text: String,
    /// By index: id, name, arguments.
    calls: Vec<(usize, String, String, String)>,
    usage: Usage,
    finish_reason: Option<String>,
    args_bytes: usize,
}

impl Accumulator {
    fn chunk(&mut self, c: Chunk) -> Result<(), ApiError> {
        if let Some(e) = c.error {
            let message = http::error_message(&json!({ "error": e }).to_string());
            return Err(ApiError::Overloaded {
                status: 500,
                message,
            });
        }
        if let Some(u) = c.usage {
            let cached = u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0)
                .min(u.prompt_tokens);
            self.usage = Usage {
                input: u.prompt_tokens - cached,
                output: u.completion_tokens,
                cache_read: cached,
                cache_write: 0,
            };
        }
        for choice in c.choices {
            if let Some(f) = choice.finish_reason {
                self.finish_reason = Some(f);
            }
            let Some(d) = choice.delta else { continue };
            if let Some(t) = d.content {
                let mut used = self.text.len();
                super::grow(&mut used, t.len(), MAX_REPLY_TEXT, "text")?;
                self.text.push_str(&t);
            }
            for cd in d.tool_calls.unwrap_or_default() {
                let pos = match self.calls.iter().position(|c| c.0 == cd.index) {
                    Some(p) => p,
                    None => {
                        self.calls
                            .push((cd.index, String::new(), String::new(), String::new()));
                        self.calls.len() - 1
                    }
                };
                let slot = &mut self.calls[pos];
                if let Some(id) = cd.id {
                    slot.1 = id;
                }
                if let Some(f) = cd.function {
                    let (name, args) =
                        (f.name.unwrap_or_default(), f.arguments.unwrap_or_default());
                    let n = name.len() + args.len();
                    super::grow(&mut self.args_bytes, n, MAX_REPLY_ARGS, "tool arguments")?;
                    slot.2.push_str(&name);
                    slot.3.push_str(&args);
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Reply {
        let calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, (_, id, name, args))| ToolCall {
                id: if id.is_empty() {
                    format!("call_{i}")
                } else {
                    id
                },
                name,
                input: super::parse_arguments(&args),
            })
            .collect::<Vec<_>>();
        let stop = match self.finish_reason.as_deref() {
            Some("length") => Stop::MaxTokens,
            _ if !calls.is_empty() => Stop::ToolUse,
            _ => Stop::EndTurn,
        };
        Reply {
            text: self.text,
            calls,
            usage: self.usage,
            stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_build_the_reply() {
        let lines = [
            r#"{"choices":[{"delta":{"role":"assistant","content":"Hi"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"run_command","arguments":"{\"comm"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"prompt_tokens_details":{"cached_tokens":20}}}"#,
        ];
        let mut acc = Accumulator::default();
        for l in lines {
            acc.chunk(serde_json::from_str(l).unwrap()).unwrap();
        }
        let r = acc.finish();
        assert_eq!(r.text, "Hi");
        assert_eq!(r.calls[0].id, "c1");
        assert_eq!(r.calls[0].input["command"], "ls");
        assert_eq!(
            (r.usage.input, r.usage.output, r.usage.cache_read),
            (100, 30, 20)
        );
        assert_eq!(r.stop, Stop::ToolUse);
    }
}
