//! The image items of a result: which become [`ImagePart`]s, which are
//! cut by the bounds, which are shown as a placeholder.

use super::{FlattenBounds, base64_decoded_len, short};
use keel_message::{ImageMediaType, ImagePart, Limits};
use serde_json::Value;

/// What of a result's images was cut: `kept_images` of `images`, and
/// `kept_bytes` of `bytes` (decoded; a cut image's size is read from its
/// base64 length, without decoding it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageCut {
    images: usize,
    kept_images: usize,
    bytes: u64,
    kept_bytes: u64,
}

impl ImageCut {
    /// The images of an allowed type the result held.
    pub fn images(&self) -> usize {
        self.images
    }

    /// The images kept.
    pub fn kept_images(&self) -> usize {
        self.kept_images
    }

    /// Their decoded size, all together.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The decoded size of the images kept.
    pub fn kept_bytes(&self) -> u64 {
        self.kept_bytes
    }

    /// The text's last line: `[images cut: kept K of N images, B of T bytes]`.
    pub(super) fn marker(&self) -> String {
        format!(
            "[images cut: kept {} of {} images, {} of {} bytes]",
            self.kept_images, self.images, self.kept_bytes, self.bytes
        )
    }
}

/// The images kept so far, against the bounds.
pub(super) struct Kept {
    bounds: FlattenBounds,
    limits: Limits,
    parts: Vec<ImagePart>,
    offered: usize,
    offered_bytes: u64,
    kept_bytes: u64,
}

impl Kept {
    pub(super) fn new(bounds: &FlattenBounds) -> Kept {
        Kept {
            bounds: *bounds,
            limits: Limits {
                image_bytes: bounds.image_bytes,
                ..Limits::default()
            },
            parts: Vec::new(),
            offered: 0,
            offered_bytes: 0,
            kept_bytes: 0,
        }
    }

    /// Takes image item `item` if it fits, or counts it as cut; returns
    /// the placeholder for an image that cannot be a part (a type outside
    /// the allowlist, bytes that are not that type).
    pub(super) fn offer(&mut self, item: &Value) -> Option<String> {
        let field = |name: &str| item.get(name).and_then(Value::as_str);
        let mime = field("mimeType").unwrap_or("unknown type");
        let data = field("data").unwrap_or_default();
        let size = base64_decoded_len(data);
        let placeholder = |rule: &str| {
            Some(format!(
                "[image: {}, {size} bytes, not shown: rule {rule}]",
                short(mime)
            ))
        };
        let Ok(media_type) = ImageMediaType::parse(mime) else {
            return placeholder("message.image_media_type");
        };
        self.offered += 1;
        self.offered_bytes = self.offered_bytes.saturating_add(size);
        let fits = self.parts.len() < self.bounds.images
            && size <= self.bounds.image_bytes as u64
            && self.kept_bytes.saturating_add(size) <= self.bounds.images_bytes as u64;
        if !fits {
            return None;
        }
        match self.decode(media_type, data) {
            Ok(part) => {
                self.kept_bytes += part.bytes().map_or(0, |b| b.len() as u64);
                self.parts.push(part);
                None
            }
            Err(rule) => {
                // Not an image after all: shown as a placeholder, and not
                // counted among the images.
                self.offered -= 1;
                self.offered_bytes = self.offered_bytes.saturating_sub(size);
                placeholder(rule)
            }
        }
    }

    /// The part for `data` (base64, line breaks allowed), or the rule it
    /// breaks.
    fn decode(&self, media_type: ImageMediaType, data: &str) -> Result<ImagePart, &'static str> {
        let compact: String;
        let data = if data.bytes().any(|b| b.is_ascii_whitespace()) {
            compact = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            &compact
        } else {
            data
        };
        ImagePart::from_base64_with(media_type, data, &self.limits).map_err(|e| e.kind().rule())
    }

    /// The parts kept, and the cut when one was made.
    pub(super) fn finish(self) -> KeptImages {
        let cut = (self.parts.len() < self.offered).then_some(ImageCut {
            images: self.offered,
            kept_images: self.parts.len(),
            bytes: self.offered_bytes,
            kept_bytes: self.kept_bytes,
        });
        KeptImages {
            parts: self.parts,
            cut,
        }
    }
}

/// The images of a flattened result.
pub(super) struct KeptImages {
    pub(super) parts: Vec<ImagePart>,
    pub(super) cut: Option<ImageCut>,
}
