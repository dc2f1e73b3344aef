//! The read_image tool (seed `000_…`): bounded bytes through the provider's readBytes, admission
//! by extension and signature, header dimensions checked before any decoding, normalization to a
//! budget the next model request can carry, and a durable copy in the attachment store.
//!
//! Admission: an extension declares the type and the signature must agree (a correctly formatted
//! image under a wrong extension is refused with the rename remedy, never sniffed); a path without
//! an extension (attachment objects included) is identified by its signature.
//!
//! Normalization, per input format (the budget: at most 4 MiB, long edge at most 2000 px):
//!
//! | input | output |
//! |-------|--------|
//! | PNG, 8-bit, still, upright, within budget | the original bytes |
//! | PNG otherwise (16-bit, APNG, EXIF-rotated, over budget) | PNG, 8 bits per channel, first frame |
//! | JPEG, 8-bit gray or YCbCr, upright, within budget | the original bytes |
//! | JPEG otherwise (CMYK, 12-bit, EXIF-rotated, over budget) | JPEG, quality 85 |
//! | WebP, still, upright, within budget | the original bytes |
//! | WebP otherwise | PNG when it has alpha, else JPEG (the codec set has no lossy WebP encoder) |
//! | GIF (any) | PNG of the first frame (an animation shows only its first frame anyway) |
//!
//! A re-encoded image that is still over the byte budget is downscaled further until it fits.
//!
//! Codes (stable; the texts are the seed's where it quotes them):
//!
//! | code | when |
//! |------|------|
//! | `IMAGE_INPUT_UNSUPPORTED` | the route's model does not declare image input (`imageInput = false`) |
//! | `IMAGE_UNSUPPORTED_FORMAT` | the extension declares no supported format, or an extension-less file has no supported signature |
//! | `IMAGE_MISMATCH` | the extension declares one format and the bytes are another; an extension-less signature that does not validate |
//! | `IMAGE_DECODE_FAILED` | the bytes do not decode (truncated, corrupt) |
//! | `IMAGE_CONVERSION_FAILED` | a 16-bit PNG could not be brought to 8-bit |
//! | `IMAGE_TOO_LARGE` | source bytes over `maxImageBytes` (at most 50 MiB), header dimensions over `maxImageDimension` or `maxImagePixels`, or no size fits the budget |
//! | `IMAGE_STORE_FAILED` | the attachment store could not keep the image |
//!
//! Layout: `admission` (formats, extensions, signatures, refusals), `normalize` (header checks,
//! decoding and re-encoding, pure and CPU-bound), and here the schema, the caps from the client
//! config, the provider call and the attachment store.

mod admission;
mod normalize;
#[cfg(test)]
mod tests;

use fsd_proto::ErrorCode;
use serde_json::{Map, Value, json};

use super::{Block, Session, ToolResult, args};
use crate::attachments::{AttachmentStore, DEFAULT_MAX_BYTES};
use crate::daemon::DaemonError;
use crate::failure::ToolError;

use admission::{Refusal, declared};
use normalize::{Caps, Normalized, normalize};

/// The hard cap on source bytes, whatever `maxImageBytes` says (CONTRACT: readBytes up to 50 MiB).
pub const SOURCE_CAP_BYTES: u64 = 50 * 1024 * 1024;
/// Default `maxImageBytes`: the source cap.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = SOURCE_CAP_BYTES;
/// Default `maxImagePixels`: 50 megapixels (a 16-bit RGBA decode of that is 400 MB, the most a
/// call may allocate).
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 50_000_000;
/// Default `maxImageDimension`: the widest side any of the four formats' common encoders write.
pub const DEFAULT_MAX_IMAGE_DIMENSION: u64 = 16384;
/// The normalized image's byte budget.
pub const BUDGET_BYTES: usize = 4 * 1024 * 1024;
/// The normalized image's longest side.
pub const MAX_LONG_EDGE: u32 = 2000;
const JPEG_QUALITY: u8 = 85;

pub fn schema() -> Value {
    json!({
        "name": super::Tool::ReadImage.name(),
        "description": "Read a PNG, JPEG, WebP or GIF image file and see it. The file extension must match the image format; a file without an extension is identified from its content. Large images are downscaled automatically (at most 2000 px on the long edge and 4 MiB), so there is no need to make a thumbnail first; an animation shows its first frame.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The image to read: an absolute path, or a path relative to the session's working directory."}
            },
            "required": ["file_path"],
            "additionalProperties": false
        }
    })
}

fn caps_of(config: &crate::config::ClientConfig) -> Caps {
    Caps {
        max_pixels: config.max_image_pixels.unwrap_or(DEFAULT_MAX_IMAGE_PIXELS),
        max_dimension: config.max_image_dimension.unwrap_or(DEFAULT_MAX_IMAGE_DIMENSION),
        ..Caps::default()
    }
}

/// The `<content>` line: media type, normalized dimensions and byte size, then what changed.
fn describe(n: &Normalized) -> String {
    let mut notes = Vec::new();
    if (n.width, n.height) != (n.source_width, n.source_height) {
        notes.push(format!("downscaled from {}x{}", n.source_width, n.source_height));
    }
    if n.format != n.source_format {
        notes.push(format!("converted from {}", n.source_format.media_type()));
    }
    if n.from_16_bit {
        notes.push("converted from 16 bits per channel".to_owned());
    }
    if n.animated {
        notes.push("first frame".to_owned());
    }
    let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join("; ")) };
    format!("{}, {}x{} pixels, {} bytes{notes}", n.format.media_type(), n.width, n.height, n.data.len())
}

pub async fn run(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let map = args::object(args, &["file_path"])?;
    let file_path = args::non_empty(map, "file_path")?;
    let path = session.absolute(&file_path);
    let config = &session.tools.config;
    // The strict gate: a text-only route never gets an image block in its history.
    if !config.image_input {
        let model = config.model.as_deref().unwrap_or("unknown");
        return Err(ToolError::new(
            "IMAGE_INPUT_UNSUPPORTED",
            format!(
                "cannot read \"{path}\" as an image: model \"{model}\" does not declare image input; switch to an image-capable model to read images"
            ),
        ));
    }
    let Some(store_dir) = config.attachment_store.clone() else {
        return Err(ToolError::new(
            "IMAGE_STORE_FAILED",
            "read_image needs an attachment store (attachmentStore)",
        ));
    };
    let caps = caps_of(config);
    let declared = declared(&path).map_err(|r| r.at(&path))?;
    let mut limit = config.max_image_bytes.unwrap_or(DEFAULT_MAX_IMAGE_BYTES).min(SOURCE_CAP_BYTES);
    if let Some(daemon_max) = Some(session.hello.max_read_bytes).filter(|&m| m > 0) {
        limit = limit.min(daemon_max);
    }

    let reply = match session.daemon.read_bytes(&path, limit.max(1)).await {
        Ok(reply) => reply,
        Err(error) => {
            return Err(match &error {
                DaemonError::Refused(wire) if wire.code == ErrorCode::TooLarge => {
                    let size =
                        wire.get("size").and_then(|s| s.parse().ok()).unwrap_or(limit.saturating_add(1));
                    Refusal::SourceTooLarge { size, limit }.at(&path)
                }
                DaemonError::Refused(wire) => {
                    if wire.code == ErrorCode::NotFound {
                        session.record_absent(&path, wire.get("target_key"));
                    }
                    ToolError::from_read_wire(&path, wire)
                }
                _ => ToolError::from_read(&path, &error),
            });
        }
    };
    let target = reply.target;
    let data = reply.data;
    // Decoding is CPU-bound and a malformed file may make a codec panic: both stay off the async
    // threads, and a panic is the bytes' fault.
    let normalized = tokio::task::spawn_blocking(move || normalize(&data, &declared, &caps))
        .await
        .unwrap_or(Err(Refusal::Undecodable))
        .map_err(|r| r.at(&path))?;
    let store = AttachmentStore::new(store_dir, DEFAULT_MAX_BYTES);
    let bytes = normalized.data.clone();
    let stored = tokio::task::spawn_blocking(move || store.put(&bytes))
        .await
        .map_err(|e| {
            ToolError::new("IMAGE_STORE_FAILED", format!("cannot store the image read from \"{path}\": {e}"))
        })?
        .map_err(|e| {
            ToolError::new("IMAGE_STORE_FAILED", format!("cannot store the image read from \"{path}\": {e}"))
        })?;
    session.record_present(&[&path], &target, &reply.version);

    let display = target.display;
    let text = format!(
        "<path>{display}</path>\n<type>image</type>\n<content>\n{}\n</content>",
        describe(&normalized)
    );
    let mut meta = Map::new();
    meta.insert("path".into(), json!(display));
    meta.insert("mediaType".into(), json!(normalized.format.media_type()));
    meta.insert("width".into(), json!(normalized.width));
    meta.insert("height".into(), json!(normalized.height));
    meta.insert("bytes".into(), json!(normalized.data.len()));
    meta.insert(
        "attachment".into(),
        json!({"ref": stored.reference, "path": stored.path.to_string_lossy(), "created": stored.created}),
    );
    meta.insert(
        "source".into(),
        json!({
            "mediaType": normalized.source_format.media_type(),
            "width": normalized.source_width,
            "height": normalized.source_height,
            "unchanged": normalized.original,
        }),
    );
    let media_type = normalized.format.media_type().to_owned();
    Ok(ToolResult {
        is_error: false,
        code: None,
        content: vec![Block::Text(text), Block::Image { mime_type: media_type, data: normalized.data }],
        meta,
    })
}
