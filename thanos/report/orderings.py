"""The paper's orderings, checked on the results at hand (perplexity, lower is better).

- at each unstructured sparsity: Thanos <= SparseGPT < Wanda < Magnitude (each link checked on its own);
- in every n:m and structured pattern: Thanos with alpha > 0 (outlier rows kept) has the lowest perplexity
  of all recipes of that pattern.

Each claim is checked per model and pattern, from the raw values (not the rounded ones of the tables); a
method with several recipes of one pattern (block sizes, alphas) takes part with its best one. A claim
whose recipes are not all evaluated is listed as ``not checked``. The paper prunes every block at the same
sparsity: recipes with OWL's per-block sparsity (``profile: owl``) take no part. Written as
``orderings.md`` and ``orderings.csv`` next to the tables.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from thanos.files.atomic import atomic_path
from thanos.pruning.structures import EVERY_LAYER
from thanos.recipes.labels import METHOD_NAMES, method_alpha_label, pattern_label, shown_alpha
from thanos.report.collect import Shown, collect, pattern_sort_key

UNSTRUCTURED_CHAIN = ("thanos", "sparsegpt", "wanda", "magnitude")
HEADER = ("Model", "Pattern", "Ordering", "Result", "Perplexities")


@dataclass(frozen=True)
class Claim:
    model: str
    pattern: str  # display label, e.g. "Unstructured 50%"
    statement: str  # e.g. "Thanos ≤ SparseGPT < Wanda < Magnitude"
    holds: bool | None  # None: not every recipe it needs has a perplexity
    detail: str  # the values, and the links that fail

    @property
    def verdict(self) -> str:
        return "not checked" if self.holds is None else "holds" if self.holds else "does not hold"


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def _unstructured_claim(model: str, pattern: str, rows: pd.DataFrame) -> Claim:
    """Thanos <= SparseGPT < Wanda < Magnitude; Thanos at alpha 0 (the unstructured default)."""
    statement = "Thanos ≤ SparseGPT < Wanda < Magnitude"
    ppl: dict[str, float] = {}
    for method in UNSTRUCTURED_CHAIN:
        mine = rows[(rows["method"] == method) & ~(rows["alpha"].fillna(0) > 0)]["ppl"].dropna()
        if not mine.empty:
            ppl[method] = float(mine.min())
    missing = [METHOD_NAMES[m] for m in UNSTRUCTURED_CHAIN if m not in ppl]
    if missing:
        return Claim(model, pattern, statement, None, f"no perplexity for {', '.join(missing)}")
    failed = []
    links = zip(UNSTRUCTURED_CHAIN, UNSTRUCTURED_CHAIN[1:], strict=False)
    for (a, b), at_most in zip(links, (True, False, False), strict=True):
        ok = ppl[a] <= ppl[b] if at_most else ppl[a] < ppl[b]
        if not ok:
            failed.append(f"{METHOD_NAMES[a]} {_fmt(ppl[a])} > {METHOD_NAMES[b]} {_fmt(ppl[b])}")
    values = ", ".join(f"{METHOD_NAMES[m]} {_fmt(ppl[m])}" for m in UNSTRUCTURED_CHAIN)
    detail = values if not failed else f"{values}; fails: {'; '.join(failed)}"
    return Claim(model, pattern, statement, not failed, detail)


def _thanos_alpha_best_claim(model: str, pattern: str, rows: pd.DataFrame) -> Claim:
    """Thanos with alpha > 0 has the lowest perplexity of the pattern (ties count as not best)."""
    statement = "Thanos (α>0) best"
    rows = rows.dropna(subset=["ppl"])
    is_alpha = (rows["method"] == "thanos") & (rows["alpha"].fillna(0) > 0)
    if not is_alpha.any() or is_alpha.all():
        return Claim(model, pattern, statement, None, "needs Thanos with α > 0 and another recipe")
    best_alpha = rows[is_alpha].sort_values("ppl").iloc[0]
    others = rows[~is_alpha].sort_values("ppl")
    runner_up = others.iloc[0]
    label, other_label = (
        method_alpha_label(r["method"], shown_alpha(r["method"], float(r["alpha"])))
        for r in (best_alpha, runner_up)
    )
    holds = bool(best_alpha["ppl"] < runner_up["ppl"])
    relation = "<" if holds else "≥"
    detail = (
        f"{label} {_fmt(best_alpha['ppl'])} {relation} {other_label} {_fmt(runner_up['ppl'])} (next best)"
    )
    return Claim(model, pattern, statement, holds, detail)


# the paper's claim per kind of the tables' rows (``_thanos_alpha_best_claim`` for the others)
CLAIMS = {"unstructured": _unstructured_claim}


def check_orderings(frame: pd.DataFrame) -> list[Claim]:
    """Every claim that the results have a pattern for, in the tables' pattern order."""
    pruned = frame[frame["kind"].isin(EVERY_LAYER)]  # the paper's patterns: every layer pruned
    if "profile" in pruned.columns:  # the paper's claims are about uniform sparsity: OWL rows take no part
        pruned = pruned[pruned["profile"].fillna("uniform") != "owl"]
    claims = []
    first = pruned.drop_duplicates(["model", "sparsity"])
    order = sorted(first.itertuples(), key=lambda r: (r.model, pattern_sort_key(r.kind, r.fraction, r.m)))
    for r in order:
        rows = pruned[(pruned["model"] == r.model) & (pruned["sparsity"] == r.sparsity)]
        pattern = pattern_label(r.kind, r.fraction, r.sparsity)
        check = CLAIMS.get(r.kind, _thanos_alpha_best_claim)
        claims.append(check(r.model, pattern, rows))
    return claims


def to_markdown(claims: list[Claim]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "| :-- | :-- | :-- | :-- | :-- |"]
    for c in claims:
        lines.append(f"| {c.model} | {c.pattern} | {c.statement} | {c.verdict} | {c.detail} |")
    return "\n".join(lines) + "\n"


def to_csv(claims: list[Claim]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    for c in claims:
        writer.writerow([c.model, c.pattern, c.statement, c.verdict, c.detail])
    return out.getvalue()


def write_orderings(
    results: str | Path, out_dir: str | Path, only: Shown = None
) -> tuple[list[Claim], list[Path]]:
    """Check the orderings on ``results`` and write ``orderings.{md,csv}`` to ``out_dir`` (nothing when
    no pattern has results)."""
    frame, _ = collect(results, only)
    claims = check_orderings(frame) if not frame.empty else []
    if not claims:
        return [], []
    paths = []
    for suffix, text in (("md", to_markdown(claims)), ("csv", to_csv(claims))):
        path = Path(out_dir) / f"orderings.{suffix}"
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        paths.append(path)
    return claims, paths


def summary(claims: list[Claim]) -> str:
    """Lines for a log or a terminal: one per claim."""
    held = sum(c.holds is True for c in claims)
    checked = sum(c.holds is not None for c in claims)
    lines = [f"the paper's orderings: {held} of {checked} checked hold"]
    lines += [f"  {c.model} | {c.pattern}: {c.statement}: {c.verdict} ({c.detail})" for c in claims]
    return "\n".join(lines)


def written_since(out_dir: str | Path, since: float) -> str | None:
    """The ``summary`` of ``out_dir/orderings.csv`` when it was written at or after ``since`` (a time
    stamp), else None: what the workflow prints at the end of a run that remade the tables."""
    path = Path(out_dir) / "orderings.csv"
    if not path.is_file() or path.stat().st_mtime < since:
        return None
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    verdict = {"holds": True, "does not hold": False}
    claims = [
        Claim(r["Model"], r["Pattern"], r["Ordering"], verdict.get(r["Result"]), r["Perplexities"])
        for r in rows
    ]
    return summary(claims)
