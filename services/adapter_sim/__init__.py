"""A simulated cluster that the pipeline schedules as if it were a live one ("simulated Slurm").

Why it exists: the services (featurizer, prioritizer, placer) must be exercised end to end without a
real cluster, and their decisions must be measurable against the base policies on the same jobs.
Hylo's own simulator plays the cluster and its scheduler (EASY backfill); at every scheduling cycle
the queue order comes from the pipeline over the real bus (``RemotePolicy``), and every finished job
is reported as a ``JobOutcome``. See ``docs/adapter-sim.md``.
"""
