"""Escaped HTML assembly: every piece of text from the store goes through ``html.escape``.

Why a tiny element builder instead of string formatting: job ids, fallback reasons, actors and model
versions are written by other programs and people; a reason containing ``<script>`` must show as
text. ``Html`` marks strings that are already markup; anything else given to ``el`` is escaped, so a
forgotten escape cannot happen by construction. The page allows nothing but inline styles and
``data:`` images (Content-Security-Policy), so it renders the same offline, from a mail attachment
or from the query API, and never loads anything.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable
from string import Template

#: the page may load nothing: no scripts, no fetches, images only from data: URIs
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
       max-width: 1100px; padding: 1rem 1.5rem 3rem; color: #1d232a; background: #fff; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.25rem; border-bottom: 2px solid #d8dee4; padding-bottom: 0.2rem; margin-top: 2.2rem; }
p.meta, p.note, figcaption { color: #57606a; font-size: 0.9rem; }
dl.summary { display: grid; grid-template-columns: repeat(auto-fill, minmax(12rem, 1fr)); gap: 0.6rem;
             margin: 1rem 0; }
dl.summary div { background: #f6f8fa; border-radius: 6px; padding: 0.5rem 0.8rem; }
dl.summary dt { font-size: 0.8rem; color: #57606a; }
dl.summary dd { margin: 0; font-size: 1.3rem; font-weight: 600; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.88rem; }
th, td { border: 1px solid #d8dee4; padding: 0.25rem 0.55rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td:first-child { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
.empty { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: 1rem 1.2rem; }
"""

PAGE = Template(
    """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="$csp">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="hylo report">
<title>$title</title>
<style>$style</style>
</head>
<body>
$body
</body>
</html>
"""
)


class Html(str):
    """A string that is already markup (built by ``el`` or ``esc``): never escaped again."""

    __slots__ = ()


class Cell(Html):
    """A finished table cell (``<td>``): ``table`` uses it as is instead of wrapping it."""

    __slots__ = ()


def esc(value: object) -> Html:
    """Text as markup: ``<``, ``>``, ``&`` and quotes escaped (markup passes unchanged)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def _children(children: Iterable[object]) -> str:
    out = []
    for c in children:
        if c is None:
            continue
        if isinstance(c, str | int | float):
            out.append(esc(c))
        else:
            out.append(_children(c))  # type: ignore[arg-type]
    return "".join(out)


def el(tag: str, *children: object, **attrs: object) -> Html:
    """``<tag attrs>children</tag>``; attribute names take ``_`` for ``-`` and a trailing ``_`` is dropped
    (``class_``); a ``None`` or ``False`` attribute is left out, ``True`` is written bare."""
    parts = [tag]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        parts.append(name if value is True else f'{name}="{esc(value)}"')
    void = tag in ("img", "meta", "br", "hr")
    head = f"<{' '.join(parts)}>"
    return Html(head if void else f"{head}{_children(children)}</{tag}>")


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def number(value: float | int | None, digits: int = 3) -> str:
    """Readable numbers: thousands separators for large ones, ``digits`` significant digits else."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def num_cell(value: float | int | None, scale: float = 1.0) -> Cell:
    """A right-aligned number shown in a unit (``value / scale``) with the raw value in ``data-value``."""
    raw = None if value is None else repr(value)
    shown = None if value is None else value / scale if scale != 1.0 else value
    return Cell(el("td", number(shown), class_="num", data_value=raw))


def table(headers: Iterable[str], rows: Iterable[Iterable[Html | str]], **attrs: object) -> Html:
    head = el("tr", *(el("th", h) for h in headers))
    body = [el("tr", *(c if isinstance(c, Cell) else el("td", c) for c in r)) for r in rows]
    return el("table", el("thead", head), el("tbody", *body), **attrs)


def document(title: str, body: Iterable[Html]) -> str:
    """The whole page; ``title`` is text, ``body`` is markup."""
    return PAGE.substitute(csp=CSP, title=esc(title), style=STYLE, body="\n".join(body))
