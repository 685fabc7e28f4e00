//! Provider requests over TLS, against TLS servers on loopback whose
//! certificates come from a certificate authority made here: a provider
//! behind a certificate the system trusts answers; one behind a certificate
//! nobody vouches for is refused with a sentence that says what to do; with
//! no root certificates at all, the request says so. The system's roots are
//! loaded once, when a TLS connection first needs them: building a client
//! or talking plain HTTP never reads them.
//!
//! One test function: it points SSL_CERT_FILE at the test authority before
//! anything reads it, and the roots are process-wide. The no-roots case runs
//! in a child process of this same binary, with its own environment.

use std::io::Write;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use mia_llm::delta::Delta;
use mia_llm::message::ChatRequest;
use mia_llm::providers::{CoreConfig, Providers};
use mia_llm::tls;

const CHILD: &str = "MIA_TLS_TEST_CHILD";

const ANSWER: &str = concat!(
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,",
    "\"delta\":{\"role\":\"assistant\",\"content\":\"over TLS\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,",
    "\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// A certificate authority (its certificate as PEM), which signs server certificates for 127.0.0.1.
struct Authority {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed");
        Authority {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn server_config(&self) -> rustls::ServerConfig {
        let params = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der");
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(vec![cert.der().clone()], key)
                .expect("server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }
}

/// Answers every connection with [`ANSWER`], over TLS when `tls` is given.
async fn server(tls: Option<rustls::ServerConfig>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                match acceptor {
                    Some(a) => {
                        if let Ok(s) = a.accept(sock).await {
                            answer(s).await;
                        }
                    }
                    None => answer(sock).await,
                }
            });
        }
    });
    port
}

async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if !buf[0].is_ascii_uppercase() {
            // Not HTTP (a TLS hello sent to the plain server): refused as HTTP servers do.
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
                .await;
            return;
        }
    }
    let _ = s.write_all(ANSWER.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// One OpenAI-compatible provider `p` at `base_url`, as setup() would give it; no retries.
fn providers(base_url: String) -> Providers {
    let config: CoreConfig = serde_json::from_value(serde_json::json!({
        "providers": { "p": { "kind": "openai_compatible", "base_url": base_url, "api_key": "local" } },
        "retry": { "max_retries": 0 },
    }))
    .expect("config");
    Providers::new(config)
}

/// Streams one prompt to `base_url`: the answer's text, or the error's message.
async fn ask(base_url: String) -> Result<String, String> {
    let providers = providers(base_url);
    let req: ChatRequest = serde_json::from_value(serde_json::json!({
        "model": "p/m",
        "messages": [{ "role": "user", "content": "hello" }],
    }))
    .expect("request");
    let mut text = String::new();
    let mut emit = |d: Delta| {
        if let Delta::Text { text: t } = d {
            text.push_str(&t);
        }
    };
    match mia_llm::stream_chat(&providers, &req, &mut emit).await {
        Ok(_) => Ok(text),
        Err(e) => Err(e.message),
    }
}

fn pem_file(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("write pem");
    path
}

#[test]
fn provider_requests_over_tls_check_the_certificate_with_roots_loaded_once_when_needed() {
    if std::env::var_os(CHILD).is_some() {
        return no_roots_child();
    }
    let trusted = Authority::new("mia test authority");
    let stranger = Authority::new("nobody's authority");
    let dir = tempfile::tempdir().expect("tempdir");
    // Before anything reads the roots (nothing has: this is the binary's only test).
    std::env::set_var("SSL_CERT_FILE", pem_file(&dir, "roots.pem", &trusted.pem));
    std::env::remove_var("SSL_CERT_DIR");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // Plain HTTP, and building clients, read no roots.
        let plain = server(None).await;
        assert_eq!(ask(format!("http://127.0.0.1:{plain}/v1")).await, Ok("over TLS".into()));
        let p = providers("https://127.0.0.1:1/v1".into());
        p.client("p").expect("client");
        assert!(
            !tls::roots_loaded(),
            "a plain-HTTP request or a client's construction loaded the roots"
        );

        // A certificate from the trusted authority: the answer arrives, and the roots are now loaded.
        let good = server(Some(trusted.server_config())).await;
        assert_eq!(ask(format!("https://127.0.0.1:{good}/v1")).await, Ok("over TLS".into()));
        assert!(tls::roots_loaded());

        // A certificate nobody trusted vouches for: refused, with the cause and the fix.
        let bad = server(Some(stranger.server_config())).await;
        let err = ask(format!("https://127.0.0.1:{bad}/v1"))
            .await
            .expect_err("untrusted certificate");
        assert!(err.starts_with("p: the TLS handshake with https://127.0.0.1:"), "{err}");
        assert!(err.contains("UnknownIssuer"), "{err}");
        assert!(err.contains("SSL_CERT_FILE"), "{err}");

        // TLS spoken to a plain-HTTP server: says to check the scheme.
        let err = ask(format!("https://127.0.0.1:{plain}/v1")).await.expect_err("not TLS");
        assert!(err.contains("the TLS handshake with"), "{err}");
        assert!(err.contains("http:// for a plain server"), "{err}");
    });

    // No root certificates at all, in a child process with its own environment.
    let empty = pem_file(&dir, "empty.pem", "");
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "provider_requests_over_tls_check_the_certificate_with_roots_loaded_once_when_needed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("SSL_CERT_FILE", empty)
        .env_remove("SSL_CERT_DIR")
        .output()
        .expect("child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("no-roots child: ok"),
        "the no-roots child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With an empty SSL_CERT_FILE: a TLS provider's request fails saying no
/// roots could be loaded and how to get some; plain HTTP still works.
fn no_roots_child() {
    let authority = Authority::new("mia test authority");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tls_port = server(Some(authority.server_config())).await;
        let err = ask(format!("https://127.0.0.1:{tls_port}/v1"))
            .await
            .expect_err("no roots");
        assert!(
            err.contains("no usable TLS root certificates on this system") && err.contains("ca-certificates"),
            "{err}"
        );
        let plain = server(None).await;
        assert_eq!(ask(format!("http://127.0.0.1:{plain}/v1")).await, Ok("over TLS".into()));
    });
    println!("no-roots child: ok");
}
