//! Property tests: any valid value survives JSON and canonical round trips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::*;
use proptest::prelude::*;
use std::sync::Arc;

/// Any valid id: the charset rule, minus the two dot segments
/// (rule ids.dot_segment).
fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.:-]{1,24}".prop_filter("`.` and `..` are not ids", |s| s != "." && s != "..")
}

fn args() -> impl Strategy<Value = CanonicalJson> {
    prop::collection::btree_map("[a-z\u{e9}\u{1F600}]{1,6}", any::<i32>(), 0..4).prop_map(|m| {
        let v = serde_json::to_value(m).unwrap();
        CanonicalJson::from_value(&v).unwrap()
    })
}

fn text_part() -> impl Strategy<Value = Part> {
    "\\PC{1,40}".prop_map(|t| Part::text(&t).unwrap())
}

fn message() -> impl Strategy<Value = Message> {
    let user = (id(), prop::collection::vec(text_part(), 1..4)).prop_map(|(i, parts)| {
        Message::new(MessageId::parse(&i).unwrap(), Role::User, parts).unwrap()
    });
    let assistant = (
        id(),
        prop::collection::vec(text_part(), 0..3),
        prop::collection::vec(("[a-z_]{1,10}", args()), 0..3),
    )
        .prop_filter("non-empty", |(_, t, c)| !t.is_empty() || !c.is_empty())
        .prop_map(|(i, texts, calls)| {
            let mut parts = texts;
            for (n, (name, a)) in calls.into_iter().enumerate() {
                let call = CallId::parse(&format!("{i}_c{n}")).unwrap();
                parts.push(Part::tool_call(call, ToolName::parse(&name).unwrap(), a).unwrap());
            }
            Message::new(MessageId::parse(&i).unwrap(), Role::Assistant, parts).unwrap()
        });
    prop_oneof![user, assistant]
}

proptest! {
    #[test]
    fn messages_round_trip(m in message()) {
        let json = serde_json::to_string(&m).unwrap();
        let back: Message = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }

    #[test]
    fn canonical_encoding_is_stable(m in message()) {
        let value = serde_json::to_value(&m).unwrap();
        let canonical = CanonicalJson::from_value(&value).unwrap();
        // Canonicalizing the canonical text again changes nothing ...
        let again = CanonicalJson::parse(canonical.as_str()).unwrap();
        prop_assert_eq!(again.as_str(), canonical.as_str());
        // ... and it decodes to the same message.
        let back = Message::from_json_with(canonical.as_str(), &Limits::default()).unwrap();
        prop_assert_eq!(back, m);
    }

    #[test]
    fn requests_round_trip(history in prop::collection::vec(message(), 1..5), n in 1u64..1000) {
        // Distinct message call ids are guaranteed by the message ids; skip
        // histories where two messages drew the same id.
        let mut ids: Vec<_> = history.iter().map(|m| m.id().clone()).collect();
        ids.sort();
        ids.dedup();
        prop_assume!(ids.len() == history.len());
        let req = ModelRequest::new(
            OperationId::parse(&format!("op_{n}")).unwrap(),
            ModelName::parse("m-1").unwrap(),
            Arc::from(history),
            Arc::from([]),
        ).unwrap();
        let json = serde_json::to_string(&req).unwrap();
        let back = ModelRequest::from_json_with(&json, &Limits::default()).unwrap();
        prop_assert_eq!(back, req);
    }
}
