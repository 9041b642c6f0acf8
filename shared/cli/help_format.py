"""``--help`` shows every option's name and default in full.

Why: Typer's rich help puts each option's names and its ``[default: ...]`` in table cells that cut
a word longer than the cell with an ellipsis (``hylo simulate --help`` at 80 columns showed
``fcfs,sjf,wfp3,unicep,f1,multif…``, ``hylo job --help`` ``--database,--database-u…``), so the help
hid the very values it documents. Folding such a word onto further lines keeps it whole at any
width. Typer has no setting for this, so its cell builder and its option highlighter are wrapped
once, here; if a later Typer renames them, help falls back to Typer's own rendering rather than
failing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.columns import Columns
from rich.text import Text
from typer.rich_utils import OptionHighlighter


class _FoldingHighlighter(OptionHighlighter):
    """Typer's option highlighter, its text folded rather than cut (the option names' cell)."""

    def __call__(self, text: str | Text) -> Text:
        out = super().__call__(text)
        out.overflow = "fold"
        return out


def fold_defaults() -> None:
    """Make Typer's option cells fold long words instead of cutting them (idempotent)."""
    from typer import rich_utils

    original: Callable[..., Any] | None = getattr(rich_utils, "_get_parameter_help", None)
    if original is not None and not getattr(original, "_hylo_folds", False):

        def folded(*args: Any, **kwargs: Any) -> Any:
            cell = original(*args, **kwargs)
            if isinstance(cell, Columns):
                for item in cell.renderables:
                    if isinstance(item, Text):
                        item.overflow = "fold"
            return cell

        folded._hylo_folds = True  # type: ignore[attr-defined]
        rich_utils._get_parameter_help = folded
    if isinstance(getattr(rich_utils, "highlighter", None), OptionHighlighter):
        rich_utils.highlighter = _FoldingHighlighter()
