//! End-to-end tests of `provider` over real HTTP against `fake_upstream`
//! (127.0.0.1:0), plus provider resolution and configuration.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use super::accumulator::ChunkAccumulator;
use super::fake_upstream::{Behaviour, FakeUpstream, embedding_for};
use super::provider::UpstreamError;
use super::provider_config::{
    ConfigError, ENV_PROVIDER_NAME, ModelsConfig, OPENAI_DEFAULT_BASE_URL, ProviderConfig, Providers,
};
use super::wire::{ChatMessage, CompletionRequest, ToolSpec};

fn provider_config(name: &str, base_url: &str, models: &[&str]) -> ProviderConfig {
    ProviderConfig {
        name: name.to_owned(),
        base_url: base_url.to_owned(),
        api_key_env: None,
        models: models.iter().map(|m| (*m).to_owned()).collect(),
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// Providers with one provider ("fake", key from FAKE_KEY) for `fake`.
fn providers(fake: &FakeUpstream, tweak: impl FnOnce(&mut ModelsConfig)) -> Providers {
    let mut cfg = ModelsConfig {
        providers: vec![ProviderConfig {
            api_key_env: Some("FAKE_KEY".to_owned()),
            ..provider_config("fake", &fake.base_url(), &[])
        }],
        ..ModelsConfig::default()
    };
    tweak(&mut cfg);
    Providers::from_config(&cfg, |var| (var == "FAKE_KEY").then(|| "sk-test".to_owned()))
        .expect("valid config")
}

fn request(text: &str) -> CompletionRequest {
    CompletionRequest::new("test-model", vec![ChatMessage::system("be brief"), ChatMessage::user(text)])
}

async fn collect(
    stream: super::provider::CompletionStream,
) -> (ChunkAccumulator, Option<UpstreamError>, usize) {
    let mut acc = ChunkAccumulator::new();
    let mut chunks = 0;
    let mut stream = stream;
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => {
                chunks += 1;
                acc.push(&chunk);
            }
            Err(e) => {
                assert!(stream.next().await.is_none(), "items after an error");
                return (acc, Some(e), chunks);
            }
        }
    }
    (acc, None, chunks)
}

#[tokio::test]
async fn text_answer() {
    let fake = FakeUpstream::start().await;
    fake.push(Behaviour::Text("Hello there, friend.".into()));
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("test-model").unwrap();
    let mut req = request("hi");
    req.temperature = Some(0.5);
    let answer = provider.chat(&req).await.unwrap();
    assert_eq!(answer.text(), "Hello there, friend.");
    assert_eq!(answer.finish_reason(), Some("stop"));
    assert_eq!(answer.model, "test-model");
    let usage = answer.usage.unwrap();
    assert!(usage.prompt_tokens > 0 && usage.completion_tokens > 0);
    assert_eq!(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);

    let recorded = fake.requests();
    assert_eq!(recorded.len(), 1);
    let r = &recorded[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"}
            ],
            "temperature": 0.5,
            "stream": false
        })
    );
}

#[tokio::test]
async fn echo_and_summary() {
    let fake = FakeUpstream::start().await;
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    // The default behaviour is Echo.
    assert_eq!(provider.chat(&request("ping")).await.unwrap().text(), "ping");
    fake.push(Behaviour::Summary);
    assert_eq!(provider.chat(&request("x")).await.unwrap().text(), "summary of 2 messages");
    fake.set_default(Behaviour::Text("fixed".into()));
    let (acc, err, _) = collect(provider.chat_stream(&request("x")).await.unwrap()).await;
    assert_eq!(err, None);
    assert_eq!(acc.content(), "fixed");
}

#[tokio::test]
async fn a_model_told_to_call_mentioned_tools_calls_the_one_named_and_cuts_text_at_max_tokens() {
    let fake = FakeUpstream::start().await;
    fake.set_default(Behaviour::CallMentionedTools);
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    let params =
        json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]});
    let mut req = request("What's the weather like in Paris?");
    req.tools = Some(vec![
        ToolSpec::function("get_time", None, json!({"type": "object"})),
        ToolSpec::function("get_weather", None, params),
    ]);
    let answer = provider.chat(&req).await.unwrap();
    let calls = answer.tool_calls();
    assert_eq!((calls.len(), calls[0].function.name.as_str()), (1, "get_weather"));
    assert_eq!(
        calls[0].function.arguments,
        json!({"location": "What's the weather like in Paris?"}).to_string()
    );
    // No tool named: the echo.
    let mut req = request("hello there");
    req.tools = Some(vec![ToolSpec::function("get_weather", None, json!({"type": "object"}))]);
    assert_eq!(provider.chat(&req).await.unwrap().text(), "hello there");
    // A text answer over max_tokens is cut there, finish_reason "length", streamed or not.
    let mut req = request("one two three four five six seven eight");
    req.max_tokens = Some(3);
    let answer = provider.chat(&req).await.unwrap();
    assert_eq!((&*answer.text(), answer.finish_reason()), ("one two ", Some("length")));
    let (acc, err, _) = collect(provider.chat_stream(&req).await.unwrap()).await;
    assert_eq!((err, acc.content(), acc.finish_reason()), (None, "one two ", Some("length")));
}

#[tokio::test]
async fn tool_call_answer() {
    let fake = FakeUpstream::start().await;
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    let mut req = request("weather in Paris?");
    req.tools = Some(vec![ToolSpec::function(
        "get_weather",
        Some("Current weather".into()),
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )]);
    req.tool_choice = Some(super::wire::ToolChoice::auto());

    let call = Behaviour::ToolCall { name: "get_weather".into(), arguments: r#"{"city":"Paris"}"#.into() };
    fake.push(call.clone());
    let answer = provider.chat(&req).await.unwrap();
    assert_eq!(answer.finish_reason(), Some("tool_calls"));
    assert_eq!(answer.message().unwrap().content, None);
    let calls = answer.tool_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].function.name, "get_weather");
    assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#);
    assert!(calls[0].id.starts_with("call_"));
    let sent = &fake.last_request().unwrap().body;
    assert_eq!(sent["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(sent["tool_choice"], "auto");

    // Streamed: fragments merge into the same call.
    fake.push(call);
    let (acc, err, _) = collect(provider.chat_stream(&req).await.unwrap()).await;
    assert_eq!(err, None);
    let merged = acc.finish();
    assert_eq!(merged.finish_reason(), Some("tool_calls"));
    assert_eq!(merged.tool_calls().len(), 1);
    assert_eq!(merged.tool_calls()[0].function.name, "get_weather");
    assert_eq!(merged.tool_calls()[0].function.arguments, r#"{"city":"Paris"}"#);
    assert!(merged.usage.is_some());

    // The answer goes back into the history as is.
    let mut history = req.messages.clone();
    history.push(merged.message().unwrap().clone());
    history.push(ChatMessage::tool_result(merged.tool_calls()[0].id.clone(), "sunny"));
    let v = serde_json::to_value(&history).unwrap();
    assert_eq!(v[2]["content"], serde_json::Value::Null);
    assert_eq!(v[3]["tool_call_id"], v[2]["tool_calls"][0]["id"]);
}

#[tokio::test]
async fn stream_delivers_first_chunk_before_the_end() {
    let fake = FakeUpstream::start().await;
    let delay = Duration::from_millis(250);
    fake.push(Behaviour::StreamWithDelays {
        chunks: ["one ", "two ", "three ", "four ", "five"].map(String::from).to_vec(),
        delay,
    });
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    let started = Instant::now();
    let mut stream = provider.chat_stream(&request("count")).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    let first_at = started.elapsed();
    assert_eq!(first.text(), Some("one "));
    let mut acc = ChunkAccumulator::new();
    acc.push(&first);
    while let Some(chunk) = stream.next().await {
        acc.push(&chunk.unwrap());
    }
    let total = started.elapsed();
    assert!(total >= delay * 4, "total {total:?}");
    assert!(first_at < delay * 2 && first_at * 3 < total, "first chunk at {first_at:?}, total {total:?}");
    assert_eq!(acc.content(), "one two three four five");
    let usage = acc.usage().expect("usage in the last chunk");
    assert!(usage.completion_tokens >= 5);

    let sent = &fake.last_request().unwrap();
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
    assert_eq!(fake.streams_completed(), 1);
}

#[tokio::test]
async fn upstream_500_is_a_status_error() {
    let fake = FakeUpstream::start().await;
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    let body = r#"{"error":{"message":"the model exploded","type":"server_error"}}"#;
    fake.push(Behaviour::Fail { status: 500, body: body.into() });
    let err = provider.chat(&request("x")).await.unwrap_err();
    assert_eq!(err, UpstreamError::Status { status: 500, message: "the model exploded".into() });
    // Streamed calls fail before any chunk; plain-text bodies are quoted.
    fake.push(Behaviour::Fail { status: 503, body: "overloaded, try later".into() });
    let err = provider.chat_stream(&request("x")).await.err().unwrap();
    assert_eq!(err, UpstreamError::Status { status: 503, message: "overloaded, try later".into() });
    assert_eq!(err.to_string(), "model provider answered HTTP 503: overloaded, try later");
}

#[tokio::test]
async fn hang_times_out_within_the_configured_timeout() {
    let fake = FakeUpstream::start().await;
    let providers = providers(&fake, |cfg| {
        cfg.request_timeout_s = Some(0.5);
        cfg.stream_idle_timeout_s = Some(0.5);
    });
    let provider = providers.resolve("m").unwrap();

    fake.push(Behaviour::Hang(Duration::from_secs(10)));
    let started = Instant::now();
    let err = provider.chat(&request("x")).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err, UpstreamError::Timeout);
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3), "{took:?}");

    // Streamed: no headers within the idle timeout.
    fake.push(Behaviour::Hang(Duration::from_secs(10)));
    let started = Instant::now();
    let err = provider.chat_stream(&request("x")).await.err().unwrap();
    assert_eq!(err, UpstreamError::Timeout);
    assert!(started.elapsed() < Duration::from_secs(3));

    // Streamed: a gap between chunks longer than the idle timeout.
    fake.push(Behaviour::StreamWithDelays {
        chunks: vec!["a".into(), "b".into()],
        delay: Duration::from_secs(5),
    });
    let started = Instant::now();
    let (acc, err, chunks) = collect(provider.chat_stream(&request("x")).await.unwrap()).await;
    assert_eq!(err, Some(UpstreamError::Timeout));
    assert_eq!((chunks, acc.content()), (1, "a"));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn garbage_is_invalid() {
    let fake = FakeUpstream::start().await;
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    fake.push(Behaviour::Garbage);
    let err = provider.chat(&request("x")).await.unwrap_err();
    assert!(matches!(&err, UpstreamError::Invalid(m) if m.contains("this is not json")), "{err:?}");

    fake.push(Behaviour::Garbage);
    let (_, err, chunks) = collect(provider.chat_stream(&request("x")).await.unwrap()).await;
    assert_eq!(chunks, 0);
    assert!(matches!(&err, Some(UpstreamError::Invalid(m)) if m.contains("not JSON")), "{err:?}");
}

#[tokio::test]
async fn cut_stream_is_a_stream_cut_item() {
    let fake = FakeUpstream::start().await;
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    fake.push(Behaviour::CutStream { chunks_before_cut: 2 });
    let (acc, err, chunks) = collect(provider.chat_stream(&request("x")).await.unwrap()).await;
    assert_eq!(chunks, 2);
    assert_eq!(acc.content(), "part0 part1 ");
    assert!(matches!(err, Some(UpstreamError::StreamCut(_))), "{err:?}");

    // Not streamed: the body breaks off mid-JSON.
    fake.push(Behaviour::CutStream { chunks_before_cut: 2 });
    let err = provider.chat(&request("x")).await.unwrap_err();
    assert!(matches!(err, UpstreamError::StreamCut(_)), "{err:?}");
}

#[tokio::test]
async fn dropping_the_stream_closes_the_upstream_connection() {
    let fake = FakeUpstream::start().await;
    fake.push(Behaviour::StreamWithDelays {
        chunks: (0..50).map(|i| format!("w{i} ")).collect(),
        delay: Duration::from_millis(50),
    });
    let providers = providers(&fake, |_| {});
    let provider = providers.resolve("m").unwrap();
    let mut stream = provider.chat_stream(&request("x")).await.unwrap();
    for _ in 0..2 {
        stream.next().await.unwrap().unwrap();
    }
    drop(stream);
    assert!(
        fake.wait_for_aborted_streams(1, Duration::from_secs(2)).await,
        "the fake did not see the client go away"
    );
    assert_eq!(fake.streams_completed(), 0);
}

#[tokio::test]
async fn embeddings() {
    let fake = FakeUpstream::start().await;
    let providers = providers(&fake, |cfg| {
        cfg.embedding_model = Some("embedder".into());
    });
    let model = providers.embedding_model().unwrap();
    let provider = providers.resolve(model).unwrap();
    let inputs = vec![
        "the cat sat on the mat".to_owned(),
        "a dog in the fog".to_owned(),
        "the cat on a mat".to_owned(),
    ];
    let vectors = provider.embed(model, &inputs).await.unwrap();
    assert_eq!(vectors.len(), 3);
    for (v, text) in vectors.iter().zip(&inputs) {
        assert_eq!(v, &embedding_for(text));
        assert_eq!(v.len(), 16);
    }
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert!(dot(&vectors[0], &vectors[2]) > dot(&vectors[0], &vectors[1]));
    let sent = fake.last_request().unwrap();
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(sent.body["model"], "embedder");
    assert_eq!(sent.body["input"], json!(inputs));

    assert!(provider.embed(model, &[]).await.unwrap().is_empty());

    fake.push_embeddings(Behaviour::Fail { status: 400, body: r#"{"error":"input too long"}"#.into() });
    assert_eq!(
        provider.embed(model, &inputs).await.unwrap_err(),
        UpstreamError::Status { status: 400, message: "input too long".into() }
    );
}

#[tokio::test]
async fn unreachable_provider_is_a_connect_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = ModelsConfig {
        providers: vec![provider_config("gone", &format!("http://127.0.0.1:{port}/v1"), &[])],
        ..ModelsConfig::default()
    };
    let providers = Providers::from_config(&cfg, no_env).unwrap();
    let provider = providers.resolve("m").unwrap();
    let err = provider.chat(&request("x")).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Connect(_)), "{err:?}");
    let err = provider.chat_stream(&request("x")).await.err().unwrap();
    assert!(matches!(err, UpstreamError::Connect(_)), "{err:?}");
}

#[test]
fn resolve_by_model_list_then_catch_all() {
    let cfg = ModelsConfig {
        providers: vec![
            provider_config("local", "http://127.0.0.1:8080/v1/", &[]),
            provider_config("ollama", "http://127.0.0.1:11434/v1", &["llama3", "qwen3"]),
        ],
        default_model: Some("qwen3".into()),
        ..ModelsConfig::default()
    };
    let providers = Providers::from_config(&cfg, no_env).unwrap();
    assert_eq!(providers.resolve("qwen3").unwrap().name(), "ollama");
    assert_eq!(providers.resolve("anything").unwrap().name(), "local");
    assert_eq!(providers.resolve("anything").unwrap().base_url(), "http://127.0.0.1:8080/v1");
    assert_eq!(providers.default_model(), Some("qwen3"));
    assert_eq!(providers.embedding_model(), None);

    let only_listed = ModelsConfig {
        providers: vec![provider_config("ollama", "http://127.0.0.1:11434/v1", &["llama3"])],
        ..ModelsConfig::default()
    };
    let providers = Providers::from_config(&only_listed, no_env).unwrap();
    let err = providers.resolve("gpt-4o").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no model provider serves model 'gpt-4o' (configured providers: ollama); add the model \
         to a provider's `models` list, or leave a provider's `models` empty to let it serve \
         every model"
    );
}

#[test]
fn env_fallback() {
    let env = |pairs: &[(&str, &str)]| {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |var: &str| map.get(var).cloned()
    };
    let empty = ModelsConfig::default();

    // Nothing set: no provider, and the error says how to add one.
    let providers = Providers::from_config(&empty, env(&[])).unwrap();
    assert!(providers.is_empty());
    assert_eq!(
        providers.resolve("gpt-4o").unwrap_err().to_string(),
        "no model provider is configured for model 'gpt-4o'; set OPENAI_BASE_URL (and \
         OPENAI_API_KEY) or add a [[models.providers]] entry to the config file"
    );
    // Empty values count as unset.
    let providers = Providers::from_config(&empty, env(&[("OPENAI_API_KEY", "")])).unwrap();
    assert!(providers.is_empty());

    // Key only: OpenAI itself.
    let providers = Providers::from_config(&empty, env(&[("OPENAI_API_KEY", "sk-1")])).unwrap();
    let p = providers.resolve("gpt-4o").unwrap();
    assert_eq!((p.name(), p.base_url()), (ENV_PROVIDER_NAME, OPENAI_DEFAULT_BASE_URL));
    assert!(!format!("{p:?}").contains("sk-1"), "the key leaks in Debug");

    // Base URL only (a local server without a key), serving every model.
    let providers =
        Providers::from_config(&empty, env(&[("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")])).unwrap();
    assert_eq!(providers.resolve("whatever").unwrap().base_url(), "http://127.0.0.1:8080/v1");

    // Configured providers win over the environment.
    let cfg = ModelsConfig {
        providers: vec![provider_config("local", "http://127.0.0.1:9/v1", &["m"])],
        ..ModelsConfig::default()
    };
    let providers = Providers::from_config(&cfg, env(&[("OPENAI_API_KEY", "sk-1")])).unwrap();
    assert_eq!(providers.list().len(), 1);
    assert!(providers.resolve("gpt-4o").is_err());
}

#[tokio::test]
async fn env_fallback_provider_sends_the_key() {
    let fake = FakeUpstream::start().await;
    let base = fake.base_url();
    let providers = Providers::from_config(&ModelsConfig::default(), |var| match var {
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_API_KEY" => Some("sk-env".to_owned()),
        _ => None,
    })
    .unwrap();
    fake.push(Behaviour::Text("ok".into()));
    let answer = providers.resolve("m").unwrap().chat(&request("x")).await.unwrap();
    assert_eq!(answer.text(), "ok");
    assert_eq!(fake.last_request().unwrap().header("authorization"), Some("Bearer sk-env"));
}

#[test]
fn config_errors() {
    let with = |p: ProviderConfig| ModelsConfig { providers: vec![p], ..ModelsConfig::default() };
    let err = Providers::from_config(
        &with(ProviderConfig {
            api_key_env: Some("MY_KEY".into()),
            ..provider_config("p", "http://h/v1", &[])
        }),
        no_env,
    )
    .unwrap_err();
    assert_eq!(err, ConfigError::MissingApiKey { name: "p".into(), var: "MY_KEY".into() });
    let err = Providers::from_config(&with(provider_config("p", "localhost:8080", &[])), no_env).unwrap_err();
    assert!(matches!(err, ConfigError::BadBaseUrl { .. }), "{err}");

    let mut cfg = with(provider_config("p", "http://h/v1", &["a"]));
    cfg.default_model = Some("b".into());
    assert_eq!(
        Providers::from_config(&cfg, no_env).unwrap_err().to_string(),
        "models.default_model is 'b', but no configured provider serves that model"
    );
    let mut cfg = with(provider_config("p", "http://h/v1", &[]));
    cfg.request_timeout_s = Some(0.0);
    assert!(matches!(Providers::from_config(&cfg, no_env), Err(ConfigError::BadTimeout { .. })));
    cfg.request_timeout_s = Some(f64::NAN);
    assert!(Providers::from_config(&cfg, no_env).is_err());
    let mut cfg = with(provider_config("p", "http://h/v1", &[]));
    cfg.providers.push(provider_config("p", "http://h2/v1", &[]));
    assert_eq!(Providers::from_config(&cfg, no_env).unwrap_err(), ConfigError::DuplicateName("p".into()));
}

#[test]
fn models_section_from_toml() {
    #[derive(serde::Deserialize)]
    struct File {
        models: ModelsConfig,
    }
    let file: File = toml::from_str(
        r#"
        [models]
        default_model = "qwen3"
        request_timeout_s = 30

        [[models.providers]]
        name = "ollama"
        base_url = "http://127.0.0.1:11434/v1"
        models = ["qwen3"]

        [[models.providers]]
        name = "openai"
        base_url = "https://api.openai.com/v1"
        api_key_env = "OPENAI_API_KEY"
        "#,
    )
    .unwrap();
    assert_eq!(file.models.providers.len(), 2);
    assert_eq!(file.models.request_timeout_s, Some(30.0));
    let providers = Providers::from_config(&file.models, |_| Some("sk".to_owned())).unwrap();
    assert_eq!(providers.resolve("gpt-4o").unwrap().name(), "openai");

    let typo = toml::from_str::<File>("[models]\ndefault_modle = \"x\"\n");
    assert!(typo.is_err());
}

#[tokio::test]
async fn connect_timeout() {
    // A listener whose accept queue is full and never drained: further
    // connection attempts get no SYN-ACK and hang until the connect timeout.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    while held.len() < 16 {
        match tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => held.push(stream),
            _ => break,
        }
    }
    if held.len() == 16 {
        eprintln!("skipped: the accept queue never filled on this system");
        return;
    }
    let cfg = ModelsConfig {
        providers: vec![provider_config("slow", &format!("http://{addr}/v1"), &[])],
        connect_timeout_s: Some(0.3),
        ..ModelsConfig::default()
    };
    let providers = Providers::from_config(&cfg, no_env).unwrap();
    let started = Instant::now();
    let err = providers.resolve("m").unwrap().chat(&request("x")).await.unwrap_err();
    assert_eq!(err, UpstreamError::Timeout, "after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(listener);
}
