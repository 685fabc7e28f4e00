//! Azure OpenAI: OpenAI's Chat Completions behind Azure's addressing. The
//! model of `"NAME/deployment"` is the deployment, which goes into the path
//! (`{base}/openai/deployments/{deployment}/chat/completions`); every
//! request carries the `api-version` query parameter, and the key travels
//! in an `api-key` header. Bodies, streams and errors are OpenAI's.

use serde_json::Value;

use super::delta::DecodeEvent;
use super::error::LlmError;
use super::message::ChatRequest;
use super::openai::{self, OpenAiDecoder, OpenAiOptions};
use super::providers::ResolvedProvider;
use super::wire::{StreamDecoder, WireFormat};

/// The data-plane API version used when `providers.NAME.api_version` is
/// not set: the newest generally available one when this was written.
pub const DEFAULT_API_VERSION: &str = "2024-10-21";

/// Azure OpenAI as a [`WireFormat`] (`kind = "azure_openai"`).
pub struct Azure;

impl Azure {
    /// `{base}/openai/{segments…}?api-version=…`, each segment and the
    /// version escaped (a deployment named `../x` stays one segment).
    fn with_version(p: &ResolvedProvider, segments: &[&str]) -> String {
        let version = p.api_version.as_deref().unwrap_or(DEFAULT_API_VERSION);
        let base = format!("{}/openai", p.base_url);
        let Ok(mut url) = reqwest::Url::parse(&base) else {
            // An unusable base_url: the request fails with the client's own error.
            return base;
        };
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url.query_pairs_mut().append_pair("api-version", version);
        url.to_string()
    }
}

impl WireFormat for Azure {
    fn kind(&self) -> &'static str {
        "azure_openai"
    }

    fn headers(&self, p: &ResolvedProvider) -> Vec<(String, String)> {
        p.api_key
            .as_ref()
            .map(|key| vec![("api-key".to_string(), key.clone())])
            .unwrap_or_default()
    }

    fn chat_url(&self, p: &ResolvedProvider, model: &str, _stream: bool) -> String {
        Self::with_version(p, &["deployments", model, "chat", "completions"])
    }

    fn speaks_responses(&self) -> bool {
        true
    }

    /// Azure's v1 API, `{base}/openai/v1/responses`: the deployment goes in
    /// the body's `model`, and no `api-version` is needed (one configured in
    /// `providers.NAME.api_version` is still sent, e.g. `"preview"`).
    fn responses_url(&self, p: &ResolvedProvider) -> String {
        let url = format!("{}/openai/v1/responses", p.base_url);
        match (&p.api_version, reqwest::Url::parse(&url)) {
            (Some(version), Ok(mut parsed)) => {
                parsed.query_pairs_mut().append_pair("api-version", version);
                parsed.to_string()
            }
            _ => url,
        }
    }

    fn request_body(&self, _p: &ResolvedProvider, model: &str, req: &ChatRequest, stream: bool) -> Value {
        // Azure's current API versions take OpenAI's newer token field.
        let opts = OpenAiOptions {
            max_completion_tokens: true,
        };
        openai::request_body(req, model, opts, stream)
    }

    fn decoder(&self, p: &ResolvedProvider) -> Box<dyn StreamDecoder> {
        Box::new(OpenAiDecoder::new(&p.name))
    }

    fn parse_response(&self, provider: &str, json: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
        openai::parse_response(provider, json)
    }

    /// The models the resource offers (`GET /openai/models`); deployments
    /// are usually named after them.
    fn models_url(&self, p: &ResolvedProvider) -> String {
        Self::with_version(p, &["models"])
    }

    fn model_ids(&self, json: &Value) -> Vec<String> {
        openai::model_ids(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{CoreConfig, ProviderConfig, Providers};

    fn resolved(extra: serde_json::Value) -> ResolvedProvider {
        let mut entry = serde_json::json!({
            "kind": "azure_openai",
            "base_url": "https://res.openai.azure.com/",
            "api_key": "az-key-1",
        });
        if let (Some(e), Some(x)) = (entry.as_object_mut(), extra.as_object()) {
            e.extend(x.clone());
        }
        let cfg: ProviderConfig = serde_json::from_value(entry).unwrap();
        let mut config = CoreConfig::default();
        config.providers.insert("az".into(), cfg);
        Providers::new(config).resolve("az/my deploy").unwrap().0
    }

    #[test]
    fn the_deployment_goes_into_the_path_with_the_api_version_and_the_key_into_api_key() {
        let p = resolved(serde_json::json!({}));
        assert_eq!(
            Azure.chat_url(&p, "my deploy", true),
            "https://res.openai.azure.com/openai/deployments/my%20deploy/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(Azure.headers(&p), vec![("api-key".to_string(), "az-key-1".to_string())]);
        let p = resolved(serde_json::json!({ "api_version": "2025-01-01-preview&x=1" }));
        assert_eq!(
            Azure.models_url(&p),
            "https://res.openai.azure.com/openai/models?api-version=2025-01-01-preview%26x%3D1"
        );
    }

    #[test]
    fn a_deployment_cannot_climb_out_of_its_path() {
        let p = resolved(serde_json::json!({}));
        let url = Azure.chat_url(&p, "../../evil?x=", false);
        assert!(
            url.starts_with(
                "https://res.openai.azure.com/openai/deployments/..%2F..%2Fevil%3Fx=/chat/completions?api-version="
            ),
            "{url}"
        );
        let url = Azure.chat_url(&p, "..", false);
        assert!(
            url.starts_with("https://res.openai.azure.com/openai/deployments/"),
            "{url}"
        );
        assert!(url.contains("/chat/completions?api-version="), "{url}");
    }

    #[test]
    fn the_body_is_openais_with_the_newer_token_field() {
        let p = resolved(serde_json::json!({}));
        let req = ChatRequest {
            model: "az/d".into(),
            max_tokens: Some(64),
            ..ChatRequest::default()
        };
        let body = Azure.request_body(&p, "d", &req, true);
        assert_eq!(body["max_completion_tokens"], 64);
        assert!(body.get("max_tokens").is_none());
        assert_eq!(body["stream"], true);
    }
}
