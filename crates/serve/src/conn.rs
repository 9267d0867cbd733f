//! The accept loop: each connection is admitted against the caps
//! ([`Admission`]) before any byte of it is read, then served as HTTP/1
//! by hyper with the header read timeout, over a socket with a small send
//! buffer and a write timeout ([`TimedIo`]), watched by the idle timeout.
//! On shutdown every connection is asked to finish its response and
//! close.

use super::admission::{Admission, AdmissionError, ConnPermit};
use super::limits::ConnectionLimits;
use super::problem::Problem;
use super::timed_io::{Activity, TimedIo};
use axum::Router;
use axum::http::StatusCode;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower_service::Service;

/// How long the accept loop pauses after an error such as EMFILE (out of
/// file descriptors), so it does not spin while none can be accepted.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// The `Retry-After` of a connection refused at the cap, in seconds.
const RETRY_AFTER_SECS: u32 = 1;

/// What every connection is served with.
#[derive(Debug, Clone)]
pub struct ConnConfig {
    app: Router,
    limits: ConnectionLimits,
}

impl ConnConfig {
    /// Serves `app` under `limits`.
    pub fn new(app: Router, limits: ConnectionLimits) -> ConnConfig {
        ConnConfig { app, limits }
    }
}

/// Accepts until `stop` turns true, then asks the open connections to
/// close and waits for them (the caller bounds how long).
pub async fn accept_loop(listener: TcpListener, config: ConnConfig, stop: watch::Receiver<bool>) {
    let admission = Admission::new(
        config.limits.max_connections(),
        config.limits.max_connections_per_peer(),
    );
    let mut tasks = JoinSet::new();
    let mut stopping = stop.clone();
    loop {
        tokio::select! {
            _ = stopping.wait_for(|s| *s) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match admission.admit(peer.ip()) {
                    Ok(permit) => {
                        tasks.spawn(serve_connection(stream, permit, config.clone(), stop.clone()));
                    }
                    Err(refusal) => refuse(&stream, peer, refusal),
                },
                // A connection reset before it was accepted: nothing to do.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    eprintln!("keel: accept: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// Answers a connection over a cap with a minimal 503 problem, written
/// only if the socket takes it at once (never waiting on the peer), and
/// closes it.
fn refuse(stream: &TcpStream, peer: SocketAddr, refusal: AdmissionError) {
    let body = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too-many-connections",
        "Too many connections",
        refusal.to_string(),
    )
    .with("bound", refusal.bound())
    .with(refusal.bound(), refusal.max())
    .to_json()
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {}\r\nretry-after: {RETRY_AFTER_SECS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        super::problem::PROBLEM_JSON,
        body.len()
    );
    let _ = stream.try_write(answer.as_bytes());
    eprintln!("keel: refused a connection from {}: {refusal}", peer.ip());
}

/// Serves one admitted connection until it ends, is evicted, goes idle or
/// (after `stop`) has finished its response.
async fn serve_connection(
    stream: TcpStream,
    permit: ConnPermit,
    config: ConnConfig,
    mut stop: watch::Receiver<bool>,
) {
    let limits = config.limits;
    let _ = stream.set_nodelay(true);
    if limits.send_buffer_bytes() > 0 {
        // Best effort: without it the kernel's own (larger) buffer holds.
        let _ = socket2::SockRef::from(&stream).set_send_buffer_size(limits.send_buffer_bytes());
    }
    let activity = Activity::new();
    let io = TokioIo::new(TimedIo::new(
        stream,
        limits.write_timeout(),
        Arc::clone(&activity),
    ));
    let mark = permit.mark();
    let app = config.app;
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(mark.clone());
        let mut app = app.clone();
        async move {
            std::future::poll_fn(|cx| {
                Service::<hyper::Request<Incoming>>::poll_ready(&mut app, cx)
            })
            .await?;
            app.call(request).await
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout())
        .keep_alive(true);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let idle = activity.idle_for(limits.idle_timeout());
    tokio::pin!(idle);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = connection.as_mut() => return,
            () = permit.evicted() => return,
            () = idle.as_mut() => return,
            _ = stop.wait_for(|s| *s), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}
