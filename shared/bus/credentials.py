"""Writing a deployment's bus credentials: one NKEY per identity, the server's authorization block,
one env file per identity, and optionally the TLS files.

Why NKEYs: the server stores only public keys, a client proves its identity by signing the
server's nonce with its seed, and the seed never crosses the wire (unlike a password or token). The
server configuration is generated from ``shared.bus.identity``, so what each role may publish is
written in one place and tested there.

Layout of the output folder (``hylo bus credentials --out DIR``)::

    nats-auth.conf        include it from nats.conf: users, their public keys and permissions
    nats-tls.conf         include it for TLS (with --tls): the server's certificate and CA
    nats-cluster-tls.conf include it inside a cluster block (with --tls): routes verify each other
    ca.pem ca-key.pem server-cert.pem server-key.pem   (with --tls)
    <identity>.nk         an identity's seed (0600): give each process only its own
    <identity>.env        HYLO_NATS_NKEY_SEED, HYLO_NATS_TLS_CA, HYLO_NATS_MANAGE_STREAMS for it
    identities.json       public keys, roles, clusters and permissions (no secrets)

Rotation: existing seeds are kept unless named in ``rotate``; a rotated identity gets a new seed,
the server's block its new public key (reload the server: ``nats-server --signal reload``), and the
old seed stops working.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import nkeys

from shared.bus.certificates import DEFAULT_HOSTS, TlsFiles, write_server_tls
from shared.bus.identity import Identity, permissions
from shared.bus.settings import BusSettings
from shared.schemas.subjects import Subjects

AUTH_CONF = "nats-auth.conf"
TLS_CONF = "nats-tls.conf"
CLUSTER_TLS_CONF = "nats-cluster-tls.conf"
MANIFEST = "identities.json"


@dataclass(frozen=True)
class Credential:
    """One identity's public key and where its seed and env file are."""

    identity: Identity
    public_key: str
    seed: Path
    env: Path


@dataclass(frozen=True)
class CredentialSet:
    """What ``write_credentials`` produced."""

    folder: Path
    credentials: tuple[Credential, ...]
    auth_conf: Path
    tls: TlsFiles | None
    tls_conf: Path | None

    def of(self, name: str) -> Credential:
        for credential in self.credentials:
            if credential.identity.name == name:
                return credential
        raise KeyError(f"no identity named {name!r} in {self.folder}")

    def env_for(self, name: str) -> dict[str, str]:
        """The ``HYLO_*`` variables of identity ``name`` (its env file)."""
        return read_env_file(self.of(name).env)

    def settings_for(self, name: str, base: BusSettings) -> BusSettings:
        """``base`` with identity ``name``'s seed, CA and stream right (for in-process clients)."""
        env = self.env_for(name)
        update: dict[str, object] = {
            "nats_nkey_seed": Path(env["HYLO_NATS_NKEY_SEED"]),
            "nats_manage_streams": env.get("HYLO_NATS_MANAGE_STREAMS", "false") == "true",
        }
        if "HYLO_NATS_TLS_CA" in env:
            update["nats_tls_ca"] = Path(env["HYLO_NATS_TLS_CA"])
        return base.model_copy(update=update)


def load_credentials(folder: Path) -> CredentialSet:
    """The credentials ``write_credentials`` left in ``folder`` (from its ``identities.json``)."""
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        entries = [
            Credential(
                Identity(e["name"], e["role"], tuple(e.get("clusters", ()))),
                e["public_key"],
                folder / f"{e['name']}.nk",
                folder / f"{e['name']}.env",
            )
            for e in manifest["identities"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"{manifest_path}: not a credentials folder of `hylo bus credentials` ({err})"
        ) from None
    tls = None
    tls_conf = folder / TLS_CONF
    if manifest.get("tls"):
        tls = TlsFiles(
            ca=folder / "ca.pem", server_cert=folder / "server-cert.pem", server_key=folder / "server-key.pem"
        )
    return CredentialSet(folder, tuple(entries), folder / AUTH_CONF, tls, tls_conf if tls else None)


def new_seed() -> bytes:
    """A fresh user NKEY seed (``SU...``)."""
    seed: bytes = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed


def public_key(seed: bytes) -> str:
    key: bytes = nkeys.from_seed(bytearray(seed)).public_key
    return key.decode()


def _seed_for(path: Path, rotate: bool) -> bytes:
    if path.is_file() and not rotate:
        return path.read_bytes().strip()
    seed = new_seed()
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(seed + b"\n")
    return seed


def _conf_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def authorization_block(entries: list[tuple[str, Identity]], subjects: Subjects) -> str:
    """The server's ``authorization`` block for (public key, identity) pairs."""
    lines = [
        "# generated by `hylo bus credentials`: one user per identity (shared/bus/identity.py)",
        "authorization {",
        "  users = [",
    ]
    for key, identity in entries:
        perms = permissions(identity, subjects)
        clusters = f": {', '.join(identity.clusters)}" if identity.clusters else ""
        lines += [
            f"    # {identity.name} ({identity.role}{clusters})",
            f"    {{ nkey: {json.dumps(key)}, permissions: {{",
            f"      publish: {{ allow: {_conf_list(perms.publish)} }}",
            f"      subscribe: {{ allow: {_conf_list(perms.subscribe)} }}",
            "    } }",
        ]
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def tls_block(server_dir: Path) -> str:
    """The server's ``tls`` block, with the files as the server sees them under ``server_dir``.

    ``handshake_first``: the TLS handshake comes before the server's INFO, so a client never sends
    anything in plaintext (Hylo's clients default to it: ``HYLO_NATS_TLS_HANDSHAKE_FIRST``)."""
    return (
        "# generated by `hylo bus credentials --tls`\n"
        "tls {\n"
        f"  cert_file: {json.dumps(str(server_dir / 'server-cert.pem'))}\n"
        f"  key_file: {json.dumps(str(server_dir / 'server-key.pem'))}\n"
        f"  ca_file: {json.dumps(str(server_dir / 'ca.pem'))}\n"
        "  handshake_first: true\n"
        "  timeout: 2\n"
        "}\n"
    )


def cluster_tls_block(server_dir: Path) -> str:
    """The ``tls`` block of a NATS cluster's routes (included inside its ``cluster`` block): each node
    presents its certificate and verifies its peers' against the CA, so only a holder of a
    certificate this CA signed can join the cluster."""
    return (
        "# generated by `hylo bus credentials --tls`: routes between the cluster's nodes\n"
        "tls {\n"
        f"  cert_file: {json.dumps(str(server_dir / 'server-cert.pem'))}\n"
        f"  key_file: {json.dumps(str(server_dir / 'server-key.pem'))}\n"
        f"  ca_file: {json.dumps(str(server_dir / 'ca.pem'))}\n"
        "  verify: true\n"
        "  timeout: 2\n"
        "}\n"
    )


def write_credentials(
    folder: Path,
    identities: list[Identity],
    subjects: Subjects,
    *,
    tls: bool = False,
    hosts: tuple[str, ...] = DEFAULT_HOSTS,
    client_dir: Path | None = None,
    server_dir: Path | None = None,
    rotate: Iterable[str] = (),
    new_ca: bool = False,
) -> CredentialSet:
    """Write every identity's seed and env file and the server's blocks into ``folder``.

    ``client_dir``/``server_dir``: where the clients and the server will find these files (a
    container's mount point); both default to ``folder`` itself."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    client_dir = client_dir or folder.resolve()
    server_dir = server_dir or folder.resolve()
    rotated = set(rotate)
    unknown = rotated - {i.name for i in identities}
    if unknown:
        raise ValueError(f"cannot rotate unknown identities: {', '.join(sorted(unknown))}")
    tls_files = write_server_tls(folder, hosts, new_ca=new_ca) if tls else None
    credentials = []
    for identity in identities:
        seed_path = folder / f"{identity.name}.nk"
        key = public_key(_seed_for(seed_path, identity.name in rotated))
        env_path = folder / f"{identity.name}.env"
        env = {
            "HYLO_NATS_NKEY_SEED": str(client_dir / seed_path.name),
            "HYLO_NATS_MANAGE_STREAMS": "true" if permissions(identity, subjects).manage_streams else "false",
        }
        if tls_files is not None:
            env["HYLO_NATS_TLS_CA"] = str(client_dir / tls_files.ca.name)
        env_path.write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
        credentials.append(Credential(identity, key, seed_path, env_path))
    auth_conf = folder / AUTH_CONF
    auth_conf.write_text(
        authorization_block([(c.public_key, c.identity) for c in credentials], subjects), encoding="utf-8"
    )
    tls_conf = None
    if tls_files is not None:
        tls_conf = folder / TLS_CONF
        tls_conf.write_text(tls_block(server_dir), encoding="utf-8")
        (folder / CLUSTER_TLS_CONF).write_text(cluster_tls_block(server_dir), encoding="utf-8")
    manifest = {
        "subject_root": subjects.root,
        "tls": tls,
        "identities": [
            {
                "name": c.identity.name,
                "role": c.identity.role,
                "clusters": list(c.identity.clusters),
                "public_key": c.public_key,
                "publish": list(permissions(c.identity, subjects).publish),
                "subscribe": list(permissions(c.identity, subjects).subscribe),
            }
            for c in credentials
        ],
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return CredentialSet(folder, tuple(credentials), auth_conf, tls_files, tls_conf)


def read_env_file(path: Path) -> dict[str, str]:
    """The ``KEY=value`` lines of an identity's env file."""
    env: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}:{number}: expected KEY=value, got {line!r}")
        env[key.strip()] = value.strip()
    return env
