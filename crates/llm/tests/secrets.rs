//! A server that quotes the API key back (in a 401 body, masked the way
//! OpenAI does, in a retried 5xx, in an in-band stream error, in a broken
//! chunk) never gets the key into the error the user sees or a retry notice;
//! and the key travels only in the auth header of each wire format.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use mia_llm::delta::Delta;
use mia_llm::error::{ErrorClass, LlmError};
use mia_llm::message::ChatRequest;
use mia_llm::providers::{CoreConfig, Jitter, ProviderConfig, ProviderKind, Providers, RetryConfig};

const KEY: &str = "sk-canary-5f0c9e27d41a8b36c0e1f2a3b4c5d6e7";

/// OpenAI's way of showing a key it refused: the first 8 and last 4 characters.
fn masked() -> String {
    format!("{}{}{}", &KEY[..8], "*".repeat(20), &KEY[KEY.len() - 4..])
}

/// What one request looked like on the wire.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: String,
}

/// A loopback server answering every request with `response` (a whole HTTP response).
async fn server(response: String) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head, body) = loop {
                let n = sock.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break (String::new(), String::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= len {
                        break (head.to_string(), body.to_string());
                    }
                }
            };
            log.lock().expect("log").push(Seen { head, body });
            let _ = sock.write_all(response.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (port, seen)
}

/// A whole response; `{KEY}` in `body` becomes the key (the server quoting it back).
fn http(status: &str, content_type: &str, body: &str) -> String {
    let body = body.replace("{KEY}", KEY);
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn providers(kind: ProviderKind, port: u16, max_retries: u32) -> Providers {
    let root = format!("http://127.0.0.1:{port}");
    let base_url = match kind.name() {
        "anthropic" => root,
        "gemini" => format!("{root}/v1beta"),
        _ => format!("{root}/v1"),
    };
    let mut config = CoreConfig {
        retry: RetryConfig {
            max_retries,
            initial_delay_ms: 1,
            jitter: Jitter::On(false),
            ..RetryConfig::default()
        },
        ..CoreConfig::default()
    };
    config.providers.insert(
        "canary".into(),
        ProviderConfig {
            kind,
            base_url: Some(base_url),
            api_key_env: None,
            api_key: Some(KEY.into()),
            headers: Default::default(),
            models: vec!["m".into()],
            prompt_caching: false,
            api_version: None,
            native_tools: true,
            api: None,
            local: None,
            api_key_cmd: None,
        },
    );
    Providers::new(config)
}

/// Streams one prompt; returns the error and every retry notice's message.
async fn fail(providers: &Providers) -> (LlmError, Vec<String>) {
    let req: ChatRequest = serde_json::from_value(serde_json::json!({
        "model": "canary/m",
        "messages": [{ "role": "user", "content": "hello" }],
    }))
    .expect("request");
    let mut notices = Vec::new();
    let mut emit = |d: Delta| {
        if let Delta::Retry { message, .. } = d {
            notices.push(message);
        }
    };
    let err = mia_llm::stream_chat(providers, &req, &mut emit)
        .await
        .expect_err("the server fails every request");
    (err, notices)
}

fn assert_no_key(text: &str) {
    for leak in [KEY.to_string(), KEY["sk-canary-".len()..].to_string(), masked()] {
        assert!(!text.contains(&leak), "the key leaked: {text}");
    }
}

#[tokio::test]
async fn a_401_body_quoting_the_key_shows_it_redacted_in_every_format() {
    for kind in [k("openai"), k("openai_compatible"), k("anthropic"), k("gemini")] {
        let body = r#"{"error":{"message":"Incorrect API key provided: {KEY}. You can find your API key in your account.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        let (port, seen) = server(http("401 Unauthorized", "application/json", body)).await;
        let (err, _) = fail(&providers(kind, port, 0)).await;
        assert_eq!(err.class, ErrorClass::AuthFailure, "{kind:?}");
        assert!(
            err.message
                .contains("Incorrect API key provided: <redacted>. You can find"),
            "{kind:?}: {}",
            err.message
        );
        assert_no_key(&err.message);
        assert_no_key(&serde_json::to_string(&err).expect("json"));
        // the key went out only in the format's auth header
        let seen = seen.lock().expect("seen").clone();
        assert_eq!(seen.len(), 1);
        let header = match kind.name() {
            "anthropic" => format!("x-api-key: {KEY}"),
            "gemini" => format!("x-goog-api-key: {KEY}"),
            _ => format!("authorization: Bearer {KEY}"),
        };
        assert!(
            seen[0].head.to_ascii_lowercase().contains(&header.to_ascii_lowercase()),
            "{kind:?}"
        );
        assert_no_key(seen[0].head.lines().next().unwrap_or_default()); // the request line: no key in the URL
        assert_no_key(&seen[0].body);
    }
}

#[tokio::test]
async fn a_key_set_as_a_custom_header_is_redacted_from_an_echo_too() {
    let body = r#"{"error":{"message":"Incorrect API key provided: {KEY}.","code":"invalid_api_key"}}"#;
    let (port, seen) = server(http("401 Unauthorized", "application/json", body)).await;
    let mut providers = providers(k("openai_compatible"), port, 0);
    let cfg = providers.config.providers.get_mut("canary").expect("canary");
    cfg.api_key = None;
    cfg.headers.insert("api-key".into(), KEY.into());
    let (err, _) = fail(&providers).await;
    assert!(
        err.message.contains("Incorrect API key provided: <redacted>."),
        "{}",
        err.message
    );
    assert_no_key(&err.message);
    assert!(seen.lock().expect("seen")[0].head.contains(&format!("api-key: {KEY}")));
    assert!(providers.secrets().contains(&KEY.to_string()));
}

#[tokio::test]
async fn a_key_masked_like_openai_does_is_redacted_whole() {
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {}. You can find your API key at https://platform.example/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#,
        masked()
    );
    let (port, _) = server(http("401 Unauthorized", "application/json", &body)).await;
    let (err, _) = fail(&providers(k("openai"), port, 0)).await;
    assert!(
        err.message
            .contains("(HTTP 401: Incorrect API key provided: <redacted>. You can find your API key at"),
        "{}",
        err.message
    );
    assert_no_key(&err.message);
}

#[tokio::test]
async fn retried_5xx_quoting_the_key_keeps_it_out_of_retry_notices() {
    let body = r#"{"error":{"message":"upstream rejected key {KEY}","type":"server_error"}}"#;
    let (port, seen) = server(http("502 Bad Gateway", "application/json", body)).await;
    let (err, notices) = fail(&providers(k("openai_compatible"), port, 2)).await;
    assert_eq!(err.class, ErrorClass::ServerError);
    assert!(err.message.ends_with("(after 2 retries)"), "{}", err.message);
    assert_eq!(notices.len(), 2);
    assert_eq!(seen.lock().expect("seen").len(), 3);
    for text in notices.iter().chain([&err.message]) {
        assert!(text.contains("upstream rejected key <redacted>"), "{text}");
        assert_no_key(text);
    }
}

#[tokio::test]
async fn an_in_band_stream_error_quoting_the_key_is_redacted() {
    let openai = "data: {\"error\":{\"message\":\"key {KEY} was revoked\",\"type\":\"invalid_api_key\"}}\n\n";
    let anthropic = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"key {KEY} was revoked\"}}\n\n";
    for (kind, stream) in [(k("openai_compatible"), openai), (k("anthropic"), anthropic)] {
        let (port, _) = server(http("200 OK", "text/event-stream", stream)).await;
        let (err, _) = fail(&providers(kind, port, 0)).await;
        assert_eq!(err.class, ErrorClass::AuthFailure, "{kind:?}: {}", err.message);
        assert!(
            err.message.contains("key <redacted> was revoked"),
            "{kind:?}: {}",
            err.message
        );
        assert_no_key(&err.message);
    }
}

#[tokio::test]
async fn a_malformed_chunk_quoting_the_key_is_redacted_even_when_cut() {
    // The error quotes the chunk's first 80 characters: the key is cut there.
    let stream = format!("data: {{\"padding\": \"{}\", \"k\": \"{{KEY}}\n\n", "p".repeat(44));
    let (port, _) = server(http("200 OK", "text/event-stream", &stream)).await;
    let (err, _) = fail(&providers(k("openai_compatible"), port, 0)).await;
    assert!(err.message.contains("malformed chunk"), "{}", err.message);
    assert!(err.message.contains("<redacted>"), "{}", err.message);
    assert!(!err.message.contains("sk-canary-5f0c"), "{}", err.message);
}

#[test]
fn secrets_are_every_key_from_setup_and_the_environment_but_placeholders() {
    std::env::set_var("MIA_SECRETS_TEST_KEY", "sk-env-canary-0123456789");
    let mut config = CoreConfig::default();
    let entry = |api_key: Option<&str>, api_key_env: Option<&str>| ProviderConfig {
        kind: k("openai_compatible"),
        base_url: Some("http://127.0.0.1:1/v1".into()),
        api_key: api_key.map(str::to_string),
        api_key_env: api_key_env.map(str::to_string),
        headers: Default::default(),
        models: vec![],
        prompt_caching: false,
        api_version: None,
        native_tools: true,
        api: None,
        local: None,
        api_key_cmd: None,
    };
    config.providers.insert("lit".into(), entry(Some(KEY), None));
    config
        .providers
        .insert("env".into(), entry(None, Some("MIA_SECRETS_TEST_KEY")));
    config.providers.insert("ollama".into(), entry(Some("ollama"), None));
    config
        .providers
        .insert("unset".into(), entry(None, Some("MIA_SECRETS_TEST_SURELY_UNSET")));
    let secrets = Providers::new(config).secrets();
    // (the built-in providers add the keys set in this environment, if any)
    assert!(secrets.contains(&KEY.to_string()), "{}", secrets.len());
    assert!(secrets.contains(&"sk-env-canary-0123456789".to_string()));
    assert!(!secrets.contains(&"ollama".to_string()));
}

/// The registered wire format `name`.
fn k(name: &str) -> ProviderKind {
    ProviderKind::named(name).expect("a registered kind")
}
