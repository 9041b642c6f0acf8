"""How much can any order of the same information gain over ``sjf-pred``? (issue 19, evidence)

    .venv/bin/python bench/order_headroom.py --trace philly \
        --cluster docs/results/clusters/philly-rltune.toml --estimates history
    .venv/bin/python bench/order_headroom.py --trace hpc2n --estimates trace
    .venv/bin/python bench/order_headroom.py --trace philly ... --quick      # 16/16/32 windows

Why: the learned prioritizer ties ``sjf-pred`` (docs/results/learned-prioritizer.md), the issue
asks for +10% on wait and BSLD. Before a larger model is trained, this measures the headroom with
the information a policy has, in three steps, each on its own windows (chronological: search and
validation windows from the training part, the held-out ones exactly as ``hylo evaluate`` picks
them):

1. **Search** a grid of weighted orders over the predictor's point, band, the job's width and its
   waiting time (``bench/support/order_family.py``) on search windows; the best few by the mean
   of the two gains go on.
2. **Select** among them on validation windows; the chosen member is scored once on the held-out
   windows with paired 95% bootstrap CIs against ``sjf-pred``, beside two bounds that no policy
   can reach: the per-window best member in hindsight (what choosing among these orders per
   window, clairvoyantly, would give) and members that mix the true runtime into the prediction
   (what better runtime knowledge is worth, with the mixed runtimes' MALE).
3. Writes ``<out>/<trace>.json`` and ``<out>/<trace>.png`` (gain against MALE) and prints a table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support.order_family import WeightedPredictionOrder, Weights, blended_male  # noqa: E402
from shared.metrics import Window, chronological_split, make_windows  # noqa: E402
from shared.metrics.bootstrap import paired_difference  # noqa: E402
from shared.sim.config import SimConfig  # noqa: E402
from shared.sim.evaluate import PreparedWorkload, evaluate_policies, prepare_workload  # noqa: E402

console = Console()
BASE = "sjf-pred"
METRICS = ("wait", "bsld")
BLENDS = (0.1, 0.25, 0.5, 1.0)


def grid() -> list[Weights]:
    """The search grid: each weight alone over a few values, and the promising pairs."""
    members = [Weights()]
    for name, values in {
        "width": (-0.5, 0.5, 1.0),
        "band": (-0.5, 0.25, 0.5, 1.0),
        "low": (-0.5, 0.5, 1.0),
        "aging": (0.1, 0.3, 1.0),
    }.items():
        members += [Weights(**{name: v}) for v in values]
    for band, aging in itertools.product((0.25, 0.5), (0.1, 0.3)):
        members.append(Weights(band=band, aging=aging))
    for band, width in itertools.product((0.25, 0.5), (-0.5, 0.5)):
        members.append(Weights(band=band, width=width))
    return members


def per_window(
    work: PreparedWorkload, members: dict[str, Weights], windows: list[Window], warmup: int, label: str
) -> dict[str, dict[str, np.ndarray]]:
    """Per-window mean wait and BSLD of ``sjf-pred`` and every member, on the same windows."""
    factories = {name: (lambda _t, w=w, n=name: WeightedPredictionOrder(w, n)) for name, w in members.items()}
    names = [BASE, *members]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(
            f"{label}: {len(names)} orders x {len(windows)} windows", total=len(names) * len(windows)
        )
        done = {"n": 0}

        def tick(_name: str, _k: int) -> None:
            done["n"] += 1
            bar.update(task, completed=done["n"])

        out, _ = evaluate_policies(
            work, names, SimConfig(), windows, warmup=warmup, factories=factories, progress=tick
        )
    return {
        name: {
            "wait": np.array([m.wait_s.mean for m in rows]),
            "bsld": np.array([m.bsld.mean for m in rows]),
        }
        for name, rows in out.items()
    }


def gains(values: dict[str, dict[str, np.ndarray]], name: str) -> dict[str, float]:
    """Relative gains of ``name`` over ``sjf-pred`` on the means (positive = better)."""
    base = values[BASE]
    return {m: float(1.0 - np.nanmean(values[name][m]) / np.nanmean(base[m])) for m in METRICS}


def paired(a: np.ndarray, b: np.ndarray, seed: int) -> dict[str, float]:
    d = paired_difference(a, b, seed=seed)
    return {"gain": d.rel_improvement, "low": d.rel_low, "high": d.rel_high, "frac_better": d.frac_a_better}


def choose(
    work: PreparedWorkload, windows: dict[str, list[Window]], args: argparse.Namespace
) -> dict[str, Any]:
    """Steps 1 and 2: search, then select on validation windows (never on held-out ones)."""
    members = {f"m{k}": w for k, w in enumerate(grid())}
    search = per_window(work, members, windows["search"], args.warmup, "search")
    ranked = sorted(members, key=lambda n: -sum(gains(search, n).values()))
    finalists = {n: members[n] for n in ranked[: args.finalists]}
    valid = per_window(work, finalists, windows["validation"], args.warmup, "validation")
    chosen = max(finalists, key=lambda n: sum(gains(valid, n).values()))
    return {
        "search": [{"weights": members[n].label, **gains(search, n)} for n in ranked],
        "validation": [{"weights": finalists[n].label, **gains(valid, n)} for n in finalists],
        "chosen": finalists[chosen],
        "members": members,
    }


def held_out(
    work: PreparedWorkload,
    chosen: Weights,
    members: dict[str, Weights],
    test: list[Window],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Step 2's scoring on held-out windows: the chosen member, the hindsight bound, the blends."""
    blends = {f"blend{b:g}": Weights(blend=b) for b in BLENDS}
    every = {**members, "chosen": chosen, **blends}
    values = per_window(work, every, test, args.warmup, "held-out")
    base = values[BASE]
    rows: dict[str, Any] = {"chosen": {"weights": chosen.label}}
    # the member with the best mean on the held-out windows themselves: an optimistic bound for
    # any static weights (chosen where they are scored), never a result
    top = max(members, key=lambda n: sum(gains(values, n).values()))
    rows["best-static"] = {"weights": f"{members[top].label} (chosen on these windows)"}
    for m in METRICS:
        rows["chosen"][m] = paired(values["chosen"][m], base[m], args.seed)
        rows["best-static"][m] = paired(values[top][m], base[m], args.seed)
        best = np.nanmin(np.stack([values[n][m] for n in members]), axis=0)
        rows.setdefault("hindsight", {"weights": f"per-window best of {len(members)} members"})[m] = paired(
            best, base[m], args.seed
        )
    rows["members"] = {members[n].label: gains(values, n) for n in members}
    jobs = work.bound.jobs
    in_test = np.concatenate([np.arange(w.start, w.stop) for w in test])
    for name, w in blends.items():
        rows[name] = {
            "weights": w.label,
            "male": blended_male(jobs.predicted[in_test], jobs.runtime[in_test], w.blend),
        }
        for m in METRICS:
            rows[name][m] = paired(values[name][m], base[m], args.seed)
    rows["sjf-pred"] = {
        "male": blended_male(jobs.predicted[in_test], jobs.runtime[in_test], 0.0),
        **{f"{m}_mean": float(np.nanmean(base[m])) for m in METRICS},
        "no_wait_share": float(np.mean(base["wait"] == 0.0)),
    }
    return rows


def windows_for(n: int, args: argparse.Namespace) -> dict[str, list[Window]]:
    """Search and validation windows from the training part (its first 80% and last 20%), the
    held-out ones from after it, chosen as ``hylo evaluate`` chooses them."""
    train, test = chronological_split(n, args.train_fraction)
    cut = train.start + int(len(train) * 0.8)
    size = args.window_size
    return {
        "search": make_windows(range(train.start + args.warmup, cut), size, args.search_windows, seed=1),
        "validation": make_windows(range(cut, train.stop), size, args.validation_windows, seed=2),
        "test": make_windows(test, size, args.test_windows, seed=args.seed),
    }


def cell(row: dict[str, float]) -> str:
    return f"{row['gain']:+.1%} [{row['low']:+.1%}, {row['high']:+.1%}]"


def print_table(trace: str, held: dict[str, Any]) -> None:
    table = Table(title=f"{trace}: held-out gain over sjf-pred (paired 95% CI)")
    for col in ("order", "weights", "MALE", "wait", "BSLD"):
        table.add_column(col)
    base = held["sjf-pred"]
    table.add_row(
        "sjf-pred",
        f"wait {base['wait_mean']:.0f} s, BSLD {base['bsld_mean']:.2f}",
        f"{base['male']:.2f}",
        "-",
        "-",
    )
    for name, row in held.items():
        if name in ("sjf-pred", "members"):
            continue
        male = f"{row['male']:.2f}" if "male" in row else ""
        table.add_row(name, row["weights"], male, cell(row["wait"]), cell(row["bsld"]))
    console.print(table)


def plot(trace: str, held: dict[str, Any], path: Path) -> None:
    """Gain over ``sjf-pred`` against the MALE of the runtimes the order sorts by."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in held if n.startswith("blend")]
    male = [held["sjf-pred"]["male"]] + [held[n]["male"] for n in names]
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, colour in zip(METRICS, ("tab:blue", "tab:orange"), strict=True):
        g = [0.0] + [100 * held[n][m]["gain"] for n in names]
        lo = [0.0] + [100 * (held[n][m]["gain"] - held[n][m]["low"]) for n in names]
        hi = [0.0] + [100 * (held[n][m]["high"] - held[n][m]["gain"]) for n in names]
        ax.errorbar(
            male, g, yerr=[lo, hi], marker="o", capsize=3, color=colour, label=f"{m}: true runtime mixed in"
        )
        ax.axhline(
            100 * held["chosen"][m]["gain"],
            color=colour,
            linestyle="--",
            label=f"{m}: reweighted order chosen on validation",
        )
    ax.axhline(10, color="grey", linestyle=":", label="issue's bar (+10%)")
    ax.set_xlabel("median absolute log error of the runtimes ordered by")
    ax.set_ylabel("gain over sjf-pred (%)")
    ax.set_title(f"{trace}: what runtime knowledge is worth")
    ax.invert_xaxis()
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--cluster", default=None)
    p.add_argument("--estimates", default="history", help="what EASY reserves with: history | trace | noisy")
    p.add_argument("--train-fraction", type=float, default=0.68)
    p.add_argument("--window-size", type=int, default=256)
    p.add_argument("--warmup", type=int, default=256)
    p.add_argument("--search-windows", type=int, default=40)
    p.add_argument("--validation-windows", type=int, default=40)
    p.add_argument("--test-windows", type=int, default=100)
    p.add_argument("--finalists", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="16 search, 16 validation, 32 held-out windows")
    p.add_argument("--out", type=Path, default=ROOT / "docs/results/order-headroom")
    args = p.parse_args()
    if args.quick:
        args.search_windows, args.validation_windows, args.test_windows = 16, 16, 32
    t0 = time.perf_counter()
    work = prepare_workload(args.trace, args.cluster, estimates=args.estimates, predictions=True)
    windows = windows_for(len(work.bound.jobs), args)
    picked = choose(work, windows, args)
    held = held_out(work, picked["chosen"], picked["members"], windows["test"], args)
    print_table(args.trace, held)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "trace": args.trace,
        "workload": work.name,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "windows": {k: len(v) for k, v in windows.items()},
        "search": picked["search"],
        "validation": picked["validation"],
        "held_out": held,
        "seconds": time.perf_counter() - t0,
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
    }
    (args.out / f"{args.trace}.json").write_text(json.dumps(record, indent=2) + "\n")
    plot(args.trace, held, args.out / f"{args.trace}.png")
    console.print(f"wrote {args.out / (args.trace + '.json')} and .png in {record['seconds']:.0f} s")


if __name__ == "__main__":
    main()
