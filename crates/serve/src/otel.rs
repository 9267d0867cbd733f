//! `ServeConfig::otel`: the daemon's engine gets an [`OtelObserver`]
//! (best-effort: a slow or absent receiver never holds a run up), which
//! the engine's shutdown flushes.
//!
//! [`OtelObserver`]: keel_observers::OtelObserver

use crate::config::ServeConfig;
use crate::error::ServeError;
use keel_engine::EngineBuilder;

/// `engine` with the OTLP exporter added when `config.otel` asks for it.
#[cfg(feature = "otel")]
pub(crate) fn with_exporter(
    engine: EngineBuilder,
    config: &ServeConfig,
) -> Result<EngineBuilder, ServeError> {
    let Some(otel) = &config.otel else {
        return Ok(engine);
    };
    let observer = keel_observers::OtelObserver::new(otel)?;
    Ok(engine.best_effort_observer(Box::new(observer)))
}

/// Without the `otel` feature there is nothing to add.
#[cfg(not(feature = "otel"))]
pub(crate) fn with_exporter(
    engine: EngineBuilder,
    _config: &ServeConfig,
) -> Result<EngineBuilder, ServeError> {
    Ok(engine)
}
