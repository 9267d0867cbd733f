#![allow(clippy::unwrap_used, clippy::expect_used)]
//! RFC 8785 canonical JSON: the RFC's examples and number table, string
//! escaping, every rejection rule, serde, and property tests.

use keel_message::canonical::{
    MAX_DEPTH, SyntaxKind, format_number, to_canonical_string, write_canonical,
};
use keel_message::{Bound, CanonicalJson, JsonError, LimitExceeded, Limits};
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Parses `input` with default limits and expects exactly `expected`; also
/// checks the other entry points agree and that the result is a fixed point.
fn check_canonical(input: &str, expected: &str) {
    let parsed = CanonicalJson::parse(input);
    assert!(parsed.is_ok(), "parse failed for {input:?}: {parsed:?}");
    let parsed = parsed.unwrap();
    assert_eq!(parsed.as_str(), expected, "input {input:?}");
    assert_eq!(parsed.len(), expected.len());
    assert_eq!(parsed.as_bytes(), expected.as_bytes());
    assert_eq!(parsed.to_string(), expected);

    let value: Value = serde_json::from_str(input).unwrap();
    assert_eq!(
        to_canonical_string(&value).unwrap(),
        expected,
        "input {input:?}"
    );
    assert_eq!(CanonicalJson::from_value(&value).unwrap(), parsed);
    let mut out = String::from("prefix:");
    write_canonical(&value, &mut out).unwrap();
    assert_eq!(out, format!("prefix:{expected}"));

    let again = CanonicalJson::parse(expected).unwrap();
    assert_eq!(again, parsed, "canonical text is not a fixed point");
}

/// `text` must fail under `limits` with exactly `expected`, and its message
/// must not contain `secret`.
fn check_error(text: &str, limits: &Limits, expected: &JsonError) {
    let err = CanonicalJson::parse_with(text, limits).expect_err(text);
    assert_eq!(&err, expected, "input {text:?}");
    assert!(
        !err.to_string().contains("SECRET"),
        "error echoes input: {err}"
    );
}

fn check_syntax(text: &str, kind: SyntaxKind) {
    let result = CanonicalJson::parse(text);
    assert!(
        matches!(result, Err(JsonError::Syntax { kind: got, line, .. }) if got == kind && line >= 1),
        "input {text:?}: expected syntax error {kind:?}, got {result:?}"
    );
}

fn limits(json_bytes: usize, json_depth: usize) -> Limits {
    Limits {
        json_bytes,
        json_depth,
        ..Limits::default()
    }
}

fn too_deep(path: &str, actual: usize, max: usize) -> JsonError {
    JsonError::TooDeep {
        path: path.to_owned(),
        limit: LimitExceeded {
            bound: Bound::JsonDepth,
            actual,
            max,
        },
    }
}

fn unsafe_integer(path: &str) -> JsonError {
    JsonError::UnsafeInteger {
        path: path.to_owned(),
    }
}

fn duplicate(path: &str) -> JsonError {
    JsonError::DuplicateKey {
        path: path.to_owned(),
    }
}

// ---------------------------------------------------------------------------
// RFC 8785 examples
// ---------------------------------------------------------------------------

#[test]
fn rfc8785_examples() {
    let cases: &[(&str, &str)] = &[
        // §3.2.2
        (
            r#"{
              "numbers": [333333333.33333329, 1E30, 4.50,
                          2e-3, 0.000000000000000000000000001],
              "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
              "literals": [null, true, false]
            }"#,
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#,
        ),
        // §3.2.3 sorting
        (
            r#"{
              "\u20ac": "Euro Sign",
              "\r": "Carriage Return",
              "\ufb33": "Hebrew Letter Dalet With Dagesh",
              "1": "One",
              "\ud83d\ude00": "Emoji: Grinning Face",
              "\u0080": "Control",
              "\u00f6": "Latin Small Letter O With Diaeresis"
            }"#,
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
             \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f600}\":\"Emoji: Grinning Face\",\
             \"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
        ),
        // The "weird" names of the RFC's test data.
        (
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\u000a":"Newline","1":"One",
               "\u0080":"Control\u007f","\ud83d\ude02":"Smiley",
               "\u00f6":"Latin Small Letter O With Diaeresis",
               "\ufb33":"Hebrew Letter Dalet With Dagesh","</script>":"Browser Challenge"}"#,
            "{\"\\n\":\"Newline\",\"\\r\":\"Carriage Return\",\"1\":\"One\",\
             \"</script>\":\"Browser Challenge\",\"\u{80}\":\"Control\u{7f}\",\
             \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f602}\":\"Smiley\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
        ),
        // Nested objects are sorted too; arrays keep their order.
        (
            r#"{"b":{"z":1,"a":[3,1,2]},"a":{"y":{"d":0,"c":0}}}"#,
            r#"{"a":{"y":{"c":0,"d":0}},"b":{"a":[3,1,2],"z":1}}"#,
        ),
        // Scalars, empty containers, whitespace.
        (" \t\r\n null \n", "null"),
        ("true", "true"),
        ("[ ]", "[]"),
        ("{ }", "{}"),
        (r#"[{}, [], "", 0]"#, r#"[{},[],"",0]"#),
        // Number spellings.
        ("-0", "0"),
        ("-0.0", "0"),
        ("0e10", "0"),
        ("1.0", "1"),
        ("1E2", "100"),
        ("-1.5e-7", "-1.5e-7"),
        ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ("18446744073709551616", "18446744073709552000"),
        ("9007199254740991", "9007199254740991"),
        ("-9007199254740991", "-9007199254740991"),
        ("9007199254740991.0", "9007199254740991"),
        ("1e21", "1e+21"),
        ("1e-7", "1e-7"),
        ("0.000001", "0.000001"),
    ];
    for (input, expected) in cases {
        check_canonical(input, expected);
    }
}

/// RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical form.
#[test]
fn rfc8785_appendix_b_numbers() {
    let table: &[(u64, Option<&str>)] = &[
        (0x0000000000000000, Some("0")),
        (0x8000000000000000, Some("0")),
        (0x0000000000000001, Some("5e-324")),
        (0x8000000000000001, Some("-5e-324")),
        (0x7fefffffffffffff, Some("1.7976931348623157e+308")),
        (0xffefffffffffffff, Some("-1.7976931348623157e+308")),
        (0x4340000000000000, Some("9007199254740992")),
        (0xc340000000000000, Some("-9007199254740992")),
        (0x4430000000000000, Some("295147905179352830000")),
        (0x7fffffffffffffff, None),
        (0x7ff0000000000000, None),
        (0x44b52d02c7e14af5, Some("9.999999999999997e+22")),
        (0x44b52d02c7e14af6, Some("1e+23")),
        (0x44b52d02c7e14af7, Some("1.0000000000000001e+23")),
        (0x444b1ae4d6e2ef4e, Some("999999999999999700000")),
        (0x444b1ae4d6e2ef4f, Some("999999999999999900000")),
        (0x444b1ae4d6e2ef50, Some("1e+21")),
        (0x3eb0c6f7a0b5ed8c, Some("9.999999999999997e-7")),
        (0x3eb0c6f7a0b5ed8d, Some("0.000001")),
        (0x41b3de4355555553, Some("333333333.3333332")),
        (0x41b3de4355555554, Some("333333333.33333325")),
        (0x41b3de4355555555, Some("333333333.3333333")),
        (0x41b3de4355555556, Some("333333333.3333334")),
        (0x41b3de4355555557, Some("333333333.33333343")),
        (0xbecbf647612f3696, Some("-0.0000033333333333333333")),
        (0x43143ff3c1cb0959, Some("1424953923781206.2")),
        // Not in the table, but the same rule.
        (0xfff0000000000000, None),
    ];
    for &(bits, expected) in table {
        check_number(f64::from_bits(bits), expected);
    }
}

/// `format_number` against the expected text and the ECMAScript reference
/// below; for values JSON can carry through a `Value`, the serializer too.
fn check_number(n: f64, expected: Option<&str>) {
    let got = format_number(n);
    assert_eq!(got.as_deref(), expected, "bits {:#018x}", n.to_bits());
    assert_eq!(
        got,
        ecmascript_reference(n),
        "reference, bits {:#018x}",
        n.to_bits()
    );
    let Some(text) = got else { return };
    assert_eq!(
        text.parse::<f64>().unwrap(),
        n + 0.0,
        "round trip of {text}"
    );
    let magnitude = n.abs();
    if !(9_007_199_254_740_992.0..18_446_744_073_709_551_616.0).contains(&magnitude) {
        let value = Value::from(n);
        assert_eq!(to_canonical_string(&value).unwrap(), text);
    }
}

/// ECMAScript `Number::toString(x)` (ECMA-262 §6.1.6.1.20) built on Rust's
/// own shortest round-trip digits (`{:e}`), as an independent oracle.
fn ecmascript_reference(x: f64) -> Option<String> {
    if !x.is_finite() {
        return None;
    }
    if x == 0.0 {
        return Some("0".to_owned());
    }
    let (digits, n) = shortest_digits(x.abs());
    let k = digits.len() as i32;
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    Some(out)
}

/// The shortest decimal digits `d` and exponent `n` with `0.d × 10^n == x`
/// after rounding to a double. When two shortest candidates are equally
/// close to `x` (its exact expansion has one more digit, a 5), ECMAScript
/// takes the even one; Rust's formatter may take the other.
fn shortest_digits(x: f64) -> (String, i32) {
    let split = |sci: &str| {
        let (mantissa, exp) = sci.split_once('e').unwrap();
        let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
        (
            digits.trim_end_matches('0').to_owned(),
            exp.parse::<i32>().unwrap() + 1,
        )
    };
    let (digits, n) = split(&format!("{x:e}"));
    let (exact, exact_n) = split(&format!("{x:.800e}"));
    let k = digits.len();
    let last = digits.as_bytes()[k - 1] - b'0';
    if exact_n == n && exact.len() == k + 1 && exact.ends_with('5') && last % 2 == 1 {
        let down = &exact[..k];
        let other_last = if digits == down { last + 1 } else { last - 1 };
        let other = format!("{}{}", &digits[..k - 1], other_last);
        let value: f64 = format!("0.{other}e{n}").parse().unwrap();
        if value == x && other_last < 10 {
            return (other, n);
        }
    }
    (digits, n)
}

// ---------------------------------------------------------------------------
// Strings
// ---------------------------------------------------------------------------

/// `input` is a JSON string literal, `expected` its canonical literal.
fn check_string(input: &str, expected: &str) {
    check_canonical(input, expected);
    // The same string as an object member name.
    check_canonical(&format!("{{{input}:0}}"), &format!("{{{expected}:0}}"));
}

#[test]
fn string_escaping() {
    let short = [
        (0x08, "\\b"),
        (0x09, "\\t"),
        (0x0a, "\\n"),
        (0x0c, "\\f"),
        (0x0d, "\\r"),
    ];
    for c in 0u32..0x20 {
        let escaped = match short.iter().find(|(code, _)| *code == c) {
            Some((_, esc)) => (*esc).to_owned(),
            None => format!("\\u{c:04x}"),
        };
        check_string(&format!("\"\\u{c:04X}\""), &format!("\"{escaped}\""));
        check_string(&format!("\"a\\u{c:04x}b\""), &format!("\"a{escaped}b\""));
    }
    let cases: &[(&str, &str)] = &[
        (r#""\"""#, r#""\"""#),
        (r#""\\""#, r#""\\""#),
        (r#""\/""#, r#""/""#),
        ("\"\u{7f}\"", "\"\u{7f}\""),
        (r#""\u007f""#, "\"\u{7f}\""),
        (r#""\u2028\u2029""#, "\"\u{2028}\u{2029}\""),
        ("\"\u{2028}\"", "\"\u{2028}\""),
        (r#""\u00e9\u00E9é""#, "\"ééé\""),
        (r#""\ud83d\ude00""#, "\"\u{1f600}\""),
        (r#""\uD83D\uDE00""#, "\"\u{1f600}\""),
        ("\"\u{1f600}\"", "\"\u{1f600}\""),
        (r#""\udbff\udfff""#, "\"\u{10ffff}\""),
        (r#""\uffff\ufeff""#, "\"\u{ffff}\u{feff}\""),
        (r#""\u0000\u001f\u0020""#, r#""\u0000\u001f ""#),
        (r#""<>&'""#, r#""<>&'""#),
        (r#""""#, r#""""#),
    ];
    for (input, expected) in cases {
        check_string(input, expected);
    }
}

#[test]
fn lone_surrogates_are_rejected() {
    for text in [
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\ud83dSECRET""#,
        r#""\ud83d\u0041""#,
        r#""\ude00\ud83d""#,
        r#"{"\udfff":1}"#,
        r#"["ok","\ud800 SECRET"]"#,
    ] {
        let err = CanonicalJson::parse(text).expect_err(text);
        assert!(
            matches!(err, JsonError::LoneSurrogate { line: 1, .. }),
            "{text}: {err:?}"
        );
        assert!(!err.to_string().contains("SECRET"));
    }
}

// ---------------------------------------------------------------------------
// Member order
// ---------------------------------------------------------------------------

/// An object built from `keys` canonicalizes with its members in exactly
/// the order `expected`.
fn check_order(keys: &[&str], expected: &[&str]) {
    let object: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), Value::Null))
        .collect();
    let text = to_canonical_string(&Value::Object(object)).unwrap();
    let members: Vec<String> = expected
        .iter()
        .map(|k| format!("{}:null", to_canonical_string(&json!(k)).unwrap()))
        .collect();
    assert_eq!(text, format!("{{{}}}", members.join(",")));
}

#[test]
fn members_sort_by_utf16_code_units() {
    // U+FB33 and U+FFFF sort after U+1F600 in UTF-16 (0xD83D…), before it in
    // UTF-8; U+D7FF and below keep their UTF-8 order.
    check_order(
        &[
            "\u{fb33}",
            "\u{1f600}",
            "\u{ffff}",
            "\u{e000}",
            "\u{d7ff}",
            "\u{10000}",
            "a",
        ],
        &[
            "a",
            "\u{d7ff}",
            "\u{10000}",
            "\u{1f600}",
            "\u{e000}",
            "\u{fb33}",
            "\u{ffff}",
        ],
    );
    check_order(
        &["b", "a", "", "aa", "ab", "A"],
        &["", "A", "a", "aa", "ab", "b"],
    );
    check_order(
        &["x\u{ffff}", "x\u{10ffff}", "x", "x\u{10000}y"],
        &["x", "x\u{10000}y", "x\u{10ffff}", "x\u{ffff}"],
    );
}

// ---------------------------------------------------------------------------
// Rejection rules
// ---------------------------------------------------------------------------

#[test]
fn duplicate_member_names() {
    let d = Limits::default();
    let cases: &[(&str, JsonError)] = &[
        (r#"{"a":1,"a":1}"#, duplicate("$.a")),
        (r#"{"a":"SECRET","b":2,"a":"SECRET"}"#, duplicate("$.a")),
        (r#"{"a":1,"\u0061":2}"#, duplicate("$.a")),
        (r#"{"x":[{"k":1},{"k":1,"k":2}]}"#, duplicate("$.x[1].k")),
        (r#"{"a b":{"é":{},"é":[]}}"#, duplicate(r#"$["a b"]["é"]"#)),
        (r#"[0,{"":1,"":2}]"#, duplicate(r#"$[1][""]"#)),
        (r#"{"q\"":{"\n":0,"\n":0}}"#, duplicate(r#"$["q\""]["\n"]"#)),
    ];
    for (text, expected) in cases {
        check_error(text, &d, expected);
    }
}

#[test]
fn unsafe_integers() {
    let d = Limits::default();
    let cases: &[(&str, JsonError)] = &[
        ("9007199254740992", unsafe_integer("$")),
        ("-9007199254740992", unsafe_integer("$")),
        ("9007199254740993", unsafe_integer("$")),
        ("18446744073709551615", unsafe_integer("$")),
        ("-9223372036854775808", unsafe_integer("$")),
        (r#"{"n":[1,-9007199254740993]}"#, unsafe_integer("$.n[1]")),
        // Spellings whose canonical form would be such an integer.
        ("9007199254740992.0", unsafe_integer("$")),
        ("1e16", unsafe_integer("$")),
        ("-1.8e19", unsafe_integer("$")),
    ];
    for (text, expected) in cases {
        check_error(text, &d, expected);
    }
    // The boundary and beyond-u64 magnitudes are accepted.
    check_canonical(
        "[9007199254740991,-9007199254740991]",
        "[9007199254740991,-9007199254740991]",
    );
    check_canonical("1e20", "100000000000000000000");
    check_canonical("-2e19", "-20000000000000000000");

    // From values, and from the allocation-free writer (which leaves `out`
    // untouched on error).
    let values = [
        (json!(9_007_199_254_740_992u64), "$"),
        (json!(-9_007_199_254_740_992i64), "$"),
        (json!({"a": {"b": [0, u64::MAX]}}), "$.a.b[1]"),
        (json!({"a": [1e16]}), "$.a[0]"),
        (json!({"z": 0, "k e y": i64::MIN}), r#"$["k e y"]"#),
        // Objects whose names need re-sorting (U+FFFF after U+1F600).
        (
            json!({"\u{ffff}": 0, "\u{1f600}": [{"\u{e000}": 1, "\u{10000}": {"n": u64::MAX}}]}),
            "$[\"\u{1f600}\"][0][\"\u{10000}\"].n",
        ),
    ];
    for (value, path) in values {
        assert_eq!(CanonicalJson::from_value(&value), Err(unsafe_integer(path)));
        let mut out = String::from("keep");
        assert_eq!(write_canonical(&value, &mut out), Err(unsafe_integer(path)));
        assert_eq!(out, "keep");
        assert_eq!(to_canonical_string(&value), Err(unsafe_integer(path)));
    }
    assert_eq!(
        to_canonical_string(&json!([
            9_007_199_254_740_991u64,
            -9_007_199_254_740_991i64
        ]))
        .unwrap(),
        "[9007199254740991,-9007199254740991]"
    );
}

#[test]
fn byte_bound() {
    // (text, json_bytes, accepted)
    let cases: &[(&str, usize, bool)] = &[
        (r#""abc""#, 5, true),
        (r#""abc""#, 4, false),
        ("[ 1 , 2 ]", 5, true),
        ("[ 1 , 2 ]", 4, false),
        (r#"{ "b" : 1, "a" : [ ] }"#, 14, true),
        (r#"{ "b" : 1, "a" : [ ] }"#, 13, false),
        ("0", 1, true),
        ("0", 0, false),
    ];
    for &(text, max, accepted) in cases {
        let l = limits(max, 64);
        let canonical_len = CanonicalJson::parse(text).unwrap().len();
        match CanonicalJson::parse_with(text, &l) {
            Ok(json) => {
                assert!(accepted, "{text} accepted with max {max}");
                assert_eq!(json.len(), canonical_len);
            }
            Err(err) => {
                assert!(!accepted, "{text} rejected with max {max}: {err}");
                let expected = JsonError::TooLarge {
                    limit: LimitExceeded {
                        bound: Bound::JsonBytes,
                        actual: canonical_len,
                        max,
                    },
                };
                assert_eq!(err, expected);
                let value: Value = serde_json::from_str(text).unwrap();
                assert_eq!(CanonicalJson::from_value_with(&value, &l), Err(expected));
            }
        }
    }
}

#[test]
fn depth_bound() {
    // (text, json_depth, Ok(depth) or Err((path, actual)))
    type Case = (&'static str, usize, Result<usize, (&'static str, usize)>);
    let cases: &[Case] = &[
        ("1", 0, Ok(0)),
        ("[]", 0, Err(("$", 1))),
        ("[]", 1, Ok(1)),
        ("{}", 1, Ok(1)),
        ("[1]", 1, Ok(1)),
        (r#"["[[["]"#, 1, Ok(1)),
        (r#"{"a":"\"{{"}"#, 1, Ok(1)),
        ("[[1]]", 2, Ok(2)),
        ("[[1]]", 1, Err(("$[0]", 2))),
        ("[[[]]]", 2, Err(("$[0][0]", 3))),
        (r#"{"a":[{}]}"#, 3, Ok(3)),
        (r#"{"a":[{}]}"#, 2, Err(("$.a[0]", 3))),
        (r#"[0,[],{"x":{"y":[1]}}]"#, 3, Err(("$[2].x.y", 4))),
        (r#"[0,[],{"x":{"y":[1]}}]"#, 4, Ok(4)),
    ];
    for &(text, max, expected) in cases {
        let l = limits(1 << 20, max);
        let value: Value = serde_json::from_str(text).unwrap();
        match expected {
            Ok(depth) => {
                let json = CanonicalJson::parse_with(text, &l).unwrap();
                assert_eq!(json.depth(), depth, "{text}");
                assert_eq!(CanonicalJson::from_value_with(&value, &l).unwrap(), json);
            }
            Err((path, actual)) => {
                let expected = too_deep(path, actual, max);
                check_error(text, &l, &expected);
                assert_eq!(CanonicalJson::from_value_with(&value, &l), Err(expected));
            }
        }
    }
}

#[test]
fn very_deep_input_is_an_error_not_a_crash() {
    let deep_open = "[".repeat(100_000);
    let deep_closed = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_objects = r#"{"a":"#.repeat(100_000);
    let default_path = format!("${}", "[0]".repeat(64));
    for text in [&deep_open, &deep_closed] {
        check_error(text, &Limits::default(), &too_deep(&default_path, 65, 64));
    }
    let object_path = format!("${}", ".a".repeat(64));
    check_error(
        &deep_objects,
        &Limits::default(),
        &too_deep(&object_path, 65, 64),
    );

    // Above serde_json's recursion limit the effective maximum is MAX_DEPTH.
    let unbounded = limits(usize::MAX, usize::MAX);
    let path = format!("${}", "[0]".repeat(MAX_DEPTH));
    check_error(
        &deep_open,
        &unbounded,
        &too_deep(&path, MAX_DEPTH + 1, MAX_DEPTH),
    );
    let at_max = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert_eq!(
        CanonicalJson::parse_with(&at_max, &unbounded)
            .unwrap()
            .depth(),
        MAX_DEPTH
    );
    let past_max = format!("[{at_max}]");
    let path = format!("${}", "[0]".repeat(MAX_DEPTH));
    check_error(
        &past_max,
        &unbounded,
        &too_deep(&path, MAX_DEPTH + 1, MAX_DEPTH),
    );

    // The writer does not recurse: a value deeper than any parser allows.
    let mut value = json!(1);
    for _ in 0..2_000 {
        value = Value::Array(vec![value]);
    }
    let text = to_canonical_string(&value).unwrap();
    assert_eq!(text, format!("{}1{}", "[".repeat(2_000), "]".repeat(2_000)));
    let path = format!("${}", "[0]".repeat(MAX_DEPTH));
    assert_eq!(
        CanonicalJson::from_value_with(&value, &unbounded),
        Err(too_deep(&path, MAX_DEPTH + 1, MAX_DEPTH))
    );
}

#[test]
fn syntax_errors_carry_position_and_category_only() {
    let cases: &[(&str, SyntaxKind)] = &[
        ("", SyntaxKind::UnexpectedEof),
        ("[1,", SyntaxKind::UnexpectedEof),
        (r#"{"a":"SECRET"#, SyntaxKind::UnexpectedEof),
        ("SECRET", SyntaxKind::ExpectedValue),
        ("nul", SyntaxKind::UnexpectedEof),
        ("nulx", SyntaxKind::ExpectedValue),
        ("tru SECRET", SyntaxKind::ExpectedValue),
        (r#"{"a":"x" "b"}"#, SyntaxKind::ExpectedToken),
        (r#"{"a" "SECRET"}"#, SyntaxKind::ExpectedToken),
        ("[1 2]", SyntaxKind::ExpectedToken),
        ("{1:2}", SyntaxKind::ExpectedToken),
        ("01", SyntaxKind::InvalidNumber),
        ("[-]", SyntaxKind::InvalidNumber),
        ("[1.e5]", SyntaxKind::InvalidNumber),
        ("+1", SyntaxKind::ExpectedValue),
        ("1e400", SyntaxKind::NumberOutOfRange),
        (r#""\x SECRET""#, SyntaxKind::InvalidEscape),
        (r#""\u12G4""#, SyntaxKind::InvalidEscape),
        ("\"SECRET\u{1}\"", SyntaxKind::ControlCharacter),
        ("[1,]", SyntaxKind::TrailingComma),
        (r#"{"a":1,}"#, SyntaxKind::TrailingComma),
        (r#"{"a":1} SECRET"#, SyntaxKind::TrailingCharacters),
        ("1 2", SyntaxKind::TrailingCharacters),
    ];
    for (text, kind) in cases {
        check_syntax(text, *kind);
    }

    let secret = "sk-live-SECRET-9f8e7d6c5b4a";
    let text = format!("{{\"api_key\": \"{secret}\" oops}}");
    let err = CanonicalJson::parse(&text).unwrap_err();
    assert_eq!(
        err,
        JsonError::Syntax {
            kind: SyntaxKind::ExpectedToken,
            line: 1,
            column: 43
        }
    );
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(
            !shown.contains(secret) && !shown.contains("SECRET"),
            "{shown}"
        );
    }
    let err = CanonicalJson::parse("[\n  1,\n  x]").unwrap_err();
    assert_eq!(
        err,
        JsonError::Syntax {
            kind: SyntaxKind::ExpectedValue,
            line: 3,
            column: 3
        }
    );
    assert_eq!(
        err.to_string(),
        "invalid JSON at line 3 column 3: expected a value"
    );
}

#[test]
fn error_rules_paths_and_limits() {
    // (text, limits, rule, path)
    let cases: &[(&str, Limits, &str, Option<&str>)] = &[
        ("[1,", Limits::default(), "json.syntax", None),
        (
            r#""\udc00""#,
            Limits::default(),
            "json.lone_surrogate",
            None,
        ),
        (
            r#"{"a":[{"b":0,"b":0}]}"#,
            Limits::default(),
            "json.duplicate_key",
            Some("$.a[0].b"),
        ),
        (
            "[[9007199254740992]]",
            Limits::default(),
            "json.unsafe_integer",
            Some("$[0][0]"),
        ),
        ("[1,2]", limits(4, 64), "limits.json_bytes", None),
        ("[[]]", limits(1024, 1), "limits.json_depth", Some("$[0]")),
    ];
    for (text, l, rule, path) in cases {
        let err = CanonicalJson::parse_with(text, l).unwrap_err();
        assert_eq!((err.rule(), err.path()), (*rule, *path), "{text}: {err:?}");
        let expected_bound = rule.strip_prefix("limits.");
        assert_eq!(
            err.limit().map(|l| l.bound.name()),
            expected_bound,
            "{text}"
        );
    }
}

#[test]
fn error_messages_name_the_rule_and_path() {
    let cases: &[(&str, Limits, &str)] = &[
        (
            r#"{"a":{"b":1,"b":2}}"#,
            Limits::default(),
            "duplicate object member name at $.a.b",
        ),
        (
            r#"{"id":[9007199254740992]}"#,
            Limits::default(),
            "integer at $.id[0] is outside ±(2^53-1)",
        ),
        (
            r#""SECRET""#,
            limits(3, 64),
            "canonical JSON too large: limits.json_bytes exceeded: 8 > 3",
        ),
        (
            r#"{"a":[[0]]}"#,
            limits(1024, 2),
            "JSON nested too deep at $.a[0]: limits.json_depth exceeded: 3 > 2",
        ),
        (r#""\ud800""#, Limits::default(), "lone UTF-16 surrogate"),
    ];
    for (text, l, message) in cases {
        let err = CanonicalJson::parse_with(text, l).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains(message), "{shown:?} lacks {message:?}");
        assert!(!shown.contains("SECRET"));
    }
}

// ---------------------------------------------------------------------------
// API and serde
// ---------------------------------------------------------------------------

#[test]
fn accessors() {
    let json = CanonicalJson::parse(r#" {"b":[1,{"c":null}],"a":"x"} "#).unwrap();
    assert_eq!(json.as_str(), r#"{"a":"x","b":[1,{"c":null}]}"#);
    assert!(json.is_object());
    assert!(!json.is_empty());
    assert_eq!(json.depth(), 3);
    assert_eq!(format!("{json}"), json.as_str());
    assert_eq!(
        format!("{json:?}"),
        r#"CanonicalJson({"a":"x","b":[1,{"c":null}]})"#
    );
    assert_eq!(json.to_value(), json!({"a": "x", "b": [1, {"c": null}]}));
    assert_eq!(json.clone(), json);
    assert_eq!("[1]".parse::<CanonicalJson>().unwrap().as_str(), "[1]");
    assert_eq!(<CanonicalJson as AsRef<str>>::as_ref(&json), json.as_str());
    for (text, object, depth) in [
        ("[]", false, 1),
        ("\"{\"", false, 0),
        ("0", false, 0),
        ("{}", true, 1),
    ] {
        let json = CanonicalJson::parse(text).unwrap();
        assert_eq!((json.is_object(), json.depth()), (object, depth), "{text}");
    }
    // Equality and ordering are those of the canonical text.
    let a = CanonicalJson::parse(r#"{"x":1.0,"y":2}"#).unwrap();
    let b = CanonicalJson::parse(r#"{ "y": 2, "x": 1 }"#).unwrap();
    assert_eq!(a, b);
    assert!(CanonicalJson::parse("[1]").unwrap() < CanonicalJson::parse("[2]").unwrap());
}

#[test]
fn serde_round_trip() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Call {
        name: String,
        arguments: CanonicalJson,
    }

    let json = CanonicalJson::parse(
        r#"{"z":[1,2.5,-3e-9,"t\n\"\\\u0001é😀"],"a":{"k":true,"j":null},"e":"","m":1e30}"#,
    )
    .unwrap();
    // Serialize emits the value, not a string.
    assert_eq!(serde_json::to_value(&json).unwrap(), json.to_value());
    let call = Call {
        name: "f".to_owned(),
        arguments: CanonicalJson::parse(r#"{"b":[1,"x"],"a":{}}"#).unwrap(),
    };
    let text = serde_json::to_string(&call).unwrap();
    assert_eq!(text, r#"{"name":"f","arguments":{"a":{},"b":[1,"x"]}}"#);
    assert_eq!(serde_json::from_str::<Call>(&text).unwrap(), call);
    assert_eq!(
        serde_json::to_string(&CanonicalJson::parse("[]").unwrap()).unwrap(),
        "[]"
    );
    assert_eq!(
        serde_json::to_string(&CanonicalJson::parse("{}").unwrap()).unwrap(),
        "{}"
    );

    // Deserialize from text: canonicalized, rules enforced (names only in errors).
    let call: Call =
        serde_json::from_str(r#"{"name":"f","arguments":{ "b" : 1.50, "a" : -0 }}"#).unwrap();
    assert_eq!(call.arguments.as_str(), r#"{"a":0,"b":1.5}"#);
    let rejected = [
        (
            r#"{"name":"f","arguments":{"k":"SECRET","k":1}}"#,
            "duplicate object member name at $.k",
        ),
        (
            r#"{"name":"f","arguments":[9007199254740992]}"#,
            "integer at $[0]",
        ),
        (r#"{"name":"f","arguments":"\ud800 SECRET"}"#, "hex escape"),
    ];
    for (text, message) in rejected {
        let err = serde_json::from_str::<Call>(text).unwrap_err().to_string();
        assert!(err.contains(message), "{err:?} lacks {message:?}");
        assert!(!err.contains("SECRET"), "{err}");
    }
    let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
    let err = serde_json::from_str::<CanonicalJson>(&deep)
        .unwrap_err()
        .to_string();
    assert!(err.contains("limits.json_depth exceeded: 65 > 64"), "{err}");

    // Deserialize from a Value (no duplicates reachable there).
    let from_value: CanonicalJson =
        serde_json::from_value(json!({"b": [1, 2.5], "a": "\u{2028}"})).unwrap();
    assert_eq!(from_value.as_str(), "{\"a\":\"\u{2028}\",\"b\":[1,2.5]}");
    let err = serde_json::from_value::<CanonicalJson>(json!({"big": u64::MAX})).unwrap_err();
    assert!(err.to_string().contains("integer at $.big"), "{err}");

    // Deserializers other than JSON can offer what JSON cannot hold.
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    use serde::de::value::Error as DeError;
    let cases: [(Result<CanonicalJson, DeError>, &str); 5] = [
        (
            CanonicalJson::deserialize(f64::NAN.into_deserializer()),
            "number at $ is not finite",
        ),
        (
            CanonicalJson::deserialize(f64::INFINITY.into_deserializer()),
            "not finite",
        ),
        (
            CanonicalJson::deserialize(i128::MAX.into_deserializer()),
            "integer at $ is outside",
        ),
        (
            CanonicalJson::deserialize(1e17f32.into_deserializer()),
            "integer at $ is outside",
        ),
        (CanonicalJson::deserialize(7u128.into_deserializer()), ""),
    ];
    for (result, message) in cases {
        match result {
            Ok(json) => assert_eq!((json.as_str(), message), ("7", "")),
            Err(err) => assert!(err.to_string().contains(message), "{err} lacks {message}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

const MAX_SAFE: i64 = (1 << 53) - 1;

fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        ".*",
        "[a-c\u{7f}\u{e000}\u{ffff}\u{10000}\u{1f600}\"\\\\\u{0}-\u{1f}]{0,6}",
    ]
}

fn arb_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-MAX_SAFE..=MAX_SAFE).prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite, not an unsafe integer", |f| {
                f.is_finite()
                    && !(9_007_199_254_740_992.0..18_446_744_073_709_551_616.0).contains(&f.abs())
            })
            .prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        arb_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(arb_string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Numbers compared as canonicalized: safe integral doubles as integers.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap();
            if f.fract() == 0.0 && f.abs() <= MAX_SAFE as f64 {
                Value::from(f as i64)
            } else {
                value.clone()
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        _ => value.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn canonical_form_is_a_fixed_point(value in arb_json()) {
        let json = CanonicalJson::from_value(&value).unwrap();
        let reparsed = CanonicalJson::parse(json.as_str()).unwrap();
        prop_assert_eq!(&reparsed, &json);
        prop_assert_eq!(to_canonical_string(&value).unwrap(), json.as_str());
        // Pretty-printed input gives the same canonical text.
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        prop_assert_eq!(CanonicalJson::parse(&pretty).unwrap(), json);
    }

    #[test]
    fn canonical_text_preserves_the_value(value in arb_json()) {
        let json = CanonicalJson::from_value(&value).unwrap();
        let expected = normalize(&value);
        prop_assert_eq!(normalize(&json.to_value()), expected.clone());
        let by_serde_json: Value = serde_json::from_str(json.as_str()).unwrap();
        prop_assert_eq!(normalize(&by_serde_json), expected.clone());
        prop_assert_eq!(normalize(&serde_json::to_value(&json).unwrap()), expected);
    }

    #[test]
    fn members_follow_utf16_order(keys in prop::collection::btree_set(arb_string(), 0..8)) {
        let mut expected: Vec<&str> = keys.iter().map(String::as_str).collect();
        expected.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        check_order(&keys, &expected);
    }

    #[test]
    fn numbers_match_the_ecmascript_reference(bits in any::<u64>()) {
        let n = f64::from_bits(bits);
        prop_assert_eq!(format_number(n), ecmascript_reference(n));
    }

    /// Dyadic fractions with short expansions, where ties between two
    /// shortest candidates (broken to even) are common.
    #[test]
    fn short_dyadic_numbers_match_the_ecmascript_reference(
        m in -(1i64 << 53)..(1i64 << 53),
        shift in 0i32..80,
    ) {
        let n = m as f64 / 2f64.powi(shift);
        prop_assert_eq!(format_number(n), ecmascript_reference(n));
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[\\[\\]{}\",:0-9a-z\\\\ .eE+-]{0,40}") {
        let _ = CanonicalJson::parse(&text);
    }
}
