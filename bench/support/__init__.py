"""Development support shared by the benchmarks in ``bench/`` and the tests in ``tests/``.

Why here and not in ``shared/``: nothing in it is production code (it starts throwaway servers for
measurements and tests), so it must not be packaged, shipped in the image or checked against the
layers of ``shared/`` and ``services/``; and why not in ``tests/``: the benchmarks use it too, and a
benchmark should not depend on the test suite. ``tests/`` imports it as ``bench.support``; a
benchmark script puts the repository root on ``sys.path`` first, as every script in ``bench/`` does.

- ``postgres.py``: a throwaway PostgreSQL server that can be stopped and started again (standard
  library only);
- ``big_store.py``: a large decisions store, generated and bulk-loaded with COPY;
- ``nats_cluster.py``: a three-node NATS cluster on loopback (failover test and bench).
"""
