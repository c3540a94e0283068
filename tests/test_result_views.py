"""Results a notebook reads (issue 44): ``HeadsetResult`` and ``OverlapReport`` print as text
tables (not walls of arrays), and give their rows as records and, with pandas, a DataFrame."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vheads.discovery._overlap import Ceiling, OverlapReport, PairOverlap
from vheads.evaluation import HeadsetResult


def _result():
    controls = {"layer-matched": {"mean": 0.01, "sd": 0.02, "z": 2.5, "rank_p": 0.05, "holm_p": 0.1, "distinct": 19},
                "any-layer": {"mean": -0.003, "sd": 0.01, "z": None, "rank_p": 0.5, "holm_p": 0.5, "distinct": 19}}
    return HeadsetResult("cm-ord-last", "ncs", 0.06, (0.01, 0.11), controls, ci_method="welch")


def _report():
    ceil = lambda m: Ceiling(m, m - 1, m + 1, np.full(50, m), 10)  # noqa: E731
    half = Ceiling(3.0, 1.0, 5.0, np.full(50, 3), 10)
    pair = PairOverlap("cm-ord-last", "cm-ref-qsp", 10, 4, half, True, math.sqrt(6.0 * 5.0), 3.0 / math.sqrt(30.0))
    return OverlapReport(["cm-ord-last", "cm-ref-qsp"], 10, "flat", np.array([[10, 4], [4, 10]]), [ceil(6.0), ceil(5.0)],
                         [pair], {"cm-ord-last|cm-ref-qsp": np.arange(10)})


def test_a_headset_result_reads_as_one_row_per_control():
    r = _result()
    rows = r.to_records()
    assert [row["control"] for row in rows] == list(r.controls)
    for row, (name, c) in zip(rows, r.controls.items()):
        assert (row["T_S"], row["ci_lo"], row["ci_hi"], row["ci_method"]) == (0.06, 0.01, 0.11, "welch")
        assert (row["mean"], row["sd"], row["rank_p"], row["draws"]) == (c["mean"], c["sd"], c["rank_p"], c["distinct"])
    text = repr(r)
    assert "array(" not in text and len(text.splitlines()) == 2 + len(rows)  # title, header, one line a control
    assert "layer-matched" in text and "any-layer" in text and "welch" in text


def test_an_overlap_report_reads_as_one_row_per_pair():
    rep = _report()
    (row,) = rep.to_records()
    assert (row["a"], row["b"], row["all"], row["half"]) == ("cm-ord-last", "cm-ref-qsp", 4, 3.0)
    assert row["fraction"] == pytest.approx(row["half"] / math.sqrt(row["ceil_a"] * row["ceil_b"]))
    text = repr(rep)
    assert "array(" not in text and "cm-ref-qsp" in text and len(text.splitlines()) == 3


def test_to_frame_is_the_records_as_a_dataframe():
    pd = pytest.importorskip("pandas")
    frame = _result().to_frame()
    assert isinstance(frame, pd.DataFrame)
    assert frame.to_dict("records")[0]["control"] == "layer-matched" and len(frame) == 2
