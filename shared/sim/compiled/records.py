"""The compiled core's named record types: what ``kernels.simulate`` reads, keeps and writes.

Why named records: the event loop used to take 33 positional arrays and read numbered slots
(``jf[j, 3]``, ``S[5]``, ``buf[12][0]``), which a newcomer had to decode against a table in a
comment. Numba compiles both kinds of record used here to plain loads and stores:

- ``typing.NamedTuple`` of arrays (and of scalars, for ``Config``): a group of arrays passed to
  compiled functions as one argument, read by field name (immutable: the arrays change, never
  which arrays they are);
- numpy structured dtypes (``JOB``, ``LOOP``, ``CYCLE``, ``FAIRSHARE``, ``ASK``): one record per
  job, and one-record arrays for the mutable scalars the loop keeps between its functions
  (``out.counts[0].cycles += 1`` writes the array).

This module imports no numba (the compiled core is optional): ``run`` builds the inputs and
outputs with it, ``kernels`` allocates its own state with it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: policy kinds (``Config.kind``): how a job's key is computed at a cycle
#: (P_EXTERNAL: keys from Python at every cycle, the loop calling back to ask for them)
P_STATIC, P_WFP3, P_UNICEP, P_MULTIFACTOR, P_EXTERNAL = range(5)
#: backfill modes (``Config.mode``)
M_EASY, M_GREEDY, M_NONE = range(3)

_F = np.float64
_I = np.int64

#: one job (the run's jobs are numbered from 0, ``run._Prepared``)
JOB = np.dtype(
    [
        ("submit", _F),  # arrival time
        ("runtime", _F),  # true runtime (the end of a started job)
        ("est", _F),  # runtime estimate (reservations, retirement, the estimated-end order)
        ("key", _F),  # static policy key (P_STATIC; an external policy's hint keys)
        ("wfp3_est", _F),  # WFP3: max(estimate, 1)
        ("wfp3_width", _F),  # WFP3: max(GPUs, 1)
        ("unicep_denom", _F),  # UNICEP: log2(max(GPUs, 1) + 1) x max(estimate, 1)
        ("mf_static", _F),  # multifactor: the size, partition and QoS terms of the priority
        ("mf_demand", _F),  # multifactor: what the job adds to its user's running usage
        ("ext_key", _F),  # P_EXTERNAL: the key the policy gave the job in the current cycle
        ("gpus", _I),  # whole GPUs asked (a share: 1)
        ("milli", _I),  # milli-GPUs per GPU (1000: whole GPUs, less: a share of one GPU)
        ("cpus", _I),  # milli-CPUs
        ("mem", _I),  # MiB
        ("shape", _I),  # GPU request and eligible groups (retirement works per shape)
        ("gclass", _I),  # class of eligible node groups (``Cluster.class_ptr``)
        ("order", _I),  # order class: jobs the policy orders alike (``Orders``)
        ("user", _I),  # multifactor: the user
    ]
)

#: the event loop's scalars (``Schedule.counts``: one record, read back by ``run``)
LOOP = np.dtype(
    [
        ("next_job", _I),  # the next job to arrive
        ("n_queued", _I),
        ("n_ends", _I),  # entries of the completion heap (``Core.ends``)
        ("n_running", _I),  # entries of the estimated-end order (``Core.by_est``)
        ("n_active", _I),  # order classes with a queued job (``Queue.active``)
        ("n_sorted", _I),  # static keys: heads kept sorted (``Queue.sorted``)
        ("busy_milli", _I),  # busy milli-GPUs (the timeline)
        ("all_blocked", np.bool_),  # the last cycle left every queued job unable to start
        ("cycles", _I),
        ("n_timeline", _I),
        ("error", _I),  # jobs that can never start on the idle cluster (the run stops)
    ]
)

#: one scheduling cycle's scalars (``Visit.counts``: one record, reset at every cycle)
CYCLE = np.dtype(
    [
        ("any_blocked", np.bool_),  # some shape fits nowhere (``Visit.blocked``)
        ("live", _I),  # entries left to visit whose shape is not retired whole (0: done)
        ("n_heap", _I),  # entries of the visit heap (``Visit.heap``)
        ("n_heads", _I),  # clock-dependent heads keyed this cycle (``Visit.heads``)
        ("n_unlisted", _I),  # of them, not yet put on the visit heap
        ("want", _I),  # the size of the next chunk put on the visit heap
        ("bound_key", _F),  # the largest (key, job) put on the heap so far ...
        ("bound_job", _I),
        ("bound_set", np.bool_),  # ... if any
        ("at_sorted", _I),  # static keys: the next sorted head to visit
        ("n_res", _I),  # reservations made
        ("soft", np.bool_),  # a job failed only on a reservation's caps
        ("n_rec", _I),  # failures recorded for retirement (``Visit.rec_*``)
        ("n_touched", _I),  # static keys: order classes whose head changed (``Queue.touched``)
    ]
)

#: the multifactor policy's parameters and decayed-usage clock (``Fairshare.params``: one record)
FAIRSHARE = np.dtype(
    [
        ("last", _F),  # when the usage was last decayed
        ("lam", _F),  # decay rate (ln 2 / half-life)
        ("version", _F),  # bumped at every decay: the fair-share weights are stale
        ("share", _F),  # each user's normalized share
        ("w_fairshare", _F),  # the fair-share weight
        ("age_per_s", _F),  # the age weight / the max age
        ("max_age", _F),  # seconds
        # 2.0, read from memory so that LLVM keeps the ``pow`` call that Python's ``math.pow``
        # makes instead of rewriting it as ``exp2`` (whose last bit may differ)
        ("two", _F),
        ("weight_version", _F),  # the version the weights were computed at (-1: never)
    ]
)

#: what an external policy is asked (``External.ask``: one record, read by ``run.run_external``)
ASK = np.dtype(
    [
        ("queue_len", _I),  # the queue in ``External.queue``
        ("n_events", _I),  # starts and ends since the last call (``External.event_*``)
        ("n_running", _I),  # the running jobs in ``External.run_*``
        ("lo", _I),  # the run's first job in the workload (added to the jobs Python sees)
        ("static_keys", np.bool_),  # ``JOB.key`` holds the policy's hint keys ...
        ("now", _F),  # the clock of the call
        ("ask_from", _F),  # ... used before this time, and for a queue of one job
    ]
)


class Config(NamedTuple):
    """The run's settings (scalars)."""

    kind: int  # P_*
    mode: int  # M_*
    best_fit: bool  # best-fit placement (else first-fit)
    slack: int  # nodes a gang may span beyond the fewest
    max_res: int  # reservations per cycle (EASY)
    head_chunk: int  # clock-dependent heads put on the visit heap this many at a time first


class Cluster(NamedTuple):
    """The node groups (nodes numbered across groups: group g has nodes base[g]..+nodes[g]) and
    per class of eligible groups its groups, as CSR in the binding's order (which decides ties
    between groups): ``class_groups[class_ptr[c]:class_ptr[c + 1]]``."""

    base: np.ndarray  # per group: its first node
    nodes: np.ndarray  # per group: its node count
    gpus: np.ndarray  # per group: GPUs per node
    cpus: np.ndarray  # per group: milli-CPUs per node
    mem: np.ndarray  # per group: MiB per node
    track: np.ndarray  # per group (bool): tracks GPU shares per physical GPU
    class_ptr: np.ndarray
    class_groups: np.ndarray


class Shapes(NamedTuple):
    """Per shape (a GPU request and its eligible groups)."""

    gpus: np.ndarray
    milli: np.ndarray
    gclass: np.ndarray  # class of eligible groups
    min_cpus: np.ndarray  # the least milli-CPUs any job of the shape asks (whole workload)
    min_mem: np.ndarray  # the least MiB any job of the shape asks (whole workload)


class Orders(NamedTuple):
    """The order classes' jobs in arrival order: ``jobs[ptr[b]:ptr[b + 1]]`` for class b, and
    per job its position there (``pos``)."""

    ptr: np.ndarray
    jobs: np.ndarray
    pos: np.ndarray


class Fairshare(NamedTuple):
    """The multifactor policy's state (empty-ish for other policies)."""

    params: np.ndarray  # one FAIRSHARE record
    usage: np.ndarray  # per user: decayed usage
    running: np.ndarray  # per user: the running jobs' demand
    weight: np.ndarray  # per user: w.fairshare x 2^(-U/S) at ``weight_version``


class Free(NamedTuple):
    """The cluster's free resources (the live state, and a scratch copy for reservations)."""

    whole: np.ndarray  # per node: free whole GPUs
    cpus: np.ndarray  # per node: free milli-CPUs
    mem: np.ndarray  # per node: free MiB
    hist: np.ndarray  # per group x free whole GPUs: how many nodes
    group_whole: np.ndarray  # per group: free whole GPUs
    gpu_milli: np.ndarray  # per node x GPU: free milli-GPUs (groups that track shares)
    top_share: np.ndarray  # per node: the largest free milli-GPUs of one GPU (tracked groups)


class Allocs(NamedTuple):
    """Each job's allocation: ``node[ptr[j]:ptr[j] + nodes_used[j]]`` (room for the most nodes
    it may span) and what it takes on each."""

    ptr: np.ndarray
    node: np.ndarray
    whole: np.ndarray
    cpus: np.ndarray
    mem: np.ndarray
    mask: np.ndarray  # the physical GPUs (bits), in groups that track shares


class Schedule(NamedTuple):
    """What the run decides, per job and over time."""

    start: np.ndarray
    end: np.ndarray
    nodes_used: np.ndarray
    group: np.ndarray
    shared_gpu: np.ndarray  # the GPU of a share (-1: none)
    timeline_t: np.ndarray
    timeline_busy: np.ndarray  # busy GPUs
    timeline_queued: np.ndarray
    counts: np.ndarray  # one LOOP record (cycles, error, timeline length ...)


class External(NamedTuple):
    """The exchange with a policy that orders the queue in Python (empty arrays otherwise)."""

    queue: np.ndarray  # the queued jobs of a call, in arrival order
    event_job: np.ndarray  # starts (j) and ends (-j - 1) since the last call
    event_time: np.ndarray
    run_job: np.ndarray  # the running jobs (from ``lo``), sorted by estimated end, ties by start
    run_group: np.ndarray
    run_end: np.ndarray
    ask: np.ndarray  # one ASK record


class Entries(NamedTuple):
    """(key, job, order class) triples, as a heap or a sorted list on (key, job)."""

    key: np.ndarray
    job: np.ndarray
    cls: np.ndarray


class Caps(NamedTuple):
    """This cycle's reservations: the caps later jobs meet on a plan's nodes, and per group."""

    whole: np.ndarray  # per node: whole GPUs a later job may take (BIG: no cap)
    cpus: np.ndarray
    mem: np.ndarray
    blocked: np.ndarray  # per node: a plan node (no share may be placed there)
    when: np.ndarray  # per group: its reservation's time (INF: none)
    covered: np.ndarray  # per group: in a pool of groups that holds a reservation
    applies: np.ndarray  # per group: the caps apply to the job being placed
    never: np.ndarray  # per group: all False (placement without caps)
    in_set: np.ndarray  # per group: scratch (the groups of a replay)


class Buffers(NamedTuple):
    """Scratch of the placer: a gang's walk, and the placement it returns."""

    usable: np.ndarray  # per node of a group: GPUs a gang may take there
    order: np.ndarray  # a gang walk's nodes, most usable first
    gang_node: np.ndarray  # a gang: nodes, GPUs, CPUs, memory, GPU masks
    gang_whole: np.ndarray
    gang_cpus: np.ndarray
    gang_mem: np.ndarray
    gang_mask: np.ndarray
    node: np.ndarray  # the placement: nodes, whole GPUs, CPUs, memory, GPU masks
    whole: np.ndarray
    cpus: np.ndarray
    mem: np.ndarray
    mask: np.ndarray
    shared: np.ndarray  # [the GPU of a share, -1: none]
    later: np.ndarray  # groups left for a whole free GPU (a share, best-fit)


class Queue(NamedTuple):
    """The queue by order class: each class's head (its first queued job) and, with static keys,
    the heads kept sorted by (key, job) between cycles (the Python loop's ``Heads``)."""

    queued: np.ndarray  # per job
    shape_jobs: np.ndarray  # per shape: queued jobs
    shape_heads: np.ndarray  # per shape: order classes with a head
    first: np.ndarray  # per class: the position of its first queued job in ``Orders.jobs``
    head: np.ndarray  # per class: the head (-1: none queued)
    active: np.ndarray  # the classes with a head (``LOOP.n_active`` of them) ...
    active_at: np.ndarray  # ... and where each is in ``active``
    sorted: Entries  # static keys: the heads by (key, job) (``LOOP.n_sorted``)
    touched: np.ndarray  # per class: its head changed in this cycle ...
    head_before: np.ndarray  # ... it was this one
    touched_list: np.ndarray  # ... the classes (``CYCLE.n_touched``)


class Visit(NamedTuple):
    """A cycle's scratch: which shapes fit nowhere or are retired, the failures that retire
    later jobs, and the heads in visit order."""

    counts: np.ndarray  # one CYCLE record
    blocked: np.ndarray  # per shape: its GPUs fit nowhere now
    dead: np.ndarray  # per shape: retired whole
    in_order: np.ndarray  # per shape: its entries in the visit order
    rec_head: np.ndarray  # per shape: its latest recorded failure (-1: none) ...
    rec_next: np.ndarray  # ... the one before
    rec_cpus: np.ndarray  # ... a failure's CPUs, memory and time threshold: a later job of
    rec_mem: np.ndarray  # the shape that asks at least as much and runs longer than the
    rec_thr: np.ndarray  # threshold cannot start either
    first_key: np.ndarray  # per class of groups: the first (key, job) of its blocked shapes
    first_job: np.ndarray
    first_seen: np.ndarray  # per class of groups: that first job was visited
    heap: Entries  # the visit heap
    heads: Entries  # clock-dependent keys: every head keyed
    select: Entries  # the selection of a chunk of heads (a max-heap)
    partial: np.ndarray  # per group: the largest free share on a partly used GPU


#: the fields of ``kernels.Core`` (a numba structref: everything one run of the loop reads and
#: keeps, passed to its functions as one pointer), in the order its constructor takes them
CORE_FIELDS = (
    "jobs",  # JOB records
    "cluster",  # Cluster
    "shapes",  # Shapes
    "orders",  # Orders
    "cfg",  # Config
    "fair",  # Fairshare
    "free",  # Free: the live state
    "scratch",  # Free: a reservation's replay
    "caps",  # Caps
    "buf",  # Buffers
    "allocs",  # Allocs
    "out",  # Schedule
    "ends",  # Entries: completions, a heap on (true end, job)
    "by_est",  # Entries: running jobs by estimated end, ties in start order (no classes)
    "queue",  # Queue
    "visit",  # Visit
    "ext",  # External
)
