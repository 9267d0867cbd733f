//! The connection, the ensured stream and the publish primitives the
//! observer and recovery share: [`JetStreamConfig`], [`JetStreamHandle`],
//! and what the server answered to one publish.

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use keel_eventlog::Event;
use std::time::Duration;

/// The default stream name.
pub const DEFAULT_STREAM: &str = "KEEL_EVENTS";
/// The default subject prefix; run `R` publishes to `<prefix>.R`.
pub const DEFAULT_SUBJECT_PREFIX: &str = "keel.runs";

/// Where and how events are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamConfig {
    /// Server URL(s), comma separated (e.g. `nats://127.0.0.1:4222`).
    pub url: String,
    /// Stream name. Default [`DEFAULT_STREAM`].
    pub stream: String,
    /// Subject prefix. Default [`DEFAULT_SUBJECT_PREFIX`].
    pub subject_prefix: String,
    /// Replicas of the stream when this observer creates it. Default 1.
    pub replicas: usize,
    /// The stream's duplicate window when created. Default 2 minutes.
    pub duplicate_window: Duration,
    /// How long one publish waits for its `PubAck`. Default 5 s (the
    /// pipeline's deadline may cut it shorter).
    pub ack_timeout: Duration,
    /// Timeout of the initial connection. Default 5 s.
    pub connect_timeout: Duration,
}

impl JetStreamConfig {
    /// The defaults, for `url`.
    pub fn new(url: impl Into<String>) -> JetStreamConfig {
        JetStreamConfig {
            url: url.into(),
            stream: DEFAULT_STREAM.to_owned(),
            subject_prefix: DEFAULT_SUBJECT_PREFIX.to_owned(),
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The subject of one run.
    pub fn subject(&self, run_id: &str) -> String {
        format!("{}.{run_id}", self.subject_prefix)
    }
}

/// Connecting to NATS or ensuring the stream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JetStreamError {
    /// The connection could not be established.
    #[error("cannot connect to NATS at {url}: {detail}")]
    Connect {
        /// The URL.
        url: String,
        /// The client's message.
        detail: String,
    },
    /// The stream could not be created or opened.
    #[error("cannot ensure JetStream stream {stream}: {detail}")]
    Stream {
        /// The stream name.
        stream: String,
        /// The server's message.
        detail: String,
    },
}

/// A connection plus the ensured stream; shared by the observer and
/// remote subscriptions.
#[derive(Clone)]
pub struct JetStreamHandle {
    config: JetStreamConfig,
    pub(super) context: jetstream::Context,
    pub(super) stream: stream::Stream,
}

impl std::fmt::Debug for JetStreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamHandle")
            .field("config", &self.config)
            .finish()
    }
}

impl JetStreamHandle {
    /// Connects (the client then reconnects by itself, forever) and
    /// creates the stream if it does not exist.
    pub async fn connect(config: JetStreamConfig) -> Result<JetStreamHandle, JetStreamError> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(config.connect_timeout)
            .max_reconnects(None)
            .connect(config.url.as_str())
            .await
            .map_err(|e| JetStreamError::Connect {
                url: config.url.clone(),
                detail: e.to_string(),
            })?;
        let context = jetstream::ContextBuilder::new()
            .timeout(config.ack_timeout)
            .build(client);
        let stream = context
            .get_or_create_stream(stream::Config {
                name: config.stream.clone(),
                subjects: vec![format!("{}.>", config.subject_prefix)],
                storage: stream::StorageType::File,
                num_replicas: config.replicas,
                duplicate_window: config.duplicate_window,
                ..Default::default()
            })
            .await
            .map_err(|e| JetStreamError::Stream {
                stream: config.stream.clone(),
                detail: e.to_string(),
            })?;
        Ok(JetStreamHandle {
            config,
            context,
            stream,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &JetStreamConfig {
        &self.config
    }

    /// The JetStream context (for tools and benches).
    pub fn context(&self) -> &jetstream::Context {
        &self.context
    }

    /// The last stored message of a run: `(stream_seq, line)`, or `None`
    /// if the run has no message.
    pub(crate) async fn last_of(&self, run_id: &str) -> Result<Option<(u64, Bytes)>, String> {
        match self
            .stream
            .get_last_raw_message_by_subject(&self.config.subject(run_id))
            .await
        {
            Ok(m) => Ok(Some((m.sequence, m.payload))),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The seq of a stored line (`None` when it does not decode).
pub(super) fn seq_of(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    Event::decode(text).ok().map(|e| e.seq())
}

/// What the server answered to the publish of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    /// Appended at this stream sequence.
    Stored(u64),
    /// A message with the same `Nats-Msg-Id` is already stored, at this
    /// stream sequence (its bytes may differ).
    Duplicate(u64),
    /// The subject's last stream sequence is not the one expected: someone
    /// else wrote the run.
    WrongLastSequence,
}

/// What ties a published message to what precedes it on the stream.
pub(crate) enum Expect {
    /// `Nats-Expected-Last-Subject-Sequence`: the run's subject ends at
    /// this stream sequence (0: the subject is empty).
    SubjectSequence(u64),
    /// `Nats-Expected-Last-Msg-Id`: the stream's last stored message
    /// carries this id (a message of the same batch, just before).
    LastMessageId(String),
}

/// The server's answer to a publish whose ack was awaited.
pub(crate) enum Answer {
    /// Stored, deduplicated, or the subject moved.
    Published(Published),
    /// The stream's last message is not the one named by
    /// [`Expect::LastMessageId`]: nothing was stored.
    ChainBroken,
}

/// Classifies the server's answer to one publish.
pub(crate) fn answer(
    ack: Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
) -> Result<Answer, String> {
    use jetstream::context::PublishErrorKind;
    match ack {
        Ok(ack) if ack.duplicate => Ok(Answer::Published(Published::Duplicate(ack.sequence))),
        Ok(ack) => Ok(Answer::Published(Published::Stored(ack.sequence))),
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
            Ok(Answer::Published(Published::WrongLastSequence))
        }
        Err(e) if e.kind() == PublishErrorKind::WrongLastMessageId => Ok(Answer::ChainBroken),
        Err(e) => Err(e.to_string()),
    }
}

impl JetStreamHandle {
    /// Publishes `event`'s line to its run's subject with `Nats-Msg-Id:
    /// <run_id>:<seq>` and `Nats-Expected-Last-Subject-Sequence:
    /// expected`, and waits for the answer. `Err` is the client's or
    /// server's message for any other failure.
    pub(crate) async fn publish_event(
        &self,
        event: &Event,
        expected: u64,
    ) -> Result<Published, String> {
        let id = format!("{}:{}", event.run_id(), event.seq());
        self.publish_as(event, id, Expect::SubjectSequence(expected))
            .await
    }

    /// [`publish_event`](Self::publish_event) with the given message id and
    /// tie.
    pub(crate) async fn publish_as(
        &self,
        event: &Event,
        id: String,
        expect: Expect,
    ) -> Result<Published, String> {
        let ack = self.send_event(event, id, expect).await;
        match ack {
            Ok(ack) => match answer(ack.await)? {
                Answer::Published(published) => Ok(published),
                Answer::ChainBroken => Err("wrong last message id".to_owned()),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    /// Sends `event`'s line with `Nats-Msg-Id: id` and the `expect` header,
    /// without waiting for the ack: the future yields it.
    pub(crate) async fn send_event(
        &self,
        event: &Event,
        id: String,
        expect: Expect,
    ) -> Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError> {
        let msg = jetstream::message::PublishMessage::build()
            .payload(Bytes::copy_from_slice(event.line().as_bytes()))
            .message_id(id);
        let msg = match expect {
            Expect::SubjectSequence(seq) => msg.expected_last_subject_sequence(seq),
            Expect::LastMessageId(last) => msg.expected_last_message_id(last),
        };
        self.context
            .send_publish(self.config.subject(event.run_id().as_str()), msg)
            .await
    }

    /// The first message on `run_id`'s subject at or after `stream_seq`.
    pub(crate) async fn first_from(
        &self,
        run_id: &str,
        stream_seq: u64,
    ) -> Result<Option<(u64, Bytes)>, String> {
        match self
            .stream
            .get_first_raw_message_by_subject(&self.config.subject(run_id), stream_seq)
            .await
        {
            Ok(m) => Ok(Some((m.sequence, m.payload))),
            Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The bytes of the message at `stream_seq`.
    pub(crate) async fn stored_line(&self, stream_seq: u64) -> Result<Bytes, String> {
        self.stream
            .get_raw_message(stream_seq)
            .await
            .map(|m| m.payload)
            .map_err(|e| e.to_string())
    }
}
