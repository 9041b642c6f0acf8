"""The report's shadow mode section: what each shadow model would have done beside what was applied.

A shadow model (``docs/model-registry.md``, "Shadow mode") ranks every snapshot's queue without its
order being applied. Per shadow model version this section shows:

- **snapshots scored**: snapshots in the range the shadow ranked; **compared**: those with at least two
  jobs the applied decision ranked too (a snapshot whose vector was stale has no applied decision);
- **rank agreement** per compared snapshot: Spearman's rho between the applied order and the shadow's
  over the jobs both ranked (1: the same order, 0: unrelated, -1: reversed; both orders are rankings
  without ties, so rho = 1 - 6 sum d^2 / (n (n^2 - 1)) on the ranks re-numbered within those jobs),
  as its mean and percentiles, and drawn as a histogram;
- **top-10 overlap** per compared snapshot: the share of the applied order's first ``k`` jobs that
  are also among the shadow's first ``k`` (``k`` = 10, or the number of jobs when fewer), averaged;
- **waits of each order's top 10**: among finished jobs, the distinct jobs each order put in its
  first 10 in at least one compared snapshot, and their mean wait. These waits are what happened under
  the *applied* order: they say whom each order would have favoured, not what the shadow's order
  would have achieved (no counterfactual: jobs would have started at other times).

The database computes each compared snapshot's rho and overlap and the top-10 waits
(``shared.report.sql.shadow_summaries``); ``spearman`` is the formula it implements, in numpy. This
module draws the section.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.report.aggregates import FloatArray, ShadowSummary
from shared.report.figures import Margins, Plot, _figure, cached, to_png
from shared.report.page import Html, data_uri, el, esc, num_cell, table
from shared.report.sql import TOP_K
from shared.report.stats import percentile


def spearman(applied_rank: FloatArray, shadow_rank: FloatArray) -> float:
    """Spearman's rho of two tie-free rankings of the same jobs (NaN for fewer than two jobs)."""
    n = len(applied_rank)
    if n < 2:
        return float("nan")
    a = np.argsort(np.argsort(applied_rank, kind="stable"), kind="stable").astype(np.float64)
    b = np.argsort(np.argsort(shadow_rank, kind="stable"), kind="stable").astype(np.float64)
    d2 = float(np.sum((a - b) ** 2))
    return 1.0 - 6.0 * d2 / (n * (n * n - 1))


def _mean(values: FloatArray) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _pct(values: FloatArray, q: float) -> float | None:
    return percentile(values, q) if len(values) else None


@cached
def agreement_plot(summaries: Sequence[ShadowSummary]) -> Plot:
    """Histogram of the per-snapshot rank agreement, one outline per shadow model version."""
    fig = _figure(10.0, 3.2, Margins(left=0.8, bottom=0.6, top=0.15))
    ax = fig.subplots()
    bins = [float(b) for b in np.linspace(-1.0, 1.0, 41)]
    for s in summaries:
        if len(s.rho):
            ax.hist(
                s.rho, bins=bins, histtype="step", linewidth=1.8, label=f"{s.model_version} ({len(s.rho)})"
            )
    ax.set_xlim(-1.0, 1.0)
    ax.set_xlabel("Spearman's rho between the applied order and the shadow's (per snapshot)")
    ax.set_ylabel("snapshots")
    ax.grid(alpha=0.3)
    if any(len(s.rho) for s in summaries):
        ax.legend(fontsize=8, loc="upper left")
    return Plot(
        "fig-shadow",
        "Shadow models: rank agreement with the applied order",
        "One value per snapshot the shadow model and the applied decision both ranked; 1 = same order.",
        to_png(fig),
    )


def shadow_section(summaries: Sequence[ShadowSummary]) -> list[Html]:
    """The section's markup: a note when no shadow model scored in the range, else a table and a plot."""
    out = [el("h2", "Shadow mode: candidates scored beside the applied model", id="shadow")]
    if not summaries:
        out.append(
            el(
                "p",
                "No shadow model scored a snapshot in this range (hylo models shadow VERSION turns it on).",
                class_="note",
                id="no-shadow",
            )
        )
        return out
    out.append(
        el(
            "p",
            "Per shadow model version: snapshots it ranked; those the applied decision ranked too "
            "(compared); Spearman's rho between the two orders per compared snapshot (1 = same order); "
            f"the mean share of the applied order's first {TOP_K} jobs also in the shadow's first {TOP_K}; "
            f"and, among finished jobs, the distinct jobs each order put in its first {TOP_K} at least "
            "once, with their mean wait. Those waits are what happened under the applied order: they show "
            "whom each order favoured, not what the shadow's order would have achieved.",
            class_="note",
        )
    )
    headers = [
        "shadow version",
        "applied by (snapshots)",
        "snapshots scored",
        "compared",
        "rho mean",
        "rho p10",
        "rho p50",
        "rho p90",
        f"top-{TOP_K} overlap",
        f"finished jobs in shadow top {TOP_K}",
        "their mean wait (s)",
        f"finished jobs in applied top {TOP_K}",
        "their mean wait (s)",
    ]
    rows = []
    for s in summaries:
        applied = ", ".join(f"{who} ({n})" for who, n in s.applied_by)
        rows.append(
            [
                esc(s.model_version),
                esc(applied),
                num_cell(s.snapshots),
                num_cell(s.compared),
                num_cell(_mean(s.rho)),
                num_cell(_pct(s.rho, 10)),
                num_cell(_pct(s.rho, 50)),
                num_cell(_pct(s.rho, 90)),
                num_cell(_mean(s.top_overlap)),
                num_cell(s.shadow_top_jobs),
                num_cell(s.shadow_top_wait if s.shadow_top_jobs else None),
                num_cell(s.applied_top_jobs),
                num_cell(s.applied_top_wait if s.applied_top_jobs else None),
            ]
        )
    out.append(table(headers, rows, id="shadow-table"))
    if any(s.compared for s in summaries):
        out.append(_figure_markup(agreement_plot(summaries)))
    return out


def _figure_markup(plot: Plot) -> Html:
    return el(
        "figure",
        el("img", id=plot.id, src=data_uri(plot.png), alt=plot.title, data_plot=plot.id),
        el("figcaption", el("strong", plot.title), ". ", plot.caption),
    )
