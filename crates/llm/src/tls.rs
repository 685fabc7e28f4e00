//! TLS for every HTTP client the core builds: one rustls configuration whose
//! certificate verifier (the platform's, as reqwest would build it) loads the
//! system's root certificates once per process, on first need, not when a
//! client is built.
//!
//! Loading the roots reads and parses every certificate the system has
//! (the bundle, and with SSL_CERT_DIR set each file of that directory too:
//! ~300 parses where both are set, several milliseconds). Built eagerly, per client, that sat
//! between a session's first prompt and its request even when the provider
//! is plain HTTP on loopback (Ollama, a local server), and again for each
//! provider and each MCP server over HTTP.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The platform verifier, built on first use from the system's roots.
#[derive(Debug)]
struct LazyVerifier {
    provider: Arc<CryptoProvider>,
    inner: OnceLock<Result<Arc<rustls_platform_verifier::Verifier>, rustls::Error>>,
}

impl LazyVerifier {
    fn get(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        let built = self.inner.get_or_init(|| {
            rustls_platform_verifier::Verifier::new(self.provider.clone())
                .map(Arc::new)
                .map_err(|e| {
                    rustls::Error::General(format!(
                        "no usable TLS root certificates on this system ({e}): install the ca-certificates \
                         package, or point SSL_CERT_FILE at a PEM bundle"
                    ))
                })
        });
        match built {
            Ok(v) => Ok(v),
            Err(e) => Err(e.clone()),
        }
    }
}

impl ServerCertVerifier for LazyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.get()?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls13_signature(message, cert, dss)
    }

    /// What the platform verifier answers too: the crypto provider's
    /// signature schemes (no roots needed to say so).
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

fn verifier() -> &'static Arc<LazyVerifier> {
    static VERIFIER: OnceLock<Arc<LazyVerifier>> = OnceLock::new();
    VERIFIER.get_or_init(|| {
        Arc::new(LazyVerifier {
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            inner: OnceLock::new(),
        })
    })
}

/// Loads the system's roots now, if not yet loaded (blocking: call it on a
/// blocking thread). Returns how it went; a failure is reported again, to
/// the request that needs the roots.
pub fn load_roots() -> Result<(), rustls::Error> {
    verifier().get().map(|_| ())
}

/// True once the roots have been loaded (or failed to load).
pub fn roots_loaded() -> bool {
    verifier().inner.get().is_some()
}

/// The TLS configuration for a reqwest client (`tls_backend_preconfigured`):
/// TLS 1.2 and 1.3 with ring, the shared lazy verifier, and ALPN for HTTP/2
/// and HTTP/1.1 as reqwest sets it for its own configurations.
pub fn client_config() -> rustls::ClientConfig {
    let v = verifier();
    let mut config = rustls::ClientConfig::builder_with_provider(v.provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(v.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// A reqwest client builder that uses [`client_config`].
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(client_config())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_offers_http2_and_http1_and_every_scheme_of_the_provider() {
        let config = client_config();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        let schemes = verifier().supported_verify_schemes();
        assert!(schemes.contains(&SignatureScheme::ECDSA_NISTP256_SHA256), "{schemes:?}");
        assert!(schemes.contains(&SignatureScheme::RSA_PSS_SHA256), "{schemes:?}");
        assert!(schemes.contains(&SignatureScheme::ED25519), "{schemes:?}");
    }
}
