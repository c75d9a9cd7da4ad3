"""The paper's orderings checked on results (thanos.report.orderings): each link, ties, gaps."""

from __future__ import annotations

import csv
import time

import pandas as pd
from helpers.report import (
    fake_results,
)

from thanos.cli import main
from thanos.report.orderings import check_orderings, written_since


def _frame(rows: list[tuple]) -> pd.DataFrame:
    """rows: (model, method, sparsity, kind, fraction, alpha, ppl)."""
    cols = ["model", "method", "sparsity", "kind", "fraction", "alpha", "ppl"]
    frame = pd.DataFrame(rows, columns=cols)
    frame["m"] = [4.0 if k == "nm" else float("nan") for k in frame["kind"]]
    return frame


def test_unstructured_chain_each_link():
    u50 = [
        ("a", m, "50%", "unstructured", 0.5, 0.0, p)
        for m, p in (("magnitude", 50.0), ("wanda", 48.0), ("sparsegpt", 47.0), ("thanos", 47.0))
    ]
    [claim] = check_orderings(_frame(u50))
    assert claim.holds is True and claim.pattern == "Unstructured 50%"  # Thanos == SparseGPT is allowed
    swapped = [r if r[1] != "wanda" else (*r[:6], 51.0) for r in u50]
    [claim] = check_orderings(_frame(swapped))
    assert claim.holds is False and "fails: Wanda 51.000 > Magnitude 50.000" in claim.detail
    worse = [r if r[1] != "thanos" else (*r[:6], 47.001) for r in u50]
    [claim] = check_orderings(_frame(worse))
    assert claim.holds is False and "Thanos 47.001 > SparseGPT 47.000" in claim.detail
    [claim] = check_orderings(_frame([r for r in u50 if r[1] != "wanda"]))
    assert claim.holds is None and claim.verdict == "not checked" and "Wanda" in claim.detail


def test_thanos_alpha_best_in_structured_and_nm():
    rows = [
        ("a", "sparsegpt", "2:4", "nm", 0.5, 0.0, 60.0),
        ("a", "thanos", "2:4", "nm", 0.5, 0.0, 59.0),
        ("a", "thanos", "2:4", "nm", 0.5, 0.1, 58.0),
        ("a", "magnitude", "structured:0.3", "structured", 0.3, 0.0, 90.0),
        ("a", "thanos", "structured:0.3", "structured", 0.3, 0.1, 91.0),
    ]
    s30, nm = check_orderings(_frame(rows))  # the tables' order: structured, then n:m
    assert (s30.pattern, s30.holds) == ("Structured 30%", False)
    assert "Magnitude 90.000 (next best)" in s30.detail
    assert (nm.pattern, nm.holds) == (
        "2:4",
        True,
    ) and "Thanos (α=0.1) 58.000 < Thanos (α=0) 59.000" in nm.detail
    tie = [r if r[5] != 0.1 else (*r[:6], 59.0) for r in rows[:3]]
    assert check_orderings(_frame(tie))[0].holds is False  # a tie is not "best"
    assert check_orderings(_frame(rows[:2]))[0].holds is None  # no Thanos with alpha > 0


def test_tables_command_writes_orderings(tmp_path):
    results = fake_results(tmp_path / "results")
    out = tmp_path / "tables"
    started = time.time() - 1
    assert main(["tables", "--results", str(results), "--out-dir", str(out)]) == 0
    with open(out / "orderings.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    by = {(r["Model"], r["Pattern"]): r for r in rows}
    # tiny-a at 50%: thanos 12.5 <= sparsegpt 13 < wanda 14 < magnitude 40 (best of the block sizes: 12.3)
    assert by[("tiny-a", "Unstructured 50%")]["Result"] == "holds"
    assert by[("tiny-a", "2:4")]["Result"] == "holds"  # Thanos α=0.05..0.2 best 17.5 < sparsegpt 21
    assert by[("tiny-a", "Unstructured 60%")]["Result"] == "not checked"  # only Thanos and SparseGPT
    assert "Unstructured 50%" in (out / "orderings.md").read_text()
    printed = written_since(out, started)
    assert printed is not None and printed.startswith("the paper's orderings:") and "tiny-b" in printed
    assert written_since(out, time.time() + 60) is None


def test_a_finished_run_says_its_perplexities_and_the_orderings_only_when_checked(tmp_path):
    """The workflow's closing lines for any config: every model's perplexities (dense and each recipe),
    where the tables are, and the orderings line only when some were checked."""
    from thanos.report.closing import closing_summary

    results = fake_results(tmp_path / "results")
    tables, figures = tmp_path / "tables", tmp_path / "figures"
    assert closing_summary(tmp_path / "empty", tables, figures, time.time()) is None
    started = time.time() - 1
    assert main(["tables", "--results", str(results), "--out-dir", str(tables)]) == 0
    lines = closing_summary(results, tables, figures, started).splitlines()
    assert lines[0] == "results:" and any(line.startswith("  tiny-a: ") for line in lines)
    assert any(line.startswith("    perplexity: dense ") for line in lines), lines
    assert f"tables: {tables}" in lines and not any(line.startswith("figures:") for line in lines)
    assert any(line.startswith("the paper's orderings: ") for line in lines)
    (tables / "orderings.csv").write_text("Model,Pattern,Ordering,Result,Perplexities\n")  # none checked
    assert "orderings" not in closing_summary(results, tables, figures, started)
