//! The `api:` section of the settings: per provider the endpoint, the key's environment
//! variable, the request scheduler's limits and the reply size; the turn limit; the price
//! table (US dollars per million tokens) with defaults for the common models.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Provider;

/// `api:` in config.yaml. Every key optional; see `docs/api-agents.md`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ApiSettings {
    /// Model requests per iteration before it ends (default 50).
    pub max_turns: Option<u32>,
    pub anthropic: Option<ProviderSettings>,
    pub openai: Option<ProviderSettings>,
    /// Model name (or prefix) → price; added to and overriding the built-in table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
}

/// One provider's endpoint and limits.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProviderSettings {
    /// `https://api.anthropic.com`, `https://api.openai.com/v1`, or any compatible server
    /// (`http://127.0.0.1:8000/v1` for vLLM, llama.cpp's server, Ollama).
    pub base_url: Option<String>,
    /// The environment variable holding the key (default ANTHROPIC_API_KEY / OPENAI_API_KEY).
    pub api_key_env: Option<String>,
    /// Requests in flight at once, for the whole daemon (default 4).
    pub max_concurrent: Option<u32>,
    /// Requests started in any 60 seconds, for the whole daemon (default: no limit).
    pub requests_per_minute: Option<u32>,
    /// Tokens (in + out) used in any 60 seconds, for the whole daemon (default: no limit).
    pub tokens_per_minute: Option<u64>,
    /// The reply's token limit (`max_tokens`; default 8192).
    pub max_tokens: Option<u32>,
}

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input read (default: a tenth of `input`).
    pub cache_read: Option<f64>,
    /// Cached input written (default: 1.25 × `input`).
    pub cache_write: Option<f64>,
}

impl Price {
    const fn new(input: f64, output: f64) -> Price {
        Price {
            input,
            output,
            cache_read: None,
            cache_write: None,
        }
    }

    /// The cost of `u` at this price.
    pub fn cost(&self, u: &super::Usage) -> f64 {
        let per = |n: u64, p: f64| n as f64 * p / 1_000_000.0;
        per(u.input, self.input)
            + per(u.output, self.output)
            + per(u.cache_read, self.cache_read.unwrap_or(self.input / 10.0))
            + per(u.cache_write, self.cache_write.unwrap_or(self.input * 1.25))
    }
}

/// Built-in prices (USD per million tokens, list prices), matched by the longest prefix
/// of the model name.
pub const DEFAULT_PRICES: &[(&str, Price)] = &[
    ("claude-opus-4", Price::new(15.0, 75.0)),
    ("claude-opus-4-5", Price::new(5.0, 25.0)),
    ("claude-sonnet-4", Price::new(3.0, 15.0)),
    ("claude-3-7-sonnet", Price::new(3.0, 15.0)),
    ("claude-3-5-sonnet", Price::new(3.0, 15.0)),
    ("claude-haiku-4-5", Price::new(1.0, 5.0)),
    ("claude-3-5-haiku", Price::new(0.8, 4.0)),
    ("gpt-5", Price::new(1.25, 10.0)),
    ("gpt-5-mini", Price::new(0.25, 2.0)),
    ("gpt-5-nano", Price::new(0.05, 0.4)),
    ("gpt-4.1", Price::new(2.0, 8.0)),
    ("gpt-4.1-mini", Price::new(0.4, 1.6)),
    ("gpt-4.1-nano", Price::new(0.1, 0.4)),
    ("gpt-4o", Price::new(2.5, 10.0)),
    ("gpt-4o-mini", Price::new(0.15, 0.6)),
    ("o3", Price::new(2.0, 8.0)),
    ("o4-mini", Price::new(1.1, 4.4)),
];

pub const DEFAULT_MAX_TURNS: u32 = 50;
pub const DEFAULT_MAX_CONCURRENT: u32 = 4;
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

impl ApiSettings {
    /// `over` wins wherever it sets a value (per key, per provider key).
    pub fn merge(self, over: ApiSettings) -> ApiSettings {
        let mut prices = self.prices;
        prices.extend(over.prices);
        ApiSettings {
            max_turns: over.max_turns.or(self.max_turns),
            anthropic: merge_provider(self.anthropic, over.anthropic),
            openai: merge_provider(self.openai, over.openai),
            prices,
        }
    }

    pub fn provider(&self, p: Provider) -> ProviderSettings {
        match p {
            Provider::Anthropic => self.anthropic.clone(),
            Provider::OpenAi => self.openai.clone(),
        }
        .unwrap_or_default()
    }

    pub fn max_turns(&self) -> u32 {
        self.max_turns.unwrap_or(DEFAULT_MAX_TURNS).max(1)
    }

    /// The price of `model`: the configured table first, then the built-in one; the
    /// longest matching prefix wins.
    pub fn price(&self, model: &str) -> Option<Price> {
        let configured = self
            .prices
            .iter()
            .filter(|(k, _)| model.starts_with(k.as_str()))
            .max_by_key(|(k, _)| k.len())
            .map(|(_, p)| *p);
        configured.or_else(|| {
            DEFAULT_PRICES
                .iter()
                .filter(|(k, _)| model.starts_with(k))
                .max_by_key(|(k, _)| k.len())
                .map(|(_, p)| *p)
        })
    }

    /// The whole table as `doctor` shows it: built-in rows overridden by configured ones.
    pub fn price_table(&self) -> BTreeMap<String, Price> {
        let mut t: BTreeMap<String, Price> = DEFAULT_PRICES
            .iter()
            .map(|(k, p)| (k.to_string(), *p))
            .collect();
        t.extend(self.prices.clone());
        t
    }
}

fn merge_provider(
    low: Option<ProviderSettings>,
    high: Option<ProviderSettings>,
) -> Option<ProviderSettings> {
    match (low, high) {
        (None, h) => h,
        (l, None) => l,
        (Some(l), Some(h)) => Some(ProviderSettings {
            base_url: h.base_url.or(l.base_url),
            api_key_env: h.api_key_env.or(l.api_key_env),
            max_concurrent: h.max_concurrent.or(l.max_concurrent),
            requests_per_minute: h.requests_per_minute.or(l.requests_per_minute),
            tokens_per_minute: h.tokens_per_minute.or(l.tokens_per_minute),
            max_tokens: h.max_tokens.or(l.max_tokens),
        }),
    }
}

impl ProviderSettings {
    pub fn base_url(&self, p: Provider) -> String {
        let url = self.base_url.clone().unwrap_or_else(|| match p {
            Provider::Anthropic => "https://api.anthropic.com".into(),
            Provider::OpenAi => "https://api.openai.com/v1".into(),
        });
        url.trim_end_matches('/').to_string()
    }

    pub fn key_env(&self, p: Provider) -> String {
        self.api_key_env.clone().unwrap_or_else(|| match p {
            Provider::Anthropic => "ANTHROPIC_API_KEY".into(),
            Provider::OpenAi => "OPENAI_API_KEY".into(),
        })
    }

    pub fn max_tokens(&self) -> u32 {
        self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).max(1)
    }
}

/// Whether `url`'s host is this machine (no key needed for an OpenAI-compatible server).
pub fn is_loopback(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The key for `p`: from its environment variable; `Ok(None)` when none is needed (an
/// OpenAI-compatible server on this machine without one).
pub fn api_key(p: Provider, s: &ProviderSettings) -> Result<Option<String>, String> {
    let var = s.key_env(p);
    match std::env::var(&var) {
        Ok(k) if !k.trim().is_empty() => Ok(Some(k.trim().to_string())),
        _ if p == Provider::OpenAi && is_loopback(&s.base_url(p)) => Ok(None),
        _ => Err(format!(
            "no API key: ${var} is not set\n  hint: export {var}=… (or set api.{}.api-key-env to the variable that holds it)",
            p.name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_files_api_block_parses() {
        let text = crate::config::DEFAULT_CONFIG_YAML;
        let start = text.find("# api:").expect("an api: block");
        let block: String = text[start..]
            .lines()
            .map_while(|l| l.strip_prefix("# "))
            .map(|l| format!("{l}\n"))
            .collect();
        let s = crate::yaml::parse::<crate::config::Settings>(std::path::Path::new("d"), &block)
            .unwrap()
            .unwrap();
        let api = s.api.unwrap();
        assert_eq!(api.max_turns(), 50);
        assert_eq!(
            api.provider(Provider::Anthropic).requests_per_minute,
            Some(50)
        );
        assert!(is_loopback(
            &api.provider(Provider::OpenAi).base_url(Provider::OpenAi)
        ));
        assert_eq!(api.price("qwen2.5-coder:7b").unwrap().output, 0.0);
    }

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback("http://127.0.0.1:8080/v1"));
        assert!(is_loopback("http://localhost:11434/v1"));
        assert!(is_loopback("http://[::1]:8000/v1"));
        assert!(!is_loopback("https://api.openai.com/v1"));
        assert!(!is_loopback("http://10.0.0.2:8000"));
    }

    #[test]
    fn longest_prefix_price_wins_and_config_overrides() {
        let mut s = ApiSettings::default();
        assert_eq!(s.price("gpt-4o-mini-2024").unwrap().input, 0.15);
        assert_eq!(s.price("claude-sonnet-4-5").unwrap().output, 15.0);
        assert!(s.price("llama3").is_none());
        s.prices.insert("llama3".into(), Price::new(0.0, 0.0));
        assert_eq!(s.price("llama3:8b").unwrap().input, 0.0);
        let u = super::super::Usage {
            input: 1_000_000,
            output: 1_000_000,
            cache_read: 1_000_000,
            cache_write: 0,
        };
        let c = s.price("claude-sonnet-4").unwrap().cost(&u);
        assert!((c - 18.3).abs() < 1e-9, "{c}");
    }
}
