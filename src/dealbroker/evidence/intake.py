"""A photo a party uploads, checked and re-encoded before anything keeps it.

Whatever was uploaded, what we keep and serve is a JPEG we wrote ourselves from the decoded
pixels: EXIF (with any GPS position), ICC and XMP metadata, comments and trailing bytes are
gone, and a file that only claims to be an image (a text renamed ``.jpg``, an SVG, a truncated
or polyglot file) is refused because it does not decode. The size is bounded before decoding
(bytes, then pixels from the header alone), so a small file that would unpack into gigabytes
(a decompression bomb) is refused without being unpacked. CPU-bound: call it off the event
loop (``prepare``).
"""

import hashlib
import io
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError
from starlette.concurrency import run_in_threadpool

from dealbroker.core.errors import BadRequest, FieldError
from dealbroker.core.i18n import _

# At most this many bytes per photo as uploaded (and as kept).
MAX_PHOTO_BYTES = 10 * 1024 * 1024
# At most this many pixels in an uploaded photo (a 50-megapixel camera's); larger is refused
# from the header alone, before decoding. Pillow's own guard is set to the same bound, so any
# image it opens elsewhere in the process is refused past twice that.
MAX_PIXELS = 50_000_000
Image.MAX_IMAGE_PIXELS = MAX_PIXELS
# The longest side of the photo we keep: enough to see a scratch, and a bounded size.
MAX_SIDE = 4096
# What we decode: the formats phones and cameras send. Others (GIF, SVG, TIFF, BMP, PSD...)
# are refused, as is anything animated.
FORMATS = ("JPEG", "PNG", "WEBP")  # a JPEG opens as MPO when it holds several pictures
CONTENT_TYPE = "image/jpeg"
FIELD = "photo"


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


def _not_an_image() -> BadRequest:
    return FieldError(
        FIELD,
        _("This file is not a photo we can read. Send a JPEG, PNG or WebP photo (at most 10 MB)."),
    )


def _too_many_pixels() -> BadRequest:
    return FieldError(
        FIELD,
        _("This photo is too large (at most %(max)s megapixels). Send a smaller one.")
        % {"max": MAX_PIXELS // 1_000_000},
    )


def too_large() -> BadRequest:
    return FieldError(FIELD, _("This photo is too large (at most 10 MB). Send a smaller one."))


def _checked_header(image: Image.Image) -> None:
    """Refuse from the header alone: an animation, or more pixels than we decode."""
    width, height = image.size
    if width < 1 or height < 1:
        raise _not_an_image()
    if width * height > MAX_PIXELS:
        raise _too_many_pixels()
    if image.format != "MPO" and getattr(image, "n_frames", 1) != 1:
        raise _not_an_image()  # animated: a photo has one picture


def reencode(data: bytes) -> Photo:
    """``data`` decoded and written anew as a JPEG without metadata, its longest side at most
    ``MAX_SIDE``; ``BadRequest`` (about the ``photo`` field) if it is not a real photo we
    accept."""
    if not data:
        raise _not_an_image()
    if len(data) > MAX_PHOTO_BYTES:
        raise too_large()
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as probe:
            _checked_header(probe)
            probe.verify()  # the file's structure and checksums, without keeping pixels
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:
            _checked_header(image)
            image.load()  # every pixel decoded: a truncated file fails here
            upright = ImageOps.exif_transpose(image)  # as the camera held it; a copy
    except Image.DecompressionBombError:
        raise _too_many_pixels() from None
    except BadRequest:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, TypeError):
        raise _not_an_image() from None
    except Exception:  # any other decoder failure on hostile input is a refusal, never a 500
        raise _not_an_image() from None
    if upright.mode in ("RGBA", "LA", "PA") or "transparency" in upright.info:
        flat = Image.new("RGB", upright.size, (255, 255, 255))
        rgba = upright.convert("RGBA")
        flat.paste(rgba, mask=rgba.getchannel("A"))
        upright = flat
    else:
        upright = upright.convert("RGB")
    upright.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    # No exif, icc_profile or comment given to save: the new file carries none.
    for quality in (85, 70, 50):
        out = io.BytesIO()
        upright.save(out, "JPEG", quality=quality, optimize=True)
        encoded = out.getvalue()
        if len(encoded) <= MAX_PHOTO_BYTES:
            break
    else:
        raise too_large()
    return Photo(encoded, upright.width, upright.height, hashlib.sha256(encoded).hexdigest())


async def prepare(data: bytes) -> Photo:
    """``reencode`` on a worker thread: decoding takes CPU the event loop must not wait for."""
    return await run_in_threadpool(reencode, data)
