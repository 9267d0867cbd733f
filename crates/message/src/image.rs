//! [`ImagePart`]: an image, inline bytes or an `https` URL, and its wire
//! shape (`{"media_type","base64"}` or `{"url"}`), shared by image parts
//! and tool-result images.

use crate::error::{MessageError, MessageErrorKind};
use crate::https_url::HttpsUrl;
use crate::limits::{Bound, Limits};
use crate::media_bytes::MediaBytes;
use crate::media_type::ImageMediaType;
use serde::{Deserialize, Serialize};

/// Where an image's content is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageData {
    /// Inline bytes, within [`Limits::image_bytes`].
    Bytes(MediaBytes),
    /// A URL the provider fetches.
    Url(HttpsUrl),
}

/// An image: a media type from the allowlist and its bytes, or an `https`
/// URL with an optional media type.
///
/// Inline bytes always have a media type (rule `message.image_media_type`)
/// and start with its signature (rule `message.image_signature`), so bytes
/// that are not the image they claim to be never get in.
///
/// ```
/// use keel_message::{ImageMediaType, ImagePart, Limits};
/// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
/// let image = ImagePart::from_bytes_with(ImageMediaType::Png, png, &Limits::default())?;
/// assert_eq!(image.bytes().map(|b| b.len()), Some(16));
/// assert!(ImagePart::from_bytes_with(ImageMediaType::Jpeg, png, &Limits::default()).is_err());
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImagePart {
    media_type: Option<ImageMediaType>,
    data: ImageData,
}

impl ImagePart {
    /// An inline image: copies `bytes`, which must be within
    /// `limits.image_bytes` and start with `media_type`'s signature.
    pub fn from_bytes_with(
        media_type: ImageMediaType,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<ImagePart, MessageError> {
        let bytes = MediaBytes::copy_from(bytes, Bound::ImageBytes, limits)
            .map_err(|e| e.within("$.base64"))?;
        Self::from_media_bytes_with(media_type, bytes, limits)
    }

    /// An inline image from canonical base64 (rule `message.base64`),
    /// decoded only when within `limits.image_bytes`.
    pub fn from_base64_with(
        media_type: ImageMediaType,
        base64: &str,
        limits: &Limits,
    ) -> Result<ImagePart, MessageError> {
        let bytes = MediaBytes::from_base64(base64, Bound::ImageBytes, limits)
            .map_err(|e| e.within("$.base64"))?;
        Self::from_media_bytes_with(media_type, bytes, limits)
    }

    /// An inline image sharing `bytes` (no copy), under the same rules as
    /// [`from_bytes_with`](ImagePart::from_bytes_with).
    pub fn from_media_bytes_with(
        media_type: ImageMediaType,
        bytes: MediaBytes,
        limits: &Limits,
    ) -> Result<ImagePart, MessageError> {
        Bound::ImageBytes
            .check(limits, bytes.len())
            .map_err(|e| MessageError::new("$.base64", e))?;
        if !media_type.signature_matches(bytes.as_bytes()) {
            return Err(MessageError::new(
                "$.base64",
                MessageErrorKind::ImageSignature {
                    media_type: media_type.as_str(),
                },
            ));
        }
        Ok(ImagePart {
            media_type: Some(media_type),
            data: ImageData::Bytes(bytes),
        })
    }

    /// An image the provider fetches from `url`.
    pub fn from_url(url: HttpsUrl, media_type: Option<ImageMediaType>) -> ImagePart {
        ImagePart {
            media_type,
            data: ImageData::Url(url),
        }
    }

    /// The media type: always present for inline bytes.
    pub fn media_type(&self) -> Option<ImageMediaType> {
        self.media_type
    }

    /// The bytes or the URL.
    pub fn data(&self) -> &ImageData {
        &self.data
    }

    /// The inline bytes, if any.
    pub fn bytes(&self) -> Option<&MediaBytes> {
        match &self.data {
            ImageData::Bytes(bytes) => Some(bytes),
            ImageData::Url(_) => None,
        }
    }

    /// The URL, if any.
    pub fn url(&self) -> Option<&HttpsUrl> {
        match &self.data {
            ImageData::Url(url) => Some(url),
            ImageData::Bytes(_) => None,
        }
    }

    /// The bytes this image counts against `message_bytes`: its decoded
    /// bytes, or its URL's.
    pub fn content_bytes(&self) -> usize {
        match &self.data {
            ImageData::Bytes(bytes) => bytes.len(),
            ImageData::Url(url) => url.as_str().len(),
        }
    }

    /// Re-checks `limits.image_bytes` (the image may have been built under
    /// other limits).
    pub(crate) fn revalidate(&self, limits: &Limits) -> Result<(), MessageError> {
        match &self.data {
            ImageData::Bytes(bytes) => Bound::ImageBytes
                .check(limits, bytes.len())
                .map_err(|e| MessageError::new("$.base64", e)),
            ImageData::Url(_) => Ok(()),
        }
    }
}

/// The wire shape of an image without its part tag.
#[derive(Serialize)]
pub(crate) struct ImageOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    media_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
}

impl<'a> From<&'a ImagePart> for ImageOut<'a> {
    fn from(image: &'a ImagePart) -> Self {
        ImageOut {
            media_type: image.media_type.map(ImageMediaType::as_str),
            base64: image.bytes().map(MediaBytes::to_base64),
            url: image.url().map(HttpsUrl::as_str),
        }
    }
}

/// The wire shape of an image, as deserialized before validation: strings,
/// so that each rule reports its member's path.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImageWire {
    media_type: Option<String>,
    base64: Option<String>,
    url: Option<String>,
}

impl ImageWire {
    pub(crate) fn build(self, limits: &Limits) -> Result<ImagePart, MessageError> {
        let media_type = self
            .media_type
            .as_deref()
            .map(ImageMediaType::parse)
            .transpose()
            .map_err(|e| e.within("$.media_type"))?;
        match (self.base64, self.url) {
            (Some(base64), None) => {
                let media_type = media_type.ok_or_else(|| {
                    MessageError::new("$.media_type", MessageErrorKind::MissingImageMediaType)
                })?;
                ImagePart::from_base64_with(media_type, &base64, limits)
            }
            (None, Some(url)) => {
                let url = HttpsUrl::parse(&url).map_err(|e| e.within("$.url"))?;
                Ok(ImagePart::from_url(url, media_type))
            }
            _ => Err(MessageError::new("$", MessageErrorKind::ImageSource)),
        }
    }
}

impl Serialize for ImagePart {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ImageOut::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ImagePart {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ImageWire::deserialize(d)?
            .build(Limits::default_ref())
            .map_err(serde::de::Error::custom)
    }
}
