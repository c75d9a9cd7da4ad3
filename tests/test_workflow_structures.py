"""The recipes ``thanos prune-model`` runs in one call, as workflow jobs: a ``depth:1`` recipe (rule depth:
the block choice and maps on the dense chain's stores, then assemble), a combined
``depth:1+neurons:0.3+vocab:0.3`` (one ``combined-part`` job per part, the vocabulary's too), a vocabulary
``vocab:0.3`` and two sizes ``params:0.3`` and ``params:0.2`` (one ``prune-model`` job each, the sizes' cost
table measured once, by ``search_candidate`` jobs of their own).
One real Snakemake run on a tiny Llama with a trained BPE tokenizer serves every assertion: it is killed
(SIGKILL) during the combined recipe's second part, then resumed as documented; the finished run is compared
with ``thanos prune-model``'s models and its tables and figures are read."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import kill_once, snakemake, workflow_config, write_corpus
from helpers.models import stored_parameters
from helpers.vocabulary import bpe_model

from thanos.runner.patterns import AXES

RECIPES = {
    "depth1": {"method": "thanos", "sparsity": "depth:1"},
    "combo": {"method": "thanos", "sparsity": "depth:1+neurons:0.3+vocab:0.3"},
    "v30": {"method": "thanos", "sparsity": "vocab:0.3"},
    "p30": {"method": "thanos", "sparsity": "params:0.3"},
    "p20": {"method": "thanos", "sparsity": "params:0.2"},  # the same search: p30's cost table
}


def _killed_during_the_second_part(workdir: Path, config: dict) -> tuple[dict[Path, int], str]:
    """Start the run, SIGKILL it once the combined recipe's second part has computed its first steps (its
    model's facts and calibration tokens); return the mtimes of what the first part and the killed second
    part had finished, and what the killed run printed (the jobs it saw finish)."""
    results = workdir / "results" / "llama" / "combo"
    tokens = results / "parts" / "1" / "calib" / "tokens.zarr"
    proc = snakemake(workdir, config, popen=True)
    kill_once(proc, tokens)
    assert not (results / "model").exists()
    finished = [
        results / "parts" / "0" / "model" / "model.safetensors",
        results / "parts" / "1" / "model_info.json",
    ]
    return {path: path.stat().st_mtime_ns for path in finished}, proc.stdout.read().decode()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """The killed and resumed run: its directory, the rules the resume ran and what the kill had finished."""
    workdir = tmp_path_factory.mktemp("structures")
    text = write_corpus(workdir / "text.jsonl", docs=60)
    vocab_text = workdir / "numbers.txt"  # the vocabulary's own text (--vocab-text): not the calibration
    vocab_text.write_text("\n\n".join(f"{n} {n * 7} {n * 13} figures and numbers" for n in range(60)) + "\n")
    recipes = RECIPES | {"v30": RECIPES["v30"] | {"vocab_text": str(vocab_text)}}
    # 4 blocks, hidden size 64, 4 heads: the shape whose size search once tried a head count transformers
    # refuses (its search_candidate job died); every setting it tries now is one the config accepts
    models = {"llama": {"path": str(bpe_model(workdir / "models" / "llama", num_blocks=4))}}
    evaluation = {"enabled": True, "source": str(text), "seqlen": 32, "max_windows": 4}
    config = workflow_config(text, models, recipes, perplexity=evaluation, evaluate_dense=True, report=True)
    snakemake(workdir, config, "--until", "model_info")  # the model's facts: the size's candidates known
    planned = snakemake(workdir, config, "--dry-run")
    finished, killed = _killed_during_the_second_part(workdir, config)
    snakemake(workdir, config, "--unlock")  # the documented resume after SIGKILL
    resumed = snakemake(workdir, config, "--rerun-incomplete", "--quiet", "rules")
    return {
        "dir": workdir,
        "text": text,
        "vocab_text": vocab_text,
        "planned": planned.stdout + planned.stderr,
        "resumed": resumed.stdout + resumed.stderr,
        "finished": finished,
        "killed": killed,
    }


@pytest.mark.slow
def test_the_search_candidates_are_jobs_of_their_own(run: dict) -> None:
    """A dry run lists every candidate the sizes' search starts from (its cost table) as a
    ``search_candidate`` job of its own (side by side on a cluster), once for both sizes, and one
    ``one_command`` job each for the sizes and the vocabulary; the second size's job measured none of them
    again (it read those its mix reached)."""
    from thanos.runner.request import build_request
    from thanos.runner.size import planned_candidates
    from thanos.runner.size_search import candidate_name

    model = str(run["dir"] / "models" / "llama")
    request = build_request(model, "thanos", "params:0.3", {"out": "out"})
    planned = planned_candidates(request)
    assert len(planned) >= 3 and len({p.partition(":")[0] for p in planned}) >= 3, planned
    jobs = re.findall(r"rule search_candidate:.*?output: (\S+)", run["planned"], flags=re.S)
    # each point of the cost table once, in the first size's directory: the second size reads it
    assert sorted(Path(job).parent.name for job in jobs) == sorted(map(candidate_name, planned))
    assert all("/p30/work/" in job for job in jobs), jobs
    assert len(re.findall(r"rule one_command:", run["planned"])) == 3
    log = run["dir"] / "results" / "logs" / "llama" / "p20" / "prune-model.log"
    lines = [line for line in log.read_text().splitlines() if line.startswith("candidate ")]
    search = json.loads((run["dir"] / "results" / "llama" / "p20" / "model" / "search.json").read_text())
    points = [c["recipe"] for c in search["candidates"] if "windows" not in c]  # those its mix reached
    assert points and set(points) <= set(planned), points
    assert all("(measured in an earlier run)" in line for line in lines[: len(points)]), lines


@pytest.mark.slow
def test_the_resume_runs_only_the_killed_part(run: dict) -> None:
    """The resume reruns the combined recipe's killed second part and its last (vocabulary) part, not its
    first part, not the depth recipe's job if the killed run had finished it, and the killed part keeps the
    steps it had finished; the earlier parts' models, which only the parts after them read, are deleted once
    the last part is written (retention.combined_parts false)."""
    rules = run["resumed"]
    assert re.search(r"^\s*combined_part\s+1\s*$", rules, flags=re.M), rules[-2000:]
    assert re.search(r"^\s*combined_model\s+1\s*$", rules, flags=re.M), rules[-2000:]
    assert "calibrate" not in rules, rules[-2000:]
    # the depth recipe's job runs beside the combined recipe's (two cores): again only if the kill caught it
    if "(Rule: depth)" in run["killed"]:
        assert re.search(r"^\s*depth\s+\d+\s*$", rules, flags=re.M) is None, rules[-2000:]
    for path, mtime in run["finished"].items():
        if "parts/0" not in str(path):
            assert path.stat().st_mtime_ns == mtime, f"a finished step of the killed part recomputed: {path}"
    for part in ("0", "1"):
        assert not (run["dir"] / "results" / "llama" / "combo" / "parts" / part / "model").exists()
    assert (run["dir"] / "results" / "llama" / "combo" / "model" / "model.safetensors").is_file()


@pytest.mark.slow
def test_the_models_are_prune_models(run: dict) -> None:
    """Every recipe's model (depth, combined with its vocabulary part, vocabulary, size) is ``thanos
    prune-model``'s, byte for byte,
    given the same calibration and threads (the workflow's jobs run on ``threads: 1``): the size's search,
    its candidates measured by jobs of their own, chose what the one command chooses; the vocabulary's
    tokens are those its own text (``vocab_text``) chooses, which the calibration does not."""
    from thanos import prune_model

    work, results = run["dir"], run["dir"] / "results" / "llama"
    options = {"calibration": str(run["text"]), "nsamples": 8, "seqlen": 32, "device": "cpu", "cores": 1}
    options |= {"stream": io.StringIO()}
    # the depth recipe in the working directory the combined recipe's first part takes: that part reuses it
    workdirs = {"depth1": work / "prune-model" / "part1", "combo": work / "prune-model"}
    workdirs |= {"v30": work / "prune-model-v", "p30": work / "prune-model-p", "p20": work / "prune-model-p"}
    patterns = {recipe: entry["sparsity"] for recipe, entry in RECIPES.items()}
    texts = {"v30": {"vocab_text": run["vocab_text"]}}
    for recipe, sparsity in patterns.items():
        out = work / f"prune-model-{recipe}"
        given = options | texts.get(recipe, {})
        prune_model(
            str(work / "models" / "llama"), "thanos", sparsity, out=out, workdir=workdirs[recipe], **given
        )
        shards = sorted(out.glob("*.safetensors"))
        assert shards
        for shard in shards:
            assert (results / recipe / "model" / shard.name).read_bytes() == shard.read_bytes(), recipe
        for name in ("config.json", "tokenizer.json"):
            assert (results / recipe / "model" / name).read_text() == (out / name).read_text(), (recipe, name)
    model = str(work / "models" / "llama")
    prune_model(model, "thanos", "vocab:0.3", out=work / "v30-calibration", **options)
    chosen, by_calibration = (
        json.loads((where / "vocabulary.json").read_text())["kept_ids"]
        for where in (results / "v30" / "model", work / "v30-calibration")
    )
    assert chosen != by_calibration


@pytest.mark.slow
def test_tables_and_the_quality_against_size_figure(run: dict) -> None:
    """The perplexity table lists the recipes under their patterns, with the parameters they removed from
    the input model (a size under its request and the recipe its search chose); the bits-per-byte table has
    the vocabulary; the quality-against-size figure is written."""
    table = pd.read_csv(run["dir"] / "results" / "tables" / "perplexity.csv")
    achieved = dict(zip(table["Sparsity"], table["Achieved"], strict=True))
    whole = RECIPES["combo"]["sparsity"]
    assert achieved[whole].endswith("% params")
    removed = {pattern: float(achieved[pattern].split("%")[0]) for pattern in ("depth:1", whole)}
    assert 0 < removed["depth:1"] < removed[whole] < 100
    figure = run["dir"] / "results" / "figures" / "ppl_vs_params_removed_llama.png"
    assert figure.is_file() and figure.stat().st_size > 0
    # the size under its request and the recipe chosen; the vocabulary beside them in bits per byte (its
    # perplexity per token compares with no other model's)
    (size,) = [pattern for pattern in achieved if str(pattern).startswith("params:0.3: ")]
    chosen = size.removeprefix("params:0.3: ")
    assert float(achieved[size].split("%")[0]) >= 30.0 and chosen.split("+")[0].partition(":")[0] in AXES
    # counted on the written weights against the input model's, whatever parts the mix has
    written, base = (
        stored_parameters(run["dir"] / path) for path in ("results/llama/p30/model", "models/llama")
    )
    assert float(achieved[size].split("%")[0]) == pytest.approx(100 * (1 - written / base), abs=0.051)
    # the vocabulary's perplexity is per token of the dense tokenization: its own per token compares with no
    # other row's (here it looked better than dense)
    from thanos.recipes.labels import per_original_token

    evaluated = {
        variant: json.loads(
            (run["dir"] / "results" / "llama" / variant / "eval" / "perplexity.json").read_text()
        )
        for variant in ("v30", "dense")
    }
    shown = float(table.loc[table["Sparsity"] == "vocab:0.3", "llama"].iloc[0])
    assert shown == round(per_original_token(evaluated["v30"], evaluated["dense"]), 2)
    assert shown != round(evaluated["v30"]["ppl"], 2)
    bits = pd.read_csv(run["dir"] / "results" / "tables" / "bits_per_byte.csv")
    vocab = bits[bits["Sparsity"] == "vocab:0.3"]
    assert list(vocab["Method"]) == ["Vocabulary"] and 0 < float(vocab["llama"].iloc[0]) < 20
