//! read_image normalization: header dimensions checked before any decoding, then the original
//! bytes kept or re-encoded to the budget (the table in the module above). Pure and CPU-bound.

use std::io::Cursor;

use image::codecs::gif::GifDecoder;
use image::codecs::jpeg::{JpegDecoder, JpegEncoder};
use image::codecs::png::{PngDecoder, PngEncoder};
use image::codecs::webp::WebPDecoder;
use image::imageops::FilterType;
use image::metadata::Orientation;
use image::{ColorType, DynamicImage, ImageDecoder, Limits};

use super::admission::{Declared, Format, Refusal, admit};
use super::{
    BUDGET_BYTES, DEFAULT_MAX_IMAGE_DIMENSION, DEFAULT_MAX_IMAGE_PIXELS, JPEG_QUALITY, MAX_LONG_EDGE,
};

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

fn open<'a>(bytes: &'a [u8], format: Format, limits: &Limits) -> Result<Opened<'a>, Refusal> {
    let cursor = Cursor::new(bytes);
    let bad = |_| Refusal::Undecodable;
    Ok(match format {
        Format::Png => {
            // The limits go in with the bytes: the PNG decoder inflates what it reads before the
            // first IDAT as it opens, and `set_limits` afterwards would not reach its buffers.
            match without_inflated_extras(bytes) {
                None => open_png(cursor, limits)?,
                Some(kept) => open_png(Cursor::new(kept), limits)?,
            }
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

/// PNG chunks whose data is deflated and which normalization never uses: the ICC profile, which
/// the decoder would inflate whole as it opens (a 500 KiB chunk can inflate to 512 MiB), and
/// compressed text.
const INFLATED_EXTRAS: [&[u8; 4]; 3] = [b"iCCP", b"zTXt", b"iTXt"];

/// The PNG chunks in order, each as (type, whole chunk with length and CRC); a chunk cut off by
/// the end of the bytes is the last, as it is.
fn png_chunks(bytes: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut pos = 8usize.min(bytes.len());
    std::iter::from_fn(move || {
        let rest = bytes.get(pos..).filter(|r| !r.is_empty())?;
        let len = rest.get(..4).map_or(0, |l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize);
        let kind = rest.get(4..8).unwrap_or(&[]);
        let end = len.saturating_add(12).min(rest.len());
        pos += end;
        Some((kind, &rest[..end]))
    })
}

/// The PNG without [`INFLATED_EXTRAS`], when it has any (the decoder then never sees them).
fn without_inflated_extras(bytes: &[u8]) -> Option<Vec<u8>> {
    let extra = |kind: &[u8]| INFLATED_EXTRAS.iter().any(|k| k.as_slice() == kind);
    if !png_chunks(bytes).any(|(kind, _)| extra(kind)) {
        return None;
    }
    let mut kept = bytes[..8.min(bytes.len())].to_vec();
    for (kind, chunk) in png_chunks(bytes) {
        if !extra(kind) {
            kept.extend_from_slice(chunk);
        }
    }
    Some(kept)
}

fn open_png<'a, R: std::io::BufRead + std::io::Seek + 'a>(
    source: R,
    limits: &Limits,
) -> Result<Opened<'a>, Refusal> {
    let d = PngDecoder::with_limits(source, limits.clone()).map_err(|_| Refusal::Undecodable)?;
    let animated = d.is_apng().map_err(|_| Refusal::Undecodable)?;
    Ok(opened(Box::new(d), animated, true))
}

/// Counts a GIF's image descriptors, up to two, by walking its blocks without decoding pixels
/// (only to say "first frame": every GIF is re-encoded anyway). A damaged stream counts what it
/// reached.
pub(super) fn gif_frames(bytes: &[u8]) -> usize {
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
pub(super) struct JpegMarkers {
    /// The scan data ends with the end-of-image marker.
    pub(super) complete: bool,
    /// 8-bit samples in 1 or 3 components: what every consumer decodes. CMYK and 12-bit JPEGs are
    /// re-encoded rather than passed on.
    pub(super) plain: bool,
}

/// Walks a JPEG's markers to the first start-of-scan (skipping segments such as an EXIF
/// thumbnail, which holds its own markers) and looks for an EOI after it. The JPEG decoder fills a
/// cut-off scan with grey instead of failing, and a truncated file kept as it is could be refused
/// by the model's API. Entropy-coded data cannot contain `FF D9` (a data `FF` is stuffed as
/// `FF 00`); trailers after EOI are allowed.
pub(super) fn jpeg_markers(bytes: &[u8]) -> JpegMarkers {
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
pub(super) fn fit(w: u32, h: u32, long: u32) -> (u32, u32) {
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

pub(super) fn encode(image: &DynamicImage, format: Format) -> Result<Vec<u8>, image::ImageError> {
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
    let mut limits = Limits::default();
    // The decoded buffer (at most 8 bytes a pixel) plus the decoders' own working memory, from
    // the first byte a decoder reads; the dimensions are judged below, with their own refusals.
    limits.max_alloc = Some(caps.max_pixels.saturating_mul(8).saturating_add(64 * 1024 * 1024));
    // Header only: the decoders read dimensions without allocating pixels.
    let Opened { mut decoder, animated, plain } = open(bytes, source_format, &limits)?;
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
    let side = u32::try_from(caps.max_dimension).unwrap_or(u32::MAX);
    limits.max_image_width = Some(side);
    limits.max_image_height = Some(side);
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
