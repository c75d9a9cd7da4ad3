"""Regenerate the measured part of the demo's page, docs/demo.md (or, with ``--real``, of the real-LLM
page, docs/real-llm.md) from a finished run.

    snakemake --cores 2                      # the first run, from a fresh clone
    python docs/demo_readme.py               # rewrites docs/demo.md between the demo-results markers
    snakemake --cores 2 --configfile workflow/configs/real-llm.yaml
    python docs/demo_readme.py --real        # ... docs/real-llm.md between the real-llm-results markers

Everything between ``<!-- demo-results:begin -->`` and ``<!-- demo-results:end -->`` comes from the run's
files: the demo model's ``train_report.json`` and dense perplexity, the tables the workflow wrote
(``perplexity.md``, ``orderings.md``), the zero-shot results (acc and acc_norm with their stderr) and
the wall time of the run from Snakemake's log (first job start to last job end). Figure 1 is copied
beside the page, which links it by its name. No number in that part of the page is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path
from textwrap import fill

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from rule_times import rule_times  # noqa: E402  (bench/rule_times.py: the one reader of Snakemake logs)

BEGIN, END = "<!-- demo-results:begin -->", "<!-- demo-results:end -->"
PAGE, FIGURE = REPO / "docs" / "demo.md", "demo_ppl_vs_sparsity.png"  # the figure lies beside the page
REAL_BEGIN, REAL_END = "<!-- real-llm-results:begin -->", "<!-- real-llm-results:end -->"
REAL_PAGE, REAL_FIGURE = REPO / "docs" / "real-llm.md", "real_llm_ppl_vs_sparsity.png"
REAL_MODEL = "smollm2-135m"
WIDTH = 110  # the docs' line length


def first_run_log(workdir: Path) -> Path:
    """The oldest Snakemake log of the working directory that ran jobs (the first run)."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    for log in logs:
        if "Finished job" in log.read_text():
            return log
    raise SystemExit(f"no Snakemake log with finished jobs under {workdir}/.snakemake/log")


def minutes(seconds: float) -> str:
    whole, rest = divmod(round(seconds), 60)
    return f"{whole} min {rest:02d} s"


def zeroshot_table(results: Path, model: str) -> str:
    from thanos.report.collect import collect, labelled_recipes

    frame, tasks = collect(results)
    frame = frame[frame["model"] == model]
    rows = [("Dense", "0%", "dense")]
    pruned = labelled_recipes(frame).sort_values("order")
    rows += list(zip(pruned["label"], pruned["group_label"], pruned["recipe"], strict=True))
    lines = ["| Method | Sparsity | acc (%) | acc_norm (%) |", "| :-- | :-- | --: | --: |"]
    last_group = None
    for label, group, recipe in rows:
        mine = tasks[(tasks["model"] == model) & (tasks["recipe"] == recipe)]
        if mine.empty:
            continue
        r = mine.iloc[0]
        cells = [
            f"{100 * r[metric]:.1f} ± {100 * r[f'{metric}_stderr']:.1f}" for metric in ("acc", "acc_norm")
        ]
        lines.append(f"| {label} | {group if group != last_group else ''} | {' | '.join(cells)} |")
        last_group = group
    return "\n".join(lines)


def orderings_table(tables: Path) -> tuple[str, int, int]:
    """The orderings table the tables step wrote, how many orderings hold and how many were checked."""
    orderings = (tables / "orderings.md").read_text().strip()
    held = orderings.count("| holds |")
    return orderings, held, held + orderings.count("| does not hold |")


def section(results: Path, log: Path, model: str = "demo") -> str:
    train = json.loads((results / "demo" / "model" / "train_report.json").read_text())
    manifest = json.loads((results / "demo" / "data" / "manifest.json").read_text())
    tables = results / "tables"
    m = train["model"]
    held_out = json.loads((results / "demo" / "dense" / "eval" / "perplexity.json").read_text())
    task = manifest["task"]
    orderings, held, checked = orderings_table(tables)
    run = (
        f"Measured on a first run from a fresh clone ({os.cpu_count()} CPU cores, Python "
        f"{platform.python_version()}, torch {train['versions']['torch']}): the whole run took "
        f"**{minutes(rule_times(log)[1])}** (Snakemake's log, first job start to last job end), of which "
        f"training the demo model took {minutes(train['seconds'])}. The model: a "
        f"{m['num_hidden_layers']}-block GQA Llama, hidden size {m['hidden_size']}, "
        f"vocabulary {m['vocab_size']}, {m['parameters'] / 1e6:.2f}M parameters, trained {train['steps']} "
        f"steps ({train['data']['tokens_seen'] / 1e6:.2f}M tokens, {train['data']['epochs']} epochs); "
        f"held-out perplexity {held_out['ppl']:.2f} (windows of {held_out['seqlen']} tokens)."
    )
    zeroshot = (
        f"Zero-shot accuracy on `{task['name']}` ({task['docs']} documents, {task['choices']} choices: "
        f"chance is {100 / task['choices']:g} %), with lm-eval's stderr (acc_norm, which divides by the "
        "length in characters, equals acc here: every choice has the same characters):"
    )
    checked_by = (
        "The paper's orderings, checked on these results by the tables step (`results/tables/orderings.md`;"
        f" a run that remakes the tables prints them at its end): **{held} of {checked} hold**."
    )
    return f"""{BEGIN}
<!-- generated by `python docs/demo_readme.py` from the run's files; do not edit by hand -->
{fill(run, WIDTH)}

Perplexity on the held-out articles (`results/tables/perplexity.md`):

{(tables / "perplexity.md").read_text().strip()}

{fill(zeroshot, WIDTH)}

{zeroshot_table(results, model)}

![perplexity above dense vs unstructured sparsity on the demo model]({FIGURE})

{fill(checked_by, WIDTH)}

{orderings}
{END}"""


def scored(ppl: dict) -> str:
    """What a perplexity.json scored: its windows, and how many of the text's when capped."""
    whole = ppl["text_tokens"] // ppl["seqlen"]
    if ppl.get("max_windows") and ppl["windows"] < whole:
        return f"the first {ppl['windows']} of its {whole} windows of {ppl['seqlen']} tokens"
    return f"{ppl['windows']} windows of {ppl['seqlen']} tokens"


def real_section(results: Path, log: Path, model: str = REAL_MODEL) -> str:
    """The measured part of "On a real pretrained LLM": from the run of workflow/configs/real-llm.yaml."""
    converted = json.loads((results / "model" / "real_model.json").read_text())
    dense = json.loads((results / model / "dense" / "eval" / "perplexity.json").read_text())
    manifest = json.loads((results.parent / "demo" / "data" / "manifest.json").read_text())
    tables = results / "tables"
    orderings, held, checked = orderings_table(tables)
    wall = rule_times(log)[1]
    run = (
        f"Measured on a first run from a fresh clone ({os.cpu_count()} CPU cores, CPU only, Python "
        f"{platform.python_version()}): the whole run took **{minutes(wall)}** (Snakemake's log, first job "
        f"start to last job end). The model: {converted['description']}; greedy continuation of "
        f'"{converted["prompt"]}": "{converted["generated"].strip()}". Dense perplexity '
        f"**{dense['ppl']:.2f}** on the demo's held-out articles ({scored(dense)}); it is a 4-bit model "
        "dequantized, so the original bf16 release would score a little better."
    )
    task = manifest["task"]
    limit = json.loads((results / model / "dense" / "eval" / "zeroshot.json").read_text()).get("limit")
    docs = f"the first {limit} of its {task['docs']} documents" if limit else f"{task['docs']} documents"
    zeroshot = (
        f"Zero-shot accuracy on `{task['name']}` ({docs}, {task['choices']} choices: "
        f"chance is {100 / task['choices']:g} %), with lm-eval's stderr:"
    )
    checked_by = (
        "The paper's orderings, checked on these results by the tables step "
        f"(`results/real-llm/tables/orderings.md`): **{held} of {checked} hold**."
    )
    return f"""{REAL_BEGIN}
<!-- generated by `python docs/demo_readme.py --real` from the run's files; do not edit by hand -->
{fill(run, WIDTH)}

Perplexity on the demo's held-out articles (`results/real-llm/tables/perplexity.md`):

{(tables / "perplexity.md").read_text().strip()}

{fill(zeroshot, WIDTH)}

{zeroshot_table(results, model)}

![perplexity above dense vs unstructured sparsity on SmolLM2-135M-Instruct]({REAL_FIGURE})

{fill(checked_by, WIDTH)}

{orderings}
{REAL_END}"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path.cwd(), help="the demo run's directory")
    parser.add_argument("--log", type=Path, help="Snakemake log of the first run (default: the oldest one)")
    pages = "default: docs/demo.md; with --real, docs/real-llm.md"
    parser.add_argument("--readme", type=Path, help=f"the page to rewrite ({pages})")
    parser.add_argument("--real", action="store_true", help="the run of workflow/configs/real-llm.yaml")
    args = parser.parse_args()
    log = args.log or first_run_log(args.workdir)
    if args.real:
        results = args.workdir / "results" / "real-llm"
        begin, end, text_of, target = REAL_BEGIN, REAL_END, real_section(results, log), REAL_FIGURE
        page = args.readme or REAL_PAGE
        figure = results / "figures" / f"ppl_vs_sparsity_{REAL_MODEL}_unstructured.png"
    else:
        results = args.workdir / "results"
        begin, end, text_of, target = BEGIN, END, section(results, log), FIGURE
        page = args.readme or PAGE
        figure = results / "figures" / "ppl_vs_sparsity_demo_unstructured.png"
    text = page.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{page}: no {begin} ... {end} block to replace")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(head + text_of + tail)
    shutil.copyfile(figure, page.parent / target)
    print(f"rewrote the results of {page} from {results} and {log}; copied {figure}")


if __name__ == "__main__":
    main()
