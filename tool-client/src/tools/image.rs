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

use std::io::Cursor;
use std::path::Path;

use fsd_proto::{ErrorCode, WireError, v1};
use image::codecs::gif::GifDecoder;
use image::codecs::jpeg::{JpegDecoder, JpegEncoder};
use image::codecs::png::{PngDecoder, PngEncoder};
use image::codecs::webp::WebPDecoder;
use image::imageops::FilterType;
use image::metadata::Orientation;
use image::{ColorType, DynamicImage, ImageDecoder, Limits};
use serde_json::{Map, Value, json};

use super::{Block, Session, ToolResult, args};
use crate::attachments::{AttachmentStore, DEFAULT_MAX_BYTES};
use crate::failure::ToolError;

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
        "name": "read_image",
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

/// The four accepted formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
    WebP,
    Gif,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Png => "PNG",
            Format::Jpeg => "JPEG",
            Format::WebP => "WebP",
            Format::Gif => "GIF",
        }
    }

    pub fn media_type(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
            Format::WebP => "image/webp",
            Format::Gif => "image/gif",
        }
    }

    fn from_extension(ext: &str) -> Option<Format> {
        match ext.to_ascii_lowercase().as_str() {
            "png" => Some(Format::Png),
            "jpg" | "jpeg" => Some(Format::Jpeg),
            "webp" => Some(Format::WebP),
            "gif" => Some(Format::Gif),
            _ => None,
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The full signature of each format: what admission trusts.
fn signature(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(Format::Jpeg)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(Format::Gif)
    } else if bytes.len() >= 16 && bytes.starts_with(b"RIFF") && &bytes[8..15] == b"WEBPVP8" {
        Some(Format::WebP)
    } else {
        None
    }
}

/// The leading bytes that claim a format without proving it (a PNG whose `\r\n` was rewritten, a
/// RIFF/WEBP container without a VP8 chunk): such a file is a damaged image, not another format.
fn claim(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(b"\x89PNG") {
        Some(Format::Png)
    } else if bytes.starts_with(&[0xff, 0xd8]) {
        Some(Format::Jpeg)
    } else if bytes.starts_with(b"GIF8") {
        Some(Format::Gif)
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some(Format::WebP)
    } else {
        None
    }
}

/// What the path declares: a supported format by extension, or nothing (identify by signature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declared {
    Extension { ext: String, format: Format },
    Nothing,
}

/// Why an image was refused; rendered after `cannot read "<path>": `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the {0} extension does not declare a supported image format; read_image accepts PNG/JPEG/WebP/GIF files, including extension-less files in those formats"
    )]
    UnsupportedExtension(String),
    #[error("the file content is not a supported image format; read_image accepts PNG/JPEG/WebP/GIF")]
    UnsupportedContent,
    #[error(
        "the {ext} extension declares {declared}, but the bytes use a different image format; rename the file to match its actual format if it is PNG/JPEG/WebP/GIF, or convert it to one of those formats"
    )]
    Mismatch { ext: String, declared: Format },
    #[error(
        "the file signature claims {0}, but the bytes decode as a different image format; the file may be corrupt"
    )]
    SignatureMismatch(Format),
    #[error(
        "the bytes do not decode as a supported PNG/JPEG/WebP/GIF image; the file may be truncated or corrupt"
    )]
    Undecodable,
    #[error(
        "the 16-bit PNG could not be converted to the normalized 8-bit sRGB form; convert it to an 8-bit PNG/JPEG/WebP and retry"
    )]
    Conversion16,
    #[error(
        "the file is {size} bytes, over the {limit}-byte limit for image sources; downscale or recompress it with another tool first"
    )]
    SourceTooLarge { size: u64, limit: u64 },
    #[error(
        "the image header declares {width}x{height} pixels, over the {cap}-pixel limit per side (maxImageDimension), so it was not decoded; downscale or crop it with another tool first"
    )]
    DimensionTooLarge { width: u32, height: u32, cap: u64 },
    #[error(
        "the image header declares {width}x{height} pixels ({total} in total), over the {cap}-pixel limit (maxImagePixels), so it was not decoded; downscale or crop it with another tool first"
    )]
    TooManyPixels { width: u32, height: u32, total: u64, cap: u64 },
    #[error("the image could not be reduced to the {0}-byte normalized budget")]
    OverBudget(usize),
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::UnsupportedExtension(_) | Refusal::UnsupportedContent => "IMAGE_UNSUPPORTED_FORMAT",
            Refusal::Mismatch { .. } | Refusal::SignatureMismatch(_) => "IMAGE_MISMATCH",
            Refusal::Undecodable => "IMAGE_DECODE_FAILED",
            Refusal::Conversion16 => "IMAGE_CONVERSION_FAILED",
            Refusal::SourceTooLarge { .. }
            | Refusal::DimensionTooLarge { .. }
            | Refusal::TooManyPixels { .. }
            | Refusal::OverBudget(_) => "IMAGE_TOO_LARGE",
        }
    }

    fn at(&self, path: &str) -> ToolError {
        ToolError::new(self.code(), format!("cannot read \"{path}\": {self}"))
    }
}

/// The extension's declaration; an extension outside the four is refused before any I/O.
pub fn declared(path: &str) -> Result<Declared, Refusal> {
    let Some(ext) = Path::new(path).extension() else { return Ok(Declared::Nothing) };
    let ext = ext.to_string_lossy();
    match Format::from_extension(&ext) {
        Some(format) => Ok(Declared::Extension { ext: format!(".{ext}"), format }),
        None => Err(Refusal::UnsupportedExtension(format!(".{ext}"))),
    }
}

/// Admission caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub max_pixels: u64,
    pub max_dimension: u64,
    pub budget_bytes: usize,
    pub long_edge: u32,
}

impl Default for Caps {
    fn default() -> Caps {
        Caps {
            max_pixels: DEFAULT_MAX_IMAGE_PIXELS,
            max_dimension: DEFAULT_MAX_IMAGE_DIMENSION,
            budget_bytes: BUDGET_BYTES,
            long_edge: MAX_LONG_EDGE,
        }
    }
}

/// A normalized image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    pub data: Vec<u8>,
    pub format: Format,
    pub width: u32,
    pub height: u32,
    pub source_format: Format,
    pub source_width: u32,
    pub source_height: u32,
    /// The source bytes were kept unchanged.
    pub original: bool,
    pub animated: bool,
    pub from_16_bit: bool,
}

/// Decides the format: the declared one, which the signature must prove, or the signature's.
fn admit(bytes: &[u8], declared: &Declared) -> Result<Format, Refusal> {
    let found = signature(bytes);
    match declared {
        Declared::Extension { ext, format } => match (found, claim(bytes)) {
            (Some(f), _) if f == *format => Ok(f),
            // The right format's opening, damaged further on: a corrupt file, not a misnamed one.
            (None, Some(c)) if c == *format => Err(Refusal::Undecodable),
            _ => Err(Refusal::Mismatch { ext: ext.clone(), declared: *format }),
        },
        Declared::Nothing => match (found, claim(bytes)) {
            (Some(f), _) => Ok(f),
            (None, Some(c)) => Err(Refusal::SignatureMismatch(c)),
            (None, None) => Err(Refusal::UnsupportedContent),
        },
    }
}

/// An opened source: a decoder boxed so the steps below are format-independent, and what the
/// container says beyond pixels.
struct Opened<'a> {
    decoder: Box<dyn ImageDecoder + 'a>,
    animated: bool,
    /// A form that may be passed on unchanged when it fits the budget.
    plain: bool,
}

fn opened<'a>(decoder: Box<dyn ImageDecoder + 'a>, animated: bool, plain: bool) -> Opened<'a> {
    Opened { decoder, animated, plain }
}

fn open(bytes: &[u8], format: Format) -> Result<Opened<'_>, Refusal> {
    let cursor = Cursor::new(bytes);
    let bad = |_| Refusal::Undecodable;
    Ok(match format {
        Format::Png => {
            let d = PngDecoder::new(cursor).map_err(bad)?;
            let animated = d.is_apng().map_err(bad)?;
            opened(Box::new(d), animated, true)
        }
        Format::Jpeg => {
            let markers = jpeg_markers(bytes);
            if !markers.complete {
                return Err(Refusal::Undecodable);
            }
            opened(Box::new(JpegDecoder::new(cursor).map_err(bad)?), false, markers.plain)
        }
        Format::WebP => {
            let d = WebPDecoder::new(cursor).map_err(bad)?;
            let animated = d.has_animation();
            opened(Box::new(d), animated, true)
        }
        // GIF is always re-encoded (see the table above).
        Format::Gif => opened(Box::new(GifDecoder::new(cursor).map_err(bad)?), gif_frames(bytes) > 1, false),
    })
}

/// Counts a GIF's image descriptors, up to two, by walking its blocks without decoding pixels
/// (only to say "first frame": every GIF is re-encoded anyway). A damaged stream counts what it
/// reached.
fn gif_frames(bytes: &[u8]) -> usize {
    let table = |flags: u8| if flags & 0x80 != 0 { 3usize << ((flags & 7) + 1) } else { 0 };
    let skip_blocks = |mut pos: usize| -> Option<usize> {
        loop {
            let n = usize::from(*bytes.get(pos)?);
            pos += 1 + n;
            if n == 0 {
                return Some(pos);
            }
        }
    };
    let Some(&flags) = bytes.get(10) else { return 0 };
    let mut pos = 13 + table(flags);
    let mut frames = 0;
    while frames < 2 {
        match bytes.get(pos) {
            Some(0x21) => match skip_blocks(pos + 2) {
                Some(next) => pos = next,
                None => break,
            },
            Some(0x2c) => {
                frames += 1;
                let Some(&flags) = bytes.get(pos + 9) else { break };
                match skip_blocks(pos + 10 + table(flags) + 1) {
                    Some(next) => pos = next,
                    None => break,
                }
            }
            _ => break,
        }
    }
    frames
}

/// What the markers of a JPEG say, read without decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct JpegMarkers {
    /// The scan data ends with the end-of-image marker.
    complete: bool,
    /// 8-bit samples in 1 or 3 components: what every consumer decodes. CMYK and 12-bit JPEGs are
    /// re-encoded rather than passed on.
    plain: bool,
}

/// Walks a JPEG's markers to the first start-of-scan (skipping segments such as an EXIF
/// thumbnail, which holds its own markers) and looks for an EOI after it. The JPEG decoder fills a
/// cut-off scan with grey instead of failing, and a truncated file kept as it is could be refused
/// by the model's API. Entropy-coded data cannot contain `FF D9` (a data `FF` is stuffed as
/// `FF 00`); trailers after EOI are allowed.
fn jpeg_markers(bytes: &[u8]) -> JpegMarkers {
    let mut plain = false;
    let mut pos = 2;
    let incomplete = |plain| JpegMarkers { complete: false, plain };
    loop {
        if bytes.get(pos) != Some(&0xff) {
            return incomplete(plain);
        }
        while bytes.get(pos) == Some(&0xff) {
            pos += 1;
        }
        let Some(&marker) = bytes.get(pos) else { return incomplete(plain) };
        pos += 1;
        match marker {
            0xda => {
                let complete = bytes[pos.min(bytes.len())..].windows(2).any(|w| w == [0xff, 0xd9]);
                return JpegMarkers { complete, plain };
            }
            0xd9 => return incomplete(plain),
            0x01 | 0xd0..=0xd7 => {}
            _ => {
                let (Some(&hi), Some(&lo)) = (bytes.get(pos), bytes.get(pos + 1)) else {
                    return incomplete(plain);
                };
                // Start of frame (not DHT C4, JPG C8, DAC CC): precision, height, width, components.
                if matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
                    plain = bytes.get(pos + 2) == Some(&8) && matches!(bytes.get(pos + 7), Some(1 | 3));
                }
                pos += usize::from(u16::from_be_bytes([hi, lo]));
            }
        }
    }
}

fn is_16_bit(color: ColorType) -> bool {
    matches!(color, ColorType::L16 | ColorType::La16 | ColorType::Rgb16 | ColorType::Rgba16)
}

/// Fits `(w, h)` within `long` on the longer side, keeping the aspect ratio (at least 1 px).
fn fit(w: u32, h: u32, long: u32) -> (u32, u32) {
    let edge = w.max(h);
    if edge <= long {
        return (w, h);
    }
    let scale = f64::from(long) / f64::from(edge);
    let side = |v: u32| ((f64::from(v) * scale).round() as u32).clamp(1, long);
    (side(w), side(h))
}

fn resized(image: &DynamicImage, w: u32, h: u32) -> DynamicImage {
    if (w, h) == (image.width(), image.height()) {
        return image.clone();
    }
    // Area averaging is fast and alias-free for large reductions; a filter does small ones.
    if image.width() >= w.saturating_mul(2) && image.height() >= h.saturating_mul(2) {
        image.thumbnail_exact(w, h)
    } else {
        image.resize_exact(w, h, FilterType::Triangle)
    }
}

fn encode(image: &DynamicImage, format: Format) -> Result<Vec<u8>, image::ImageError> {
    let mut out = Vec::new();
    match format {
        Format::Jpeg => {
            let encoder = JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY);
            match image.color() {
                ColorType::L8 | ColorType::Rgb8 => image.write_with_encoder(encoder)?,
                ColorType::La8 => DynamicImage::ImageLuma8(image.to_luma8()).write_with_encoder(encoder)?,
                _ => DynamicImage::ImageRgb8(image.to_rgb8()).write_with_encoder(encoder)?,
            }
        }
        _ => image.write_with_encoder(PngEncoder::new(&mut out))?,
    }
    Ok(out)
}

/// Brings 16-bit (and any other wide) samples to 8 bits, keeping the channel layout.
fn to_8_bit(image: DynamicImage) -> DynamicImage {
    match image.color() {
        ColorType::L8 | ColorType::La8 | ColorType::Rgb8 | ColorType::Rgba8 => image,
        ColorType::L16 => DynamicImage::ImageLuma8(image.to_luma8()),
        ColorType::La16 => DynamicImage::ImageLumaA8(image.to_luma_alpha8()),
        ColorType::Rgb16 | ColorType::Rgb32F => DynamicImage::ImageRgb8(image.to_rgb8()),
        _ => DynamicImage::ImageRgba8(image.to_rgba8()),
    }
}

/// Admits, checks and normalizes source bytes. Pure and CPU-bound: callers run it off the async
/// threads.
pub fn normalize(bytes: &[u8], declared: &Declared, caps: &Caps) -> Result<Normalized, Refusal> {
    let source_format = admit(bytes, declared)?;
    // Header only: the decoders read dimensions without allocating pixels.
    let Opened { mut decoder, animated, plain } = open(bytes, source_format)?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) > caps.max_dimension || u64::from(height) > caps.max_dimension {
        return Err(Refusal::DimensionTooLarge { width, height, cap: caps.max_dimension });
    }
    let total = u64::from(width) * u64::from(height);
    if total > caps.max_pixels {
        return Err(Refusal::TooManyPixels { width, height, total, cap: caps.max_pixels });
    }
    if width == 0 || height == 0 {
        return Err(Refusal::Undecodable);
    }
    let mut limits = Limits::default();
    let side = u32::try_from(caps.max_dimension).unwrap_or(u32::MAX);
    limits.max_image_width = Some(side);
    limits.max_image_height = Some(side);
    // The decoded buffer (at most 8 bytes a pixel) plus the decoders' own working memory.
    limits.max_alloc = Some(caps.max_pixels.saturating_mul(8).saturating_add(64 * 1024 * 1024));
    decoder.set_limits(limits).map_err(|_| Refusal::Undecodable)?;
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let source_16 = is_16_bit(decoder.color_type());
    let mut image = DynamicImage::from_decoder(decoder).map_err(|_| Refusal::Undecodable)?;
    image.apply_orientation(orientation);
    // The source as it is meant to be seen: a quarter turn swaps its sides.
    let (upright_w, upright_h) = (image.width(), image.height());

    let fits = width.max(height) <= caps.long_edge && bytes.len() <= caps.budget_bytes;
    let keep = fits && plain && !animated && !source_16 && orientation == Orientation::NoTransforms;
    let done = |data: Vec<u8>, format: Format, w: u32, h: u32, original: bool| Normalized {
        data,
        format,
        width: w,
        height: h,
        source_format,
        source_width: upright_w,
        source_height: upright_h,
        original,
        animated,
        from_16_bit: source_16,
    };
    if keep {
        return Ok(done(bytes.to_vec(), source_format, width, height, true));
    }
    let format = match source_format {
        Format::Png | Format::Gif => Format::Png,
        Format::Jpeg => Format::Jpeg,
        Format::WebP if image.color().has_alpha() => Format::Png,
        Format::WebP => Format::Jpeg,
    };
    let image = to_8_bit(image);
    // A failure on the 16-bit path is the seed's conversion failure; otherwise the bytes' fault.
    let failed = if source_16 { Refusal::Conversion16 } else { Refusal::Undecodable };
    let (mut w, mut h) = fit(image.width(), image.height(), caps.long_edge);
    for _ in 0..12 {
        let data = encode(&resized(&image, w, h), format).map_err(|_| failed.clone())?;
        if data.len() <= caps.budget_bytes {
            return Ok(done(data, format, w, h, false));
        }
        if w == 1 && h == 1 {
            break;
        }
        // Bytes scale roughly with area: shrink by the square root of the overshoot, and a bit.
        let scale = (caps.budget_bytes as f64 / data.len() as f64).sqrt() * 0.9;
        let shrink = |v: u32| ((f64::from(v) * scale).floor() as u32).clamp(1, v);
        (w, h) = (shrink(w), shrink(h));
    }
    Err(Refusal::OverBudget(caps.budget_bytes))
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
    if let Some(daemon_max) = session.hello.limits.as_ref().map(|l| l.max_read_bytes).filter(|&m| m > 0) {
        limit = limit.min(daemon_max);
    }

    let request =
        v1::ReadBytesRequest { context: session.context(), path: path.clone(), max_bytes: limit.max(1) };
    let reply = match session.client.read_bytes(request).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => {
            return Err(match WireError::from_status(&status) {
                Some(wire) if wire.code == ErrorCode::TooLarge => {
                    let size =
                        wire.get("size").and_then(|s| s.parse().ok()).unwrap_or(limit.saturating_add(1));
                    Refusal::SourceTooLarge { size, limit }.at(&path)
                }
                Some(wire) => {
                    if wire.code == ErrorCode::NotFound {
                        session.record_absent(&path, wire.get("target_key"));
                    }
                    ToolError::from_read_wire(&path, &wire)
                }
                None => ToolError::unavailable(&status),
            });
        }
    };
    let target = reply.target.unwrap_or_default();
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

    let display = target.display_path;
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

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageBuffer, Rgb, Rgba};

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = ImageBuffer::from_fn(w, h, |x, y| Rgba([(x % 256) as u8, (y % 256) as u8, 7, 255]));
        encode(&DynamicImage::ImageRgba8(img), Format::Png).unwrap()
    }

    fn ext(e: &str, format: Format) -> Declared {
        Declared::Extension { ext: e.to_owned(), format }
    }

    #[test]
    fn extensions_declare_and_signatures_decide() {
        assert_eq!(declared("/a/b.PNG"), Ok(ext(".PNG", Format::Png)));
        assert_eq!(declared("/a/b.jpeg"), Ok(ext(".jpeg", Format::Jpeg)));
        assert_eq!(declared("/a/b"), Ok(Declared::Nothing));
        assert_eq!(declared("/a/.hidden"), Ok(Declared::Nothing));
        assert_eq!(declared("/a/b.txt"), Err(Refusal::UnsupportedExtension(".txt".into())));
        let bytes = png(3, 2);
        assert_eq!(admit(&bytes, &Declared::Nothing), Ok(Format::Png));
        assert_eq!(
            admit(&bytes, &ext(".gif", Format::Gif)),
            Err(Refusal::Mismatch { ext: ".gif".into(), declared: Format::Gif })
        );
        assert_eq!(
            admit(b"\x89PNG\n\x1a\nxxxxxxxx", &Declared::Nothing),
            Err(Refusal::SignatureMismatch(Format::Png))
        );
        assert_eq!(admit(b"\x89PNG\n\x1a\nxxxxxxxx", &ext(".png", Format::Png)), Err(Refusal::Undecodable));
        assert_eq!(admit(b"hello", &Declared::Nothing), Err(Refusal::UnsupportedContent));
    }

    #[test]
    fn small_png_is_kept_and_large_one_downscaled() {
        let bytes = png(30, 20);
        let n = normalize(&bytes, &Declared::Nothing, &Caps::default()).unwrap();
        assert!(n.original);
        assert_eq!((n.width, n.height, n.data), (30, 20, bytes));
        let big = png(50, 10);
        let caps = Caps { long_edge: 20, ..Caps::default() };
        let n = normalize(&big, &Declared::Nothing, &caps).unwrap();
        assert_eq!((n.format, n.width, n.height, n.original), (Format::Png, 20, 4, false));
    }

    #[test]
    fn over_budget_bytes_shrink_until_they_fit() {
        // Noise does not compress: 200x200 RGB is ~120 KB as PNG.
        let mut seed = 1u32;
        let img = ImageBuffer::from_fn(200, 200, |_, _| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            Rgb([(seed >> 16) as u8, (seed >> 8) as u8, seed as u8])
        });
        let bytes = encode(&DynamicImage::ImageRgb8(img), Format::Png).unwrap();
        let caps = Caps { budget_bytes: 20_000, ..Caps::default() };
        let n = normalize(&bytes, &Declared::Nothing, &caps).unwrap();
        assert!(
            n.data.len() <= 20_000 && n.width < 200 && n.width == n.height,
            "{}x{} {}",
            n.width,
            n.height,
            n.data.len()
        );
    }

    #[test]
    fn header_caps_refuse_before_decoding() {
        let caps = Caps { max_dimension: 40, max_pixels: 1000, ..Caps::default() };
        assert_eq!(
            normalize(&png(41, 1), &Declared::Nothing, &caps),
            Err(Refusal::DimensionTooLarge { width: 41, height: 1, cap: 40 })
        );
        assert_eq!(
            normalize(&png(40, 26), &Declared::Nothing, &caps),
            Err(Refusal::TooManyPixels { width: 40, height: 26, total: 1040, cap: 1000 })
        );
    }

    #[test]
    fn jpeg_needs_its_end_marker_after_the_scan() {
        let jpeg =
            encode(&DynamicImage::ImageRgb8(ImageBuffer::from_pixel(8, 8, Rgb([9, 9, 9]))), Format::Jpeg)
                .unwrap();
        assert_eq!(jpeg_markers(&jpeg), JpegMarkers { complete: true, plain: true });
        // The same frame header claiming 4 components (CMYK) is not plain.
        let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
        let mut cmyk = jpeg.clone();
        cmyk[sof + 9] = 4;
        assert_eq!(jpeg_markers(&cmyk), JpegMarkers { complete: true, plain: false });
        assert!(!jpeg_markers(&jpeg[..jpeg.len() - 2]).complete);
        // An APP1 segment holding a whole thumbnail (with its own SOS and EOI) proves nothing
        // about the main image's scan.
        let thumb = [0xff, 0xd8, 0xff, 0xda, 0x00, 0x02, 0x11, 0xff, 0xd9];
        let mut with_thumb = vec![0xff, 0xd8, 0xff, 0xe1, 0x00, (thumb.len() + 2) as u8];
        with_thumb.extend_from_slice(&thumb);
        with_thumb.extend_from_slice(&jpeg[2..]);
        assert!(jpeg_markers(&with_thumb).complete);
        assert!(!jpeg_markers(&with_thumb[..with_thumb.len() - 2]).complete);
    }

    #[test]
    fn gif_frames_are_counted_without_decoding() {
        let frame = |c: u8| image::Frame::new(ImageBuffer::from_pixel(3, 2, Rgba([c, 0, 0, 255])));
        let mut two = Vec::new();
        image::codecs::gif::GifEncoder::new(&mut two).encode_frames(vec![frame(1), frame(200)]).unwrap();
        assert_eq!(gif_frames(&two), 2);
        let mut one = Vec::new();
        image::codecs::gif::GifEncoder::new(&mut one).encode_frames(vec![frame(1)]).unwrap();
        assert_eq!(gif_frames(&one), 1);
        assert_eq!(gif_frames(b"GIF89a"), 0);
    }

    #[test]
    fn refusals_render_the_seed_texts() {
        let at = |r: Refusal| r.at("/ws/x").text();
        assert_eq!(
            at(Refusal::Conversion16),
            "Error: cannot read \"/ws/x\": the 16-bit PNG could not be converted to the normalized 8-bit sRGB form; convert it to an 8-bit PNG/JPEG/WebP and retry"
        );
        assert_eq!(Refusal::Conversion16.code(), "IMAGE_CONVERSION_FAILED");
        assert_eq!(
            at(Refusal::SignatureMismatch(Format::WebP)),
            "Error: cannot read \"/ws/x\": the file signature claims WebP, but the bytes decode as a different image format; the file may be corrupt"
        );
        assert_eq!(
            at(Refusal::OverBudget(BUDGET_BYTES)),
            "Error: cannot read \"/ws/x\": the image could not be reduced to the 4194304-byte normalized budget"
        );
    }

    #[test]
    fn fit_keeps_aspect() {
        assert_eq!(fit(4000, 3000, 2000), (2000, 1500));
        assert_eq!(fit(10, 10, 2000), (10, 10));
        assert_eq!(fit(100_000, 1, 2000), (2000, 1));
    }
}
