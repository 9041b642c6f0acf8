"""API authentication, scopes and rate limits (issue 20, items 4 and 5), over real HTTP.

The query API and the trainer's routes are called in-process over ASGI (``httpx.ASGITransport``)
against migrated SQLite stores; ``python -m shared.query`` and ``hylo retrain`` run for real. The
token file is written by the same code as ``hylo tokens create``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from shared.cli.app import app as hylo
from shared.query import QuerySettings, create_app
from shared.service.api_auth import ApiAuthError, ApiSecuritySettings, api_guard, is_loopback
from shared.service.api_tokens import TokenFileError, add_token, read_tokens, token_digest
from shared.service.rate_limit import TokenBuckets
from shared.store import StoreSettings
from tests.query.query_helpers import migrated, seed, unique_cluster

ROOT = Path(__file__).parents[2]


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, str, str]:
    """A token file with one read and one admin token: (file, read token, admin token)."""
    path = tmp_path / "tokens"
    return path, add_token(path, "dashboard", "read"), add_token(path, "ops", "admin")


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"


@asynccontextmanager
async def query_api(
    url: str, security: ApiSecuritySettings, settings: QuerySettings | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The query API over a seeded store, with its lifespan, called in-process over ASGI."""
    engine = await migrated(url)
    await seed(engine, unique_cluster())
    await engine.dispose()
    app = create_app(StoreSettings(database_url=url), settings or QuerySettings(), security)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://query") as http,
    ):
        http.app = app  # type: ignore[attr-defined]
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- the token file ------------------------------------------------------------------------------


def test_the_file_keeps_hashes_never_tokens(tokens: tuple[Path, str, str]) -> None:
    path, read, admin = tokens
    text = path.read_text()
    assert read not in text and admin not in text
    assert f"sha256:{token_digest(read).hex()}" in text
    assert [(e.name, e.scope) for e in read_tokens(path)] == [("dashboard", "read"), ("ops", "admin")]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(TokenFileError, match="'ops' exists"):
        add_token(path, "ops", "read")


def test_a_bad_line_is_one_line_naming_file_and_line_without_its_text(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    secret = "hylo_pasted-a-plaintext-token-here"
    path.write_text(f"# comment\nok read sha256:{'a' * 64}\n\nci admin {secret}\n")
    with pytest.raises(ApiAuthError) as err:
        api_guard(ApiSecuritySettings(api_tokens_file=path), "127.0.0.1", "the query API")
    message = str(err.value)
    assert "\n" not in message and secret not in message
    assert message.startswith(f"the query API: HYLO_API_TOKENS_FILE: {path}:4: the hash must be")
    cases = {
        "a b": ":1: expected NAME SCOPE sha256:HASH [CREATED] (3 or 4 fields), found 2",
        f"x write sha256:{'a' * 64}": ":1: the scope must be one of read, admin",
        f"x/y read sha256:{'a' * 64}": ":1: the name must be",
        f"x read sha256:{'a' * 64}\nx admin sha256:{'b' * 64}": ":2: the name 'x' is already used on line 1",
    }
    for text, expected in cases.items():
        path.write_text(text)
        with pytest.raises(TokenFileError) as bad:
            read_tokens(path)
        assert str(bad.value).startswith(f"{path}{expected}"), str(bad.value)
    with pytest.raises(ApiAuthError, match="cannot read the token file"):
        api_guard(ApiSecuritySettings(api_tokens_file=tmp_path / "missing"), "127.0.0.1", "the query API")


def test_hylo_tokens_create_prints_the_token_once_list_and_revoke(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "tokens"
    runner = CliRunner()
    created = runner.invoke(
        hylo, ["tokens", "create", "--name", "ci", "--scope", "admin", "--file", str(path)]
    )
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert token.startswith("hylo_") and len(token) == 48 and "\n" not in token
    assert "it is shown only now" in created.stderr
    (entry,) = read_tokens(path)
    assert (entry.name, entry.scope, entry.digest) == ("ci", "admin", token_digest(token))
    listed = runner.invoke(hylo, ["tokens", "list"], env={"HYLO_API_TOKENS_FILE": str(path)})
    assert listed.exit_code == 0 and "ci" in listed.output and "admin" in listed.output
    assert token not in listed.output
    bad = runner.invoke(hylo, ["tokens", "create", "--name", "x", "--scope", "write", "--file", str(path)])
    assert bad.exit_code == 2 and "--scope: expected one of read, admin" in bad.output
    again = runner.invoke(hylo, ["tokens", "create", "--name", "ci", "--file", str(path)])
    assert again.exit_code == 2 and "'ci' exists" in again.output
    assert runner.invoke(hylo, ["tokens", "revoke", "--name", "ci", "--file", str(path)]).exit_code == 0
    gone = runner.invoke(hylo, ["tokens", "revoke", "--name", "ci", "--file", str(path)])
    assert gone.exit_code == 2 and "no token named 'ci'" in gone.output
    assert read_tokens(path) == []


# --- who may start without tokens ----------------------------------------------------------------


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.1.2.3", "query.internal", ""))


def test_non_loopback_without_tokens_refuses_naming_the_setting(
    tokens: tuple[Path, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    store = StoreSettings(database_url="sqlite+aiosqlite:///unused.db")
    exposed = QuerySettings(http_host="0.0.0.0")
    with pytest.raises(ApiAuthError) as err:
        create_app(store, exposed, ApiSecuritySettings(api_auth="auto", api_tokens_file=None))
    assert "would serve on 0.0.0.0 without authentication: set HYLO_API_TOKENS_FILE" in str(err.value)
    assert "HYLO_API_AUTH=off" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ApiAuthError, match="HYLO_API_AUTH=on needs HYLO_API_TOKENS_FILE"):
        create_app(store, QuerySettings(), ApiSecuritySettings(api_auth="on", api_tokens_file=None))
    # with tokens, or on purpose, it starts; the open cases say so in the log
    create_app(store, exposed, ApiSecuritySettings(api_tokens_file=tokens[0]))
    with caplog.at_level(logging.WARNING, logger="hylo.api"):
        create_app(store, exposed, ApiSecuritySettings(api_auth="off"))
        create_app(store, QuerySettings(), ApiSecuritySettings(api_auth="auto", api_tokens_file=None))
    assert "authentication is off (HYLO_API_AUTH=off)" in caplog.text
    assert "unauthenticated, reachable from this host only (127.0.0.1)" in caplog.text


def test_python_m_shared_query_on_0_0_0_0_without_tokens_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYLO_")}
    env |= {
        "HYLO_CONFIG": str(tmp_path / "none.toml"),
        "HYLO_HTTP_HOST": "0.0.0.0",
        "HYLO_DATABASE_URL": "sqlite+aiosqlite:///unused.db",
    }
    result = subprocess.run(
        [sys.executable, "-m", "shared.query"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("hylo query: the query API would serve on 0.0.0.0 without authentication")
    assert "HYLO_API_TOKENS_FILE" in lines[0]


# --- the query API with tokens -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_query_api_needs_a_token_and_leaves_probes_open(
    store_url: str, tokens: tuple[Path, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    path, read, admin = tokens
    wrong = "hylo_not-a-token-of-this-file"
    async with query_api(store_url, ApiSecuritySettings(api_tokens_file=path)) as http:
        with caplog.at_level(logging.DEBUG):
            missing = await http.get("/v1/clusters")
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"] == 'Bearer realm="hylo"'
            assert missing.json()["detail"].startswith("missing bearer token")
            invalid = await http.get("/v1/decisions", headers=bearer(wrong))
            assert (
                invalid.status_code == 401 and 'error="invalid_token"' in invalid.headers["www-authenticate"]
            )
            basic = await http.get("/v1/models", headers={"Authorization": f"Basic {read}"})
            assert basic.status_code == 401
            for route in ("/v1/clusters", "/v1/decisions", "/v1/models", "/v1/report"):
                assert (await http.get(route, headers=bearer(read))).status_code == 200, route
                assert (await http.get(route, headers=bearer(admin))).status_code == 200, route
            for route in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
                assert (await http.get(route)).status_code == 200, route
        assert wrong not in caplog.text and read not in caplog.text and admin not in caplog.text
        doc = (await http.get("/openapi.json")).json()
        assert doc["components"]["securitySchemes"]["HTTPBearer"] == {
            "type": "http",
            "scheme": "bearer",
            "description": "a token from `hylo tokens create` (scope read, or admin for POST routes)",
        }
        assert {"401", "403", "429"} <= set(doc["paths"]["/v1/decisions"]["get"]["responses"])
        assert "security" not in doc["paths"]["/healthz"]["get"]


@pytest.mark.asyncio
async def test_a_revoked_token_is_refused_without_a_restart(
    store_url: str, tokens: tuple[Path, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    path, read, admin = tokens
    async with query_api(store_url, ApiSecuritySettings(api_tokens_file=path)) as http:
        assert (await http.get("/v1/clusters", headers=bearer(read))).status_code == 200
        result = CliRunner().invoke(hylo, ["tokens", "revoke", "--name", "dashboard", "--file", str(path)])
        assert result.exit_code == 0, result.output
        assert (await http.get("/v1/clusters", headers=bearer(read))).status_code == 401
        assert (await http.get("/v1/clusters", headers=bearer(admin))).status_code == 200
        # a file broken by hand keeps the last good tokens in force, and says so once
        path.write_text(path.read_text() + "garbage\n")
        with caplog.at_level(logging.ERROR, logger="hylo.api"):
            assert (await http.get("/v1/clusters", headers=bearer(admin))).status_code == 200
            assert (await http.get("/v1/clusters", headers=bearer(read))).status_code == 401
        assert caplog.text.count("API tokens not reloaded, the previous ones stay in force") == 1
        assert f"{path}:" in caplog.text


# --- rate limits ---------------------------------------------------------------------------------


def test_token_buckets_refill_and_stay_bounded() -> None:
    now = [0.0]
    buckets = TokenBuckets(rate=2.0, burst=3, max_clients=100, clock=lambda: now[0])
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)  # one token comes back every 0.5 s
    assert buckets.take("b") == 0.0  # another client has its own bucket
    now[0] = 0.5
    assert buckets.take("a") == 0.0 and buckets.take("a") > 0
    for k in range(10_000):
        buckets.take(f"ip:{k}")
    assert len(buckets) == 100  # the least recently seen were dropped


@pytest.mark.asyncio
async def test_rate_limit_gives_429_with_retry_after_then_recovers(
    store_url: str, tokens: tuple[Path, str, str]
) -> None:
    path, read, admin = tokens
    security = ApiSecuritySettings(api_tokens_file=path, api_rate_per_s=10.0, api_rate_burst=3)
    async with query_api(store_url, security) as http:
        codes = [(await http.get("/v1/clusters", headers=bearer(read))).status_code for _ in range(3)]
        limited = await http.get("/v1/clusters", headers=bearer(read))
        assert codes == [200, 200, 200] and limited.status_code == 429
        assert limited.headers["retry-after"] == "1"
        assert "HYLO_API_RATE_PER_S" in limited.json()["detail"]
        # per token: the admin token still has its burst; probes are never limited
        assert (await http.get("/v1/clusters", headers=bearer(admin))).status_code == 200
        for _ in range(10):
            assert (await http.get("/healthz")).status_code == 200
        await asyncio.sleep(0.15)  # one request back at 10/s
        assert (await http.get("/v1/clusters", headers=bearer(read))).status_code == 200
        # without a valid token the client is its address: guessing tokens is limited too
        guesses = [
            (await http.get("/v1/clusters", headers=bearer(f"hylo_{k}"))).status_code for k in range(5)
        ]
        assert guesses[:3] == [401, 401, 401] and guesses[3:] == [429, 429]


# --- report limits -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_report_timeout_is_504_and_too_many_reports_503(store_url: str) -> None:
    quick = QuerySettings(report_timeout_s=0.001)
    async with query_api(store_url, ApiSecuritySettings(), quick) as http:
        late = await http.get("/v1/report")
        assert late.status_code == 504
        assert "longer than 0.001 s (HYLO_REPORT_TIMEOUT_S)" in late.json()["detail"]
    one_cluster = store_url.replace("hylo.db", "other.db")  # the report then needs no parameter
    async with query_api(one_cluster, ApiSecuritySettings(), QuerySettings(report_max_concurrent=1)) as http:
        gate = http.app.state.report_gate  # type: ignore[attr-defined]
        async with gate.admit():  # a report in progress
            busy = await http.get("/v1/report")
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert "HYLO_REPORT_MAX_CONCURRENT" in busy.json()["detail"]
        assert (await http.get("/v1/report")).status_code == 200
        assert gate.in_progress == 0


@pytest.mark.asyncio
async def test_a_render_past_its_deadline_keeps_the_drawing_lock_until_it_ends() -> None:
    import threading
    import time

    from shared.query.report_route import ReportGate

    gate = ReportGate(most=2, timeout_s=10.0)
    release = threading.Event()
    loop = asyncio.get_running_loop()

    def slow() -> str:
        release.wait(5)
        return "slow"

    with pytest.raises(TimeoutError):
        await gate.draw(slow, loop.time() + 0.05)
    # the abandoned render still holds the lock: the next one waits for it, within its own deadline
    with pytest.raises(TimeoutError):
        await gate.draw(lambda: "next", loop.time() + 0.05)
    release.set()
    started = time.monotonic()
    assert await gate.draw(lambda: "next", loop.time() + 5) == "next"
    assert time.monotonic() - started < 5
