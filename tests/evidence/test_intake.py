"""A photo is decoded and written anew: metadata gone, upright, bounded; anything that is not a
real photo we accept is refused, hostile files included (made here, not mocked)."""

import asyncio
import io

import pytest
from PIL import Image

from dealbroker.core.errors import FieldError
from dealbroker.evidence import intake
from tests.evidence import hostile


def opened(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_exif_and_gps_are_stripped_and_the_photo_is_turned_upright():
    original = hostile.jpeg_with_gps((320, 240), orientation=6)
    assert hostile.GPS in opened(original).getexif()  # the test's file does carry a position
    photo = intake.reencode(original)
    kept = opened(photo.data)
    assert kept.format == "JPEG"
    assert not kept.getexif()  # no EXIF at all: no GPS, no camera
    assert "exif" not in kept.info
    assert "icc_profile" not in kept.info
    assert b"SecretCam" not in photo.data
    # Orientation 6 (rotate 90° clockwise to view): stored upright, so width and height swap.
    assert (photo.width, photo.height) == (240, 320) == kept.size
    assert photo.content_type == "image/jpeg"
    assert len(photo.sha256) == 64


def test_transparent_png_becomes_a_jpeg_on_white():
    photo = intake.reencode(hostile.png((64, 48), "RGBA"))
    kept = opened(photo.data)
    assert (kept.format, kept.mode, kept.size) == ("JPEG", "RGB", (64, 48))


def test_a_large_photo_is_scaled_down_to_the_longest_side():
    out = io.BytesIO()
    Image.new("RGB", (6000, 3000), (10, 200, 10)).save(out, "JPEG")
    photo = intake.reencode(out.getvalue())
    assert (photo.width, photo.height) == (intake.MAX_SIDE, intake.MAX_SIDE // 2)


def test_a_jpeg_with_a_payload_after_its_end_is_kept_without_it():
    photo = intake.reencode(hostile.jpeg_with_gps() + hostile.POLYGLOT_TAIL)
    assert b"<script>" not in photo.data


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("empty", b""),
        ("text renamed .jpg", hostile.TEXT),
        ("svg", hostile.SVG),
        ("gif", hostile.gif()),
        ("animated png", hostile.animated_png()),
        ("truncated jpeg", hostile.jpeg_with_gps((800, 600))[:1500]),
        ("truncated png", hostile.png((300, 300), "RGB")[:120]),
        ("html with a jpeg header", b"\xff\xd8\xff\xe0" + hostile.POLYGLOT_TAIL * 20),
    ],
)
def test_what_is_not_a_real_photo_is_refused(name, data):
    with pytest.raises(FieldError) as refused:
        intake.reencode(data)
    assert refused.value.field == "photo"
    assert "not a photo we can read" in refused.value.detail


def test_a_decompression_bomb_is_refused_from_its_header():
    bomb = hostile.png_bomb()
    assert len(bomb) < 2 * 1024 * 1024  # small on the wire, 400 megapixels unpacked
    with pytest.raises(FieldError) as refused:
        intake.reencode(bomb)
    assert "too large" in refused.value.detail


def test_more_bytes_than_the_bound_are_refused_before_decoding():
    with pytest.raises(FieldError) as refused:
        intake.reencode(b"\xff\xd8" + b"\0" * intake.MAX_PHOTO_BYTES)
    assert "at most 10 MB" in refused.value.detail


def test_no_metadata_survives_not_even_a_jpeg_comment():
    original = hostile.jpeg_with_metadata()
    carried = hostile.jpeg_segments(original)
    assert {0xFFFE, 0xFFE1, 0xFFE2} <= set(carried)  # COM, EXIF and XMP (APP1), ICC (APP2)
    photo = intake.reencode(original)
    # Only what any JPEG needs: JFIF's APP0, the tables, the frame, the scan.
    assert set(hostile.jpeg_segments(photo.data)) <= {0xFFE0, 0xFFDB, 0xFFC0, 0xFFC4, 0xFFDA}
    assert b"\xff\xfe" not in photo.data  # no COM marker anywhere, image data included
    for secret in (b"Secret comment", b"SecretCam", b"SecretXMP", b"sRGB"):
        assert secret not in photo.data
    kept = opened(photo.data)
    assert not {"comment", "exif", "xmp", "icc_profile"} & set(kept.info)


def test_the_pixels_are_read_from_the_header_alone():
    # 49 megapixels in 150 KB: counted without decoding (in milliseconds, not seconds).
    bomb = hostile.png_bomb(7000, colour=True)
    assert intake.pixels(bomb) == 49_000_000
    with pytest.raises(intake.PhotoRefused) as refused:
        intake.pixels(bomb, max_pixels=40_000_000)
    assert refused.value.reason == "too_many_pixels"
    assert "at most 40 megapixels" in refused.value.detail
    with pytest.raises(intake.PhotoRefused) as refused:
        intake.pixels(hostile.SVG)
    assert refused.value.reason == "not_an_image"


async def test_the_decoder_decodes_a_bounded_number_at_a_time():
    """However many photos arrive at once, at most ``concurrent`` are decoded together (each of
    at most ``max_pixels``): the memory decoding takes is bounded. The others wait their
    turn, and all are decoded."""
    out = io.BytesIO()
    Image.new("RGB", (3000, 2000), (10, 200, 10)).save(out, "PNG")
    for concurrent in (1, 2):
        decoder = intake.Decoder(concurrent)
        seen = []
        decoding = [asyncio.create_task(decoder.reencode(out.getvalue())) for _ in range(4)]
        while not all(task.done() for task in decoding):
            seen.append(decoder.decoding)
            await asyncio.sleep(0.005)
        assert [task.result().width for task in decoding] == [3000] * 4
        assert max(seen) == concurrent
        assert decoder.decoding == 0
