//! `keel serve`: the flags become a [`ServeConfig`] and a
//! [`ScenarioFactory`] (posted scenario files, `--chat-scenario`,
//! `--allow-provider`, `--mcp`), and `keel-serve` runs the daemon until
//! SIGTERM or Ctrl-C.

use crate::args::ServeArgs;
use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use keel_engine::{Engine, EngineShutdown};
use keel_scenario::allowance::ProviderAllowance;
use keel_serve::limits::{ConnectionConfig, StreamConfig};
use keel_serve::{BearerToken, ScenarioFactory, ServeConfig, ServeError, Server};
use std::sync::Arc;
use std::time::Duration;

/// Runs `keel serve` until SIGTERM or Ctrl-C; returns the exit code.
pub fn serve(args: ServeArgs) -> Result<i32, CliError> {
    let config = config(&args)?;
    let factory = factory(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel-serve")
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let result = rt.block_on(async move {
        let server = Server::bind(config, Engine::builder(), Arc::new(factory))
            .await
            .map_err(|e| serve_error(&e))?;
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "listening on http://{}", server.local_addr());
            let _ = out.flush();
        }
        Ok::<_, CliError>(server.run(wait_for_signal()).await)
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(exit_code(&result?))
}

fn serve_error(e: &ServeError) -> CliError {
    if e.is_bad_input() {
        CliError::bad_input(e.to_string())
    } else {
        CliError::failure(e.to_string())
    }
}

/// The daemon's settings from the flags, checked whole.
fn config(args: &ServeArgs) -> Result<ServeConfig, CliError> {
    let config = ServeConfig {
        listen: args.listen,
        db: args.db.db.clone(),
        token: read_token(args)?,
        log_max_events: args.log_max_events,
        nats: args.nats.clone(),
        allow_origin: args.allow_origin.clone(),
        public_host: args.public_host.clone(),
        max_live_runs: args.max_live_runs,
        approval_timeout: Duration::from_millis(args.approval_timeout_ms),
        shutdown_timeout: Duration::from_millis(args.shutdown_timeout_ms),
        connections: ConnectionConfig {
            max_connections: args.max_connections,
            max_connections_per_peer: args.max_connections_per_peer,
            header_timeout_ms: args.header_timeout_ms,
            body_timeout_ms: args.body_timeout_ms,
            idle_timeout_ms: args.idle_timeout_ms,
            write_timeout_ms: args.write_timeout_ms,
            send_buffer_bytes: args.send_buffer_bytes,
        },
        streams: StreamConfig {
            max_streams: args.max_streams,
            max_streams_per_run: args.max_streams_per_run,
        },
        #[cfg(feature = "otel")]
        otel: otel_config(args)?,
    };
    #[cfg(not(feature = "otel"))]
    if args.otlp.is_some() {
        return Err(CliError::bad_input(
            "--otlp: this keel was built without the `otel` feature",
        ));
    }
    config
        .validate()
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    Ok(config)
}

/// `--otlp URL [--otlp-content]` as the exporter's settings.
#[cfg(feature = "otel")]
fn otel_config(args: &ServeArgs) -> Result<Option<keel_observers::OtelConfig>, CliError> {
    let Some(url) = &args.otlp else {
        return Ok(None);
    };
    let endpoint = keel_observers::OtlpEndpoint::parse(url)
        .map_err(|e| CliError::bad_input(format!("--otlp: {e}")))?;
    Ok(Some(
        keel_observers::OtelConfig::new(endpoint).record_content(args.otlp_content),
    ))
}

/// What posted bodies become: scenario files, with the operator's
/// allowances and chat agent.
fn factory(args: &ServeArgs) -> Result<ScenarioFactory, CliError> {
    let bad = |e: &dyn std::fmt::Display| CliError::bad_input(e.to_string());
    let providers = args
        .allow_provider
        .iter()
        .map(|a| ProviderAllowance::parse(a))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    #[cfg(not(feature = "mcp"))]
    if !args.mcp.is_empty() {
        return Err(CliError::bad_input(
            "--mcp: this keel was built without the `mcp` feature",
        ));
    }
    let factory = ScenarioFactory::new(providers);
    #[cfg(feature = "mcp")]
    let factory =
        factory.mcp_servers(keel_scenario::mcp::parse_flags(&args.mcp).map_err(|e| bad(&e))?);
    match &args.chat_scenario {
        Some(file) => factory.chat_scenario(file).map_err(|e| bad(&e)),
        None => Ok(factory),
    }
}

fn read_token(args: &ServeArgs) -> Result<Option<BearerToken>, CliError> {
    let (text, from) = match &args.token_file {
        Some(file) => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                CliError::bad_input(format!("--token-file {}: {e}", file.display()))
            })?;
            (
                text.trim_end_matches(['\r', '\n']).to_owned(),
                "--token-file",
            )
        }
        None => match std::env::var("KEEL_TOKEN") {
            Ok(t) => (t, "KEEL_TOKEN"),
            Err(_) => return Ok(None),
        },
    };
    BearerToken::parse(&text).map(Some).map_err(|_| {
        CliError::bad_input(format!(
            "{from}: the token must be non-empty printable ASCII without spaces"
        ))
    })
}

/// 0 when every run's whole history reached the journal; otherwise the
/// runs are named on stderr and the code is 1.
fn exit_code(report: &EngineShutdown) -> i32 {
    if report.unacknowledged.is_empty() && report.runs_abandoned == 0 {
        return EXIT_OK;
    }
    eprintln!(
        "keel: {} run(s) left for recovery ({} abandoned at the deadline): their journal lacks events, terminals included",
        report.unacknowledged.len(),
        report.runs_abandoned
    );
    let mut left: Vec<&str> = report.unacknowledged.iter().map(|id| id.as_str()).collect();
    left.sort_unstable();
    for run_id in left {
        eprintln!("keel: left for recovery: {run_id}");
    }
    EXIT_FAILED
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
