#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `POST /v1/chat`'s user `file` parts (the AI SDK's), through the body
//! parser the handler calls: what becomes an image or a file part, and
//! each refusal naming the part's member and the rule or bound.
use keel_message::Part;
use keel_serve::chat::{Ask, parse_body};

/// The PNG signature and the start of its header chunk.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUg==";
/// `%PDF-1.4` and a binary comment line.
const PDF: &str = "JVBERi0xLjQKJeLjz9MK";

/// A body whose one user message has `parts` (JSON).
fn body(parts: &str) -> String {
    format!(r#"{{"id":"c1","messages":[{{"id":"u1","role":"user","parts":[{parts}]}}]}}"#)
}

fn file(media_type: &str, url: &str) -> String {
    format!(r#"{{"type":"file","mediaType":"{media_type}","url":"{url}"}}"#)
}

fn named(media_type: &str, url: &str, filename: &str) -> String {
    format!(r#"{{"type":"file","mediaType":"{media_type}","url":"{url}","filename":{filename}}}"#)
}

/// What parsing a body gives.
enum Expect<'a> {
    /// Accepted: the kinds of the files, and the texts.
    Files(&'a [&'a str], &'a [&'a str]),
    /// Refused at this path, the rule containing this.
    Refused(&'a str, &'a str),
}

/// Parses `body(parts)` and compares.
fn check(parts: &str, expect: Expect<'_>) {
    match (parse_body(&body(parts)), expect) {
        (Ok(body), Expect::Files(kinds, texts)) => {
            let got: Vec<&str> = body.files.iter().map(Part::kind).collect();
            assert_eq!(got, kinds, "{parts}");
            assert_eq!(
                body.ask,
                Ask::User(texts.iter().map(|t| t.to_string()).collect()),
                "{parts}"
            );
        }
        (Err(e), Expect::Refused(path, rule)) => {
            assert_eq!(e.path, path, "{parts}: {e}");
            assert!(e.rule.contains(rule), "{parts}: {e} lacks {rule}");
        }
        (got, _) => panic!("{parts}: {got:?}"),
    }
}

#[test]
fn file_parts_become_image_and_file_parts() {
    let png = file("image/png", &format!("data:image/png;base64,{PNG}"));
    let pdf = named(
        "application/pdf",
        &format!("data:application/pdf;base64,{PDF}"),
        r#""report.pdf""#,
    );
    let text = r#"{"type":"text","text":"what is this?"}"#;
    check(
        &format!("{png},{pdf},{text}"),
        Expect::Files(&["image", "file"], &["what is this?"]),
    );
    // Files may stand without text.
    check(&png, Expect::Files(&["image"], &[]));
    check(
        &file("image/webp", "https://example.com/a.webp"),
        Expect::Files(&["image"], &[]),
    );
    check(
        &named("text/plain", "data:text/plain;base64,aGk=", "null"),
        Expect::Files(&["file"], &[]),
    );
}

/// Expects each row's parts refused at `messages[0].parts[0].<member>`
/// with a rule containing the row's text.
fn check_refusals(rows: &[(String, &str, &str)]) {
    for (parts, member, rule) in rows {
        check(
            parts,
            Expect::Refused(&format!("messages[0].parts[0].{member}"), rule),
        );
    }
}

#[test]
fn types_urls_and_names_are_refused_naming_the_member_and_the_rule() {
    check_refusals(&[
        (
            file("image/svg+xml", "data:image/svg+xml;base64,PHN2Zy8+"),
            "mediaType",
            "message.image_media_type",
        ),
        (
            file("application/zip", "data:application/zip;base64,UEsDBA=="),
            "mediaType",
            "an allowed media type",
        ),
        (
            file("image/png", &format!("data:image/jpeg;base64,{PNG}")),
            "url",
            "a data URL of the part's mediaType",
        ),
        (
            file("image/png", &format!("data:image/png,{PNG}")),
            "url",
            "base64",
        ),
        (
            file("image/png", "http://example.com/a.png"),
            "url",
            "message.image_url",
        ),
        (
            file("application/pdf", "https://example.com/a.pdf"),
            "url",
            "a document is not fetched",
        ),
        (
            named("text/plain", "data:text/plain;base64,aGk=", r#""../a.txt""#),
            "filename",
            "message.file_name",
        ),
        (
            named("text/plain", "data:text/plain;base64,aGk=", "7"),
            "filename",
            "a string",
        ),
        (
            r#"{"type":"file","url":"data:text/plain;base64,aGk="}"#.into(),
            "mediaType",
            "a string",
        ),
        (
            r#"{"type":"file","mediaType":"text/plain"}"#.into(),
            "url",
            "a string",
        ),
    ]);
}

#[test]
fn bytes_are_refused_naming_the_bound_or_the_rule() {
    let over = |signature: &[u8], len: usize| {
        let mut bytes = signature.to_vec();
        bytes.resize(len + 1, b' ');
        base64_of(&bytes)
    };
    let limits = keel_message::Limits::default();
    let over_image = over(b"\x89PNG\r\n\x1a\n", limits.image_bytes);
    let over_file = over(b"%PDF-", limits.file_bytes);
    check_refusals(&[
        (
            file("image/png", &format!("data:image/png;base64,{over_image}")),
            "url",
            "limits.image_bytes",
        ),
        (
            file(
                "application/pdf",
                &format!("data:application/pdf;base64,{over_file}"),
            ),
            "url",
            "limits.file_bytes",
        ),
        (
            file("image/png", "data:image/png;base64,/9j/4A=="),
            "url",
            "message.image_signature",
        ),
        (
            file("image/png", "data:image/png;base64,not base64"),
            "url",
            "message.base64",
        ),
        (
            file(
                "application/pdf",
                &format!("data:application/pdf;base64,{PNG}"),
            ),
            "url",
            "message.file_signature",
        ),
        (
            file("text/plain", "data:text/plain;base64,/w=="),
            "url",
            "message.file_signature",
        ),
    ]);
}

/// A file without a name is called `attachment`; a name is kept.
#[test]
fn file_names_are_kept_or_defaulted() {
    let names = |parts: &str| -> Vec<String> {
        parse_body(&body(parts))
            .unwrap()
            .files
            .iter()
            .map(|p| match p {
                Part::File(f) => f.name().as_str().to_owned(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let url = "data:text/csv;base64,YSxiCg==";
    assert_eq!(
        names(&format!(
            "{},{}",
            file("text/csv", url),
            named("text/csv", url, r#""t.csv""#)
        )),
        ["attachment", "t.csv"]
    );
}

/// `bytes` as canonical base64, whatever their size.
fn base64_of(bytes: &[u8]) -> String {
    let unbounded = keel_message::Limits {
        image_bytes: usize::MAX,
        ..Default::default()
    };
    keel_message::MediaBytes::copy_from(bytes, keel_message::Bound::ImageBytes, &unbounded)
        .unwrap()
        .to_base64()
}

/// At most `limits.media_parts_per_message` file parts: the first past
/// the bound is named.
#[test]
fn the_file_count_is_bounded() {
    let max = keel_message::Limits::default().media_parts_per_message;
    let png = file("image/png", &format!("data:image/png;base64,{PNG}"));
    let kinds = vec!["image"; max];
    check(
        &vec![png.as_str(); max].join(","),
        Expect::Files(&kinds, &[]),
    );
    check(
        &vec![png.as_str(); max + 1].join(","),
        Expect::Refused(
            &format!("messages[0].parts[{max}]"),
            "limits.media_parts_per_message",
        ),
    );
}
