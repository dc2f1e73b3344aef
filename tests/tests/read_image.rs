//! read_image through the real daemon: each format, extension-less files and attachment object
//! paths, wrong extensions, truncated and damaged files, a 16-bit PNG, an animation, a
//! decompression-bomb header, images over the budget, the source byte cap, a text-only route, a
//! FIFO, visibility, and the content-addressed store. Every image is generated here.

use crate::common;

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use image::codecs::gif::GifEncoder;
use image::{DynamicImage, Frame, ImageBuffer, ImageFormat, Rgb, Rgba};
use serde_json::{Value, json};

fn config(store: &Path) -> String {
    format!("attachmentStore = \"{}\"\nimageInput = true\nmodel = \"vision-1\"\n", store.display())
}

fn encode(image: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn rgba(w: u32, h: u32) -> DynamicImage {
    DynamicImage::ImageRgba8(ImageBuffer::from_fn(w, h, |x, y| {
        Rgba([(x * 255 / w.max(1)) as u8, (y * 255 / h.max(1)) as u8, 90, 200])
    }))
}

fn rgb(w: u32, h: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(ImageBuffer::from_fn(w, h, |x, y| {
        Rgb([(x * 255 / w.max(1)) as u8, (y * 255 / h.max(1)) as u8, 90])
    }))
}

/// Pseudo-random pixels: they do not compress.
fn noise(w: u32, h: u32) -> DynamicImage {
    let mut seed = 0x1234_5678u32;
    DynamicImage::ImageRgb8(ImageBuffer::from_fn(w, h, |_, _| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        Rgb([(seed >> 24) as u8, (seed >> 16) as u8, (seed >> 8) as u8])
    }))
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A valid small PNG whose header claims `w`x`h` (the IHDR and its CRC rewritten).
fn bomb(w: u32, h: u32) -> Vec<u8> {
    let mut png = encode(&rgb(1, 1), ImageFormat::Png);
    png[16..20].copy_from_slice(&w.to_be_bytes());
    png[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&png[12..29]);
    png[29..33].copy_from_slice(&crc.to_be_bytes());
    png
}

fn envelope(p: &Path, line: &str) -> String {
    format!("<path>{}</path>\n<type>image</type>\n<content>\n{line}\n</content>", p.display())
}

fn read_image(s: &mut ToolSession, p: &Path) -> Reply {
    s.call("read_image", json!({"file_path": p.display().to_string()}))
}

/// The image block of a success: its media type and bytes.
fn block(reply: &Reply) -> (String, Vec<u8>) {
    let content = reply.json["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "text then image: {}", reply.json);
    assert_eq!(content[0]["type"], json!("text"));
    assert_eq!(content[1]["type"], json!("image"));
    let data =
        base64::engine::general_purpose::STANDARD.decode(content[1]["data"].as_str().unwrap()).unwrap();
    (content[1]["mime_type"].as_str().unwrap().to_owned(), data)
}

/// Checks a success: the exact envelope, the block, and the stored object behind the reference.
#[track_caller]
fn check_ok(reply: &Reply, p: &Path, line: &str, mime: &str) -> Vec<u8> {
    assert!(!reply.is_error(), "expected success, got {}", reply.json);
    assert_eq!(reply.text(), envelope(p, line));
    let (got_mime, data) = block(reply);
    assert_eq!(got_mime, mime);
    let meta = reply.meta();
    assert_eq!(meta["mediaType"], json!(mime));
    assert_eq!(meta["bytes"], json!(data.len()));
    let reference = meta["attachment"]["ref"].as_str().unwrap();
    let object = PathBuf::from(meta["attachment"]["path"].as_str().unwrap());
    assert_eq!(reference.strip_prefix("sha256:"), object.file_name().and_then(|n| n.to_str()));
    assert_eq!(std::fs::read(&object).unwrap(), data, "the store keeps exactly the block's bytes");
    data
}

#[track_caller]
fn check_err(reply: &Reply, code: &str, message: &str) {
    assert!(reply.is_error(), "expected an error, got {}", reply.json);
    assert_eq!(reply.code(), Some(code), "{}", reply.json);
    assert_eq!(reply.text(), format!("Error: {message}"));
}

#[test]
fn each_format_and_extension_less_files() {
    let d = Daemon::start();
    let store = d.root.join(".attachments");
    let png = encode(&rgba(4, 3), ImageFormat::Png);
    let jpeg = encode(&rgb(4, 3), ImageFormat::Jpeg);
    let webp = encode(&rgba(4, 3), ImageFormat::WebP);
    let gif = encode(&rgba(4, 3), ImageFormat::Gif);
    d.write("a.png", &png);
    d.write("b.JPG", &jpeg);
    d.write("b2.jpeg", &jpeg);
    d.write("c.webp", &webp);
    d.write("d.gif", &gif);
    d.write("png-noext", &png);
    d.write("jpeg-noext", &jpeg);
    d.write("webp-noext", &webp);
    d.write("gif-noext", &gif);
    let mut s = d.session_with_config(&config(&store));

    // Within the budget, PNG, JPEG and WebP keep their bytes; GIF becomes PNG.
    let line = |mime: &str, n: usize| format!("{mime}, 4x3 pixels, {n} bytes");
    for (rel, mime, bytes) in [
        ("a.png", "image/png", &png),
        ("b.JPG", "image/jpeg", &jpeg),
        ("b2.jpeg", "image/jpeg", &jpeg),
        ("c.webp", "image/webp", &webp),
        ("png-noext", "image/png", &png),
        ("jpeg-noext", "image/jpeg", &jpeg),
        ("webp-noext", "image/webp", &webp),
    ] {
        let p = d.path(rel);
        let reply = read_image(&mut s, &p);
        let data = check_ok(&reply, &p, &line(mime, bytes.len()), mime);
        assert_eq!(&data, bytes, "{rel} is kept as it was");
        assert_eq!(reply.meta()["source"]["unchanged"], json!(true));
    }
    for rel in ["d.gif", "gif-noext"] {
        let p = d.path(rel);
        let reply = read_image(&mut s, &p);
        let n = reply.meta()["bytes"].as_u64().unwrap() as usize;
        let data = check_ok(
            &reply,
            &p,
            &format!("image/png, 4x3 pixels, {n} bytes (converted from image/gif)"),
            "image/png",
        );
        let decoded = image::load_from_memory(&data).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (4, 3));
    }

    // A stored attachment object has no extension and is read back by its signature; the same
    // bytes are the same object.
    let first = read_image(&mut s, &d.path("a.png"));
    let object = PathBuf::from(first.meta()["attachment"]["path"].as_str().unwrap());
    assert!(object.starts_with(&store) && object.extension().is_none());
    let again = read_image(&mut s, &object);
    check_ok(&again, &object, &line("image/png", png.len()), "image/png");
    assert_eq!(
        again.meta()["attachment"],
        json!({"ref": first.meta()["attachment"]["ref"], "path": first.meta()["attachment"]["path"], "created": false})
    );
}

#[test]
fn extension_and_signature_must_agree() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    let png = encode(&rgba(4, 3), ImageFormat::Png);
    d.write("png-as.gif", &png);
    d.write("text.png", "hello, not an image\n");
    d.write("notes.txt", &png);
    d.write("pic.bmp", "BM");
    d.write("text-noext", "hello\n");
    // A PNG signature whose CRLF was rewritten to LF, as a text transfer does.
    let mut mangled = png.clone();
    mangled.remove(4);
    d.write("mangled", &mangled);
    d.write("mangled.png", &mangled);
    let mut s = d.session_with_config(&config(&store));
    let p = |rel: &str| d.path(rel).display().to_string();
    let rename = "rename the file to match its actual format if it is PNG/JPEG/WebP/GIF, or convert it to one of those formats";
    let cases = [
        (
            "png-as.gif",
            "IMAGE_MISMATCH",
            format!(
                "cannot read \"{}\": the .gif extension declares GIF, but the bytes use a different image format; {rename}",
                p("png-as.gif")
            ),
        ),
        (
            "text.png",
            "IMAGE_MISMATCH",
            format!(
                "cannot read \"{}\": the .png extension declares PNG, but the bytes use a different image format; {rename}",
                p("text.png")
            ),
        ),
        (
            "notes.txt",
            "IMAGE_UNSUPPORTED_FORMAT",
            format!(
                "cannot read \"{}\": the .txt extension does not declare a supported image format; read_image accepts PNG/JPEG/WebP/GIF files, including extension-less files in those formats",
                p("notes.txt")
            ),
        ),
        (
            "pic.bmp",
            "IMAGE_UNSUPPORTED_FORMAT",
            format!(
                "cannot read \"{}\": the .bmp extension does not declare a supported image format; read_image accepts PNG/JPEG/WebP/GIF files, including extension-less files in those formats",
                p("pic.bmp")
            ),
        ),
        (
            "text-noext",
            "IMAGE_UNSUPPORTED_FORMAT",
            format!(
                "cannot read \"{}\": the file content is not a supported image format; read_image accepts PNG/JPEG/WebP/GIF",
                p("text-noext")
            ),
        ),
        (
            "mangled",
            "IMAGE_MISMATCH",
            format!(
                "cannot read \"{}\": the file signature claims PNG, but the bytes decode as a different image format; the file may be corrupt",
                p("mangled")
            ),
        ),
        (
            "mangled.png",
            "IMAGE_DECODE_FAILED",
            format!(
                "cannot read \"{}\": the bytes do not decode as a supported PNG/JPEG/WebP/GIF image; the file may be truncated or corrupt",
                p("mangled.png")
            ),
        ),
        ("missing.png", "FS_NOT_FOUND", format!("cannot read \"{}\": not found", p("missing.png"))),
    ];
    for (rel, code, message) in cases {
        check_err(&read_image(&mut s, &d.path(rel)), code, &message);
    }
}

#[test]
fn truncated_files_do_not_decode() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    let image = noise(64, 48);
    let mut s = d.session_with_config(&config(&store));
    for (rel, format) in
        [("t.png", ImageFormat::Png), ("t.gif", ImageFormat::Gif), ("t.webp", ImageFormat::WebP)]
    {
        let bytes = encode(&image, format);
        d.write(rel, &bytes[..bytes.len() / 2]);
        let p = d.path(rel);
        check_err(
            &read_image(&mut s, &p),
            "IMAGE_DECODE_FAILED",
            &format!(
                "cannot read \"{}\": the bytes do not decode as a supported PNG/JPEG/WebP/GIF image; the file may be truncated or corrupt",
                p.display()
            ),
        );
    }
    // JPEGs cut inside the headers, inside the scan (which the decoder alone would fill with
    // grey), and just before the end-of-image marker.
    let jpeg = encode(&image, ImageFormat::Jpeg);
    for cut in [40, jpeg.len() / 2, jpeg.len() - 2] {
        d.write("t.jpg", &jpeg[..cut]);
        let p = d.path("t.jpg");
        check_err(
            &read_image(&mut s, &p),
            "IMAGE_DECODE_FAILED",
            &format!(
                "cannot read \"{}\": the bytes do not decode as a supported PNG/JPEG/WebP/GIF image; the file may be truncated or corrupt",
                p.display()
            ),
        );
    }
    // Bytes after the end-of-image marker (camera trailers) are fine.
    let mut trailer = jpeg.clone();
    trailer.extend_from_slice(b"SEFT trailer");
    d.write("trailer.jpg", &trailer);
    let reply = read_image(&mut s, &d.path("trailer.jpg"));
    assert!(!reply.is_error(), "{}", reply.json);
}

#[test]
fn sixteen_bit_png_and_animation_first_frame() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    let deep = DynamicImage::ImageRgb16(ImageBuffer::from_fn(5, 4, |x, y| {
        Rgb([x as u16 * 13000, y as u16 * 20000, 65535])
    }));
    d.write("deep.png", encode(&deep, ImageFormat::Png));
    let mut anim = Vec::new();
    {
        let mut encoder = GifEncoder::new(&mut anim);
        let red = ImageBuffer::from_pixel(6, 2, Rgba([255u8, 0, 0, 255]));
        let blue = ImageBuffer::from_pixel(6, 2, Rgba([0u8, 0, 255, 255]));
        encoder.encode_frames(vec![Frame::new(red), Frame::new(blue)]).unwrap();
    }
    d.write("anim.gif", &anim);
    let mut s = d.session_with_config(&config(&store));

    let p = d.path("deep.png");
    let reply = read_image(&mut s, &p);
    let n = reply.meta()["bytes"].as_u64().unwrap();
    let data = check_ok(
        &reply,
        &p,
        &format!("image/png, 5x4 pixels, {n} bytes (converted from 16 bits per channel)"),
        "image/png",
    );
    let decoded = image::load_from_memory(&data).unwrap();
    assert_eq!(decoded.color(), image::ColorType::Rgb8);
    assert_eq!(decoded.to_rgb8(), deep.to_rgb8(), "the same pixels at 8 bits");

    let p = d.path("anim.gif");
    let reply = read_image(&mut s, &p);
    let n = reply.meta()["bytes"].as_u64().unwrap();
    let data = check_ok(
        &reply,
        &p,
        &format!("image/png, 6x2 pixels, {n} bytes (converted from image/gif; first frame)"),
        "image/png",
    );
    let decoded = image::load_from_memory(&data).unwrap().to_rgba8();
    assert_eq!(decoded.get_pixel(0, 0), &Rgba([255, 0, 0, 255]), "the first frame");
}

#[test]
fn header_dimensions_are_checked_before_decoding() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    let bytes = bomb(20000, 20000);
    assert!(bytes.len() < 100, "a small file with a huge header");
    d.write("bomb.png", &bytes);
    d.write("bomb-noext", &bytes);
    let p = d.path("bomb.png");
    let mut s = d.session_with_config(&config(&store));
    let started = Instant::now();
    check_err(
        &read_image(&mut s, &p),
        "IMAGE_TOO_LARGE",
        &format!(
            "cannot read \"{}\": the image header declares 20000x20000 pixels, over the 16384-pixel limit per side (maxImageDimension), so it was not decoded; downscale or crop it with another tool first",
            p.display()
        ),
    );
    // With the side cap raised, the pixel cap refuses it.
    let mut s = d.session_with_config(&format!("{}maxImageDimension = 30000\n", config(&store)));
    let p = d.path("bomb-noext");
    check_err(
        &read_image(&mut s, &p),
        "IMAGE_TOO_LARGE",
        &format!(
            "cannot read \"{}\": the image header declares 20000x20000 pixels (400000000 in total), over the 50000000-pixel limit (maxImagePixels), so it was not decoded; downscale or crop it with another tool first",
            p.display()
        ),
    );
    // Refused from the header: a 1.6 GB decode would take far longer than this.
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    // Configured caps apply the same way.
    d.write("small.png", encode(&rgb(30, 30), ImageFormat::Png));
    let mut s = d.session_with_config(&format!("{}maxImagePixels = 800\n", config(&store)));
    let p = d.path("small.png");
    check_err(
        &read_image(&mut s, &p),
        "IMAGE_TOO_LARGE",
        &format!(
            "cannot read \"{}\": the image header declares 30x30 pixels (900 in total), over the 800-pixel limit (maxImagePixels), so it was not decoded; downscale or crop it with another tool first",
            p.display()
        ),
    );
}

#[test]
fn images_over_the_budget_are_downscaled() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    d.write("wide.png", encode(&rgb(2400, 1200), ImageFormat::Png));
    d.write("wide.jpg", encode(&rgb(2400, 600), ImageFormat::Jpeg));
    // Noise: over 4 MiB as PNG while its long edge is within 2000 px.
    let heavy = encode(&noise(1200, 1200), ImageFormat::Png);
    assert!(heavy.len() > 4 * 1024 * 1024, "{}", heavy.len());
    d.write("heavy.png", &heavy);
    let mut s = d.session_with_config(&config(&store));

    for (rel, mime, w, h, from) in [
        ("wide.png", "image/png", 2000, 1000, "2400x1200"),
        ("wide.jpg", "image/jpeg", 2000, 500, "2400x600"),
    ] {
        let p = d.path(rel);
        let reply = read_image(&mut s, &p);
        let n = reply.meta()["bytes"].as_u64().unwrap();
        let data = check_ok(
            &reply,
            &p,
            &format!("{mime}, {w}x{h} pixels, {n} bytes (downscaled from {from})"),
            mime,
        );
        let decoded = image::load_from_memory(&data).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (w, h));
    }

    let p = d.path("heavy.png");
    let reply = read_image(&mut s, &p);
    let meta = reply.meta();
    let (w, h, n) =
        (meta["width"].as_u64().unwrap(), meta["height"].as_u64().unwrap(), meta["bytes"].as_u64().unwrap());
    let data = check_ok(
        &reply,
        &p,
        &format!("image/png, {w}x{h} pixels, {n} bytes (downscaled from 1200x1200)"),
        "image/png",
    );
    assert!(data.len() <= 4 * 1024 * 1024 && w < 1200 && w == h, "{w}x{h}, {} bytes", data.len());
    let decoded = image::load_from_memory(&data).unwrap();
    assert_eq!((u64::from(decoded.width()), u64::from(decoded.height())), (w, h));
}

#[test]
fn source_byte_cap() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    let bytes = encode(&noise(30, 30), ImageFormat::Png);
    d.write("n.png", &bytes);
    let mut s = d.session_with_config(&format!("{}maxImageBytes = 1000\n", config(&store)));
    let p = d.path("n.png");
    check_err(
        &read_image(&mut s, &p),
        "IMAGE_TOO_LARGE",
        &format!(
            "cannot read \"{}\": the file is {} bytes, over the 1000-byte limit for image sources; downscale or recompress it with another tool first",
            p.display(),
            bytes.len()
        ),
    );
}

#[test]
fn text_only_routes_fifos_and_visibility() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    d.write("a.png", encode(&rgba(4, 3), ImageFormat::Png));
    let p = d.path("a.png");
    let store_line = format!("attachmentStore = \"{}\"\n", store.display());
    let gate = |model: &str| {
        format!(
            "cannot read \"{}\" as an image: model \"{model}\" does not declare image input; switch to an image-capable model to read images",
            p.display()
        )
    };
    // Registered (the schema is route-independent) but refused at execution, before any read.
    let mut s = d.session_with_config(&format!("{store_line}model = \"text-1\"\n"));
    check_err(&read_image(&mut s, &p), "IMAGE_INPUT_UNSUPPORTED", &gate("text-1"));
    let mut s = d.session_with_config(&store_line);
    check_err(&read_image(&mut s, &p), "IMAGE_INPUT_UNSUPPORTED", &gate("unknown"));
    assert!(!store.exists(), "nothing was stored");

    // A FIFO named like an image is refused by type, without blocking.
    mkfifo(&d.path("x.png"));
    let mut s = d.session_with_config(&config(&store));
    let started = Instant::now();
    let fifo = d.path("x.png");
    check_err(
        &read_image(&mut s, &fifo),
        "FS_NOT_REGULAR_FILE",
        &format!("cannot read \"{}\": not a regular file", fifo.display()),
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    // Without a store the tool is not offered at all.
    let mut plain = d.session_with_config("imageInput = true\n");
    assert_eq!(read_image(&mut plain, &p).code(), Some("UNKNOWN_TOOL"));
    let mut off = d.session_with_config(&format!("{}readImage = false\n", config(&store)));
    assert_eq!(read_image(&mut off, &p).code(), Some("UNKNOWN_TOOL"));
    let dir = tempfile::tempdir().unwrap();
    let names = |config: &str| -> Vec<String> {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, config).unwrap();
        let out = std::process::Command::new(tools_bin())
            .arg("schemas")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        let schemas: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        schemas.iter().map(|s| s["name"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(names("imageInput = true\n"), ["read", "write", "edit"]);
    assert_eq!(names(&store_line), ["read", "read_image", "write", "edit"]);
}

#[test]
fn the_store_dedups_and_survives_restarts() {
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    let png = encode(&rgba(8, 8), ImageFormat::Png);
    d.write("one.png", &png);
    d.write("copy.png", &png);
    let first = {
        let mut s = d.session_with_config(&config(&store));
        let reply = read_image(&mut s, &d.path("one.png"));
        assert_eq!(reply.meta()["attachment"]["created"], json!(true));
        reply.meta()["attachment"].clone()
    };
    // A new client process over the same store: same reference, same object, nothing new written.
    let mut s = d.session_with_config(&config(&store));
    let reply = read_image(&mut s, &d.path("copy.png"));
    assert_eq!(reply.meta()["attachment"]["ref"], first["ref"]);
    assert_eq!(reply.meta()["attachment"]["path"], first["path"]);
    assert_eq!(reply.meta()["attachment"]["created"], json!(false));
    let objects: Vec<_> = walk(&store.join("objects"));
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert_eq!(std::fs::read(&objects[0]).unwrap(), png);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn exif_orientation_is_applied() {
    use image::ImageEncoder;
    let d = Daemon::start();
    let store = d.dir.path().join("store");
    // A 4x2 JPEG whose EXIF says "rotate 90° clockwise to view" (orientation 6).
    let tiff: Vec<u8> =
        [&b"MM\0\x2a\0\0\0\x08"[..], &[0, 1], &[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0], &[0, 0, 0, 0]]
            .concat();
    let mut jpeg = Vec::new();
    let mut encoder = image::codecs::jpeg::JpegEncoder::new(&mut jpeg);
    encoder.set_exif_metadata(tiff).unwrap();
    encoder.write_image(rgb(4, 2).as_bytes(), 4, 2, image::ExtendedColorType::Rgb8).unwrap();
    d.write("turned.jpg", &jpeg);
    let mut s = d.session_with_config(&config(&store));
    let p = d.path("turned.jpg");
    let reply = read_image(&mut s, &p);
    let n = reply.meta()["bytes"].as_u64().unwrap();
    // Re-encoded upright (the output carries no orientation to apply twice).
    let data = check_ok(&reply, &p, &format!("image/jpeg, 2x4 pixels, {n} bytes"), "image/jpeg");
    let decoded = image::load_from_memory(&data).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (2, 4));
    assert_eq!(reply.meta()["source"]["unchanged"], json!(false));
}
