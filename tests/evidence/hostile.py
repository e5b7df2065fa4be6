"""Photos and non-photos made in the test, hostile ones included."""

import io
import struct
import zlib

from PIL import Image

GPS = 0x8825


def jpeg_with_gps(size: tuple[int, int] = (320, 240), orientation: int = 6) -> bytes:
    """A JPEG whose EXIF holds a GPS position, a camera make and a rotation."""
    image = Image.new("RGB", size, (200, 30, 30))
    for x in range(size[0] // 2):  # a mark in the top-left quarter, to see the rotation
        for y in range(size[1] // 2):
            image.putpixel((x, y), (20, 20, 220))
    exif = Image.Exif()
    exif[0x010F] = "SecretCam"  # Make
    exif[0x0112] = orientation
    exif[GPS] = {1: "N", 2: (59.0, 54.0, 44.0), 3: "E", 4: (10.0, 45.0, 8.0)}
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif.tobytes(), quality=90)
    return out.getvalue()


def png(size: tuple[int, int] = (64, 48), mode: str = "RGBA") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, (0, 128, 0, 128) if mode == "RGBA" else (0, 128, 0)).save(out, "PNG")
    return out.getvalue()


def png_bomb(side: int = 20_000, colour: bool = False) -> bytes:
    """A PNG whose header claims ``side``×``side`` pixels (400 megapixels by default): a few
    hundred kilobytes that would unpack into more than a gigabyte. ``colour``: RGB rather
    than greyscale, three bytes a pixel (7,000 a side: 49 megapixels, 147 MB, in 150 KB)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", side, side, 8, 2 if colour else 0, 0, 0, 0)
    compressor = zlib.compressobj(9)
    row = b"\0" + b"\0" * (side * (3 if colour else 1))
    data = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


def animated_png(frames: int = 3) -> bytes:
    out = io.BytesIO()
    images = [Image.new("RGB", (32, 32), (i * 60, 0, 0)) for i in range(frames)]
    images[0].save(out, "PNG", save_all=True, append_images=images[1:])
    return out.getvalue()


def gif() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16)).save(out, "GIF")
    return out.getvalue()


SVG = (
    b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
    b"<script>alert(1)</script></svg>"
)
TEXT = b"Just some text, renamed photo.jpg\n" * 10
# A JPEG with HTML after its end marker: what we serve is our own encoding, without it.
POLYGLOT_TAIL = b"<html><script>alert(document.cookie)</script></html>"


def jpeg_with_metadata() -> bytes:
    """A JPEG that carries every kind of metadata a camera or an editor writes: a comment (a COM
    segment), EXIF, XMP and an ICC profile."""
    from PIL import ImageCms

    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    exif = Image.Exif()
    exif[0x010F] = "SecretCam"
    out = io.BytesIO()
    Image.new("RGB", (120, 80), (90, 140, 200)).save(
        out,
        "JPEG",
        comment=b"Secret comment: taken at Storgata 1",
        exif=exif.tobytes(),
        xmp=b'<x:xmpmeta xmlns:x="adobe:ns:meta/">SecretXMP</x:xmpmeta>',
        icc_profile=icc,
    )
    return out.getvalue()


def jpeg_segments(data: bytes) -> list[int]:
    """The markers of a JPEG's segments before its image data (0xFFE0 APP0 ... 0xFFFE COM)."""
    assert data[:2] == b"\xff\xd8"
    markers, at = [], 2
    while at < len(data):
        assert data[at] == 0xFF, f"no marker at {at}"
        marker = 0xFF00 | data[at + 1]
        markers.append(marker)
        if marker == 0xFFDA:  # start of scan: the compressed image data follows
            break
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        at += 2 + length
    return markers
