"""Who may say what on the bus: one identity per service role, with the subjects it may use.

Why: without identities anyone who can reach NATS controls the pipeline (issue 20: one raw message
retired the current model, forged decisions made the Slurm adapter run ``scontrol`` in an attacker's
order). With them the server itself refuses a message from the wrong sender before any service
sees it: a featurizer can publish only feature matrices, only the trainer (the registry) and the
admin can announce models, only the placer can publish placement decisions, and an adapter can
publish snapshots, outcomes and push events only of its own clusters.

What is granted, and why it is shaped so:
- **publish** is what matters for integrity: each role's own output subjects, dead letters (any stage
  may refuse any cluster's message; a dead letter only points at the stored original, so a forged
  one cannot inject data: ``hylo deadletters replay`` re-reads the original from its stream), and the
  JetStream API calls the role's consumers need on the streams it reads (create/inspect its
  consumers, fetch, ack, read a stored message). Creating, updating, purging or deleting streams is
  the admin's alone (``hylo bus init``); the other roles wait for the streams.
- **subscribe**: reply inboxes and the subjects of the streams the role reads (the snapshot cache
  and decode-ahead read snapshots and matrices as core NATS messages).
- **membership**: the featurizer, prioritizer and placer replicas announce themselves on their
  group's core subject (``<root>.members.<role>``), so that each cluster has one owner among them.
- **large payloads** (``shared.bus.large``): every role but the trainer's may write objects into the
  root's bucket (its chunk and info subjects) and read them (direct gets, the info of the bucket's
  stream). Object names are not per cluster or kind, so a role can only be kept out of the bucket
  as a whole: what a forged object can do is bounded by the reference that names it, which carries
  the whole payload's sha256 (a forged or overwritten object is dead-lettered as corrupt).
The admin identity (operators, ``hylo models``, ``hylo deadletters``, ``hylo bus init``) may do
everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from shared.bus.membership import members_subject
from shared.bus.streams import large_bucket, large_stream, stream_name
from shared.schemas.subjects import KINDS, Kind, Subjects, validate_cluster_name

Role = Literal["admin", "adapter", "featurizer", "prioritizer", "placer", "trainer"]
ROLES: tuple[Role, ...] = get_args(Role)

#: the stream kinds each role reads (consumers, stored messages, core subscriptions)
READS: dict[Role, tuple[Kind, ...]] = {
    "admin": (),
    "adapter": ("placements", "dead"),
    "featurizer": ("snapshots", "outcomes"),
    "prioritizer": ("features", "models", "snapshots"),
    # the placer's process also runs the recorder, which stores every kind below
    "placer": ("priorities", "snapshots", "features", "placements", "outcomes", "models", "shadows"),
    "trainer": ("models",),
}
#: the kinds each role publishes, for every cluster (adapters: only their own clusters, below)
WRITES: dict[Role, tuple[Kind, ...]] = {
    "admin": (),
    "adapter": (),
    "featurizer": ("features",),
    "prioritizer": ("priorities", "shadows"),
    "placer": ("placements",),
    "trainer": ("models",),
}
#: what an adapter publishes for each of its clusters
ADAPTER_WRITES: tuple[Kind, ...] = ("snapshots", "outcomes")
#: the roles whose replicas split the clusters between them and announce themselves to each other
#: on their group's subject (``shared.bus.membership``; the group is the service's name)
SHARDED: tuple[Role, ...] = ("featurizer", "prioritizer", "placer")
#: the push-event subject's last token (core NATS, not stored: shared by slurmctld's hooks' relay)
EVENTS = "events"
#: the prefix of reply subjects (nats-py's default inbox prefix)
INBOX = "_INBOX.>"


class IdentityError(ValueError):
    """An identity that cannot be built (unknown role, an adapter without clusters, a bad name)."""


@dataclass(frozen=True)
class Identity:
    """One credential: its name (the file stem), its role and, for adapters, its clusters."""

    name: str
    role: Role
    clusters: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise IdentityError(
                f"identity {self.name!r}: unknown role {self.role!r}; expected one of {ROLES}"
            )
        if self.role == "adapter" and not self.clusters:
            raise IdentityError(f"identity {self.name!r}: an adapter needs the clusters it speaks for")
        for cluster in self.clusters:
            validate_cluster_name(cluster)
        validate_cluster_name(self.name)  # the same character set keeps file names and logs safe


@dataclass(frozen=True)
class Permissions:
    """The subjects an identity may publish to and subscribe to (NATS ``allow`` lists)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    #: whether the identity may create and update streams (``BusSettings.nats_manage_streams``)
    manage_streams: bool = False


def _stream_api(stream: str) -> list[str]:
    """The JetStream API subjects a consumer of ``stream`` needs (create, inspect, fetch, ack, get)."""
    return [
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.INFO.{stream}.>",
        f"$JS.API.CONSUMER.DELETE.{stream}.>",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.>",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def _large_api(subjects: Subjects) -> list[str]:
    """Writing and reading the root's object-store bucket (``shared.bus.large``)."""
    bucket, stream = large_bucket(subjects), large_stream(subjects)
    return [
        f"$O.{bucket}.C.>",
        f"$O.{bucket}.M.>",
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
    ]


def permissions(identity: Identity, subjects: Subjects) -> Permissions:
    """The permissions of ``identity`` in the namespace ``subjects``."""
    if identity.role == "admin":
        return Permissions(publish=(">",), subscribe=(">",), manage_streams=True)
    publish = ["$JS.API.INFO"]
    publish += [f"$JS.API.STREAM.INFO.{stream_name(subjects, kind)}" for kind in KINDS]
    publish.append(subjects.all_clusters("dead"))
    subscribe = [INBOX]
    for kind in READS[identity.role]:
        publish += _stream_api(stream_name(subjects, kind))
        if identity.role == "adapter":  # only its own clusters' decisions and dead letters
            subscribe += [subjects.of(c, kind) for c in identity.clusters]
        else:
            subscribe.append(subjects.all_clusters(kind))
    publish += [subjects.all_clusters(kind) for kind in WRITES[identity.role]]
    if identity.role != "trainer":  # the trainer announces models: small, and it reads no big kind
        publish += _large_api(subjects)
    if identity.role in SHARDED:  # its replicas split the clusters (shared.bus.membership)
        publish.append(members_subject(subjects, identity.role))
        subscribe.append(members_subject(subjects, identity.role))
    for cluster in identity.clusters:
        publish += [subjects.of(cluster, kind) for kind in ADAPTER_WRITES]
        events = f"{subjects.prefix}.{cluster}.{EVENTS}"
        publish.append(events)
        subscribe.append(events)
    return Permissions(publish=tuple(dict.fromkeys(publish)), subscribe=tuple(dict.fromkeys(subscribe)))


def standard_identities(clusters: tuple[str, ...]) -> list[Identity]:
    """The identities of a deployment: admin, the pipeline, the trainer, one adapter per cluster."""
    found = [Identity("admin", "admin")]
    found += [Identity(role, role) for role in ("featurizer", "prioritizer", "placer", "trainer")]
    found += [Identity(f"adapter-{c}", "adapter", (c,)) for c in clusters]
    return found
