"""A photo a party uploads, checked and re-encoded before anything keeps it.

Whatever was uploaded, what we keep and serve is a JPEG we wrote ourselves from the decoded
pixels: EXIF (with any GPS position), ICC and XMP metadata, comments and trailing bytes are
gone, and a file that only claims to be an image (a text renamed ``.jpg``, an SVG, a truncated
or polyglot file) is refused because it does not decode. The size is bounded before decoding
(bytes, then pixels from the header alone), so a small file that would unpack into gigabytes
(a decompression bomb) is refused without being unpacked. CPU-bound: ``Decoder`` runs it off
the event loop, a bounded number at a time, so the memory decoding takes is bounded too
(``DEALBROKER_EVIDENCE_CONCURRENT_DECODES`` times what one photo of
``DEALBROKER_EVIDENCE_PHOTO_MAX_PIXELS`` takes).
"""

import asyncio
import hashlib
import io
from dataclasses import dataclass

from PIL import Image, ImageOps
from starlette.concurrency import run_in_threadpool

from dealbroker.core.errors import FieldError
from dealbroker.core.i18n import _

# At most this many bytes per photo as uploaded (and as kept).
MAX_PHOTO_BYTES = 10 * 1024 * 1024
# At most this many pixels in an uploaded photo (a 50-megapixel camera's); larger is refused
# from the header alone, before decoding. ``DEALBROKER_EVIDENCE_PHOTO_MAX_PIXELS`` may lower it.
# Pillow's own guard is set to the same bound, so any image it opens elsewhere in the process
# is refused past twice that.
MAX_PIXELS = 50_000_000
Image.MAX_IMAGE_PIXELS = MAX_PIXELS
# The longest side of the photo we keep: enough to see a scratch, and a bounded size.
MAX_SIDE = 4096
# What we decode: the formats phones and cameras send. Others (GIF, SVG, TIFF, BMP, PSD...)
# are refused, as is anything animated.
FORMATS = ("JPEG", "PNG", "WEBP")  # a JPEG opens as MPO when it holds several pictures
CONTENT_TYPE = "image/jpeg"
FIELD = "photo"
# Modes Pillow scales as they are: a photo in one of them is scaled down before anything else
# copies its pixels (a palette or 16-bit image is converted first, at its full size).
SCALABLE = frozenset({"RGB", "RGBA", "L", "LA", "CMYK"})


class PhotoRefused(FieldError):
    """A photo refused for what it is; ``reason`` names why, for the refusal metric."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(FIELD, detail)
        self.reason = reason


@dataclass(frozen=True)
class Photo:
    """A photo as we keep it: JPEG bytes of our own making and what we know of them."""

    data: bytes
    width: int
    height: int
    sha256: str

    @property
    def content_type(self) -> str:
        return CONTENT_TYPE


def _not_an_image() -> PhotoRefused:
    return PhotoRefused(
        "not_an_image",
        _("This file is not a photo we can read. Send a JPEG, PNG or WebP photo (at most 10 MB)."),
    )


def _too_many_pixels(max_pixels: int) -> PhotoRefused:
    return PhotoRefused(
        "too_many_pixels",
        _("This photo is too large (at most %(max)s megapixels). Send a smaller one.")
        % {"max": max_pixels // 1_000_000},
    )


def too_large() -> PhotoRefused:
    return PhotoRefused(
        "too_large", _("This photo is too large (at most 10 MB). Send a smaller one.")
    )


def _checked_header(image: Image.Image, max_pixels: int) -> int:
    """The pixels ``image`` would decode into, read from its header alone; refused if it is an
    animation, or holds more than ``max_pixels``."""
    width, height = image.size
    if width < 1 or height < 1:
        raise _not_an_image()
    if width * height > max_pixels:
        raise _too_many_pixels(max_pixels)
    if image.format != "MPO" and getattr(image, "n_frames", 1) != 1:
        raise _not_an_image()  # animated: a photo has one picture
    return width * height


def _refused_as_photo(exc: Exception, max_pixels: int) -> PhotoRefused:
    """What a failure to open or decode hostile input is: always a refusal, never a 500."""
    if isinstance(exc, PhotoRefused):
        return exc
    if isinstance(exc, Image.DecompressionBombError):
        return _too_many_pixels(max_pixels)
    return _not_an_image()


def pixels(data: bytes, max_pixels: int = MAX_PIXELS) -> int:
    """How many pixels ``data`` would decode into, from its header alone (nothing is decoded);
    ``PhotoRefused`` for bytes over the bound, a file that is not one of ``FORMATS``, an
    animation, or more than ``max_pixels``. What the upload is charged before it is decoded."""
    if not data:
        raise _not_an_image()
    if len(data) > MAX_PHOTO_BYTES:
        raise too_large()
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as probe:
            return _checked_header(probe, max_pixels)
    except Exception as exc:  # noqa: BLE001 - any failure on hostile input is a refusal
        raise _refused_as_photo(exc, max_pixels) from None


def reencode(data: bytes, max_pixels: int = MAX_PIXELS) -> Photo:
    """``data`` decoded and written anew as a JPEG without metadata, its longest side at most
    ``MAX_SIDE``; ``PhotoRefused`` (about the ``photo`` field) if it is not a real photo we
    accept, checked from the header (``pixels``) before any pixel is decoded.

    The full-size pixels are held once: the decoded image is scaled down in place before it is
    turned upright, flattened or converted, each of which copies it."""
    pixels(data, max_pixels)
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as probe:
            probe.verify()  # the file's structure and checksums, without keeping pixels
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:
            _checked_header(image, max_pixels)
            image.load()  # every pixel decoded: a truncated file fails here
            if image.mode in SCALABLE:
                image.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
            ImageOps.exif_transpose(image, in_place=True)  # as the camera held it
            upright = _flattened(image)
    except Exception as exc:  # noqa: BLE001 - any failure on hostile input is a refusal
        raise _refused_as_photo(exc, max_pixels) from None
    upright.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    # Nothing the upload carried goes along: Pillow would write the uploaded JPEG's comment
    # (its COM segment) by default, so the image's info is emptied and an empty comment given;
    # no exif, icc_profile or xmp is given to save, so the new file carries none.
    upright.info = {}
    for quality in (85, 70, 50):
        out = io.BytesIO()
        upright.save(out, "JPEG", quality=quality, optimize=True, comment=b"")
        encoded = out.getvalue()
        if len(encoded) <= MAX_PHOTO_BYTES:
            break
    else:
        raise too_large()
    return Photo(encoded, upright.width, upright.height, hashlib.sha256(encoded).hexdigest())


def _flattened(image: Image.Image) -> Image.Image:
    """``image`` as RGB (a copy): transparent parts on white."""
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        flat = Image.new("RGB", image.size, (255, 255, 255))
        rgba = image.convert("RGBA")
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return image.convert("RGB")


class Decoder:
    """Runs ``reencode`` on worker threads (decoding takes CPU the event loop must not wait
    for), at most ``concurrent`` at a time: the memory decoding takes in a process is bounded
    by that many photos of at most ``max_pixels`` each, however many uploads arrive. The others
    wait their turn. One per app (``app.state.photo_decoder``)."""

    def __init__(self, concurrent: int, max_pixels: int = MAX_PIXELS) -> None:
        self.max_pixels = max_pixels
        self._slots = asyncio.Semaphore(concurrent)
        self.decoding = 0  # photos being decoded now, at most ``concurrent``

    async def pixels(self, data: bytes) -> int:
        """``pixels`` (the header alone) on a worker thread."""
        return await run_in_threadpool(pixels, data, self.max_pixels)

    async def reencode(self, data: bytes) -> Photo:
        """``reencode`` on a worker thread, once a slot is free. The slot is held until the
        thread is done, even if the request is cancelled meanwhile (the thread cannot be)."""
        async with self._slots:
            self.decoding += 1
            try:
                return await run_in_threadpool(reencode, data, self.max_pixels)
            finally:
                self.decoding -= 1
