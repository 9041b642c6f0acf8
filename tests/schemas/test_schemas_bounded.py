"""Decoding is bounded before it allocates (issue 20, "Bounded resources everywhere"): a packed float
table's header is checked against the limits before its bytes are inflated, so a small deflated
payload that declares (or inflates to) gigabytes is refused at once, with a one-line reason naming
the field, the value and the limit."""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np
import pytest

from shared.schemas import FeatureMatrix, Limits, MessageError, PlacementDecision, decode, encode
from shared.schemas.limits import DEFLATE_MAX_RATIO
from shared.schemas.packed import FloatRows, unpack
from tests.rss_probe import probe
from tests.schemas.bombs import HUGE_COLS, HUGE_ROWS, decision_bomb, matrix_bomb, packed_bomb, zlib_zeros
from tests.schemas.message_factories import features

#: the issue's target: no single message raises a service's RSS by more than this
RSS_BUDGET_MIB = 256


def _refusal(model: type[FeatureMatrix] | type[PlacementDecision], data: bytes, limits: Limits) -> str:
    with pytest.raises(MessageError) as caught:
        decode(model, data, limits)
    reason = caught.value.reason
    assert "\n" not in reason
    return reason


def test_the_bomb_helper_really_inflates_to_what_it_says() -> None:
    data = zlib_zeros(3)
    out = zlib.decompress(data)
    assert len(out) == 3 << 20 and not any(out) and len(data) < 4000


def test_a_matrix_declaring_a_million_rows_is_refused_from_its_header() -> None:
    """The issue's probe: 1 MB that declares 10^6 x 4096 and inflates to 1 GB."""
    data = matrix_bomb()
    assert len(data) < 1_500_000
    reason = _refusal(FeatureMatrix, data, Limits(max_message_bytes=8 << 20))
    assert reason.startswith("invalid FeatureMatrix: values: ")
    # the default max_jobs (HYLO_MAX_JOBS: 100,000 since issue 22) still refuses it from the header
    assert f"'rows' must be an integer in [0, 100000] (max_jobs), got {HUGE_ROWS}" in reason


def test_the_row_bound_is_the_configured_max_jobs() -> None:
    limits = Limits(max_message_bytes=8 << 20, max_jobs=64)
    reason = _refusal(FeatureMatrix, matrix_bomb(rows=65, cols=2, inflates_to_mib=1), limits)
    assert "'rows' must be an integer in [0, 64] (max_jobs), got 65" in reason


def test_a_header_declaring_more_than_max_table_bytes_is_refused() -> None:
    reason = _refusal(
        FeatureMatrix, matrix_bomb(rows=4096, cols=HUGE_COLS), Limits(max_message_bytes=8 << 20)
    )
    assert (
        "values: Value error, packed float table: rows * cols * 8 = 4096 * 4096 * 8 = 134217728 bytes, "
        "more than the limit of 67108864 (max_table_bytes)"
    ) in reason
    smaller = Limits(max_message_bytes=8 << 20, max_table_bytes=4096)
    assert "(max_table_bytes)" in _refusal(
        FeatureMatrix, matrix_bomb(rows=3, cols=512, inflates_to_mib=1), smaller
    )


def test_a_header_no_deflate_stream_can_honour_is_refused_uninflated() -> None:
    """2 MiB declared from a 1 kB stream: more than deflate's 1032:1, so a lie; nothing is inflated."""
    doc = packed_bomb(rows=4096, cols=64, inflates_to_mib=1)
    with pytest.raises(
        ValueError, match=r"declares 2097152 bytes from \d+ deflated bytes, more than 1032 times"
    ):
        unpack(doc)
    data = json.loads(encode(features()))
    data["values"] = doc
    reason = _refusal(FeatureMatrix, json.dumps(data).encode(), Limits(max_message_bytes=8 << 20))
    assert "values: Value error" in reason and "(max_inflate_ratio)" in reason


def test_a_placement_decisions_features_are_bounded_the_same_way() -> None:
    reason = _refusal(PlacementDecision, decision_bomb(), Limits(max_message_bytes=8 << 20))
    assert reason.startswith("invalid PlacementDecision: placements.features: ")
    assert "(max_jobs)" in reason


def test_the_version_3_rows_form_is_bounded_too() -> None:
    data = json.loads(encode(features()))
    data["values"] = [[0.0, 1.0]] * 65
    reason = _refusal(FeatureMatrix, json.dumps(data).encode(), Limits(max_jobs=64))
    assert "values: Value error, float table has 65 rows, more than the limit of 64 (max_jobs)" in reason
    data["values"] = [[0.0] * 600] * 4
    reason = _refusal(FeatureMatrix, json.dumps(data).encode(), Limits(max_table_bytes=16384))
    assert "float table: rows * cols * 8 = 4 * 600 * 8 = 19200 bytes" in reason


@pytest.mark.parametrize("level", [1, 9])
def test_the_largest_honest_table_still_decodes(level: int) -> None:
    """4,096 jobs x 64 features of zeros (the most compressible table there is), deflated by Hylo
    (level 1) or by a writer that prefers level 9, stays within every default bound."""
    table = np.zeros((4096, 64))
    data = zlib.compress(table.tobytes(), level)
    assert len(table.tobytes()) <= len(data) * DEFLATE_MAX_RATIO
    doc = {
        "dtype": "<f8",
        "rows": 4096,
        "cols": 64,
        "codec": "zlib",
        "base64": base64.b64encode(data).decode(),
    }
    assert unpack(doc) == FloatRows(table)


_SETUP = """
from shared.schemas import FeatureMatrix, Limits, decode
from shared.schemas.packed import unpack
from tests.schemas.bombs import matrix_bomb, packed_bomb
limits = Limits(max_message_bytes=8 << 20)
"""


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ("data = matrix_bomb()", "(max_jobs)"),  # the issue's: 1 MB, declares 10^6 x 4096, inflates to 1 GB
        ("data = matrix_bomb(rows=4096, cols=4096)", "(max_table_bytes)"),
        ("data = matrix_bomb(rows=4096, cols=512, inflates_to_mib=1)", "(max_inflate_ratio)"),
        # within every bound from its header, but it inflates to 1 GB: cut at the declared 16 MiB
        (
            "data = matrix_bomb(rows=4096, cols=512)",
            "does not hold exactly rows * cols values (16777216 bytes)",
        ),
    ],
)
def test_a_bomb_costs_neither_memory_nor_time(payload: str, fragment: str) -> None:
    """Before the header was bounded, the issue's bomb cost 1.9 GB and 7.9 s here."""
    found = probe(_SETUP + payload, "decode(FeatureMatrix, data, limits)")
    assert found.error is not None and fragment in found.error
    assert found.rss_mib < 48 and found.seconds < 1.0, found


def test_the_worst_header_within_the_limits_stays_far_under_the_budget() -> None:
    """A header at ``max_table_bytes`` whose stream really inflates that far (16 MiB of zeros, at an
    honest ratio) is inflated, then refused for its shape: that is the most a table can cost."""
    setup = _SETUP + "doc = packed_bomb(rows=4096, cols=512, inflates_to_mib=16)"
    found = probe(setup, "unpack(doc, limits)")
    assert found.error is None  # a valid table of zeros: the message around it is what is wrong
    assert found.rss_mib < RSS_BUDGET_MIB / 4, found
    found = probe(
        _SETUP + "data = matrix_bomb(rows=4096, cols=512, inflates_to_mib=16)",
        "decode(FeatureMatrix, data, limits)",
    )
    assert found.error is not None and "values has 4096 rows, expected one per job (3)" in found.error
    assert found.rss_mib < RSS_BUDGET_MIB / 4, found
