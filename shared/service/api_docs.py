"""The API reference at ``/docs`` (and ``/redoc``), rendered on the server from the OpenAPI document.

Why not FastAPI's own pages: its Swagger UI and ReDoc pages load their JavaScript and CSS from a
CDN, so on a cluster's management network, which often has no way out, ``/docs`` is blank. This
page is plain HTML built from ``app.openapi()`` with nothing to fetch: every operation with its
parameters, body and responses, and every schema with its fields. ``/openapi.json`` stays as it
is for tools (code generators, Postman, a Swagger UI an operator hosts).
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

METHODS = ("get", "post", "put", "patch", "delete")
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
h2{border-bottom:1px solid #ccc;margin-top:2em}
.op{border:1px solid #ddd;border-radius:4px;margin:1em 0;padding:.5em 1em}
.method{display:inline-block;min-width:4em;font-weight:bold;text-transform:uppercase}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .6em;text-align:left}
code{background:#f4f4f4;padding:0 .2em}
"""


def install_api_docs(app: FastAPI) -> None:
    """Serve the reference at ``/docs`` and ``/redoc``; build the app with ``docs_url=None`` and
    ``redoc_url=None`` so that FastAPI's CDN pages are not registered first."""

    async def reference() -> HTMLResponse:
        return HTMLResponse(render_reference(app.openapi()))

    for path in ("/docs", "/redoc"):
        app.add_api_route(path, reference, methods=["GET"], include_in_schema=False)


def render_reference(spec: dict[str, Any]) -> str:
    """The whole page for one OpenAPI document."""
    info = spec.get("info", {})
    title = escape(str(info.get("title", "API")))
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{title} <small>{escape(str(info.get('version', '')))}</small></h1>",
        _paragraph(info.get("summary")),
        _paragraph(info.get("description")),
        "<p>Machine-readable: <a href='openapi.json'><code>openapi.json</code></a>.</p>",
        "<h2>Operations</h2>",
    ]
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                parts.append(_operation(method, path, item[method]))
    schemas = spec.get("components", {}).get("schemas", {})
    if schemas:
        parts.append("<h2>Schemas</h2>")
        parts.extend(_schema(name, schema) for name, schema in schemas.items())
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def _paragraph(text: object) -> str:
    return f"<p>{escape(str(text))}</p>" if text else ""


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    anchor = escape(f"{method}-{path}", quote=True)
    rows = [
        f"<div class='op' id='{anchor}'><span class='method'>{method}</span> <code>{escape(path)}</code>",
        _paragraph(op.get("summary")),
        _paragraph(op.get("description")),
    ]
    params = op.get("parameters", [])
    if params:
        rows.append(
            "<table><tr><th>parameter</th><th>in</th><th>required</th><th>type</th><th>description</th></tr>"
        )
        for p in params:
            said = p.get("description") or p.get("schema", {}).get("description", "")
            cells = (
                escape(str(p.get("name", ""))),
                escape(str(p.get("in", ""))),
                "yes" if p.get("required") else "no",
                _type(p.get("schema", {}), link=False),
                escape(str(said)),
            )
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        rows.append("</table>")
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        rows.append(f"<p>Body ({escape(media)}): {_type(content.get('schema', {}))}</p>")
    rows.append("<table><tr><th>response</th><th>description</th><th>body</th></tr>")
    for code, response in op.get("responses", {}).items():
        media = response.get("content", {})
        shown = ", ".join(_type(c.get("schema", {})) for c in media.values()) or "-"
        said = escape(response.get("description", ""))
        rows.append(f"<tr><td>{escape(str(code))}</td><td>{said}</td><td>{shown}</td></tr>")
    rows.append("</table></div>")
    return "\n".join(r for r in rows if r)


def _schema(name: str, schema: dict[str, Any]) -> str:
    heading = f"<h3 id='schema-{escape(name, quote=True)}'>{escape(name)}</h3>"
    rows = [heading, _paragraph(schema.get("description"))]
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        rows.append("<table><tr><th>field</th><th>type</th><th>required</th><th>description</th></tr>")
        for field, sub in props.items():
            said = escape(str(sub.get("description", "")))
            cells = (escape(field), _type(sub), "yes" if field in required else "no", said)
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        rows.append("</table>")
    elif "enum" in schema:
        rows.append(f"<p>One of: {escape(', '.join(map(str, schema['enum'])))}</p>")
    return "\n".join(r for r in rows if r)


def _type(schema: dict[str, Any], link: bool = True) -> str:
    """A schema's type as HTML (escaped), naming the schemas it refers to, as links to them when
    ``link``."""
    if "$ref" in schema:
        name = escape(str(schema["$ref"]).rsplit("/", 1)[-1])
        return f"<a href='#schema-{escape(name, quote=True)}'>{name}</a>" if link else name
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_type(s, link) for s in schema[key])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}), link)}"
    return escape(str(schema.get("type", "any")))
