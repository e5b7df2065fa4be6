"""The QR code a seller shows at the counter, drawn by us as inline SVG (segno, pure Python)."""

import segno


def qr_svg(text: str, *, title: str | None = None) -> str:
    """An ``<svg>`` element (no XML declaration) of ``text`` as a QR code, with the quiet zone
    the scanners need, black on white, sized by the page (a viewBox, no width or height);
    ``title`` (by default the text itself: what a screen reader says) becomes its ``<title>``,
    and the element is ``role="img"``."""
    code = segno.make(text, error="m", micro=False)
    svg = code.svg_inline(
        scale=4,
        border=4,
        dark="#000",
        light="#fff",
        title=title if title is not None else text,
        svgclass="qr-code",
        # A viewBox instead of a fixed size: the page's style sizes it for the scanner.
        omitsize=True,
    )
    return svg.replace("<svg ", '<svg role="img" ', 1)
