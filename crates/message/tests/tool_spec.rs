//! `ToolSpec`: the compile-time checker agrees with `ToolDefinition::new`.
//! Every spec it accepts is accepted at run time (with the same
//! definition), and each rule it enforces is shown on both sides.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Test strings must be `'static` for `try_new`; leaking a few is fine.
fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// What `ToolDefinition::new` says about the same three strings.
fn runtime(name: &str, description: &str, parameters: &str) -> Option<ToolDefinition> {
    let name = ToolName::parse(name).ok()?;
    let parameters = CanonicalJson::parse(parameters).ok()?;
    ToolDefinition::new(name, description, parameters).ok()
}

/// The property: whatever the checker accepts, `ToolDefinition::new`
/// accepts, and `definition()` is that very definition.
fn agrees(name: &str, description: &str, parameters: &str) -> Result<bool, TestCaseError> {
    let checked = ToolSpec::try_new(
        leak(name.to_owned()),
        leak(description.to_owned()),
        leak(parameters.to_owned()),
    );
    let at_run_time = runtime(name, description, parameters);
    if let Ok(spec) = checked {
        prop_assert_eq!(Some(spec.definition()), at_run_time, "{}", parameters);
        return Ok(true);
    }
    Ok(false)
}

fn schema_problem(parameters: &'static str) -> Option<SchemaProblem> {
    match ToolSpec::try_new("t", "", parameters) {
        Ok(_) => None,
        Err(ToolSpecError::Parameters { problem, .. }) => Some(problem),
        Err(other) => panic!("not a schema error: {other}"),
    }
}

const WEATHER: ToolSpec = ToolSpec::new(
    "get_weather",
    "Current weather for a city",
    r#"{ "type": "object", "properties": { "city": { "type": "string", "maxLength": 100 } } }"#,
);

#[test]
fn a_const_spec_gives_the_runtime_definition() {
    let expected = runtime(WEATHER.name(), WEATHER.description(), WEATHER.parameters()).unwrap();
    assert_eq!(WEATHER.definition(), expected);
    assert_eq!(WEATHER.name(), "get_weather");
}

#[test]
fn names_follow_the_tool_name_rule() {
    let long = leak("a".repeat(TOOL_NAME_MAX_BYTES + 1));
    let max = leak("a".repeat(TOOL_NAME_MAX_BYTES));
    assert!(ToolSpec::try_new(max, "", "{}").is_ok());
    for (name, problem) in [
        ("", NameProblem::Empty),
        (long, NameProblem::TooLong { len: 65, max: 64 }),
        ("get weather", NameProblem::Character { offset: 3 }),
        ("a.b", NameProblem::Character { offset: 1 }),
    ] {
        assert_eq!(
            ToolSpec::try_new(name, "", "{}"),
            Err(ToolSpecError::Name { problem })
        );
        assert!(ToolName::parse(name).is_err());
    }
}

#[test]
fn the_description_bound_is_the_default_limit() {
    let max = Limits::default().tool_description_bytes;
    let at_max = leak("d".repeat(max));
    let over = leak("d".repeat(max + 1));
    assert!(ToolSpec::try_new("t", at_max, "{}").is_ok());
    assert!(runtime("t", at_max, "{}").is_some());
    assert_eq!(
        ToolSpec::try_new("t", over, "{}"),
        Err(ToolSpecError::Description {
            limit: LimitExceeded {
                bound: Bound::ToolDescriptionBytes,
                actual: max + 1,
                max
            }
        })
    );
    assert!(runtime("t", over, "{}").is_none());
}

#[test]
fn the_depth_bound_is_the_default_limit() {
    let depth = Limits::default().json_depth;
    let nest = |n: usize| -> &'static str {
        let inner = format!("{}{}", "[".repeat(n - 1), "]".repeat(n - 1));
        leak(format!(r#"{{"a":{inner}}}"#))
    };
    assert_eq!(schema_problem(nest(depth)), None);
    assert!(runtime("t", "", nest(depth)).is_some());
    assert_eq!(
        schema_problem(nest(depth + 1)),
        Some(SchemaProblem::TooDeep)
    );
    assert!(runtime("t", "", nest(depth + 1)).is_none());
}

#[test]
fn each_schema_rule_is_enforced_on_both_sides() {
    let cases: [(&'static str, SchemaProblem); 20] = [
        ("", SchemaProblem::Syntax),
        ("{", SchemaProblem::Syntax),
        (r#"{"a":1,}"#, SchemaProblem::Syntax),
        (r#"{"a":1} x"#, SchemaProblem::Syntax),
        (r#"{"a":tru}"#, SchemaProblem::Syntax),
        (r#"{"a":01}"#, SchemaProblem::Syntax),
        (r#"{"a":1.}"#, SchemaProblem::Syntax),
        (r#"{"a":"\x"}"#, SchemaProblem::Syntax),
        ("{\"a\":\"\u{1}\"}", SchemaProblem::Syntax),
        (r#"{'a':1}"#, SchemaProblem::Syntax),
        (r#"{"a":"\ud800"}"#, SchemaProblem::LoneSurrogate),
        (r#"{"a":"\udc00"}"#, SchemaProblem::LoneSurrogate),
        (r#"{"a":"\ud800\u0041"}"#, SchemaProblem::LoneSurrogate),
        (r#"{"a":1,"a":2}"#, SchemaProblem::DuplicateKey),
        (r#"{"é":1,"\u00e9":2}"#, SchemaProblem::DuplicateKey),
        (r#"{"a":9007199254740993}"#, SchemaProblem::NumberRange),
        (r#"{"a":1e16}"#, SchemaProblem::NumberRange),
        (r#"[{"type":"object"}]"#, SchemaProblem::NotObjectSchema),
        (r#"{"type":"array"}"#, SchemaProblem::NotObjectSchema),
        (r#"{"type":["object"]}"#, SchemaProblem::NotObjectSchema),
    ];
    for (text, problem) in cases {
        assert_eq!(schema_problem(text), Some(problem), "{text}");
        assert!(runtime("t", "", text).is_none(), "runtime accepted {text}");
    }
}

#[test]
fn stricter_than_canonical_json_only_for_huge_numbers() {
    // Canonical JSON keeps doubles of 2^64 and up; the spec refuses them.
    assert_eq!(
        schema_problem(r#"{"a":1e20}"#),
        Some(SchemaProblem::NumberRange)
    );
    assert!(runtime("t", "", r#"{"a":1e20}"#).is_some());
    for text in [
        r#"{"a":999999999999999}"#,
        r#"{"a":-0.5e-3,"b":1.25E+2,"c":-0}"#,
        r#"{"a":0.000000000000000000001}"#,
        r#"{"type":"obj\u0065ct","\u0074ype2":"x"}"#,
        r#"{"k":"\ud83d\ude00 \" \\ \/ \b\f\n\r\t"}"#,
        " \t\r\n{ } \n",
    ] {
        assert_eq!(schema_problem(leak(text.to_owned())), None, "{text}");
        assert!(runtime("t", "", text).is_some(), "{text}");
    }
}

#[test]
fn the_size_bound_covers_number_growth() {
    // 40,000 one-byte numbers fit as written but could not all grow to
    // 25 bytes within 1 MiB, so the checker refuses; a text of the same
    // length of strings is fine.
    let numbers = leak(format!(r#"{{"a":[{}0]}}"#, "0,".repeat(45_000)));
    assert_eq!(schema_problem(numbers), Some(SchemaProblem::TooLarge));
    let strings = leak(format!(r#"{{"a":"{}"}}"#, "x".repeat(90_000)));
    assert_eq!(schema_problem(strings), None);
}

#[test]
fn errors_name_the_rule_and_offset_not_the_text() {
    let error =
        ToolSpec::try_new("t", "", r#"{"secret-key":"sk-123","secret-key":1}"#).unwrap_err();
    let text = error.to_string();
    assert_eq!(
        text,
        "tool spec parameters at byte 23: duplicate object member name (rule json.duplicate_key)"
    );
    assert!(!text.contains("sk-123"));
}

#[test]
#[should_panic(expected = "rule tool_name")]
fn new_outside_const_panics_with_the_rule() {
    let name = std::hint::black_box("bad name");
    let _ = ToolSpec::new(name, "", "{}");
}

/// JSON values a schema might hold: numbers within the checker's range.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-999_999_999_999_999i64..=999_999_999_999_999).prop_map(|n| json!(n)),
        (-1.0e14f64..1.0e14).prop_map(|f| json!(f)),
        "[a-z\"\\\\\u{0}-\u{1f}é\u{1F600}\u{FFFF}]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_\u{E000}\u{10000}]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn schema_text() -> impl Strategy<Value = String> {
    (
        prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..5),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(members, with_type, pretty)| {
            let mut map: Map<String, Value> = members.into_iter().collect();
            if with_type {
                map.insert("type".into(), json!("object"));
            }
            let value = Value::Object(map);
            if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            }
        })
}

/// One random edit at a character boundary.
fn mutate(text: &str, at: usize, edit: u8, with: char) -> String {
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let i = boundaries[at % boundaries.len()];
    let mut out = text.to_owned();
    match edit % 3 {
        0 => out.insert(i, with),
        1 if i < text.len() => {
            out.remove(i);
        }
        _ => {
            if i < text.len() {
                out.remove(i);
            }
            out.insert(i, with);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_schemas_are_accepted_by_both(text in schema_text()) {
        prop_assert!(agrees("t", "d", &text)?, "checker refused {}", text);
    }

    #[test]
    fn mutated_schemas_accepted_by_the_checker_are_accepted_at_run_time(
        text in schema_text(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(),
            prop::sample::select(vec!['{', '}', '[', ']', '"', '\\', ',', ':', '0', '1', '-',
                '.', 'e', 'u', 'd', '8', 'c', ' ', 't', 'n', '\u{1}', 'é'])), 1..4),
    ) {
        let mut text = text;
        for (at, edit, with) in edits {
            text = mutate(&text, at, edit, with);
        }
        agrees("t", "", &text)?;
    }

    #[test]
    fn numbers_accepted_by_the_checker_are_accepted_at_run_time(
        number in "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?",
    ) {
        agrees("t", "", &format!(r#"{{"n":{number}}}"#))?;
    }

    #[test]
    fn a_name_spelled_two_ways_is_a_duplicate(key in "[a-zé\u{1F600}]{1,5}") {
        let escaped: String = key
            .encode_utf16()
            .map(|unit| format!("\\u{unit:04x}"))
            .collect();
        let text = leak(format!(r#"{{"{key}":1,"{escaped}":2}}"#));
        prop_assert_eq!(schema_problem(text), Some(SchemaProblem::DuplicateKey));
        prop_assert!(runtime("t", "", text).is_none());
    }

    #[test]
    fn names_agree_with_tool_name_parse(name in "[a-zA-Z0-9_. -]{0,70}") {
        let checked = ToolSpec::try_new(leak(name.clone()), "", "{}").is_ok();
        prop_assert_eq!(checked, ToolName::parse(&name).is_ok());
    }
}
