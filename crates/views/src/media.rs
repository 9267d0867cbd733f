//! Images and files as the frontends' protocols spell them: a `data:` URL
//! of the bytes (the AI SDK's `file` parts) or an AG-UI source (`data`
//! with base64, or `url`). Only allowlisted media types reach here (the
//! message model refuses others), so a `data:` URL never names SVG or HTML.

use keel_message::{FilePart, ImageData, ImagePart};
use serde_json::{Value, json};

/// The media type an image with no declared type is given: a URL image
/// may leave it to the response.
pub(crate) const ANY_IMAGE: &str = "image/*";

/// The image's media type, or [`ANY_IMAGE`] when it has none.
pub(crate) fn image_media_type(image: &ImagePart) -> &'static str {
    image.media_type().map_or(ANY_IMAGE, |t| t.as_str())
}

/// The image as a URL: `data:<type>;base64,<bytes>` or its `https` URL.
pub(crate) fn image_url(image: &ImagePart) -> String {
    match image.data() {
        ImageData::Bytes(bytes) => {
            format!(
                "data:{};base64,{}",
                image_media_type(image),
                bytes.to_base64()
            )
        }
        ImageData::Url(url) => url.as_str().to_owned(),
    }
}

/// AG-UI's `source` of an image: `{"type":"data","value","mimeType"}` or
/// `{"type":"url","value"[,"mimeType"]}`.
pub(crate) fn image_source(image: &ImagePart) -> Value {
    match image.data() {
        ImageData::Bytes(bytes) => json!({
            "type": "data",
            "value": bytes.to_base64(),
            "mimeType": image_media_type(image),
        }),
        ImageData::Url(url) => match image.media_type() {
            Some(t) => json!({"type": "url", "value": url.as_str(), "mimeType": t.as_str()}),
            None => json!({"type": "url", "value": url.as_str()}),
        },
    }
}

/// AG-UI's image content part.
pub(crate) fn image_part(image: &ImagePart) -> Value {
    json!({"type": "image", "source": image_source(image)})
}

/// AG-UI's document content part for a file; its name goes in the part's
/// `metadata` (AG-UI's sources have no file name).
pub(crate) fn file_part(file: &FilePart) -> Value {
    json!({
        "type": "document",
        "source": {
            "type": "data",
            "value": file.bytes().to_base64(),
            "mimeType": file.media_type().as_str(),
        },
        "metadata": {"filename": file.name().as_str()},
    })
}
