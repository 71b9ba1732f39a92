//! The span of one Redis call, beneath the server span of the call it decides: a `tracing`
//! span of the target only the OpenTelemetry layer listens to (the server's `otel`).

use tracing::Span;

/// The `tracing` target of every span meant for export; the log output never shows it.
pub const TARGET: &str = "otel_spans";

/// The span of one Redis round trip: `command` (FCALL, EVALSHA or EVAL) running the script
/// for `hits` hits at once, in `mode`; none outside a traced call.
pub fn redis_span(command: &'static str, hits: usize, mode: &'static str) -> Span {
    if Span::current().is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "redis",
        otel.name = command,
        otel.kind = "client",
        db.system = "redis",
        db.operation.name = command,
        sluice.redis.scripts = hits,
        sluice.redis.mode = mode,
    )
}
