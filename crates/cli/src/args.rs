//! The command line (clap derive). Doc comments are the `--help` text.

use crate::approval::ApprovalMode;
use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use keel_observers::StoreLocation;
use std::ffi::OsStr;
use std::path::PathBuf;

/// Run agents from scenario files; read, verify, export and import their history.
///
/// Exit codes: 0 success (a completed run), 1 a failed run, a verify
/// violation or a recover that needs attention, 2 bad input, 130 a run
/// cancelled with Ctrl-C.
#[derive(Debug, Parser)]
#[command(name = "keel", version, about, long_about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one agent run from a JSON scenario, journaling every event.
    Run(RunArgs),
    /// Print a run's stored events, one canonical line each.
    Events(EventsArgs),
    /// List stored runs: id, status, turns, events, duration, and the run
    /// each continues.
    Runs(RunsArgs),
    /// Check every stored run: contiguous sequences, lifecycle, canonical lines.
    Verify(DbArgs),
    /// Close the runs a dead host left running (recovery terminals, rule
    /// run.host_lost); runs a live process owns are left to it.
    Recover(DbArgs),
    /// Compact a completed run's history: a compaction-only run continuing
    /// it (by reference), whose one turn replaces all but the system
    /// messages and the last turns by a summary the model writes.
    Compact(CompactArgs),
    /// Write a run as JSON Lines: a header line, then its events.
    Export(ExportArgs),
    /// Store a run from a file written by `keel export`.
    Import(ImportArgs),
    /// Serve runs over HTTP: start them, stream their events (SSE), answer approvals.
    Serve(ServeArgs),
    /// Re-run a stored run with the current code, serving its model calls,
    /// tool results and approvals from its log (no network, no side
    /// effect, nothing stored), and compare the logs: prints `identical`
    /// (exit 0) or the first diverging seq with both lines (exit 1).
    Replay(ReplayArgs),
    /// Delete a stored run and its sub-runs (or, with --conversation, its
    /// whole conversation), leaving a tombstone each; a running run, or
    /// one another run continues or forks from, is refused.
    Delete(DeleteArgs),
    /// Delete every closed run tree whose last event is older than
    /// --older-than (kept when a newer run continues or forks from it).
    Prune(PruneArgs),
}

/// `keel delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The run to delete.
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// Delete the whole conversation RUN_ID belongs to: every run of its
    /// `continues` chain, with their sub-runs.
    #[arg(long)]
    pub conversation: bool,
    /// Who deletes, as the tombstones record it (at most 256 bytes, no
    /// credential); default `cli:$USER`.
    #[arg(long, value_name = "WHO")]
    pub who: Option<String>,
    /// Also delete from NATS JetStream at URL (the stream every `--nats`
    /// host reads), before the journal; the journal need not hold the runs.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `keel prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// The age: digits and a unit, s, m, h or d (`30d`).
    #[arg(long, value_name = "DURATION")]
    pub older_than: String,
    /// Who prunes, as the tombstones record it; default `cli:$USER`.
    #[arg(long, value_name = "WHO")]
    pub who: Option<String>,
    /// Also delete from NATS JetStream at URL (the stream every `--nats`
    /// host reads), before the journal; the journal need not hold the runs.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `keel replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The stored run to replay.
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
    /// The composition to replay with: the scenario's limits, metadata
    /// allowlist and tool policies (its provider, scripts and messages are
    /// not used). Without it: the default limits, and approval required
    /// for exactly the tools whose recorded calls asked for it.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
}

/// The journal to use.
#[derive(Debug, Args)]
pub struct DbArgs {
    /// The store: a SQLite file, or a postgres:// URL (PostgreSQL, in a
    /// build with the feature `postgres`; the password from the URL or
    /// PGPASSWORD, never printed).
    #[arg(
        long,
        env = "KEEL_DB",
        hide_env_values = true,
        default_value = "keel.db",
        value_name = "PATH_OR_URL",
        value_parser = StoreLocationParser
    )]
    pub db: StoreLocation,
}

/// Parses `--db` into a [`StoreLocation`]. A refusal names the rule, never
/// the value (clap's own message would echo it, and a URL's password with
/// it).
#[derive(Debug, Clone, Copy)]
pub struct StoreLocationParser;

impl TypedValueParser for StoreLocationParser {
    type Value = StoreLocation;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<StoreLocation, clap::Error> {
        match StoreLocation::parse(&value.to_string_lossy()) {
            // A path keeps its bytes, UTF-8 or not.
            Ok(StoreLocation::Sqlite(_)) => Ok(StoreLocation::Sqlite(PathBuf::from(value))),
            Ok(location) => Ok(location),
            Err(e) => Err(
                clap::Error::raw(ErrorKind::ValueValidation, format!("--db: {e}\n")).with_cmd(cmd),
            ),
        }
    }
}

/// `keel run`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("parent").args(["continue_run", "fork"])))]
pub struct RunArgs {
    /// The scenario file (JSON; see examples/).
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
    /// Print each event's canonical line, exactly as stored, and nothing else.
    #[arg(long)]
    pub json: bool,
    /// Answer approvals: all, none, or ask on the terminal (denies when stdin is not one).
    #[arg(long, value_enum, default_value = "ask", value_name = "MODE")]
    pub approve: ApprovalMode,
    /// The directory the read_file builtin may read (required to use it).
    #[arg(long, value_name = "DIR")]
    pub files: Option<PathBuf>,
    /// Also journal every event to NATS JetStream at URL (comma-separated
    /// servers); each event is acknowledged by the local journal and then
    /// by JetStream before the run goes on.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// Continue this completed run: the new run starts from its history
    /// (rebuilt from the journal) plus --message, and records the run it
    /// continues; the scenario's own messages are not used.
    #[arg(long = "continue", value_name = "RUN_ID", requires = "message")]
    pub continue_run: Option<String>,
    /// Fork this stored run (any status) at --at SEQ: the new run starts
    /// from its history as its log rebuilds it through SEQ, plus --message
    /// if given, and records `forked_from`; the run forked is not changed.
    /// The scenario gives the model, provider, tools and limits; its
    /// messages are not used. SEQ must be a fork point (rule fork.point):
    /// the last run.input before the first turn, a turn.completed, a
    /// model.completed of an answer without tool calls, or run.completed.
    #[arg(
        long,
        value_name = "RUN_ID",
        requires = "at",
        conflicts_with = "continue_run"
    )]
    pub fork: Option<String>,
    /// The parent's seq the fork starts after (with --fork).
    #[arg(long, value_name = "SEQ", requires = "fork")]
    pub at: Option<u64>,
    /// The follow-up user message (with --continue, or optional with --fork).
    #[arg(long, value_name = "TEXT", requires = "parent")]
    pub message: Option<String>,
    /// Set by `keel compact`: the run continuing --continue is a
    /// compaction-only run.
    #[arg(skip)]
    pub compact: bool,
}

/// `keel compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The completed run whose history is compacted.
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// The scenario giving the model, the provider and `limits.context`
    /// (keep_turns, instruction; without it, the defaults). Required: keel
    /// has no default provider. Its messages are not used.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
    /// Print each event's canonical line, exactly as stored, and nothing else.
    #[arg(long)]
    pub json: bool,
}

/// `keel runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
    /// Show only the conversation RUN_ID belongs to: its chain of runs,
    /// first to last, each continuing the one before.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "tree")]
    pub conversation: Option<String>,
    /// Show the tree of the conversation RUN_ID belongs to: its root, then
    /// every continuation, fork and sub-run under the run it comes from,
    /// indented, each with its status (and `forked at SEQ` for a fork,
    /// `sub-run of PARENT (call CALL_ID)` for a sub-run).
    #[arg(long, value_name = "RUN_ID")]
    pub tree: Option<String>,
    /// List only runs of this status: running, completed, failed or
    /// cancelled (as `GET /v1/runs?status=`).
    #[arg(long, value_name = "STATUS", conflicts_with_all = ["conversation", "tree"])]
    pub status: Option<String>,
    /// List only runs started at or after TIME: unix milliseconds or an
    /// RFC 3339 UTC time such as 2026-12-05T12:00:00Z (as `GET /v1/runs?since=`).
    #[arg(long, value_name = "TIME", conflicts_with_all = ["conversation", "tree"])]
    pub since: Option<String>,
    /// Print at most N runs (1 to 1000), then `next: CURSOR` on stderr
    /// when more follow (as `GET /v1/runs?limit=`); without it every run
    /// is printed, read a page at a time.
    #[arg(long, value_name = "N", conflicts_with_all = ["conversation", "tree"])]
    pub limit: Option<String>,
    /// Start after CURSOR, the `next` of an earlier `keel runs --limit`
    /// or `GET /v1/runs` with the same filters.
    #[arg(long, value_name = "CURSOR", conflicts_with_all = ["conversation", "tree"])]
    pub after: Option<String>,
}

/// `keel events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The run.
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// Print events with seq greater than N.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub after: u64,
    /// Keep printing new events until the run ends.
    #[arg(long)]
    pub follow: bool,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `keel export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run.
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    /// Write here instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `keel import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A file written by `keel export`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The largest file accepted, in bytes: a longer input is refused
    /// before anything is parsed or stored (rule import.input_bytes).
    #[arg(long, default_value_t = IMPORT_MAX_BYTES, value_name = "BYTES")]
    pub max_bytes: u64,
    /// A provider metadata namespace this journal accepts (repeatable;
    /// like a scenario's `allow_metadata`). A file whose `model.completed`
    /// metadata holds any other namespace is refused whole (rule
    /// import.metadata_allowlist).
    #[arg(long = "allow-metadata", value_name = "NS")]
    pub allow_metadata: Vec<String>,
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
}

/// The default bound of `keel import --max-bytes`: 256 MiB.
pub const IMPORT_MAX_BYTES: u64 = 256 << 20;

/// `keel serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The journal.
    #[command(flatten)]
    pub db: DbArgs,
    /// The address to listen on (port 0 picks a free port). A non-loopback
    /// address requires a token.
    #[arg(long, default_value = "127.0.0.1:7878", value_name = "ADDR")]
    pub listen: std::net::SocketAddr,
    /// A file holding the bearer token every request must present (else
    /// the KEEL_TOKEN environment variable; else no token, loopback only).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Events each live run's log retains in memory (default 100000; older
    /// events are served from the journal).
    #[arg(long, value_name = "N")]
    pub log_max_events: Option<usize>,
    /// Also serve the events of runs this daemon does not have (neither
    /// live nor stored) from NATS JetStream at URL (comma-separated servers).
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// Export every run's spans over OTLP/HTTP (protobuf) to URL: the
    /// receiver's base URL (http://host:4318) or its /v1/traces URL, with
    /// the GenAI semantic conventions (invoke_agent, chat, execute_tool).
    /// No message text, tool arguments or results unless --otlp-content.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// With --otlp: also export the conventions' content attributes
    /// (messages, tool arguments and results, approval requests and
    /// decisions), each screened for secrets and bounded.
    #[arg(long, requires = "otlp")]
    pub otlp_content: bool,
    /// A network provider posted scenarios may use: its type
    /// (openai-compatible, anthropic, openai-responses or gemini), the environment variable holding
    /// its key, and its base URL (default: the type's own endpoint). The
    /// scenario must name all three exactly. Repeatable; without it, only
    /// scripted providers run.
    #[arg(long, value_name = "TYPE,KEY_ENV[,BASE_URL]")]
    pub allow_provider: Vec<String>,
    /// A web origin (scheme://host or scheme://host:port) whose pages may call the API
    /// (CORS). Repeatable; none by default. Requests carrying any other
    /// Origin, except the daemon's own, are refused (403).
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// A Host header (host or host:port) served besides localhost,
    /// 127.0.0.1 and ::1 (the DNS-rebinding defence). Repeatable.
    #[arg(long, value_name = "HOST")]
    pub public_host: Vec<String>,
    /// Most runs live at once; beyond it POST /v1/runs is a 503
    /// too-many-live-runs problem (it bounds the memory of runs waiting
    /// for approvals, and the MCP servers of runs starting: they count).
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_live_runs: usize,
    /// How long an approval waits for its answer when the scenario sets no
    /// limits.approval_timeout_ms; then the interaction fails and the run
    /// goes on without the tool.
    #[arg(long, default_value_t = 300_000, value_name = "MS")]
    pub approval_timeout_ms: u64,
    /// How long SIGTERM or Ctrl-C waits for the cancelled runs to journal
    /// their terminals (at least 500). Runs still unjournaled then are
    /// named on stderr ("left for recovery") and the exit code is 1.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub shutdown_timeout_ms: u64,
    /// The agent POST /v1/chat (the AI SDK's useChat) and POST /v1/agui
    /// (AG-UI's HttpAgent, CopilotKit) run: a scenario
    /// giving the model, provider, tools, limits and system messages. Its
    /// provider must be scripted or allowed with --allow-provider.
    #[arg(long, value_name = "FILE")]
    pub chat_scenario: Option<PathBuf>,
    /// An MCP server posted scenarios may use: `NAME=COMMAND [ARG…]`
    /// (split on whitespace), `NAME=http(s)://…`, or a JSON server entry
    /// (for `env`, timeouts and tool policies). A posted scenario names it
    /// (`{"name": "NAME"}`) or repeats its entry exactly; any other server
    /// is a 403 before anything starts. Repeatable; none by default.
    #[arg(long, value_name = "NAME=COMMAND…")]
    pub mcp: Vec<String>,
    /// Most connections open at once (default 1024; keep it below the
    /// process's file limit). At the cap, a new connection closes the
    /// oldest one that has not yet passed the token check; when every
    /// open connection has, the new one is answered 503
    /// too-many-connections and closed.
    #[arg(long, default_value_t = keel_serve::limits::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub max_connections: usize,
    /// Most connections open at once from one IP address (default 256, at
    /// most --max-connections), with the same rule as --max-connections:
    /// one peer cannot fill the total.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_connections_per_peer: usize,
    /// How long a connection may take to send a whole request head,
    /// counted from when the daemon waits for it (the wait between
    /// keep-alive requests included); then it is closed (default 10000).
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub header_timeout_ms: u64,
    /// How long a request body may take after its head (default 30000);
    /// then the request is answered 408 body-timeout.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub body_timeout_ms: u64,
    /// How long a connection may move no byte either way before it is
    /// closed (default 60000; event streams send a keep-alive comment
    /// every 15 s, so keep it above that).
    #[arg(long, default_value_t = 60_000, value_name = "MS")]
    pub idle_timeout_ms: u64,
    /// How long one write may wait for a client that does not read
    /// (default 10000); then the connection is closed and its stream's
    /// memory freed.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub write_timeout_ms: u64,
    /// Each connection's socket send buffer in bytes (default 65536; 0
    /// keeps the kernel's, which may grow to megabytes): the most a
    /// client that does not read holds in kernel memory.
    #[arg(long, default_value_t = 65_536, value_name = "BYTES")]
    pub send_buffer_bytes: usize,
    /// Most event streams open at once (GET /v1/runs/{id}/events, /agui,
    /// /v1/chat/{id}/stream, the responses of POST /v1/chat and POST
    /// /v1/agui; default 512); beyond it a 503
    /// too-many-streams problem with Retry-After.
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub max_streams: usize,
    /// Most event streams of one run open at once (default 256, at most
    /// --max-streams); beyond it a 503 too-many-streams problem with
    /// Retry-After.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_streams_per_run: usize,
}
