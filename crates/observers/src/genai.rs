//! Attribute and event names shared by the `tracing` bridge and the OTLP
//! exporter: the OpenTelemetry GenAI semantic conventions where they name
//! the thing, `keel.*` where they do not. (The bridge's span macros need
//! their field names as literals; what it records later uses these.)

/// `gen_ai.operation.name`: `invoke_agent`, `chat` or `execute_tool`.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// The model asked for.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// Input tokens of a model call.
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Output tokens of a model call.
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Why the model stopped.
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// The tool's name.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// The tool call's id.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// The failure's type (a problem kind, a tool outcome, …).
pub const ERROR_TYPE: &str = "error.type";
/// Content (opt-in): the messages given to the agent.
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// Content (opt-in): what the model answered.
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// Content (opt-in): a tool call's arguments.
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// Content (opt-in): a tool call's result.
pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";

/// Every content attribute: none of them is set unless content is opted in.
pub const CONTENT_ATTRIBUTES: [&str; 6] = [
    INPUT_MESSAGES,
    OUTPUT_MESSAGES,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_RESULT,
    INTERACTION_REQUEST,
    INTERACTION_DECISION,
];

/// The run's id.
pub const RUN_ID: &str = "keel.run_id";
/// The turn a model or tool call belongs to.
pub const TURN: &str = "keel.turn";
/// A model call's attempt number (from 1).
pub const ATTEMPT: &str = "keel.attempt";
/// A model call attempt's operation id.
pub const OPERATION_ID: &str = "keel.operation_id";
/// `completed`, `failed` or `cancelled`.
pub const OUTCOME: &str = "keel.outcome";
/// An interaction's (approval's) id.
pub const INTERACTION_ID: &str = "keel.interaction_id";
/// Content (opt-in): what an interaction asked.
pub const INTERACTION_REQUEST: &str = "keel.interaction.request";
/// Content (opt-in): what an interaction was answered.
pub const INTERACTION_DECISION: &str = "keel.interaction.decision";

/// The span event a model retry adds to the run's span.
pub const RETRY_EVENT: &str = "keel.retry";
/// Span events an interaction (an approval) adds to the run's span.
pub const INTERACTION_STARTED_EVENT: &str = "keel.interaction.started";
/// See [`INTERACTION_STARTED_EVENT`].
pub const INTERACTION_COMPLETED_EVENT: &str = "keel.interaction.completed";
/// See [`INTERACTION_STARTED_EVENT`].
pub const INTERACTION_FAILED_EVENT: &str = "keel.interaction.failed";
/// See [`INTERACTION_STARTED_EVENT`].
pub const INTERACTION_CANCELLED_EVENT: &str = "keel.interaction.cancelled";
