"""Bus settings (``HYLO_NATS_*`` and friends): connection, stream retention, redelivery.

Why one class: every service connects the same way and must agree on stream limits (a stream is
created by whichever service starts first, so two services with different limits would fight over
its configuration). Environment variables use the project-wide ``HYLO_`` prefix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from shared.schemas.limits import Limits, LimitSettings


class BusSettings(LimitSettings):
    """NATS connection and JetStream policy shared by every service, and the message limits
    (``LimitSettings``: ``HYLO_MAX_JOBS``, ``HYLO_MAX_MESSAGE_BYTES``, ...) every service decodes
    under."""

    model_config = SettingsConfigDict(env_prefix="HYLO_", extra="ignore")

    nats_url: str = Field(default="nats://127.0.0.1:4222", description="comma-separated server URLs")
    nats_name: str = Field(default="hylo", description="client name shown by the server")
    nats_token: SecretStr | None = Field(default=None, description="token authentication")
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    nats_creds: Path | None = Field(default=None, description="NATS credentials (.creds) file")
    nats_nkey_seed: Path | None = Field(
        default=None,
        description="file holding this identity's NKEY seed (written by `hylo bus credentials`); the "
        "server knows only its public key and the subjects it may use",
    )
    nats_tls_ca: Path | None = Field(
        default=None, description="CA bundle that signed the server's certificate (asks for TLS)"
    )
    nats_tls_cert: Path | None = Field(
        default=None, description="client certificate, for servers that verify clients (asks for TLS)"
    )
    nats_tls_key: Path | None = Field(default=None, description="the client certificate's private key")
    nats_tls_handshake_first: bool = Field(
        default=True,
        description="with TLS, start the TLS handshake before the server says anything (the server's "
        "tls block needs handshake_first: true), so nothing, credentials included, ever travels in "
        "plaintext and a server without TLS is refused; off: upgrade after the server's INFO, refusing "
        "a server that does not offer TLS",
    )
    nats_manage_streams: bool = Field(
        default=True,
        description="create and update the JetStream streams at start-up; identities without the "
        "right (`hylo bus credentials` sets false for all but admin) wait for the streams instead",
    )
    nats_streams_wait_s: float = Field(
        default=60.0, gt=0, description="how long an identity that cannot create streams waits for them"
    )
    nats_connect_timeout_s: float = Field(default=2.0, gt=0)
    nats_max_reconnect_attempts: int = Field(
        default=60, ge=-1, description="per server, also on the first connect; -1 = retry forever"
    )
    nats_reconnect_wait_s: float = Field(default=2.0, ge=0)
    nats_gone_budget_s: float = Field(
        default=120.0,
        gt=0,
        description="how long a running service waits for a lost NATS connection to come back before it "
        "exits with status 3 (so that a restart-on-failure supervisor restarts it)",
    )
    subject_root: str = Field(default="hylo", description="first subject token (namespace)")
    storage: Literal["file", "memory"] = "file"
    stream_replicas: int = Field(
        default=1,
        ge=1,
        le=5,
        description="copies of every stream (and its consumers) in a NATS cluster: 3 survives the loss of "
        "one server with nothing lost (deploy/nats: three nodes); 1 on a single server",
    )
    stream_max_age_s: float = Field(default=24 * 3600.0, gt=0, description="work streams keep a day")
    stream_max_bytes: int = Field(default=1 << 30, gt=0, description="per work stream")
    stream_max_msgs: int = Field(default=1_000_000, gt=0, description="per work stream")
    snapshots_latest_only: bool = Field(
        default=True, description="snapshot stream keeps only the newest snapshot per cluster"
    )
    dead_max_age_s: float = Field(default=14 * 24 * 3600.0, gt=0, description="dead letters keep two weeks")
    dead_max_bytes: int = Field(default=256 << 20, gt=0)
    stream_root_max_bytes: int = Field(
        default=4 << 30,
        gt=0,
        description="storage all streams of one subject root reserve together (file or memory); each "
        "stream gets its share (shared.bus.streams.STREAM_SHARES), at most stream_max_bytes "
        "(dead_max_bytes for dead letters). Subject roots x this must fit the server's max_file_store",
    )
    duplicate_window_s: float = Field(default=120.0, gt=0, description="Nats-Msg-Id dedup window")
    ack_wait_s: float = Field(default=30.0, gt=0, description="redeliver if not acked within")
    max_deliver: int = Field(default=5, ge=1, description="handler attempts before dead-lettering")
    nak_delay_s: float = Field(default=0.5, ge=0, description="redelivery delay after a handler error")
    retry_window_s: float = Field(
        default=900.0,
        gt=0,
        description="how long a message whose handler finds a dependency unavailable (the recorders: "
        "the database) is retried, with back-off, before it is dead-lettered",
    )
    retry_backoff_s: float = Field(
        default=0.5, gt=0, description="first redelivery delay while a dependency is unavailable"
    )
    retry_backoff_max_s: float = Field(
        default=5.0,
        gt=0,
        description="longest redelivery delay while a dependency is unavailable (the delay doubles up "
        "to it): the most a write waits after the dependency is back",
    )
    max_ack_pending: int = Field(default=1000, ge=1)
    large_payload_bytes: int = Field(
        default=0,
        ge=0,
        description="a message whose encoding is larger travels through the JetStream object store "
        "(shared.bus.large), a small reference in its stream; 0 = the server's max_payload less "
        "16 KiB for the headers",
    )
    large_chunk_bytes: int = Field(
        default=0,
        ge=0,
        description="bytes per object-store chunk of such a message; 0 = the same as the inline limit",
    )
    max_sequence_jump: int = Field(
        default=10**9,
        ge=1,
        description="how far a snapshot's or decision's sequence may move from the newest adopted one; "
        "beyond that it is dead-lettered, not adopted (shared.bus.sequence)",
    )
    consumer_check_s: float = Field(
        default=5.0, gt=0, description="while idle, how often a consumer checks it still exists"
    )
    fetch_batch: int = Field(default=64, ge=1)
    fetch_timeout_s: float = Field(default=0.5, gt=0)
    shard_clusters: bool = Field(
        default=True,
        description="replicas of a stage split the clusters between them (a durable consumer per cluster, "
        "an owner per cluster: shared.service.shards); false: every replica takes any cluster's message",
    )
    shard_heartbeat_s: float = Field(
        default=1.0, gt=0, description="how often a replica tells the others of its stage it is alive"
    )
    shard_expiry_s: float = Field(
        default=5.0,
        gt=0,
        description="a replica not heard from for this long is gone: its clusters go to the others",
    )
    shard_fetch_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description="idle fetch wait of a per-cluster consumer: each idle one polls the server this often "
        "(a message is returned as soon as it arrives); longer = less idle CPU, slower stop; at most half "
        "of ack_wait_s is used",
    )
    shard_sweep_s: float = Field(
        default=30.0,
        gt=0,
        description="how often the first replica looks for messages of clusters without a spec (refused)",
    )


def message_limits(settings: BusSettings, max_payload: int | None = None) -> Limits:
    """The limits messages are decoded under: the settings' sizes and counts.

    Why settings: a site with 20,000 pending jobs raises ``HYLO_MAX_JOBS`` without a code change;
    every service, the replay and the CLI build their limits here, so they all agree. The server's
    ``max_payload`` (``max_payload``, kept for the callers that pass it) no longer caps the message
    size: a message above it travels through the object store (``shared.bus.large``), and
    ``max_message_bytes`` bounds it whole."""
    del max_payload
    return settings.limits()


def retry_delays(settings: BusSettings) -> list[float]:
    """The redelivery delays of a message whose dependency is unavailable, one per failed delivery.

    Why a fixed schedule rather than a clock: a delivery carries only its count, so "retried for the
    window" has to be a count of deliveries that JetStream itself enforces (the consumer's
    ``max_deliver``); the delays double from ``retry_backoff_s`` up to ``retry_backoff_max_s`` until
    they add up to ``retry_window_s``. The last delivery is the one that dead-letters.
    """
    delays: list[float] = []
    delay, total = settings.retry_backoff_s, 0.0
    while total < settings.retry_window_s:
        step = min(delay, settings.retry_backoff_max_s)
        delays.append(step)
        total += step
        delay *= 2.0
    return delays
