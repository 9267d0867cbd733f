//! The daemon's bounds on connections and streams (issue #22), from its
//! [`ServeConfig`](crate::ServeConfig) (the `keel serve` flags): what a hostile client can hold, and for how long.
//! `docs/SECURITY.md` ("Hostile clients") tables them.

use std::time::Duration;

/// Why a connection or stream flag was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitsError {
    /// A count or a duration that must be at least 1 was 0.
    #[error("{flag}: must be at least 1")]
    Zero {
        /// The flag.
        flag: &'static str,
    },
    /// A per-peer or per-run cap above its total.
    #[error("{flag} {value}: must not exceed {total_flag} {total}")]
    AboveTotal {
        /// The per-peer or per-run flag.
        flag: &'static str,
        /// Its value.
        value: usize,
        /// The total's flag.
        total_flag: &'static str,
        /// The total.
        total: usize,
    },
}

/// The default of [`ConnectionConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The connection settings as given (the `keel serve` flags of the same
/// names); [`ConnectionLimits::from_config`] checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionConfig {
    /// `--max-connections`: open connections in all.
    pub max_connections: usize,
    /// `--max-connections-per-peer`: at most the total.
    pub max_connections_per_peer: usize,
    /// `--header-timeout-ms`.
    pub header_timeout_ms: u64,
    /// `--body-timeout-ms`.
    pub body_timeout_ms: u64,
    /// `--idle-timeout-ms`.
    pub idle_timeout_ms: u64,
    /// `--write-timeout-ms`.
    pub write_timeout_ms: u64,
    /// `--send-buffer-bytes` (0: the kernel's).
    pub send_buffer_bytes: usize,
}

impl Default for ConnectionConfig {
    fn default() -> ConnectionConfig {
        ConnectionConfig {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: 256,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            write_timeout_ms: 10_000,
            send_buffer_bytes: 65_536,
        }
    }
}

/// The event stream caps as given; [`StreamLimits::from_config`] checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// `--max-streams`: open event streams in all.
    pub max_streams: usize,
    /// `--max-streams-per-run`: at most the total.
    pub max_streams_per_run: usize,
}

impl Default for StreamConfig {
    fn default() -> StreamConfig {
        StreamConfig {
            max_streams: 512,
            max_streams_per_run: 256,
        }
    }
}

/// File descriptors kept for the daemon's own use (the journal, the
/// listener, MCP server processes, NATS) when the connection cap is fitted
/// to the file limit.
pub const FD_RESERVE: u64 = 64;

/// The soft open-file limit of this process, from `/proc/self/limits`
/// (Linux; `None` elsewhere or when it is unlimited or unreadable).
pub fn soft_file_limit() -> Option<u64> {
    parse_file_limit(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

/// The soft limit of the `Max open files` line of a `/proc/PID/limits`.
fn parse_file_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What one connection may hold: the caps (enforced at accept, before any
/// byte is read, so before the token check) and the timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    max_connections: usize,
    max_connections_per_peer: usize,
    header_timeout: Duration,
    body_timeout: Duration,
    idle_timeout: Duration,
    write_timeout: Duration,
    send_buffer_bytes: usize,
}

impl ConnectionLimits {
    /// Checks the settings.
    pub fn from_config(args: &ConnectionConfig) -> Result<ConnectionLimits, LimitsError> {
        let count = |value: usize, flag: &'static str| {
            if value == 0 {
                Err(LimitsError::Zero { flag })
            } else {
                Ok(value)
            }
        };
        let ms = |value: u64, flag: &'static str| {
            if value == 0 {
                Err(LimitsError::Zero { flag })
            } else {
                Ok(Duration::from_millis(value))
            }
        };
        let max_connections = count(args.max_connections, "--max-connections")?;
        let per_peer = count(args.max_connections_per_peer, "--max-connections-per-peer")?;
        if per_peer > max_connections {
            return Err(LimitsError::AboveTotal {
                flag: "--max-connections-per-peer",
                value: per_peer,
                total_flag: "--max-connections",
                total: max_connections,
            });
        }
        Ok(ConnectionLimits {
            max_connections,
            max_connections_per_peer: per_peer,
            header_timeout: ms(args.header_timeout_ms, "--header-timeout-ms")?,
            body_timeout: ms(args.body_timeout_ms, "--body-timeout-ms")?,
            idle_timeout: ms(args.idle_timeout_ms, "--idle-timeout-ms")?,
            write_timeout: ms(args.write_timeout_ms, "--write-timeout-ms")?,
            send_buffer_bytes: args.send_buffer_bytes,
        })
    }

    /// Lowers the caps to fit a process that may open `open_files` file
    /// descriptors, keeping [`FD_RESERVE`] for the daemon's own: over the
    /// file limit accept fails, and no connection could be closed to make
    /// room. The cap it had, when it was lowered.
    pub fn fit_file_limit(&mut self, open_files: u64) -> Option<usize> {
        let room = usize::try_from(open_files.saturating_sub(FD_RESERVE))
            .unwrap_or(usize::MAX)
            .max(1);
        if self.max_connections <= room {
            return None;
        }
        let was = self.max_connections;
        self.max_connections = room;
        self.max_connections_per_peer = self.max_connections_per_peer.min(room);
        Some(was)
    }

    /// `--max-connections`: open connections in all.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// `--max-connections-per-peer`: open connections from one IP address.
    pub fn max_connections_per_peer(&self) -> usize {
        self.max_connections_per_peer
    }

    /// `--header-timeout-ms`: from waiting for a request to its whole head.
    pub fn header_timeout(&self) -> Duration {
        self.header_timeout
    }

    /// `--body-timeout-ms`: from a request's head to the end of its body.
    pub fn body_timeout(&self) -> Duration {
        self.body_timeout
    }

    /// `--idle-timeout-ms`: a connection moving no byte either way.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// `--write-timeout-ms`: one write the client does not take.
    pub fn write_timeout(&self) -> Duration {
        self.write_timeout
    }

    /// `--send-buffer-bytes`: the socket's send buffer (0: the kernel's).
    pub fn send_buffer_bytes(&self) -> usize {
        self.send_buffer_bytes
    }
}

/// The caps on concurrent event streams (`GET /v1/runs/{id}/events`,
/// `/agui`, `/v1/chat/{id}/stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    max_streams: usize,
    max_streams_per_run: usize,
}

impl StreamLimits {
    /// Checks the settings.
    pub fn from_config(args: &StreamConfig) -> Result<StreamLimits, LimitsError> {
        if args.max_streams == 0 {
            return Err(LimitsError::Zero {
                flag: "--max-streams",
            });
        }
        if args.max_streams_per_run == 0 {
            return Err(LimitsError::Zero {
                flag: "--max-streams-per-run",
            });
        }
        if args.max_streams_per_run > args.max_streams {
            return Err(LimitsError::AboveTotal {
                flag: "--max-streams-per-run",
                value: args.max_streams_per_run,
                total_flag: "--max-streams",
                total: args.max_streams,
            });
        }
        Ok(StreamLimits {
            max_streams: args.max_streams,
            max_streams_per_run: args.max_streams_per_run,
        })
    }

    /// `--max-streams`: open event streams in all.
    pub fn max_streams(&self) -> usize {
        self.max_streams
    }

    /// `--max-streams-per-run`: open event streams of one run.
    pub fn max_streams_per_run(&self) -> usize {
        self.max_streams_per_run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(edit: impl FnOnce(&mut ConnectionConfig)) -> ConnectionConfig {
        let mut config = ConnectionConfig::default();
        edit(&mut config);
        config
    }

    #[test]
    fn defaults_are_accepted() {
        let c = ConnectionLimits::from_config(&ConnectionConfig::default()).unwrap();
        assert_eq!(c.max_connections(), DEFAULT_MAX_CONNECTIONS);
        assert_eq!(c.header_timeout(), Duration::from_millis(10_000));
        let s = StreamLimits::from_config(&StreamConfig::default()).unwrap();
        assert_eq!(s.max_streams_per_run(), 256);
    }

    #[test]
    fn the_caps_fit_the_file_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max open files            256                  4096                 files     \n";
        assert_eq!(parse_file_limit(text), Some(256));
        assert_eq!(
            parse_file_limit("Max open files  unlimited unlimited files"),
            None
        );
        let mut c = ConnectionLimits::from_config(&ConnectionConfig::default()).unwrap();
        assert_eq!(c.fit_file_limit(256), Some(DEFAULT_MAX_CONNECTIONS));
        assert_eq!(c.max_connections(), 192);
        assert_eq!(c.max_connections_per_peer(), 192);
        assert_eq!(c.fit_file_limit(20_000), None);
        assert_eq!(c.max_connections(), 192);
    }

    #[test]
    fn zero_and_above_total_are_refused() {
        assert_eq!(
            ConnectionLimits::from_config(&config(|c| c.write_timeout_ms = 0)),
            Err(LimitsError::Zero {
                flag: "--write-timeout-ms"
            })
        );
        let e = ConnectionLimits::from_config(&config(|c| {
            c.max_connections = 4;
            c.max_connections_per_peer = 5;
        }))
        .unwrap_err();
        assert!(matches!(e, LimitsError::AboveTotal { value: 5, .. }), "{e}");
        let e = StreamLimits::from_config(&StreamConfig {
            max_streams: 2,
            max_streams_per_run: 3,
        })
        .unwrap_err();
        assert!(e.to_string().contains("--max-streams-per-run 3"), "{e}");
    }
}
