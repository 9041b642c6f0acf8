"""The scheduling core that the simulator, the policies, the placers and the services share.

Why its own package: the simulator (``shared.sim``) and the pipeline's stages schedule on the same
cluster model, and the policies, metrics and feature views read it; keeping it below all of them
lets every package import only downward (``tests/test_layers.py``).

- ``state``: free resources per node and GPU (``ClusterState``, ``GroupState``, ``Alloc``);
- ``binding``: jobs bound to the node groups they may run on (``BoundWorkload``, ``bind_jobs``);
- ``placement``: first-fit and best-fit node placers and EASY reservation caps (``Caps``);
- ``pinning``: which nodes an EASY reservation pins;
- ``releases``: per-node release profiles of running jobs, for reservations;
- ``partition``: row classes of per-job columns;
- ``result``: a simulation's schedule (``SimResult``);
- ``running``: compiled sorted insert/delete of running jobs (shared with the feature views);
- ``workload_memo``: per-workload caches.
"""
