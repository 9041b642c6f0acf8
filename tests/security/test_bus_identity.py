"""Identity on the bus (issue 20, item 1): per-service NKEYs with subject permissions, and TLS.

Every probe runs against a private nats-server configured by ``hylo bus credentials``' own output
(never the machine's server): a message from the wrong sender must never reach its stream, an
unknown or missing credential must not connect, and a client that asked for TLS must never talk in
plaintext.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from shared.bus.connection import PlaintextRefused, connect
from shared.bus.credentials import CredentialSet, load_credentials, new_seed, write_credentials
from shared.bus.identity import Identity, permissions, standard_identities
from shared.bus.settings import BusSettings
from shared.bus.streams import StreamsMissing, create_streams, ensure_streams, stream_name
from shared.bus.tls import BusConfigError
from shared.schemas.subjects import KINDS, Subjects
from tests.security.nats_server import private_nats

ROOT = "idt"
SUBJECTS = Subjects(ROOT)


def _creds(tmp_path: Path, tls: bool = True) -> CredentialSet:
    return write_credentials(tmp_path / "creds", standard_identities(("a", "b")), SUBJECTS, tls=tls)


@pytest.fixture
def secure_nats(tmp_path: Path) -> Iterator[tuple[str, CredentialSet, subprocess.Popen[bytes]]]:
    creds = _creds(tmp_path)
    assert creds.tls_conf is not None
    with private_nats(tmp_path, includes=(creds.auth_conf, creds.tls_conf)) as (url, proc):
        yield url, creds, proc


def _settings(url: str, **update: object) -> BusSettings:
    base = BusSettings(
        nats_url=url,
        subject_root=ROOT,
        nats_max_reconnect_attempts=1,
        nats_reconnect_wait_s=0.1,
        nats_connect_timeout_s=2.0,
        nats_streams_wait_s=1.0,
    )
    return base.model_copy(update=update)


def _as(url: str, creds: CredentialSet, name: str) -> BusSettings:
    return creds.settings_for(name, _settings(url))


async def _init(url: str, creds: CredentialSet) -> None:
    await create_streams(_as(url, creds, "admin"))


async def _count(nc: Client, kind: str) -> int:
    info = await nc.jetstream().stream_info(stream_name(SUBJECTS, kind))  # type: ignore[arg-type]
    return int(info.state.messages)


async def _try_publish(nc: Client, subject: str) -> bool:
    """True if the stream acknowledged the message (a refused publish never gets an ack)."""
    try:
        await nc.jetstream().publish(subject, b"{}", timeout=0.5)
    except Exception:
        return False
    return True


# -- the permissions themselves ---------------------------------------------------------------------


def _writes(identity: Identity) -> set[str]:
    """The Hylo subjects (not JetStream API or inbox) an identity may publish to."""
    return {s for s in permissions(identity, SUBJECTS).publish if s.startswith(f"{ROOT}.")}


def test_each_role_publishes_only_its_own_output() -> None:
    by_name = {i.name: i for i in standard_identities(("a", "b"))}
    dead = SUBJECTS.all_clusters("dead")
    # the pipeline's stages also announce their replicas on their own group's subject, no other
    members = {role: f"{ROOT}.members.{role}" for role in ("featurizer", "prioritizer", "placer")}
    assert _writes(by_name["featurizer"]) == {SUBJECTS.all_clusters("features"), dead, members["featurizer"]}
    assert _writes(by_name["prioritizer"]) == {
        SUBJECTS.all_clusters("priorities"),
        SUBJECTS.all_clusters("shadows"),
        dead,
        members["prioritizer"],
    }
    assert _writes(by_name["placer"]) == {SUBJECTS.all_clusters("placements"), dead, members["placer"]}
    assert _writes(by_name["trainer"]) == {SUBJECTS.all_clusters("models"), dead}
    assert _writes(by_name["adapter-a"]) == {
        SUBJECTS.of("a", "snapshots"),
        SUBJECTS.of("a", "outcomes"),
        f"{SUBJECTS.prefix}.a.events",
        dead,
    }
    assert permissions(by_name["admin"], SUBJECTS).manage_streams
    assert not any(permissions(i, SUBJECTS).manage_streams for i in by_name.values() if i.role != "admin")
    for identity in by_name.values():  # no stream management outside the admin
        if identity.role != "admin":
            api = [s for s in permissions(identity, SUBJECTS).publish if s.startswith("$JS.API.STREAM.")]
            assert all(s.startswith(("$JS.API.STREAM.INFO.", "$JS.API.STREAM.MSG.GET.")) for s in api)


def test_seeds_are_private_and_kept_unless_rotated(tmp_path: Path) -> None:
    first = _creds(tmp_path, tls=False)
    for credential in first.credentials:
        assert credential.seed.stat().st_mode & 0o077 == 0, credential.seed
        assert credential.seed.read_bytes().startswith(b"SU")
        assert credential.seed.read_bytes().strip().decode() not in first.auth_conf.read_text()
    again = write_credentials(
        tmp_path / "creds", standard_identities(("a", "b")), SUBJECTS, rotate=("featurizer",)
    )
    keys = {c.identity.name: c.public_key for c in first.credentials}
    for credential in again.credentials:
        changed = keys[credential.identity.name] != credential.public_key
        assert changed == (credential.identity.name == "featurizer"), credential.identity.name
    loaded = load_credentials(tmp_path / "creds")
    assert {c.public_key for c in loaded.credentials} == {c.public_key for c in again.credentials}


# -- against a server -------------------------------------------------------------------------------

#: (identity, subject) pairs the server must refuse: every forged-sender probe of issue 20
FORGED = [
    ("featurizer", SUBJECTS.of("a", "models")),
    ("featurizer", SUBJECTS.of("a", "placements")),
    ("featurizer", SUBJECTS.of("a", "snapshots")),
    ("prioritizer", SUBJECTS.of("a", "placements")),
    ("prioritizer", SUBJECTS.of("a", "models")),
    ("placer", SUBJECTS.of("a", "models")),
    ("placer", SUBJECTS.of("a", "outcomes")),
    ("trainer", SUBJECTS.of("a", "placements")),
    ("adapter-a", SUBJECTS.of("b", "snapshots")),
    ("adapter-a", SUBJECTS.of("b", "outcomes")),
    ("adapter-a", SUBJECTS.of("a", "placements")),
    ("adapter-a", SUBJECTS.of("a", "models")),
]
ALLOWED = [
    ("featurizer", SUBJECTS.of("a", "features")),
    ("prioritizer", SUBJECTS.of("b", "priorities")),
    ("placer", SUBJECTS.of("a", "placements")),
    ("trainer", SUBJECTS.of("a", "models")),
    ("adapter-a", SUBJECTS.of("a", "snapshots")),
    ("adapter-b", SUBJECTS.of("b", "outcomes")),
]


def test_the_server_refuses_every_forged_sender_and_stores_the_rest(
    secure_nats: tuple[str, CredentialSet, subprocess.Popen[bytes]],
) -> None:
    url, creds, _ = secure_nats

    async def probe() -> tuple[list[str], list[str], dict[str, int]]:
        await _init(url, creds)
        accepted, refused = [], []
        for name, subject in FORGED + ALLOWED:
            nc = await connect(_as(url, creds, name))
            try:
                (accepted if await _try_publish(nc, subject) else refused).append(f"{name} -> {subject}")
            finally:
                await nc.close()
        admin = await connect(_as(url, creds, "admin"))
        try:
            counts = {kind: await _count(admin, kind) for kind in KINDS}
        finally:
            await admin.close()
        return accepted, refused, counts

    accepted, refused, counts = asyncio.run(probe())
    assert refused == [f"{n} -> {s}" for n, s in FORGED]
    assert accepted == [f"{n} -> {s}" for n, s in ALLOWED]
    # only the allowed messages are stored: one features, priorities, placements, models, outcomes
    # message each, and one snapshot (adapter-a's own)
    expected = {k: 0 for k in KINDS} | {
        "features": 1,
        "priorities": 1,
        "placements": 1,
        "models": 1,
        "snapshots": 1,
        "outcomes": 1,
    }
    assert counts == expected


def test_no_credential_or_an_unknown_key_does_not_connect(
    secure_nats: tuple[str, CredentialSet, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    url, creds, _ = secure_nats
    assert creds.tls is not None
    stranger = tmp_path / "stranger.nk"
    stranger.write_bytes(new_seed())
    for settings in (
        _settings(url, nats_tls_ca=creds.tls.ca),
        _settings(url, nats_tls_ca=creds.tls.ca, nats_nkey_seed=stranger),
    ):
        with pytest.raises(Exception) as caught:
            asyncio.run(connect(settings))
        assert not isinstance(caught.value, AssertionError)


def test_a_service_identity_waits_for_streams_it_may_not_create(
    secure_nats: tuple[str, CredentialSet, subprocess.Popen[bytes]],
) -> None:
    url, creds, _ = secure_nats

    async def as_featurizer() -> None:
        settings = _as(url, creds, "featurizer")
        assert not settings.nats_manage_streams
        nc = await connect(settings)
        try:
            await ensure_streams(nc.jetstream(), SUBJECTS, settings)
        finally:
            await nc.close()

    with pytest.raises(StreamsMissing, match="hylo bus init"):
        asyncio.run(as_featurizer())
    asyncio.run(_init(url, creds))
    asyncio.run(as_featurizer())  # now they exist: it proceeds


def test_a_rotated_seed_stops_working_after_a_reload(
    secure_nats: tuple[str, CredentialSet, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    url, creds, proc = secure_nats
    old_seed = tmp_path / "old-featurizer.nk"
    old_seed.write_bytes(creds.of("featurizer").seed.read_bytes())
    old = _as(url, creds, "featurizer").model_copy(update={"nats_nkey_seed": old_seed})
    asyncio.run(_connect_and_close(old))
    write_credentials(
        tmp_path / "creds", standard_identities(("a", "b")), SUBJECTS, tls=True, rotate=("featurizer",)
    )
    proc.send_signal(signal.SIGHUP)  # nats-server reloads its configuration
    asyncio.run(asyncio.sleep(0.5))
    with pytest.raises(Exception) as caught:
        asyncio.run(_connect_and_close(old))
    assert not isinstance(caught.value, AssertionError)
    asyncio.run(_connect_and_close(_as(url, load_credentials(tmp_path / "creds"), "featurizer")))


async def _connect_and_close(settings: BusSettings) -> None:
    nc = await connect(settings)
    await nc.close()


# -- TLS --------------------------------------------------------------------------------------------


def test_a_client_without_tls_cannot_talk_to_the_tls_server(
    secure_nats: tuple[str, CredentialSet, subprocess.Popen[bytes]],
) -> None:
    url, creds, _ = secure_nats
    plain = _settings(url, nats_nkey_seed=creds.of("admin").seed)
    with pytest.raises(Exception) as caught:
        asyncio.run(_connect_and_close(plain))
    assert not isinstance(caught.value, AssertionError)


def test_asking_for_tls_refuses_a_plaintext_server(tmp_path: Path) -> None:
    creds = _creds(tmp_path)
    assert creds.tls is not None
    with private_nats(tmp_path) as (url, _):
        tls_url = url.replace("nats://", "tls://")
        handshake_first = _settings(tls_url, nats_tls_ca=creds.tls.ca)
        with pytest.raises(Exception) as caught:
            asyncio.run(_connect_and_close(handshake_first))
        assert not isinstance(caught.value, AssertionError)
        upgrade = _settings(url, nats_tls_ca=creds.tls.ca, nats_tls_handshake_first=False)
        with pytest.raises(PlaintextRefused, match="plaintext"):
            asyncio.run(_connect_and_close(upgrade))
        # and without TLS asked for, the same server is reachable (the probe above is not vacuous)
        asyncio.run(_connect_and_close(_settings(url)))


def test_tls_settings_that_cannot_work_are_named(tmp_path: Path) -> None:
    with pytest.raises(BusConfigError, match="HYLO_NATS_TLS_CA"):
        asyncio.run(_connect_and_close(_settings("nats://127.0.0.1:1", nats_tls_ca=tmp_path / "nope.pem")))
    creds = _creds(tmp_path)
    assert creds.tls is not None
    with pytest.raises(BusConfigError, match="go together"):
        asyncio.run(_connect_and_close(_settings("nats://127.0.0.1:1", nats_tls_cert=creds.tls.server_cert)))
    with pytest.raises(BusConfigError, match="HYLO_NATS_NKEY_SEED"):
        asyncio.run(_connect_and_close(_settings("nats://127.0.0.1:1", nats_nkey_seed=tmp_path / "x.nk")))
