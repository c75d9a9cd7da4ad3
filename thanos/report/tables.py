"""The paper's tables from whatever results exist: CSV, Markdown and LaTeX (booktabs).

- ``perplexity``: method x sparsity rows, models as columns (Table 2): a Dense row, then one group per
  sparsity pattern; the lowest perplexity of each column within a group in bold. ``Achieved`` is the
  sparsity the pruned layers really have (zeros / weights; a range when the models differ): Thanos n:m
  with alpha > 0 keeps a fraction alpha of the rows dense, and is labelled so (``2:4 + 10% dense rows``).
- ``bits_per_byte``: the same layout with the perplexity's loss in bits per byte of text, where a model's
  variants cut the perplexity text into different numbers of tokens (a pruned vocabulary): perplexities
  per token do not compare across tokenizers, bits per byte do (``thanos.evaluation.perplexity``).
- ``zeroshot_avg``: the same layout with the mean zero-shot accuracy in percent (Table 3); highest in bold.
- ``zeroshot_tasks_{pattern}``: per-task accuracy (percent) for one sparsity pattern, one block of rows per
  model (Dense first), tasks as columns in the paper's order, then their average (appendix tables).

Bold marks a unique best only: values are compared as shown (two decimals), and a column of a group with
fewer than two values, or with a tie for the best, has no bold (Dense is never compared). Missing cells
are ``-``. Every file shows the same numbers: CSV, Markdown and LaTeX cells all come from
``format_value`` (two decimals); bold exists only in Markdown and LaTeX.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from thanos.files.atomic import atomic_path
from thanos.recipes.labels import pattern_slug, pattern_title
from thanos.report.collect import TASK_LABELS, Shown, as_float, collect, labelled_recipes, tokenizers_differ

log = logging.getLogger(__name__)
MISSING = "-"


@dataclass
class Row:
    group: str  # rows of one group are compared for the bold best value
    keys: list[str]  # leading label cells (e.g. method, sparsity)
    values: dict[str, float]  # column -> value (NaN or absent: missing)
    compare: bool = True  # take part in the best-value comparison (Dense does not)


@dataclass
class Table:
    name: str
    caption: str
    key_columns: list[str]
    value_columns: list[str]
    rows: list[Row] = field(default_factory=list)
    lower_is_better: bool = True
    repeat_keys: tuple[bool, ...] = ()  # per key column: shown on every row of a group (else first only)

    def best(self) -> set[tuple[int, str]]:
        """(row index, column) of the best value per column within each group, compared as shown (two
        decimals): only a unique best among two or more values is marked, a tie or a lone value is not."""
        marks: set[tuple[int, str]] = set()
        groups: dict[str, list[int]] = {}
        for i, row in enumerate(self.rows):
            if row.compare:
                groups.setdefault(row.group, []).append(i)
        for members in groups.values():
            for col in self.value_columns:
                shown = [(shown_value(self.rows[i].values.get(col, math.nan)), i) for i in members]
                best = _unique_best([(v, i) for v, i in shown if not math.isnan(v)], self.lower_is_better)
                if best is not None:
                    marks.add((best, col))
        return marks

    def _key_cells(self) -> list[list[str]]:
        """Label cells as displayed: a non-repeated key column is blank where it equals the row above."""
        cells, previous = [], None
        for row in self.rows:
            shown = []
            for j, key in enumerate(row.keys):
                repeat = self.repeat_keys[j] if j < len(self.repeat_keys) else True
                same = previous is not None and j < len(previous) and previous[j] == key
                shown.append("" if (same and not repeat) else key)
            cells.append(shown)
            previous = row.keys
        return cells

    def to_csv(self) -> str:
        """The cells as Markdown shows them (``format_value``), without the bold and with every key."""
        frame = pd.DataFrame(
            [
                row.keys + [format_value(row.values.get(c, math.nan)) for c in self.value_columns]
                for row in self.rows
            ],
            columns=self.key_columns + self.value_columns,
            dtype=str,
        )
        return frame.to_csv(index=False)

    def to_markdown(self) -> str:
        best = self.best()
        header = self.key_columns + self.value_columns
        lines = [f"<!-- {self.caption} -->", "| " + " | ".join(header) + " |"]
        lines.append(
            "| " + " | ".join([":--"] * len(self.key_columns) + ["--:"] * len(self.value_columns)) + " |"
        )
        for i, (row, keys) in enumerate(zip(self.rows, self._key_cells(), strict=True)):
            cells = []
            for col in self.value_columns:
                text = format_value(row.values.get(col, math.nan))
                cells.append(f"**{text}**" if (i, col) in best else text)
            lines.append("| " + " | ".join(keys + cells) + " |")
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        best = self.best()
        ncol = len(self.key_columns) + len(self.value_columns)
        spec = "l" * len(self.key_columns) + "r" * len(self.value_columns)
        out = [
            "% requires \\usepackage{booktabs}",
            "\\begin{table}[t]",
            "\\centering",
            f"\\caption{{{_tex(self.caption)}}}",
            f"\\label{{tab:{self.name}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            " & ".join(f"\\textbf{{{_tex(c)}}}" for c in self.key_columns + self.value_columns) + " \\\\",
            "\\midrule",
        ]
        previous = None
        for i, (row, keys) in enumerate(zip(self.rows, self._key_cells(), strict=True)):
            if previous is not None and row.group != previous:
                out.append(f"\\cmidrule{{1-{ncol}}}" if previous.startswith("dense") else "\\midrule")
            previous = row.group
            cells = []
            for col in self.value_columns:
                text = format_value(row.values.get(col, math.nan))
                cells.append(f"\\textbf{{{text}}}" if (i, col) in best else text)
            out.append(" & ".join([_tex(k) for k in keys] + cells) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
        return "\n".join(out) + "\n"

    def write(self, out_dir: Path) -> list[Path]:
        paths = []
        for suffix, text in (("csv", self.to_csv()), ("md", self.to_markdown()), ("tex", self.to_latex())):
            path = out_dir / f"{self.name}.{suffix}"
            with atomic_path(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
            paths.append(path)
        return paths


def format_value(value: float) -> str:
    """A value as every table file shows it: two decimals, ``inf``, or ``-`` when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if math.isinf(value):
        return "inf"
    return f"{value:.2f}"


def shown_value(value: float) -> float:
    """The number a reader sees (``format_value`` read back): NaN when missing."""
    text = format_value(value)
    return math.nan if text == MISSING else float(text)


def _unique_best(values: list[tuple[float, int]], lower_is_better: bool) -> int | None:
    """The row holding the one best of two or more (value, row) pairs; None for fewer or a tie."""
    if len(values) < 2:
        return None
    target = min(v for v, _ in values) if lower_is_better else max(v for v, _ in values)
    winners = [i for v, i in values if v == target]
    return winners[0] if len(winners) == 1 else None


def _tex(text: str) -> str:
    for a, b in (("\\", "\\textbackslash{}"), ("&", "\\&"), ("%", "\\%"), ("_", "\\_"), ("#", "\\#")):
        text = text.replace(a, b)
    return text.replace("α", "$\\alpha$")


def _drop_empty(table: Table) -> Table:
    """Rows without any value (recipes not evaluated for this table) are left out."""
    kept = [row for row in table.rows if any(not math.isnan(v) for v in row.values.values())]
    dropped = len(table.rows) - len(kept)
    if dropped:
        log.info("%s: %d row(s) without any result left out", table.name, dropped)
    table.rows = kept
    return table


def _achieved(row: pd.Series) -> tuple[float, str]:
    """What a recipe achieved: the zeros of its pruned weights, or for a structural recipe written smaller
    (neurons, heads, blocks removed) the parameters it removed."""
    removed = as_float(row.get("params_removed"))
    if not math.isnan(removed):
        return removed, "% params"
    return as_float(row["overall_sparsity"]), "%"


def achieved_text(values: list[tuple[float, str]]) -> str:
    """``45.0%``, or ``44.7-45.1%`` when the models differ, ``29.7% params`` for the parameters a structural
    recipe removed; ``-`` when unknown."""
    known = sorted((v, unit) for v, unit in values if not math.isnan(v))
    if not known:
        return MISSING
    unit = known[0][1]
    low, high = f"{100 * known[0][0]:.1f}", f"{100 * known[-1][0]:.1f}"
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def _models(frame: pd.DataFrame) -> list[str]:
    return sorted(frame["model"].unique()) if not frame.empty else []


def model_table(
    frame: pd.DataFrame, metric: str, name: str, caption: str, lower_is_better: bool, scale: float = 1.0
):
    """Method x sparsity rows, models as columns (Tables 2 and 3)."""
    models = _models(frame)
    table = Table(name, caption, ["Method", "Sparsity", "Achieved"], models, lower_is_better=lower_is_better)
    table.repeat_keys = (True, False, True)
    dense = frame[frame["method"] == "dense"]
    if not dense.empty:
        values = {r["model"]: as_float(r[metric]) * scale for _, r in dense.iterrows()}
        table.rows.append(Row("dense", ["Dense", "0%", "0%"], values, compare=False))
    pruned = labelled_recipes(frame)
    if not pruned.empty:
        seen: dict[tuple, Row] = {}
        achieved: dict[tuple, list[float]] = {}
        for _, r in sorted(pruned.iterrows(), key=lambda item: item[1]["order"]):
            key = (r["group"], r["label"])
            if key not in seen:
                seen[key] = Row(r["group"], [r["label"], r["group_label"], MISSING], {})
                table.rows.append(seen[key])
            cell = seen[key].values
            if r["model"] in cell and not math.isnan(cell[r["model"]]):
                log.warning("%s: two recipes for %s / %s; keeping the first", r["model"], *key)
                continue
            cell[r["model"]] = as_float(r[metric]) * scale
            achieved.setdefault(key, []).append(_achieved(r))
        for key, row in seen.items():
            row.keys[2] = achieved_text(achieved.get(key, []))
    return _drop_empty(table)


def task_columns(tasks: pd.DataFrame) -> list[str]:
    """Task names in the paper's order (ArcC, ArcE, BoolQ, HellaSwag, OBQA, PiQA, WinoGrande), then others."""
    present = set(tasks["task"]) if not tasks.empty else set()
    return [t for t in TASK_LABELS if t in present] + sorted(present - set(TASK_LABELS))


def task_tables(frame: pd.DataFrame, tasks: pd.DataFrame) -> list[Table]:
    """One per sparsity pattern: rows (model, method), Dense first per model; tasks then Average."""
    columns = task_columns(tasks)
    if not columns:
        return []
    labels = [TASK_LABELS.get(t, t) for t in columns] + ["Average"]
    acc = {(r["model"], r["recipe"], r["task"]): as_float(r["acc"]) * 100 for _, r in tasks.iterrows()}

    def values(model: str, recipe: str, mean: float) -> dict[str, float]:
        out = {lab: acc.get((model, recipe, t), math.nan) for t, lab in zip(columns, labels, strict=False)}
        out["Average"] = as_float(mean) * 100
        return out

    pruned = labelled_recipes(frame)
    if pruned.empty:
        return []
    dense = {r["model"]: r for _, r in frame[frame["method"] == "dense"].iterrows()}
    out = []
    for group, members in sorted(pruned.groupby("group"), key=lambda item: item[1]["order"].iloc[0]):
        first = members.iloc[0]
        slug = pattern_slug(first["kind"], first["fraction"], first["sparsity"])
        title = pattern_title(first["kind"], first["fraction"], first["sparsity"])
        table = Table(
            f"zeroshot_tasks_{slug}",
            f"Zero-shot accuracy (%) per task, {title} sparsity; best per model in bold",
            ["Model", "Method", "Achieved"],
            labels,
            lower_is_better=False,
        )
        table.repeat_keys = (False, True, True)
        for model in sorted(set(members["model"])):
            if model in dense:
                table.rows.append(
                    Row(
                        f"dense:{model}",
                        [model, "Dense", "0%"],
                        values(model, "dense", dense[model]["zs_mean"]),
                        False,
                    )
                )
            for _, r in sorted(
                members[members["model"] == model].iterrows(), key=lambda item: item[1]["order"]
            ):
                table.rows.append(
                    Row(
                        model,
                        [model, r["label"], achieved_text([_achieved(r)])],
                        values(model, r["recipe"], r["zs_mean"]),
                    )
                )
        _drop_empty(table)
        with_results = {row.keys[0] for row in table.rows if row.compare}
        table.rows = [
            row for row in table.rows if row.keys[0] in with_results
        ]  # Dense alone: nothing to show
        if table.rows:
            out.append(table)
        else:
            log.info("no zero-shot results for %s yet", group)
    return out


def build_tables(results: str | Path, only: Shown = None) -> list[Table]:
    frame, tasks = collect(results, only)
    if frame.empty:
        return []
    tables = []
    datasets = sorted({Path(str(d)).name for d in frame["ppl_dataset"].dropna()})
    where = f" on {', '.join(datasets)}" if datasets else ""
    differ = tokenizers_differ(frame)
    if frame["ppl"].notna().any():
        # a pruned vocabulary's perplexity is per token of the dense model's tokenization (collect)
        per = "; per token of the dense model's tokenization" if differ else ""
        caption = f"Perplexity{where} (lower is better; best per sparsity in bold{per})"
        tables.append(model_table(frame, "ppl", "perplexity", caption, True))
    if differ:
        tables.append(
            model_table(
                frame,
                "bits_per_byte",
                "bits_per_byte",
                f"Bits per byte{where} (lower is better; the models cut the text into different tokens, so "
                "their perplexities per own token do not compare: these do)",
                True,
            )
        )
    if frame["zs_mean"].notna().any():
        tables.append(
            model_table(
                frame,
                "zs_mean",
                "zeroshot_avg",
                "Average zero-shot accuracy (%) (higher is better; best per sparsity in bold)",
                False,
                scale=100.0,
            )
        )
    tables += task_tables(frame, tasks)
    return tables


def write_tables(results: str | Path, out_dir: str | Path, only: Shown = None) -> list[Path]:
    """Write every table that has data to ``out_dir`` (of the ``only`` pairs); returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for table in build_tables(results, only):
        paths += table.write(out)
    if not paths:
        log.warning("no perplexity or zero-shot results under %s yet; no tables written", results)
    return paths
