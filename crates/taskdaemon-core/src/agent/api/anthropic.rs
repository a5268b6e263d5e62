//! The Anthropic Messages API: one streamed request per turn (SSE), tool use, prompt
//! caching of the stable prefix (the tools, the system prompt and the iteration's prompt
//! carry `cache_control`, so every later turn of the conversation reads them from the
//! cache). Wire types written by hand.

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::http::{self, ApiError};
use super::{MAX_REPLY_ARGS, MAX_REPLY_TEXT, Msg, Reply, Request, Stop, ToolCall, Usage};

const VERSION: &str = "2023-06-01";

#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block>,
    tools: Vec<ToolDef<'a>>,
    messages: Vec<Message>,
    stream: bool,
}

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: Option<CacheControl> = Some(CacheControl { kind: "ephemeral" });

#[derive(Serialize)]
struct ToolDef<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct Message {
    role: &'static str,
    content: Vec<Block>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
    },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: DeltaBody,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        error: ErrorBody,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DeltaBody {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

fn body<'a>(req: &'a Request<'a>) -> MessagesRequest<'a> {
    let n = req.tools.len();
    let tools = req
        .tools
        .iter()
        .enumerate()
        .map(|(i, (name, description, schema))| ToolDef {
            name,
            description,
            input_schema: schema,
            cache_control: if i + 1 == n { EPHEMERAL } else { None },
        })
        .collect();
    let system = req
        .system
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            vec![Block::Text {
                text: s.to_string(),
                cache_control: EPHEMERAL,
            }]
        })
        .unwrap_or_default();
    let messages = req
        .history
        .iter()
        .enumerate()
        .map(|(i, m)| message(m, i == 0))
        .collect();
    MessagesRequest {
        model: req.model,
        max_tokens: req.max_tokens,
        system,
        tools,
        messages,
        stream: true,
    }
}

/// One neutral message on the wire; the first (the iteration's prompt) is cached.
fn message(m: &Msg, first: bool) -> Message {
    match m {
        Msg::User(text) => Message {
            role: "user",
            content: vec![Block::Text {
                text: text.clone(),
                cache_control: if first { EPHEMERAL } else { None },
            }],
        },
        Msg::Assistant { text, calls } => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(Block::Text {
                    text: text.clone(),
                    cache_control: None,
                });
            }
            content.extend(calls.iter().map(|c| Block::ToolUse {
                id: c.id.clone(),
                name: c.name.clone(),
                input: c.input.clone(),
            }));
            Message {
                role: "assistant",
                content,
            }
        }
        Msg::Results(results) => Message {
            role: "user",
            content: results
                .iter()
                .map(|r| Block::ToolResult {
                    tool_use_id: r.id.clone(),
                    content: r.content.clone(),
                    is_error: r.is_error,
                })
                .collect(),
        },
    }
}

/// One turn: the request, streamed back into a [`Reply`].
pub async fn send(
    client: &reqwest::Client,
    base_url: &str,
    key: Option<&str>,
    req: &Request<'_>,
) -> Result<Reply, ApiError> {
    let mut rb = client
        .post(format!("{base_url}/v1/messages"))
        .header("anthropic-version", VERSION)
        .json(&body(req));
    if let Some(k) = key {
        rb = rb.header("x-api-key", k);
    }
    let stream = http::event_stream(rb).await?;
    futures_util::pin_mut!(stream);
    let mut acc = Accumulator::default();
    while let Some(ev) = stream.next().await {
        let ev = ev?;
        let Ok(parsed) = serde_json::from_str::<Event>(&ev.data) else {
            continue;
        };
        if acc.event(parsed)? {
            return Ok(acc.finish());
        }
    }
    Err(ApiError::Unreachable {
        message: "the reply stream ended before message_stop".into(),
    })
}

/// Text and tool-use blocks as they stream in, by index.
#[derive(Default)]
struct Accumulator {
    blocks: Vec<(usize, Part)>,
    usage: Usage,
    stop: Option<String>,
    text_bytes: usize,
    args_bytes: usize,
}

enum Part {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
}

impl Accumulator {
    /// Returns true at the end of the message.
    fn event(&mut self, ev: Event) -> Result<bool, ApiError> {
        match ev {
            Event::MessageStart { message } => self.usage(message.usage),
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                StartBlock::Text { text } => self.blocks.push((index, Part::Text(text))),
                StartBlock::ToolUse { id, name } => self.blocks.push((
                    index,
                    Part::Tool {
                        id,
                        name,
                        json: String::new(),
                    },
                )),
                StartBlock::Other => {}
            },
            Event::ContentBlockDelta { index, delta } => {
                let part = self.blocks.iter_mut().rev().find(|(i, _)| *i == index);
                match (part.map(|(_, p)| p), delta) {
                    (Some(Part::Text(t)), DeltaBody::TextDelta { text }) => {
                        super::grow(&mut self.text_bytes, text.len(), MAX_REPLY_TEXT, "text")?;
                        t.push_str(&text)
                    }
                    (Some(Part::Tool { json, .. }), DeltaBody::InputJsonDelta { partial_json }) => {
                        let n = partial_json.len();
                        super::grow(&mut self.args_bytes, n, MAX_REPLY_ARGS, "tool arguments")?;
                        json.push_str(&partial_json)
                    }
                    _ => {}
                }
            }
            Event::MessageDelta { delta, usage } => {
                self.stop = delta.stop_reason.or(self.stop.take());
                self.usage(usage);
            }
            Event::MessageStop => return Ok(true),
            Event::Error { error } => return Err(stream_error(error)),
            Event::Other => {}
        }
        Ok(false)
    }

    fn usage(&mut self, u: Option<WireUsage>) {
        let u = u.unwrap_or_default();
        let keep = |old: &mut u64, new: Option<u64>| *old = (*old).max(new.unwrap_or(0));
        keep(&mut self.usage.input, u.input_tokens);
        keep(&mut self.usage.output, u.output_tokens);
        keep(&mut self.usage.cache_write, u.cache_creation_input_tokens);
        keep(&mut self.usage.cache_read, u.cache_read_input_tokens);
    }

    fn finish(self) -> Reply {
        let mut text = String::new();
        let mut calls = Vec::new();
        for (_, part) in self.blocks {
            match part {
                Part::Text(t) => text.push_str(&t),
                Part::Tool { id, name, json } => calls.push(ToolCall {
                    id,
                    name,
                    input: super::parse_arguments(&json),
                }),
            }
        }
        let stop = match self.stop.as_deref() {
            Some("max_tokens") => Stop::MaxTokens,
            Some("tool_use") => Stop::ToolUse,
            _ => Stop::EndTurn,
        };
        Reply {
            text,
            calls,
            usage: self.usage,
            stop,
        }
    }
}

fn stream_error(e: ErrorBody) -> ApiError {
    let message = format!("{}: {}", e.kind, e.message);
    match e.kind.as_str() {
        "overloaded_error" => ApiError::Overloaded {
            status: 529,
            message,
        },
        "api_error" => ApiError::Overloaded {
            status: 500,
            message,
        },
        "rate_limit_error" => ApiError::RateLimited {
            message,
            retry_after: None,
        },
        "authentication_error" | "permission_error" => ApiError::Auth {
            status: 401,
            message,
        },
        _ if http::error_message(&e.message).contains("prompt is too long") => {
            ApiError::ContextOverflow { message }
        }
        _ => ApiError::Refused {
            status: 400,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_events_build_the_reply() {
        let lines = [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":100,"cache_read_input_tokens":50,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"write_file","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"a\"}"}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let mut acc = Accumulator::default();
        let mut done = false;
        for l in lines {
            done = acc.event(serde_json::from_str(l).unwrap()).unwrap();
        }
        assert!(done);
        let r = acc.finish();
        assert_eq!(r.text, "Hello");
        assert_eq!(r.calls[0].name, "write_file");
        assert_eq!(r.calls[0].input["path"], "a");
        assert_eq!(
            (r.usage.input, r.usage.output, r.usage.cache_read),
            (100, 20, 50)
        );
        assert_eq!(r.stop, Stop::ToolUse);
    }

    #[test]
    fn overloaded_event_is_transient() {
        let mut acc = Accumulator::default();
        let e = acc
            .event(serde_json::from_str(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).unwrap())
            .unwrap_err();
        assert!(e.is_transient());
    }
}
