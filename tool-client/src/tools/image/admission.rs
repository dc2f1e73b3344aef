//! read_image admission: the four formats, what a path's extension declares, the signatures that
//! prove a format, and the refusals (rendered after `cannot read "<path>": `).

use std::path::Path;

use crate::failure::ToolError;

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

    pub(super) fn at(&self, path: &str) -> ToolError {
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

/// Decides the format: the declared one, which the signature must prove, or the signature's.
pub(super) fn admit(bytes: &[u8], declared: &Declared) -> Result<Format, Refusal> {
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
