//! Non-text parts of a message: images a user sends or a tool returns.
//!
//! A message keeps its text in `content` and anything else as typed [`Attachment`]s, which
//! providers that accept them send as their own parts (an OpenAI `image_url`, an Ollama
//! `images` entry), never as base64 text the model would read as characters.
//!
//! Bytes are large and traces are kept: a trace file keeps an image's media type, SHA-256
//! and size always, and its bytes only up to [`TRACE_IMAGE_BYTES`] (enough for the viewer's
//! thumbnail of a small image).

use std::cell::Cell;
use std::sync::Arc;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Images up to this many bytes keep their bytes in trace files; larger ones keep their
/// hash and size only.
pub const TRACE_IMAGE_BYTES: usize = 32 * 1024;

/// Tokens an image may cost a model, for bounding a prompt before it is sent
/// ([`Prompt::max_input_tokens`](crate::Prompt::max_input_tokens)): above what the common
/// providers charge for one image at their largest size.
pub const IMAGE_MAX_TOKENS: u64 = 2_000;

/// A non-text part of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Attachment {
    /// An image.
    Image(Image),
}

impl Attachment {
    /// The attachment's image, if it is one.
    pub fn as_image(&self) -> Option<&Image> {
        match self {
            Attachment::Image(image) => Some(image),
        }
    }
}

/// An image: its media type, its bytes (absent when read back from a trace that left them
/// out), their SHA-256 and their size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Image {
    media_type: String,
    sha256: String,
    size: u64,
    #[serde(
        default,
        skip_serializing_if = "bytes_left_out",
        serialize_with = "to_base64",
        deserialize_with = "from_base64"
    )]
    data: Option<Arc<[u8]>>,
}

impl Image {
    /// An image of `media_type` (`image/png`, `image/jpeg`, …) with these bytes.
    pub fn new(media_type: impl Into<String>, bytes: impl Into<Arc<[u8]>>) -> Image {
        let bytes: Arc<[u8]> = bytes.into();
        Image {
            media_type: media_type.into(),
            sha256: format!("{:x}", Sha256::digest(&bytes)),
            size: bytes.len() as u64,
            data: Some(bytes),
        }
    }

    /// An image from base64 text (as MCP servers and APIs send them); `None` if the text is
    /// not base64.
    pub fn from_base64(media_type: impl Into<String>, text: &str) -> Option<Image> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()?;
        Some(Image::new(media_type, bytes))
    }

    /// Its media type.
    pub fn media_type(&self) -> &str {
        &self.media_type
    }

    /// The SHA-256 of its bytes, in hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Its bytes; `None` for an image read back from a trace that kept only its hash.
    pub fn data(&self) -> Option<&[u8]> {
        self.data.as_deref()
    }

    /// Its bytes as base64 (for wire formats); `None` without bytes.
    pub fn base64(&self) -> Option<String> {
        self.data
            .as_deref()
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
    }

    /// A `data:` URL of it (for wire formats and pages); `None` without bytes.
    pub fn data_url(&self) -> Option<String> {
        Some(format!(
            "data:{};base64,{}",
            self.media_type,
            self.base64()?
        ))
    }
}

/// A tool's `output` as traces keep it: an image in MCP-style content blocks (the output
/// itself, or an array of them) larger than [`TRACE_IMAGE_BYTES`] gives up its base64 `data`
/// for its `sha256` and `size`; everything else is kept as it is. Borrowed when nothing is
/// left out (the usual case: tools seldom return large images), so a caller pays for a copy
/// only where it keeps one.
pub fn traced_output(output: &serde_json::Value) -> std::borrow::Cow<'_, serde_json::Value> {
    use serde_json::Value;
    use std::borrow::Cow;
    /// The large image's base64, if `value` is a block holding one.
    fn large(value: &Value) -> Option<&str> {
        let fields = value.as_object()?;
        let data = fields.get("data").and_then(Value::as_str)?;
        // Base64 holds 3 bytes in 4 characters.
        (fields.get("type").and_then(Value::as_str) == Some("image")
            && data.len() / 4 * 3 > TRACE_IMAGE_BYTES)
            .then_some(data)
    }
    fn block(value: &Value) -> Value {
        let (Some(data), Some(fields)) = (large(value), value.as_object()) else {
            return value.clone();
        };
        let mut kept = fields.clone();
        kept.remove("data");
        let media_type = fields.get("mimeType").and_then(Value::as_str).unwrap_or("");
        match Image::from_base64(media_type, data) {
            Some(image) => {
                kept.insert("sha256".into(), Value::from(image.sha256()));
                kept.insert("size".into(), Value::from(image.size()));
            }
            None => {
                kept.insert("data_chars".into(), Value::from(data.len()));
            }
        }
        Value::Object(kept)
    }
    match output {
        Value::Array(items) if items.iter().any(|i| large(i).is_some()) => {
            Cow::Owned(Value::Array(items.iter().map(block).collect()))
        }
        other if large(other).is_some() => Cow::Owned(block(other)),
        other => Cow::Borrowed(other),
    }
}

thread_local! {
    /// While set, images larger than this many bytes serialize without their bytes.
    static BYTES_KEPT_UP_TO: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `f` with images larger than `limit` bytes serializing without their bytes (their
/// hash and size stay): trace files use it with [`TRACE_IMAGE_BYTES`], and so should any
/// writer of traces (the HTML viewer does).
pub fn with_bytes_up_to<R>(limit: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BYTES_KEPT_UP_TO.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(BYTES_KEPT_UP_TO.with(|c| c.replace(Some(limit))));
    f()
}

fn bytes_left_out(data: &Option<Arc<[u8]>>) -> bool {
    match data {
        None => true,
        Some(bytes) => BYTES_KEPT_UP_TO.with(|c| c.get().is_some_and(|limit| bytes.len() > limit)),
    }
}

fn to_base64<S: Serializer>(data: &Option<Arc<[u8]>>, serializer: S) -> Result<S::Ok, S::Error> {
    match data {
        Some(bytes) => {
            serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        None => serializer.serialize_none(),
    }
}

fn from_base64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Arc<[u8]>>, D::Error> {
    let text: Option<String> = Option::deserialize(deserializer)?;
    text.map(|t| {
        base64::engine::general_purpose::STANDARD
            .decode(t.as_bytes())
            .map(Arc::from)
            .map_err(serde::de::Error::custom)
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_round_trips_and_traces_keep_only_small_bytes() {
        let small = Attachment::Image(Image::new("image/png", vec![1u8, 2, 3]));
        let text = serde_json::to_string(&small).unwrap();
        assert!(text.contains(r#""type":"image""#), "{text}");
        assert!(text.contains(r#""data":"AQID""#), "{text}");
        assert_eq!(serde_json::from_str::<Attachment>(&text).unwrap(), small);

        let big = Image::new("image/jpeg", vec![7u8; TRACE_IMAGE_BYTES + 1]);
        let traced = with_bytes_up_to(TRACE_IMAGE_BYTES, || serde_json::to_string(&big).unwrap());
        assert!(!traced.contains("data"), "{traced}");
        assert!(traced.contains(big.sha256()));
        let back: Image = serde_json::from_str(&traced).unwrap();
        assert_eq!(
            (back.size(), back.sha256(), back.data()),
            (big.size(), big.sha256(), None)
        );
        // Outside the scope the bytes are written again.
        assert!(serde_json::to_string(&big).unwrap().contains("data"));
        assert_eq!(
            Image::from_base64("image/png", "AQID").unwrap().data(),
            Some(&[1u8, 2, 3][..])
        );
        assert!(Image::from_base64("image/png", "not base64!").is_none());
    }

    #[test]
    fn traced_tool_outputs_keep_large_images_as_hash_and_size() {
        use base64::Engine as _;
        let big = vec![9u8; TRACE_IMAGE_BYTES * 2];
        let data = base64::engine::general_purpose::STANDARD.encode(&big);
        let output = serde_json::json!([
            {"type": "text", "text": "a chart"},
            {"type": "image", "mimeType": "image/png", "data": data},
            {"type": "image", "mimeType": "image/png", "data": "AQID"},
        ]);
        let traced = traced_output(&output);
        assert_eq!(traced[0], output[0]);
        assert_eq!(traced[1].get("data"), None);
        assert_eq!(traced[1]["size"], big.len());
        assert_eq!(traced[1]["sha256"], Image::new("image/png", big).sha256());
        assert_eq!(traced[2], output[2], "small images are kept whole");
        // Nothing to leave out: nothing is copied.
        let small = serde_json::json!([output[0], output[2]]);
        assert!(matches!(
            traced_output(&small),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
