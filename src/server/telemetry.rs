//! Exporting the spans of `runtime::trace` to an OpenTelemetry
//! collector (feature `otlp`, on in the binary).
//!
//! Nothing is installed unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: then spans go out over
//! OTLP/HTTP with protobuf, in batches, from the exporter's own thread (the
//! session threads never wait on the collector). The exporter reads the
//! standard `OTEL_EXPORTER_OTLP_*` variables itself (endpoint, headers,
//! timeout); `OTEL_SERVICE_NAME` names the service (default `subagentd`).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;

/// Flushes and stops the exporter when dropped (at exit), so the last
/// batch of spans is not lost.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(err) = self.provider.shutdown() {
            log::warn!("telemetry: flushing spans at exit failed: {err}");
        }
    }
}

fn is_set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|value| !value.is_empty())
}

/// Installs the OTLP exporter when the environment names an endpoint;
/// `Ok(None)` when it does not (spans then cost nothing).
pub fn init_from_env() -> Result<Option<Telemetry>, String> {
    if !is_set("OTEL_EXPORTER_OTLP_ENDPOINT") && !is_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|err| format!("cannot build the OTLP exporter: {err}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME").ok().filter(|name| !name.is_empty());
    let resource = Resource::builder().with_service_name(service.unwrap_or_else(|| "subagentd".into())).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    install(&provider)?;
    Ok(Some(Telemetry { provider }))
}

/// Sends every span of the process to `provider` (the process-wide
/// subscriber; it can be installed once).
pub fn install(provider: &SdkTracerProvider) -> Result<(), String> {
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("subagentd"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .map_err(|err| format!("cannot install the span exporter: {err}"))
}
