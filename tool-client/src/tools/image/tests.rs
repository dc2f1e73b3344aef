//! read_image's pure steps: admission, header checks and normalization, table-driven.

use super::admission::*;
use super::normalize::*;
use super::*;
use image::{DynamicImage, ImageBuffer, Rgb, Rgba};

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
    let jpeg = encode(&DynamicImage::ImageRgb8(ImageBuffer::from_pixel(8, 8, Rgb([9, 9, 9]))), Format::Jpeg)
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
