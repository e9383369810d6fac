//! Model provider configuration: the `[models]` section (`ModelsConfig`,
//! `ProviderConfig`) and its defaults, the checks that reject a bad one
//! (`ConfigError`), and `Providers`, built from it, which says which provider
//! serves which model (`NoProvider` when none does).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::provider::{Limits, Listing, Provider, error_chain};

/// Default for [`ModelsConfig::connect_timeout_s`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`ModelsConfig::request_timeout_s`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Default for [`ModelsConfig::stream_idle_timeout_s`].
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default for [`ModelsConfig::max_answer_bytes`]: 8 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// Default for [`ModelsConfig::max_input_part_bytes`]: 8 MiB.
pub const DEFAULT_MAX_INPUT_PART_BYTES: usize = 8 * 1024 * 1024;
/// Default for [`ModelsConfig::list_cache_s`].
pub const DEFAULT_LIST_CACHE: Duration = Duration::from_secs(300);
/// Default for [`ModelsConfig::list_timeout_s`].
pub const DEFAULT_LIST_TIMEOUT: Duration = Duration::from_secs(5);
/// Base URL used when only `OPENAI_API_KEY` is set.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Name of the provider built from `OPENAI_BASE_URL` / `OPENAI_API_KEY`.
pub const ENV_PROVIDER_NAME: &str = "env";

/// One `[[models.providers]]` entry.
#[derive(Deserialize, Serialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    /// E.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Name of the environment variable holding the API key (the key itself
    /// never goes in the config file).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Model names this provider serves; empty = every model.
    #[serde(default)]
    pub models: Vec<String>,
}

/// The `[models]` config section.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    #[serde(default)]
    pub default_model: Option<String>,
    #[serde(default)]
    pub embedding_model: Option<String>,
    /// TCP (and TLS) connect timeout; default 10.
    #[serde(default)]
    pub connect_timeout_s: Option<f64>,
    /// Whole non-streamed call (and embeddings); default 120.
    #[serde(default)]
    pub request_timeout_s: Option<f64>,
    /// Longest wait for the next bytes of a streamed answer, the first ones
    /// (response headers) included; default 60.
    #[serde(default)]
    pub stream_idle_timeout_s: Option<f64>,
    /// The largest model answer accepted, in bytes: a whole answer's body, or
    /// the text of a streamed one (content, reasoning and tool calls); default
    /// 8 MiB (`AGENT_PLATFORM_MODELS_MAX_ANSWER_BYTES`). A larger answer is
    /// dropped as soon as it passes the bound: the chat fails with 502
    /// `upstream_error` and saves nothing.
    #[serde(default)]
    pub max_answer_bytes: Option<usize>,
    /// The largest image URL or file data one content part of a request may
    /// send to a model, in bytes (`input_image`, `input_file`, `image_url`,
    /// `file`); default 8 MiB (`AGENT_PLATFORM_MODELS_MAX_INPUT_PART_BYTES`). A
    /// larger one is a 400 naming it.
    #[serde(default)]
    pub max_input_part_bytes: Option<usize>,
    /// How long a provider's own list of models (`GET {base_url}/models`, for
    /// `GET /v1/models`) is kept; default 300.
    #[serde(default)]
    pub list_cache_s: Option<f64>,
    /// The longest wait for a provider's list of models; default 5.
    #[serde(default)]
    pub list_timeout_s: Option<f64>,
}

/// An invalid `[models]` section.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ConfigError {
    #[error("models.providers: a provider has an empty name")]
    EmptyName,
    #[error("models.providers: provider name '{0}' is used twice")]
    DuplicateName(String),
    #[error("models.providers '{name}': base_url '{url}' is not an http(s) URL: {reason}")]
    BadBaseUrl { name: String, url: String, reason: String },
    #[error(
        "models.providers '{name}': api_key_env names the environment variable '{var}', which is not set"
    )]
    MissingApiKey { name: String, var: String },
    #[error("models.{field} must be a positive number of seconds, got {value}")]
    BadTimeout { field: &'static str, value: f64 },
    #[error("models.max_answer_bytes must be at least 1")]
    BadMaxAnswerBytes,
    #[error("models.max_input_part_bytes must be at least 1")]
    BadMaxInputPartBytes,
    #[error("models.{field} is '{model}', but no configured provider serves that model")]
    UnservedModel { field: &'static str, model: String },
    #[error("could not build the HTTP client: {0}")]
    Client(String),
}

/// No provider serves the requested model.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub struct NoProvider {
    pub model: String,
    /// Names of the configured providers (empty: none at all).
    pub configured: Vec<String>,
}

impl fmt::Display for NoProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.configured.is_empty() {
            write!(
                f,
                "no model provider is configured for model '{}'; set OPENAI_BASE_URL (and \
                 OPENAI_API_KEY) or add a [[models.providers]] entry to the config file",
                self.model
            )
        } else {
            write!(
                f,
                "no model provider serves model '{}' (configured providers: {}); add the model \
                 to a provider's `models` list, or leave a provider's `models` empty to let it \
                 serve every model",
                self.model,
                self.configured.join(", ")
            )
        }
    }
}

/// All configured providers.
#[derive(Clone, Debug)]
pub struct Providers {
    providers: Vec<Provider>,
    default_model: Option<String>,
    embedding_model: Option<String>,
    max_input_part_bytes: usize,
}

fn seconds(field: &'static str, value: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => Duration::try_from_secs_f64(v)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or(ConfigError::BadTimeout { field, value: v }),
    }
}

fn check_base_url(name: &str, url: &str) -> Result<String, ConfigError> {
    let bad = |reason: String| ConfigError::BadBaseUrl { name: name.to_owned(), url: url.to_owned(), reason };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(format!("unsupported scheme '{}'", parsed.scheme())));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

impl Providers {
    /// Builds the providers from the `[models]` section.
    ///
    /// With no providers configured, `OPENAI_BASE_URL` / `OPENAI_API_KEY`
    /// (the OpenAI SDKs' own variables) define one provider, named
    /// [`ENV_PROVIDER_NAME`], serving every model; its base URL defaults to
    /// [`OPENAI_DEFAULT_BASE_URL`] only when the key is set. With neither,
    /// there is no provider (and [`Providers::resolve`] says how to add one).
    /// `env` looks up environment variables (empty values count as unset).
    pub fn from_config(
        cfg: &ModelsConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env = |var: &str| env(var).filter(|v| !v.trim().is_empty());
        let connect = seconds("connect_timeout_s", cfg.connect_timeout_s, DEFAULT_CONNECT_TIMEOUT)?;
        let limits = Limits {
            request: seconds("request_timeout_s", cfg.request_timeout_s, DEFAULT_REQUEST_TIMEOUT)?,
            stream_idle: seconds(
                "stream_idle_timeout_s",
                cfg.stream_idle_timeout_s,
                DEFAULT_STREAM_IDLE_TIMEOUT,
            )?,
            max_answer_bytes: match cfg.max_answer_bytes {
                None => DEFAULT_MAX_ANSWER_BYTES,
                Some(0) => return Err(ConfigError::BadMaxAnswerBytes),
                Some(n) => n,
            },
        };
        let max_input_part_bytes = match cfg.max_input_part_bytes {
            None => DEFAULT_MAX_INPUT_PART_BYTES,
            Some(0) => return Err(ConfigError::BadMaxInputPartBytes),
            Some(n) => n,
        };
        // At most a day: an expiry instant is always representable.
        let day = |d: Duration| d.min(Duration::from_secs(86_400));
        let list_cache = day(seconds("list_cache_s", cfg.list_cache_s, DEFAULT_LIST_CACHE)?);
        let list_timeout = day(seconds("list_timeout_s", cfg.list_timeout_s, DEFAULT_LIST_TIMEOUT)?);
        let http = reqwest::Client::builder()
            .connect_timeout(connect)
            .user_agent(concat!("agent-platform/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Client(error_chain(&e)))?;

        let mut providers: Vec<Provider> = Vec::new();
        for p in &cfg.providers {
            if p.name.trim().is_empty() {
                return Err(ConfigError::EmptyName);
            }
            if providers.iter().any(|q| q.name == p.name) {
                return Err(ConfigError::DuplicateName(p.name.clone()));
            }
            let api_key =
                match &p.api_key_env {
                    None => None,
                    Some(var) => Some(env(var).ok_or_else(|| ConfigError::MissingApiKey {
                        name: p.name.clone(),
                        var: var.clone(),
                    })?),
                };
            providers.push(Provider {
                name: p.name.clone(),
                base_url: check_base_url(&p.name, &p.base_url)?,
                api_key,
                models: p.models.clone(),
                http: http.clone(),
                limits,
                listing: Listing::new(list_cache, list_timeout),
            });
        }
        if cfg.providers.is_empty() {
            let api_key = env("OPENAI_API_KEY");
            let base_url = env("OPENAI_BASE_URL")
                .or_else(|| api_key.as_ref().map(|_| OPENAI_DEFAULT_BASE_URL.to_owned()));
            if let Some(base_url) = base_url {
                providers.push(Provider {
                    name: ENV_PROVIDER_NAME.to_owned(),
                    base_url: check_base_url(ENV_PROVIDER_NAME, &base_url)?,
                    api_key,
                    models: Vec::new(),
                    http,
                    limits,
                    listing: Listing::new(list_cache, list_timeout),
                });
            }
        }

        let this = Providers {
            providers,
            default_model: cfg.default_model.clone(),
            embedding_model: cfg.embedding_model.clone(),
            max_input_part_bytes,
        };
        if !this.providers.is_empty() {
            for (field, model) in
                [("default_model", &this.default_model), ("embedding_model", &this.embedding_model)]
            {
                if let Some(model) = model
                    && this.resolve(model).is_err()
                {
                    return Err(ConfigError::UnservedModel { field, model: model.clone() });
                }
            }
        }
        Ok(this)
    }

    /// No provider at all: every [`Providers::resolve`] fails.
    pub fn none() -> Self {
        Providers {
            providers: Vec::new(),
            default_model: None,
            embedding_model: None,
            max_input_part_bytes: DEFAULT_MAX_INPUT_PART_BYTES,
        }
    }

    /// The provider for `model`: the first one listing it by name, else the
    /// first one with an empty `models` list.
    pub fn resolve(&self, model: &str) -> Result<&Provider, NoProvider> {
        self.providers
            .iter()
            .find(|p| p.models.iter().any(|m| m == model))
            .or_else(|| self.providers.iter().find(|p| p.models.is_empty()))
            .ok_or_else(|| NoProvider {
                model: model.to_owned(),
                configured: self.providers.iter().map(|p| p.name.clone()).collect(),
            })
    }

    pub fn default_model(&self) -> Option<&str> {
        self.default_model.as_deref()
    }

    pub fn embedding_model(&self) -> Option<&str> {
        self.embedding_model.as_deref()
    }

    /// The largest image URL or file data a content part may send (see [`ModelsConfig`]).
    pub fn max_input_part_bytes(&self) -> usize {
        self.max_input_part_bytes
    }

    /// All providers, in config order.
    pub fn list(&self) -> &[Provider] {
        &self.providers
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }
}
