"""`python -m services.adapter_sim`: replay a workload once through a running pipeline.

Settings come from ``HYLO_*`` (``AdapterSimSettings``, ``BusSettings``); the featurizer,
prioritizer and placer must already be running on the same bus with the cluster in
``HYLO_CLUSTERS``. Prints one JSON document: the run's counters and the pipeline's metrics against
the base policy's on the same jobs. ``hylo run`` does all of this with a local pipeline.
"""

from __future__ import annotations

import asyncio
import json
import sys

from pydantic import ValidationError

from services.adapter_sim.errors import AdapterError
from services.adapter_sim.replay import compare_with_base, load_workload, replay, sim_config
from services.adapter_sim.settings import AdapterSimSettings
from services.adapter_sim.snapshot import SnapshotError
from shared.bus import BusSettings
from shared.sim.applied import RefusedStart


def main() -> int:
    try:
        settings = AdapterSimSettings()
        bus = BusSettings()
        work = load_workload(settings)
        run = asyncio.run(replay(bus, settings, work))
    except (ValidationError, ValueError, AdapterError, SnapshotError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RefusedStart as err:  # a decision started a job where it does not fit: say which
        print(f"error: the simulated cluster refused a decision: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    cmp = compare_with_base(run, work, sim_config(settings))
    report = {
        "cluster": run.cluster,
        "workload": work.name,
        "jobs": len(work.bound.jobs),
        "base_policy": run.base_policy,
        "wall_s": run.wall_s,
        "stats": run.stats.summary(),
        "differing_starts": cmp.differing_starts,
        "differing_nodes": cmp.differing_nodes,
        "pipeline": cmp.pipeline.to_json_dict(),
        "base": cmp.base.to_json_dict(),
    }
    print(json.dumps(report, indent=2, allow_nan=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
