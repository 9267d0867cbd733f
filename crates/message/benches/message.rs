//! Message construction plus canonical encoding, against plain
//! `serde_json::to_vec` of an unvalidated struct holding the same data.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use keel_message::*;
use serde::Serialize;

#[derive(Serialize)]
struct PlainPart<'a> {
    r#type: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<&'a serde_json::Value>,
}

#[derive(Serialize)]
struct PlainMessage<'a> {
    id: &'a str,
    role: &'a str,
    parts: Vec<PlainPart<'a>>,
}

const TEXT: &str = "The weather in Oslo is 3 °C with light rain; bring an umbrella.";

fn bench(c: &mut Criterion) {
    let args = serde_json::json!({"city": "Oslo", "units": "metric", "days": 3});
    let mut group = c.benchmark_group("message_build_and_encode");
    group.bench_function("keel_validated_canonical", |b| {
        b.iter(|| {
            let canonical = CanonicalJson::from_value(black_box(&args)).unwrap();
            let parts = vec![
                Part::text(black_box(TEXT)).unwrap(),
                Part::tool_call(
                    CallId::parse("call_1").unwrap(),
                    ToolName::parse("get_weather").unwrap(),
                    canonical,
                )
                .unwrap(),
            ];
            let m =
                Message::new(MessageId::parse("msg_1").unwrap(), Role::Assistant, parts).unwrap();
            let value = serde_json::to_value(&m).unwrap();
            black_box(canonical::to_canonical_string(&value).unwrap())
        })
    });
    group.bench_function("serde_json_to_vec", |b| {
        b.iter(|| {
            let m = PlainMessage {
                id: "msg_1",
                role: "assistant",
                parts: vec![
                    PlainPart {
                        r#type: "text",
                        text: Some(black_box(TEXT)),
                        call_id: None,
                        name: None,
                        arguments: None,
                    },
                    PlainPart {
                        r#type: "tool_call",
                        text: None,
                        call_id: Some("call_1"),
                        name: Some("get_weather"),
                        arguments: Some(black_box(&args)),
                    },
                ],
            };
            black_box(serde_json::to_vec(&m).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
