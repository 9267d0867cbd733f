//! The canonical text of a `tool.completed` that carries images, written
//! straight into the event line: the image bytes are base64-encoded once,
//! into the line's own allocation, instead of through a `String` per
//! image, a JSON value and the canonical text (three copies of a 1 MiB
//! image). The generic path gives the same bytes (tested).

use super::{PayloadError, ToolCompleted};
use base64::Engine as _;
use keel_message::{ImageData, ImagePart};

/// The member the images go in.
const IMAGES: &str = "images";

/// A `tool.completed` with images, ready to be written: the canonical text
/// of its other members, split where `"images"` goes in RFC 8785 key order.
pub(crate) struct MediaPayload<'a> {
    /// `{` and the members before `images` (with their trailing comma).
    before: String,
    images: &'a [ImagePart],
    /// The members after `images` (with their leading comma) and `}`.
    after: String,
}

impl<'a> MediaPayload<'a> {
    /// Splits the canonical text of `payload` without its images.
    pub(crate) fn new(payload: &'a ToolCompleted) -> Result<MediaPayload<'a>, PayloadError> {
        let bare = ToolCompleted {
            turn: payload.turn,
            call_id: payload.call_id.clone(),
            tool: payload.tool.clone(),
            output: payload.output.clone(),
            images: Vec::new(),
            extra: payload.extra.clone(),
        };
        let schema = |e: serde_json::Error| PayloadError::Schema {
            kind: "tool.completed".to_owned(),
            detail: keel_message::decode::elide_values(&e.to_string()),
        };
        let serde_json::Value::Object(members) = serde_json::to_value(&bare).map_err(schema)?
        else {
            return Err(PayloadError::NotObject {
                kind: "tool.completed".to_owned(),
            });
        };
        // RFC 8785 orders member names by their UTF-16 code units.
        let (head, tail): (serde_json::Map<_, _>, serde_json::Map<_, _>) = members
            .into_iter()
            .partition(|(name, _)| name.encode_utf16().lt(IMAGES.encode_utf16()));
        let canonical =
            |map| keel_message::canonical::to_canonical_string(&serde_json::Value::Object(map));
        let mut before = canonical(head)?;
        before.pop(); // `}`
        if before.len() > 1 {
            before.push(',');
        }
        let mut after = canonical(tail)?;
        after.remove(0); // `{`
        if after.len() > 1 {
            after.insert(0, ',');
        }
        Ok(MediaPayload {
            before,
            images: &payload.images,
            after,
        })
    }

    /// The length of the canonical text.
    pub(crate) fn len(&self) -> usize {
        let images: usize = self.images.iter().map(image_len).sum();
        // `"images":[` … `]`, and a comma between images.
        let frame = IMAGES.len() + 5 + self.images.len().saturating_sub(1);
        self.before.len() + frame + images + self.after.len()
    }

    /// Appends the canonical text to `out`.
    pub(crate) fn write(&self, out: &mut String) {
        out.push_str(&self.before);
        out.push('"');
        out.push_str(IMAGES);
        out.push_str("\":[");
        for (i, image) in self.images.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_image(image, out);
        }
        out.push(']');
        out.push_str(&self.after);
    }
}

/// `{"base64":…,"media_type":…}` or `{"media_type":…?,"url":…}`, members
/// in canonical order. Media types and base64 need no escaping.
fn write_image(image: &ImagePart, out: &mut String) {
    out.push('{');
    if let ImageData::Bytes(bytes) = image.data() {
        out.push_str("\"base64\":\"");
        base64::engine::general_purpose::STANDARD.encode_string(bytes.as_bytes(), out);
        out.push_str("\",");
    }
    if let Some(media_type) = image.media_type() {
        out.push_str("\"media_type\":\"");
        out.push_str(media_type.as_str());
        out.push('"');
    }
    if let ImageData::Url(url) = image.data() {
        if image.media_type().is_some() {
            out.push(',');
        }
        out.push_str("\"url\":");
        keel_message::canonical::write_canonical_str(url.as_str(), out);
    }
    out.push('}');
}

/// The length [`write_image`] writes.
fn image_len(image: &ImagePart) -> usize {
    let media_type = image
        .media_type()
        .map_or(0, |m| "\"media_type\":\"\"".len() + m.as_str().len());
    let data = match image.data() {
        ImageData::Bytes(bytes) => "\"base64\":\"\",".len() + bytes.len().div_ceil(3) * 4,
        ImageData::Url(url) => {
            let comma = usize::from(image.media_type().is_some());
            comma + "\"url\":".len() + super::canonical_str_len(url.as_str())
        }
    };
    2 + media_type + data
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::payload::{Extra, Payload};
    use keel_message::{CallId, HttpsUrl, ImageMediaType, Limits, ToolName};
    use serde_json::json;

    fn png(extra: &[u8]) -> ImagePart {
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        bytes.extend_from_slice(extra);
        ImagePart::from_bytes_with(ImageMediaType::Png, &bytes, &Limits::default()).unwrap()
    }

    fn url(u: &str, media_type: Option<ImageMediaType>) -> ImagePart {
        ImagePart::from_url(HttpsUrl::parse(u).unwrap(), media_type)
    }

    /// The direct encoding is the generic canonical text, byte for byte,
    /// whatever members sort around `images`, and its length is exact.
    #[test]
    fn writes_what_the_generic_path_writes() {
        let check = |name: &str, images: Vec<ImagePart>, extra: &[(&str, serde_json::Value)]| {
            let payload = Payload::ToolCompleted(ToolCompleted {
                turn: 3,
                call_id: CallId::parse("c1").unwrap(),
                tool: ToolName::parse("camera").unwrap(),
                output: "a \"picture\"\n".into(),
                images,
                extra: extra
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.clone()))
                    .collect::<Extra>(),
            });
            let Payload::ToolCompleted(p) = &payload else {
                unreachable!()
            };
            let media = MediaPayload::new(p).unwrap();
            let mut out = String::new();
            media.write(&mut out);
            assert_eq!(out, payload.canonical_generic().unwrap(), "[{name}]");
            assert_eq!(media.len(), out.len(), "[{name}] length");
            assert_eq!(payload.to_canonical().unwrap(), out, "[{name}] encode");
        };
        check("one png", vec![png(&[])], &[]);
        check(
            "padding 1 and 2",
            vec![png(&[1]), png(&[1, 2]), png(&[1, 2, 3])],
            &[],
        );
        check(
            "urls",
            vec![
                url("https://example.com/a.png", Some(ImageMediaType::Jpeg)),
                url("https://example.com/q?a=\"b\"\\", None),
            ],
            &[],
        );
        check(
            "members before and after",
            vec![png(&[9])],
            &[
                ("aaa", json!(1)),
                ("call", json!("x")),
                ("imagez", json!([])),
                ("output_cut", json!({"kept_bytes": 1, "original_bytes": 2})),
                ("zz", json!(null)),
                ("é", json!("u")),
                ("\u{e000}", json!(1)),
                ("😀", json!(2)),
            ],
        );
    }

    #[test]
    fn an_unsafe_turn_is_refused_as_by_the_generic_path() {
        let payload = ToolCompleted {
            turn: 1 << 53,
            call_id: CallId::parse("c1").unwrap(),
            tool: ToolName::parse("camera").unwrap(),
            output: String::new(),
            images: vec![png(&[])],
            extra: Extra::new(),
        };
        assert!(MediaPayload::new(&payload).is_err());
        assert!(Payload::ToolCompleted(payload).to_canonical().is_err());
    }
}
