"""``/docs`` and ``/redoc`` serve a reference with nothing to fetch (shared/service/api_docs.py).

FastAPI's own pages load Swagger UI and ReDoc from a CDN and are blank offline. The reference must
name every operation and schema of the OpenAPI document and reference no outside asset.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.service.api_docs import render_reference
from tests.query.query_helpers import client

OUTSIDE = re.compile(r"""(?:src|href)\s*=\s*['"](?:https?:)?//""", re.IGNORECASE)


@pytest.mark.asyncio
async def test_the_query_apis_docs_name_every_operation_and_fetch_nothing(tmp_path: Path) -> None:
    async with client(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}") as http:
        spec = (await http.get("/openapi.json")).json()
        for path in ("/docs", "/redoc"):
            page = await http.get(path)
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert not OUTSIDE.search(page.text), "the reference loads an outside asset"
            assert "cdn" not in page.text.lower()
            for route, item in spec["paths"].items():
                for method in item:
                    assert f"id='{method}-{route}'" in page.text, (method, route)
            for name in spec["components"]["schemas"]:
                assert f"id='schema-{name}'" in page.text, name
        assert "/docs" not in spec["paths"]  # the page is not an API operation


def test_the_reference_escapes_what_the_document_says() -> None:
    spec = {
        "info": {"title": "<script>x</script>", "version": "1"},
        "paths": {
            "/v1/a": {
                "get": {"summary": "a & b", "parameters": [], "responses": {"200": {"description": "ok"}}}
            }
        },
        "components": {"schemas": {"Row": {"properties": {"n": {"type": "integer", "description": "<b>"}}}}},
    }
    page = render_reference(spec)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "a &amp; b" in page and "&lt;b&gt;" in page
    assert "id='get-/v1/a'" in page and "id='schema-Row'" in page
