//! OTLP/gRPC (feature `grpc`): the protobuf bodies the SDK's OTLP/HTTP
//! exporter encodes (`ExportMetricsServiceRequest`, `ExportLogsServiceRequest`:
//! the same messages both protocols carry) sent as unary calls of the
//! collector's `MetricsService/Export` and `LogsService/Export` over tonic's
//! HTTP/2 channel. So gRPC exports go through [`super::client::Client`] like
//! HTTP ones, and share its bounded backlog, counters and exit deadline.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::Code;

/// The most of a collector's answer that is decoded (it is a few bytes).
const MAX_ANSWER: usize = 64 * 1024;
/// Longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest body accepted once decompressed (the SDK's own bodies are far smaller).
const MAX_BODY: u64 = 64 * 1024 * 1024;

/// Which service a signal's exports call.
#[derive(Debug, Clone, Copy)]
pub enum Service {
    Metrics,
    Logs,
}

impl Service {
    fn path(self) -> &'static str {
        match self {
            Service::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            Service::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        }
    }
}

/// One signal's collector. The channel (and, for https, its TLS roots) is
/// made on the first export, on the exporter's own thread, not when export
/// is configured on Neovim's main thread.
pub struct Target {
    endpoint: String,
    service: Service,
    gzip: bool,
    rt: tokio::runtime::Handle,
    channel: OnceLock<Result<Channel, String>>,
}

/// Why a call failed, and whether a later try may pass.
pub struct Failure {
    pub retry: bool,
    pub why: String,
}

impl Target {
    /// `endpoint` is the collector's address (`http://host:4317`); checked here.
    pub fn new(endpoint: &str, service: Service, gzip: bool, rt: tokio::runtime::Handle) -> Result<Self, String> {
        Endpoint::from_shared(endpoint.to_string()).map_err(|e| format!("invalid gRPC endpoint {endpoint:?}: {e}"))?;
        Ok(Target {
            endpoint: endpoint.to_string(),
            service,
            gzip,
            rt,
            channel: OnceLock::new(),
        })
    }

    fn channel(&self) -> Result<Channel, String> {
        self.channel
            .get_or_init(|| {
                // The channel's worker task is spawned on mia's runtime.
                let _in_runtime = self.rt.enter();
                let mut ep = Endpoint::from_shared(self.endpoint.clone())
                    .map_err(|e| e.to_string())?
                    .connect_timeout(CONNECT_TIMEOUT);
                if self.endpoint.starts_with("https://") {
                    ep = ep
                        .tls_config(ClientTlsConfig::new().with_native_roots())
                        .map_err(|e| format!("TLS: {e}"))?;
                }
                Ok(ep.connect_lazy())
            })
            .clone()
    }

    /// One export call: `body` is the encoded request, `headers` the
    /// collector's (sent as metadata), `gzipped` when the SDK compressed
    /// the body for HTTP (it is inflated: gRPC compresses per message).
    /// Runs on mia's runtime.
    pub async fn export(
        &self,
        body: Bytes,
        gzipped: bool,
        headers: &reqwest::header::HeaderMap,
        timeout: Duration,
    ) -> Result<(), Failure> {
        let refused = |why: String| Failure { retry: false, why };
        let body = if gzipped {
            inflate(&body).map_err(refused)?
        } else {
            body
        };
        let channel = self.channel().map_err(refused)?;
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_ANSWER);
        if self.gzip {
            grpc = grpc
                .send_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Gzip);
        }
        let mut meta = reqwest::header::HeaderMap::new();
        for (k, v) in headers {
            // The SDK's HTTP framing is not the call's: tonic sets its own.
            if k != reqwest::header::CONTENT_TYPE && k != reqwest::header::CONTENT_ENCODING {
                meta.append(k.clone(), v.clone());
            }
        }
        let mut request = tonic::Request::new(body);
        *request.metadata_mut() = tonic::metadata::MetadataMap::from_headers(meta);
        request.set_timeout(timeout);
        let path = http::uri::PathAndQuery::from_static(self.service.path());
        let call = async {
            grpc.ready().await.map_err(|e| Failure {
                retry: true,
                why: format!("cannot connect: {}", innermost(&e)),
            })?;
            grpc.unary::<Bytes, Bytes, Raw>(request, path, Raw)
                .await
                .map(|_| ())
                .map_err(|s| classify(&s))
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(Failure {
                retry: true,
                why: "timed out".into(),
            }),
        }
    }
}

/// Retryable per the OTLP specification (the codes a later try may pass),
/// and so is a status made on this side from a broken connection (it has a
/// source; a collector's own status does not), whatever its code.
fn classify(s: &tonic::Status) -> Failure {
    use std::error::Error;
    let retry = s.source().is_some()
        || matches!(
            s.code(),
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::OutOfRange
                | Code::Unavailable
                | Code::DataLoss
                | Code::ResourceExhausted
        );
    let mut message: String = s.message().chars().filter(|c| !c.is_control()).take(200).collect();
    if message.is_empty() {
        message = innermost(s);
    }
    Failure {
        retry,
        why: format!("gRPC {:?}: {message}", s.code()),
    }
}

fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        last = c.to_string();
        cause = c.source();
    }
    last
}

fn inflate(body: &[u8]) -> Result<Bytes, String> {
    use std::io::Read;
    let mut out = Vec::with_capacity(body.len() * 4);
    flate2::read::GzDecoder::new(body)
        .take(MAX_BODY + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("cannot inflate the export: {e}"))?;
    if out.len() as u64 > MAX_BODY {
        return Err("the export is too large".into());
    }
    Ok(Bytes::from(out))
}

/// Bytes in, bytes out: the messages are encoded by the SDK, and the
/// collector's answer is not needed beyond its status.
#[derive(Clone, Copy)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_is_retried_and_a_refusal_is_not() {
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset",
        )));
        assert_eq!(broken.code(), Code::Unknown);
        assert!(classify(&broken).retry);
        assert!(classify(&tonic::Status::unavailable("busy")).retry);
        assert!(classify(&tonic::Status::resource_exhausted("slow down")).retry);
        let refused = classify(&tonic::Status::invalid_argument("bad\nbody"));
        assert!(!refused.retry);
        assert_eq!(refused.why, "gRPC InvalidArgument: badbody");
        assert!(!classify(&tonic::Status::unauthenticated("key")).retry);
    }
}
