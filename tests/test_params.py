"""The vocabulary as a part of combined recipes, and a size as the request (``params:p``): the search's
choice, its record (``search.json``), its resume, and the chosen recipe run on its own."""

from __future__ import annotations

import io
import json
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from helpers.models import measured_name, stored_parameters
from helpers.vocabulary import PROSE, bpe_model

from thanos import prune_model
from thanos.demo.tested_models import TESTED_MODELS
from thanos.files import digests
from thanos.report.collect import collect
from thanos.runner.size_search import candidate_name as slug


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The model, a calibration text and the options every run here shares."""
    root = tmp_path_factory.mktemp("params")
    text = root / "calib.txt"
    lines = [line for line in PROSE if line]
    text.write_text("\n\n".join(" ".join(lines[i:] + lines[:i]) for i in range(len(lines))) + "\n")
    options = {"calibration": str(text), "nsamples": 8, "seqlen": 32, "device": "cpu"}
    return {"root": root, "model": bpe_model(root / "dense"), "options": options}


def weights(out: Path) -> dict[str, bytes]:
    """What a written model is: its weights, config and tokenizer, byte for byte."""
    names = ("model.safetensors", "config.json", "tokenizer.json", "generation_config.json")
    return {name: (out / name).read_bytes() for name in names if (out / name).exists()}


def test_the_intermediate_models_are_kept_while_the_recipe_runs(
    inputs: dict[str, Any], tmp_path: Path
) -> None:
    """``thanos workdirs --delete-all`` while a combined recipe runs its second part keeps the directory of
    its intermediate models (in use: the part reads the first part's model there); it deleted it, and the
    part then failed on the missing model."""
    from conftest import thanos_here

    root, said = tmp_path / "root", []

    class Deleting(io.StringIO):
        """The terminal: deletes every working directory not in use as the second part starts."""

        def write(self, text: str) -> int:
            if "--- part 2/2" in text and not said:
                said.append(thanos_here("workdirs", "--root", root, "--delete-all", cwd=tmp_path))
            return super().write(text)

    model, options = inputs["model"], inputs["options"]
    out = tmp_path / "out"
    prune_model(model, "thanos", "depth:1+neurons:0.3", out=out, workdir=root, stream=Deleting(), **options)
    assert said[0].returncode == 0 and "-combined (in use by pid" in said[0].stdout, said[0].stdout
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2


def test_vocab_runs_last_in_a_combined_recipe(inputs: dict[str, Any], tmp_path: Path) -> None:
    """``vocab:0.3+depth:1+neurons:0.3``: depth, then neurons, then the vocabulary on the model they wrote;
    the output is the one the parts give run one after the other by hand; its card, ``sparsity.json``,
    ``pruning_report.json`` and its row in the results' tables name the whole recipe and the input model,
    and count the parameters on the written weights against the input model's."""
    model, options, out = inputs["model"], inputs["options"], tmp_path / "out"
    report = prune_model(model, "thanos", "vocab:0.3+depth:1+neurons:0.3", out=tmp_path / "out", **options)
    assert [part["sparsity"] for part in report["parts"]] == ["depth:1", "neurons:0.3", "vocab:0.3"]
    widths = prune_model(model, "thanos", "depth:1+neurons:0.3", out=tmp_path / "widths", **options)
    prune_model(widths["out"], "thanos", "vocab:0.3", out=tmp_path / "by-hand", **options)
    assert weights(tmp_path / "out") == weights(tmp_path / "by-hand")
    kept = [json.loads((tmp_path / d / "vocabulary.json").read_text()) for d in ("out", "by-hand")]
    assert kept[0]["kept_ids"] == kept[1]["kept_ids"] and report["parts"][-1]["compact"][
        "kept_tokens"
    ] == len(kept[1]["kept_ids"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["vocab_size"] == kept[1]["tokens_kept"]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "It is the combined recipe `depth:1+neurons:0.3+vocab:0.3` on `dense`" in card
    assert card.startswith("---\n") and "\n# dense: Thanos `depth:1+neurons:0.3+vocab:0.3`\n" in card
    # what was written, described as a whole: the recipe, the input model, parameters counted on the weights
    whole, base, written = "depth:1+neurons:0.3+vocab:0.3", stored_parameters(model), stored_parameters(out)
    sidecar = json.loads((tmp_path / "out" / "sparsity.json").read_text())
    assert (
        sidecar["structure"] == "depth+neurons+vocab" and sidecar["all_parameters"]["parameters"] == written
    )
    assert sidecar["combined"] == {
        "sparsity": whole, "parts": ["depth:1", "neurons:0.3", "vocab:0.3"], "base_model": "dense",
        "parameters": {"base_model": base, "written": written},
    }  # fmt: skip
    pruned = json.loads((tmp_path / "out" / "pruning_report.json").read_text())["workflow"]["combined"]
    assert pruned["sparsity"] == whole and pruned["base_model"] == str(model)
    assert f"Against the base model: {written:,} of {base:,} parameters" in card
    results = tmp_path / "results"
    shutil.copytree(tmp_path / "out", results / "dense" / "combo" / "model")
    (row,) = collect(results)[0].to_dict("records")
    assert row["sparsity"] == whole and row["structure"] == "depth+neurons+vocab"
    assert row["params_removed"] == pytest.approx(1 - written / base)
    digests.verify(tmp_path / "out")  # its report records the files it holds: evaluations load it
    with pytest.raises(ValueError, match="ends with the vocabulary, which is not distilled"):
        prune_model(
            model, "thanos", "depth:1+vocab:0.3", out=tmp_path / "x", distill={"tokens": 64}, **options
        )


@pytest.fixture(scope="module")
def searched(inputs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``params:0.3`` stopped by an error after its second measurement, then run again: the measurements
    of each run (recipes measured, in order) and the second run's report."""
    import thanos.evaluation.heldout as heldout

    root, original, runs = tmp_path_factory.mktemp("searched"), heldout.measure, [[], []]
    options = inputs["options"] | {"out": root / "out", "workdir": root / "work"}

    def failing(dense: Any, candidate: Path, *args: Any) -> dict[str, Any]:
        if len(runs[0]) == 2:
            raise RuntimeError("stopped during the search")
        runs[0].append(measured_name(candidate))
        return original(dense, candidate, *args)

    def counted(dense: Any, candidate: Path, *args: Any) -> dict[str, Any]:
        runs[1].append(measured_name(candidate))
        return original(dense, candidate, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(heldout, "measure", failing)
        with pytest.raises(RuntimeError, match="stopped during the search"):
            prune_model(inputs["model"], "thanos", "params:0.3", **options)
        patch.setattr(heldout, "measure", counted)
        report = prune_model(inputs["model"], "thanos", "params:0.3", **options)
    return {"root": root, "runs": runs, "report": report, "out": root / "out"}


def test_params_removes_at_least_p_counted_on_the_written_model(
    searched: dict[str, Any], inputs: dict[str, Any]
) -> None:
    """The chosen recipe removes at least 30 % of the parameters, counted on the written model as
    ``search.json`` says; every candidate's predicted count is its written count; the card lists them."""
    from thanos.models.checkpoint import stored_parameters

    search = json.loads((searched["out"] / "search.json").read_text())
    assert search == json.loads((searched["root"] / "work" / "search" / "search.json").read_text())
    assert search == searched["report"]["search"]
    assert stored_parameters(searched["out"]) == search["chosen_parameters"]
    assert search["parameters"] - search["chosen_parameters"] >= search["target_removed"] >= 0.3 * 137984
    for candidate in search["candidates"]:
        assert candidate["predicted_parameters"] == candidate["parameters"]
        assert (candidate["kl"] is None) == ("vocab" in candidate["recipe"])
    # the mix of least loss among the mixes written and measured that remove enough
    mixes = [c for c in search["candidates"] if "predicted_loss" in c]
    chosen = min((c for c in mixes if c["removed"] >= search["target_removed"]), key=lambda c: c["loss"])
    assert search["chosen"] == chosen["recipe"]
    card = (searched["out"] / "README.md").read_text()
    assert f"Chosen: `{search['chosen']}`" in card and card.count("## The size search") == 1
    assert all(f"| `{c['recipe']}` | {c['parameters']:,} |" in card for c in search["candidates"])
    # the cost table first (each axis alone, marked `table` on the card), then the mixes it predicted, each
    # with its prediction and the measurement's error beside it
    mixes = [c for c in search["candidates"] if "predicted_loss" in c]
    assert mixes and search["candidates"][-len(mixes) :] == mixes
    assert all("+" not in c["recipe"] for c in search["candidates"][: -len(mixes)])
    for mix in mixes:
        error = mix["loss"] - mix["predicted_loss"]
        spread = statistics.stdev(mix["text_losses"]) / len(mix["text_losses"]) ** 0.5  # the texts' spread
        assert mix["loss"] == pytest.approx(statistics.mean(mix["text_losses"]), abs=0.05)
        assert f"| {mix['loss']:.4f} ± {spread:.4f} | {mix['predicted_loss']:.4f} ({error:+.4f}) |" in card
    assert card.count(" | table | ") == len(search["candidates"]) - len(mixes)
    digests.verify(searched["out"])  # search.json and the card's section recorded: evaluations load it
    # described as what was written: the chosen recipe whole, the input model as the base, every parameter
    # counted on the written weights against the input model's
    written, base = stored_parameters(searched["out"]), search["parameters"]
    sidecar = json.loads((searched["out"] / "sparsity.json").read_text())
    assert sidecar["all_parameters"]["parameters"] == written
    if "+" in search["chosen"]:
        combined = sidecar["combined"]
        assert (combined["sparsity"], combined["base_model"]) == (search["chosen"], "dense")
        assert combined["parameters"] == {"base_model": base, "written": written}
    else:
        assert sidecar["sparsity"] == search["chosen"]
        assert sidecar["compact"]["parameters"] == {"original": base, "kept": written}
    report = json.loads((searched["out"] / "pruning_report.json").read_text())
    combined_record = (report.get("workflow") or {}).get("combined", {})
    described = combined_record.get("base_model") or report["model"]["path"]
    assert described == str(inputs["model"]) and f"{written:,} of {base:,} parameters" in card


@pytest.mark.slow
def test_a_running_search_holds_its_out_and_is_killed_and_resumed(
    searched: dict[str, Any], inputs: dict[str, Any], tmp_path: Path
) -> None:
    """``thanos prune-model --sparsity params:0.3`` (a process of its own), stopped once its search holds
    its directory: a second size on its ``--out`` exits 2 in one ERROR line naming it; ``thanos workdirs``
    lists its search directory in use by its pid, ``--delete-all`` leaves that directory and ``--delete``
    refuses it. Let go on, it is SIGKILLed once its second candidate is measured; the same command again
    measures only the candidates the killed run had not (its lines say which were measured in an earlier
    run), each once, and writes the bytes of the in-process search (which the chosen recipe run alone
    writes too: ``test_the_chosen_recipe_alone_writes_the_same_bytes``); ``thanos workdirs`` then lists the
    search finished, with its calibration."""
    import itertools
    import os
    import re

    from conftest import kill_once, stopped_holding, thanos_here

    root, shared = tmp_path / "root", tmp_path / "shared"
    env = {"THANOS_WORKDIR": str(root)}

    def search_lock() -> (
        Path | None
    ):  # once the search has recorded itself (a busy machine may stop it between)
        found = sorted(root.glob("*-search-*/.thanos-run.lock"))
        record = found[0].parent / "workdir.json" if found else None
        return found[0] if record and record.is_file() and "search_key" in record.read_text() else None

    proc = _popen(_command(inputs, "params:0.3", shared), env={**os.environ, **env})
    with stopped_holding(proc, search_lock):
        search = search_lock().parent  # type: ignore[union-attr]
        listed = thanos_here("workdirs", "--root", root, cwd=tmp_path)
        everything = thanos_here("workdirs", "--root", root, "--delete-all", cwd=tmp_path)
        one = thanos_here("workdirs", "--root", root, "--delete", search.name, cwd=tmp_path)
        second = thanos_here(*_command(inputs, "params:0.2", shared), cwd=tmp_path, env=env)
    assert f"{search.name} (in use by pid {proc.pid} (thanos prune-model --model" in listed.stdout, (
        listed.stdout
    )
    assert "unfinished: params:0.3 (not finished yet; a run is using the directory)" in listed.stdout
    assert everything.returncode == 0 and search.is_dir()
    assert one.returncode == 2 and f"a run is using it now (pid {proc.pid} (thanos" in one.stderr, one.stderr
    _refused_by(second, shared, proc)

    candidates = search / "candidates"
    # a measurement is finished once its ledger record is written (the record is last: a run killed
    # between the two measures that candidate again)
    kill_once(proc, lambda: len(list(candidates.glob("*/.measurement.json.inputs.json"))) >= 2)
    killed = {path.parent.name for path in candidates.glob("*/.measurement.json.inputs.json")}
    again = thanos_here(*_command(inputs, "params:0.3", shared), cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [line for line in again.stderr.splitlines() if line.startswith("candidate ")]
    earlier = {line.split(": ")[1] for line in lines if "(measured in an earlier run)" in line}
    measured = [line.split(": ")[1] for line in lines if "(measured in an earlier run)" not in line]
    # each line: its place among the most the search measures, the best so far, the time the rest may take
    assert all(re.match(r"candidate \d+ of at most \d+: ", line) for line in lines), lines
    # its loss with the standard error over the held-out windows
    assert all(re.search(r" held-out loss -?[0-9.]+ ± [0-9.]+ \(", line) for line in lines), lines
    assert "; best so far " in lines[-1] and any("left" in line for line in lines), lines
    recorded = json.loads((shared / "search.json").read_text())
    assert len(killed) >= 2 and {slug(p) for p in earlier} == killed, (killed, lines)
    assert sorted([*earlier, *measured]) == sorted(c["recipe"] for c in recorded["candidates"])
    assert len(measured) == len(set(measured)) and not set(measured) & earlier
    assert recorded["request"] == "params:0.3"
    assert weights(shared) == weights(searched["out"])
    after = thanos_here("workdirs", "--root", root, cwd=tmp_path).stdout.split(search.name)[1].splitlines()
    block = "\n".join([after[0], *itertools.takewhile(lambda line: line.startswith(" " * 12), after[1:])])
    assert "recipes params:0.3;" in block and "unfinished" not in block, block
    assert f"calibration 8 x 32 of {inputs['options']['calibration']}" in block, block


def test_a_stopped_search_measures_no_candidate_twice(searched: dict[str, Any]) -> None:
    """The run stopped after two measurements; the second measured only the others, each once."""
    first, second = searched["runs"]
    candidates = searched["report"]["search"]["candidates"]
    assert len(first) == 2 and len(candidates) >= 4
    assert sorted(first + second) == sorted({*first, *second}) and len(first + second) == len(candidates)


def test_the_tables_width_points_read_one_dense_capture(inputs: dict[str, Any], tmp_path: Path) -> None:
    """The cost table's heads and neurons points prune every block on the dense model's inputs, captured
    once in the search's working directory and read by each of them: no point has a chain of its own
    (``--keep all`` keeps the stages, and each point's model where it was assembled: not published, not
    described; the dry run's plan said at least the disk they took). Measured again
    with ``--keep needed``, every point is read, and the stages are deleted: a later size reads the
    measurements."""
    import io

    options = inputs["options"] | {"out": tmp_path / "out", "workdir": tmp_path / "work", "table_only": True}
    said = io.StringIO()
    prune_model(inputs["model"], "thanos", "params:0.3", stream=said, keep="all", dry_run=True, **options)
    assert "of disk while they are measured, kept (--keep all)" in said.getvalue(), said.getvalue()
    size, unit = said.getvalue().split("the table's points take up to ")[1].split(" ")[:2]
    planned = float(size) * 1024 ** ("B KiB MiB GiB".split().index(unit))
    report = prune_model(inputs["model"], "thanos", "params:0.3", keep="all", **options)
    assert report["predicted"]["recipe"]
    search = tmp_path / "work" / "search"
    measured = {path.parent.name for path in search.glob("candidates/*/measurement.json")}
    assert {"neurons0.25", "heads0.5"} <= measured, measured
    (chains,) = (tmp_path / "work" / "search" / "work").glob("results/*/chains")
    assert sorted(path.name for path in chains.iterdir()) == ["dense"]
    blocks = json.loads((inputs["model"] / "config.json").read_text())["num_hidden_layers"]
    stored = sorted(path.name for path in (chains / "dense").glob("hessians_*.zarr"))
    assert stored == sorted(f"hessians_{block}.zarr" for block in range(blocks))
    assert sum(path.stat().st_size for path in search.rglob("*")) <= planned
    # each point's model kept where it was written, not published (no copy), undescribed (no card, no
    # sparsity.json: its report alone, a vocabulary's too)
    models = list((search / "work" / "results").glob("*/*/model"))
    assert len(models) == len(list(search.glob("candidates/*/measurement.json"))), models
    assert not list(search.glob("candidates/*/model"))
    assert any((m / "vocabulary.json").is_file() for m in models)
    described = [m for m in models if (m / "README.md").exists() or (m / "sparsity.json").exists()]
    assert not described and all((m / "pruning_report.json").is_file() for m in models), described
    said = io.StringIO()
    prune_model(inputs["model"], "thanos", "params:0.3", stream=said, **options)
    lines = [line for line in said.getvalue().splitlines() if line.startswith("candidate ")]
    assert lines and all("(measured in an earlier run)" in line for line in lines), said.getvalue()
    assert not (tmp_path / "work" / "search" / "work").exists()


def test_a_size_keeps_the_dense_stores_for_the_points_no_size_has_reached(
    inputs: dict[str, Any], tmp_path: Path
) -> None:
    """A size measures the points of the cost table its mix reaches; with ``--keep needed`` their own stages
    go once measured, and the dense model's stores they share stay (said, with the points left) while a
    point remains: a later size that reaches a new point prunes it on them, computing no Hessian again; the
    table completed (``--table-only``), the stores go too."""
    import io

    options = inputs["options"] | {"workdir": tmp_path / "work"}
    work = tmp_path / "work" / "search" / "work"
    said = io.StringIO()
    prune_model(inputs["model"], "thanos", "params:0.1", out=tmp_path / "a", stream=said, **options)
    kept = re.search(r"params:0.1: the dense model's stores of the cost table kept in (\S+) \(.*\) for the "
                     r"\d+ points? no size has reached yet \((.*)\); ", said.getvalue())  # fmt: skip
    assert kept is not None and Path(kept[1]) == work, said.getvalue()
    left = kept[2].split(", ")
    assert "neurons:0.5" in left, left
    assert sorted(path.name for path in work.glob("results/*/*") if path.is_dir()) == ["calib", "chains"]
    said = io.StringIO()
    prune_model(inputs["model"], "thanos", "params:0.5", out=tmp_path / "b", stream=said, **options)
    assert "neurons:0.5: " in said.getvalue() and "(measured in an earlier run)" in said.getvalue()
    log = (tmp_path / "work" / "search" / "candidates" / "neurons0.5" / "run.log").read_text()
    assert "Hessians of block 0 (dense)" in log.split("reused: ")[1] and "done: Hessians" not in log, log
    prune_model(inputs["model"], "thanos", "params:0.5", out=tmp_path / "c", table_only=True, **options)
    assert not work.exists()


def test_a_moved_working_directory_measures_nothing_again(inputs: dict[str, Any], tmp_path: Path) -> None:
    """A size's working directory moved (to a larger disk, renamed) and given again: its search reads every
    measurement of the table where it is now (the ledger records the search's calibration by its content,
    not its path). Every point is measured in the dtype the request's pruning computes in (the tiny model's
    float32; bfloat16 asked: half the time of float32 on a CPU that multiplies it faster), the dense model's
    side too, and says so; a table measured in one dtype is measured again in another, as its plan says."""
    import io

    options = inputs["options"] | {"out": tmp_path / "out", "table_only": True, "workdir": tmp_path / "there"}
    prune_model(inputs["model"], "thanos", "params:0.3", **options | {"workdir": tmp_path / "here"})
    shutil.move(tmp_path / "here", tmp_path / "there")
    losses: dict[str, dict[str, float]] = {}
    for dtype, again in (("float32", True), ("bfloat16", False)):
        said = io.StringIO()
        prune_model(inputs["model"], "thanos", "params:0.3", compute_dtype=dtype, stream=said, **options)
        lines = [line for line in said.getvalue().splitlines() if line.startswith("candidate ")]
        assert len(lines) > 3, said.getvalue()
        assert [("(measured in an earlier run)" in line) for line in lines] == [again] * len(lines), lines
        (plan,) = [line for line in said.getvalue().splitlines() if line.startswith("params:0.3: measures ")]
        n = len(lines)  # the plan says which are read and which are measured again, before any is
        assert (f"; {n} of the {n} were measured by an earlier run in " in plan) == again, plan
        assert (f"; {n} points an earlier run measured there from other inputs" in plan) != again, plan
        search = next((tmp_path / "there").glob("*/candidates")).parent
        points = {
            p.parent.name: json.loads(p.read_text()) for p in search.glob("candidates/*/measurement.json")
        }
        assert {point["dtype"] for point in points.values()} == {dtype}
        losses[dtype] = {name: point["loss"] for name, point in points.items()}
    assert losses["bfloat16"].keys() == losses["float32"].keys() and losses["bfloat16"] != losses["float32"]


def test_a_damaged_measurement_is_measured_again(inputs: dict[str, Any], tmp_path: Path) -> None:
    """A point's ``measurement.json`` truncated after it was recorded is measured again (its record keeps
    the file's size and modification time), not read: the search does not fail on it at every rerun."""
    import io

    options = inputs["options"] | {"out": tmp_path / "out", "table_only": True, "workdir": tmp_path / "w"}
    prune_model(inputs["model"], "thanos", "params:0.3", **options)
    damaged = sorted((tmp_path / "w").glob("search/candidates/*/measurement.json"))[0]
    damaged.write_text(damaged.read_text()[:50])
    said = io.StringIO()
    prune_model(inputs["model"], "thanos", "params:0.3", stream=said, **options)
    lines = [line for line in said.getvalue().splitlines() if line.startswith("candidate ")]
    again = [line for line in lines if "(measured in an earlier run)" not in line]
    recipe = json.loads(damaged.read_text())["recipe"]  # whole again
    assert len(again) == 1 and f": {recipe}: " in again[0] and len(lines) > 3, lines


def test_one_search_whatever_the_paths_are_spelled(
    inputs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same model and calibration named by relative and by absolute paths are one search: its default
    directory is keyed by the paths resolved (``med`` then ``/work/med`` measured the whole table again
    in a directory of its own)."""
    import io

    monkeypatch.setenv("THANOS_WORKDIR", str(tmp_path / "root"))
    monkeypatch.chdir(inputs["root"])
    model, text = inputs["model"], Path(inputs["options"]["calibration"])
    options = inputs["options"] | {"out": tmp_path / "out", "table_only": True, "axes": "depth"}
    relative = options | {"calibration": text.name}
    prune_model(f"./{model.name}/", "thanos", "params:0.1", **relative)
    said = io.StringIO()
    prune_model(str(model), "thanos", "params:0.1", stream=said, **options)
    lines = [line for line in said.getvalue().splitlines() if line.startswith("candidate ")]
    assert lines and all("(measured in an earlier run)" in line for line in lines), said.getvalue()
    assert len(list((tmp_path / "root").glob("*-search-*"))) == 1


def test_a_size_names_the_model_file_it_cannot_read(inputs: dict[str, Any], tmp_path: Path) -> None:
    """A size on a model whose config.json or tokenizer.json is damaged names the file (it said only
    ``Expecting property name enclosed in double quotes: line 2 column 1``), before anything is written; a
    recipe's dry run refuses it too (it passed, and the run failed at its calibration)."""
    for name in ("config.json", "tokenizer.json"):
        model = tmp_path / name / "m"
        shutil.copytree(inputs["model"], model)
        (model / name).write_text("{\n,\n")
        said = rf"{name} is not valid JSON \(.*\) \({model / name}\); restore it from the original model"
        with pytest.raises(ValueError, match=said):
            prune_model(model, "thanos", "params:0.2", out=tmp_path / name / "out", **inputs["options"])
        assert not (tmp_path / name / "out").exists()
        with pytest.raises(ValueError, match=said):
            prune_model(
                model, "thanos", "depth:1", out=tmp_path / name / "o", dry_run=True, **inputs["options"]
            )


def test_a_size_takes_the_width_multiple_for_its_neurons_points(
    inputs: dict[str, Any], tmp_path: Path
) -> None:
    """``--width-multiple 16`` with ``params:P``: its neurons points and mixes round the kept width to 16; the
    other axes' points take no such option (it was refused: ``depth:1: only neurons:p recipes round the
    kept MLP width``, whatever the multiple)."""
    options = inputs["options"] | {"workdir": tmp_path / "w", "table_only": True, "axes": "depth,neurons"}
    prune_model(inputs["model"], "thanos", "params:0.2", out=tmp_path / "out", width_multiple=16, **options)
    logs = {
        path.parent.name: path.read_text()
        for path in (tmp_path / "w" / "search").glob("candidates/*/run.log")
    }
    neurons = [log for name, log in logs.items() if name.startswith("neurons")]
    assert neurons and all("_w16" in log for log in neurons), logs.keys()
    assert any(name.startswith("depth") for name in logs), logs.keys()


def test_the_curve_gives_a_chosen_point_as_written_and_names_each_size_once() -> None:
    """A size whose mix is a point of the cost table (``--axes depth``): its row in ``sizes.csv`` is the
    written model's measurement (the table's point, on a quarter of the windows, came first and was kept),
    and names the size once (``params:0.1 params:0.1``)."""
    from thanos.report.size_curve import curve_rows

    def measured(recipe: str, loss: float, **extra: Any) -> dict[str, Any]:
        return {"recipe": recipe, "parameters": 90, "removed_fraction": 0.1, "loss": loss} | extra

    table = [measured("depth:1", 0.03), measured("depth:2", 0.2)]
    searches = {
        "params:0.1": {"chosen": "depth:1", "candidates": [*table, measured("depth:1", 0.002, windows=8)]},
        "params:0.2": {"chosen": "depth:2", "candidates": [*table, measured("depth:2", -0.0003, windows=8)]},
    }
    rows = {row["recipe"]: row for row in curve_rows(searches)}
    assert (rows["depth:1"]["loss"], rows["depth:1"]["chosen_for"]) == (0.002, "params:0.1")
    assert (rows["depth:2"]["loss"], rows["depth:2"]["chosen_for"]) == (-0.0003, "params:0.2")


def test_one_model_and_several_sizes_never_replace_each_other(inputs: dict[str, Any], tmp_path: Path) -> None:
    """An ``--out`` holding one model, given to several sizes, and one holding several sizes' models, given
    to one recipe or size, are refused saying what they hold (they said there was no previous result), with
    ``--overwrite`` too: it replaces a result of the same kind only."""
    one, several = tmp_path / "one", tmp_path / "several"
    (one / "pruning_report.json").parent.mkdir()
    (one / "pruning_report.json").write_text("{}")
    (several / "params0.1").mkdir(parents=True)
    (several / "sizes.json").write_text("{}")
    options = inputs["options"] | {"overwrite": True}
    with pytest.raises(
        ValueError, match="holds one pruned model .* several sizes write a directory of models"
    ):
        prune_model(inputs["model"], "thanos", "params:0.1,0.2", out=one, **options)
    for pattern in ("params:0.1", "magnitude"):
        method, sparsity = ("magnitude", 0.5) if pattern == "magnitude" else ("thanos", pattern)
        with pytest.raises(ValueError, match=r"holds the models of several sizes \(sizes.json"):
            prune_model(inputs["model"], method, sparsity, out=several, **options)
    assert (one / "pruning_report.json").is_file() and (several / "params0.1").is_dir()


def test_the_card_of_a_resumed_search_says_its_candidates_were_measured_before(tmp_path: Path) -> None:
    """A search that read its table from an earlier run searched for seconds: the card says so, with the
    candidates' own time, where it said ``Searched in 0:02`` as if that were the search's cost."""
    from thanos.runner.size_card import write_card

    def candidate(recipe: str, seconds: float, **extra: Any) -> dict[str, Any]:
        return {"recipe": recipe, "parameters": 9, "removed_fraction": 0.1, "loss": 0.1, "kl": None,
                "seconds": seconds} | extra  # fmt: skip

    candidates = [candidate("depth:1", 40.0), candidate("depth:2", 35.0), candidate("depth:1", 30, windows=8)]
    record = {
        "request": "params:0.1", "target_removed": 1, "parameters": 10, "axes": ["depth"],
        "chosen": "depth:1", "chosen_parameters": 9, "loss": "loss", "held_out": {"windows": 2},
        "calibration": {"windows": 2}, "candidates": candidates,
    }  # fmt: skip
    for seconds, said in ((80.0, "Searched in 1:20; "), (2.0, "Searched in 0:02 by this run, which read "
                          "candidates an earlier run measured (1:15 in all); ")):  # fmt: skip
        (tmp_path / "README.md").write_text("# m\n")
        write_card(tmp_path, record | {"seconds": seconds})
        assert said in (tmp_path / "README.md").read_text()


def test_the_chosen_recipe_alone_writes_the_same_bytes(
    searched: dict[str, Any], inputs: dict[str, Any], tmp_path: Path
) -> None:
    """The chosen explicit recipe run on its own writes the model the (resumed) search wrote."""
    chosen = searched["report"]["search"]["chosen"]
    prune_model(inputs["model"], "thanos", chosen, out=tmp_path / "alone", **inputs["options"])
    assert weights(tmp_path / "alone") == weights(searched["out"])


def test_axes_restrict_the_search(inputs: dict[str, Any], tmp_path: Path) -> None:
    """``axes="depth"``: the only candidate is a depth recipe; --axes or table_only without params:P, an
    unknown axis, a fraction out of range and params combined are refused in one line."""
    options = inputs["options"] | {"workdir": tmp_path / "work"}
    report = prune_model(
        inputs["model"], "thanos", "params:0.2", out=tmp_path / "out", axes="depth", **options
    )
    # the table's one point, then that mix written as the size's model and measured on what was written
    candidates = report["search"]["candidates"]
    assert [c["recipe"] for c in candidates] == ["depth:1", "depth:1"] and "windows" in candidates[1]
    assert report["search"]["chosen"] == "depth:1" and report["search"]["axes"] == ["depth"]
    refusals = {
        ("depth:1", "depth"): "is for params:P; depth:1 names its mix",
        ("params:0.2", "width"): "axes=width: choose from depth, heads, neurons, vocab",
        ("params:1.5", None): "params takes the fraction of the parameters removed, in",
        ("params:0.2,0.20", None): "names the size 0.2 twice; give each size once",
        ("params:0.2+depth:1", None): "params:P asks for a size and the tool chooses the mix; give it alone",
    }
    for (sparsity, axes), message in refusals.items():
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            prune_model(inputs["model"], "thanos", sparsity, out=tmp_path / "x", axes=axes, **options)
    table_only = r"table_only: is for params:P \(it measures a size's cost table\); 2:4 names its mix"
    with pytest.raises(ValueError, match=table_only):
        prune_model(inputs["model"], "thanos", "2:4", out=tmp_path / "x", table_only=True, **options)
    assert not (tmp_path / "x").exists()


def test_vocab_text_chooses_the_tokens(
    searched: dict[str, Any], inputs: dict[str, Any], tmp_path: Path
) -> None:
    """``vocab_text``: a vocab recipe, a combined recipe's vocab part and a size's vocabulary candidates
    choose their tokens by that text, not the calibration; the model is the one ``prune-vocab --text``
    writes from it. A search run again with it in the first search's working directory measures again only
    the candidates with a vocab part. A missing text, or a recipe without a vocab part, is refused in one
    line before anything runs."""
    import thanos.evaluation.heldout as heldout
    from thanos.pruning.sparsity import parse_sparsity
    from thanos.stages.vocab import prune_vocabulary

    model, options = inputs["model"], inputs["options"]
    other = tmp_path / "other.txt"
    numbers = (f"{n} {n * 7} {n * 13} figures, digits and numbers" for n in range(60))
    other.write_text("\n\n".join(numbers) + "\n")
    prune_model(model, "thanos", "vocab:0.3", out=tmp_path / "plain", **options)
    prune_model(model, "thanos", "vocab:0.3", out=tmp_path / "t", vocab_text=other, **options)
    by_text = prune_vocabulary(model, tmp_path / "cmd", parse_sparsity("vocab:0.3"), [other.read_text()], "x")
    plain, chosen = (json.loads((tmp_path / d / "vocabulary.json").read_text()) for d in ("plain", "t"))
    assert chosen["kept_ids"] == by_text["kept_ids"] != plain["kept_ids"]
    assert weights(tmp_path / "t") == weights(tmp_path / "cmd")
    assert str(other) in (tmp_path / "t" / "README.md").read_text()
    options = options | {"vocab_text": other}
    prune_model(model, "thanos", "depth:1+vocab:0.3", out=tmp_path / "c", **options)
    depth = prune_model(model, "thanos", "depth:1", out=tmp_path / "d", **inputs["options"])
    prune_model(depth["out"], "thanos", "vocab:0.3", out=tmp_path / "h", **options)
    assert weights(tmp_path / "c") == weights(tmp_path / "h")

    work = searched["root"] / "work"  # the first search's (its vocab candidates are measured again here)
    first = {c["recipe"] for c in searched["report"]["search"]["candidates"]}
    measured: list[str] = []
    original = heldout.measure

    def counted(dense: Any, candidate: Path, *args: Any) -> dict[str, Any]:
        measured.append(measured_name(candidate))
        return original(dense, candidate, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(heldout, "measure", counted)
        report = prune_model(model, "thanos", "params:0.3", out=tmp_path / "s", workdir=work, **options)
    again = {c["recipe"] for c in report["search"]["candidates"]} & first
    assert {slug(p) for p in again if "vocab" in p} <= set(measured)
    assert not {slug(p) for p in again if "vocab" not in p} & set(measured), measured

    refusals = {
        ("vocab:0.3", tmp_path / "missing.txt", None): "vocab_text=.*missing.txt: does not exist; give",
        ("neurons:0.3", other, None): "vocab_text=.*only vocab:N and vocab:p recipes choose tokens",
        ("depth:1+neurons:0.3", other, None): "chooses the tokens of a vocab part, and depth:1",
        ("params:0.3", other, "depth,neurons"): "the axes leave the vocabulary out",
        ("depth:1+vocab:0.3", tmp_path / "missing.txt", None): "missing.txt: does not exist",
    }
    for (sparsity, text, axes), message in refusals.items():
        with pytest.raises(ValueError, match=message):
            given = inputs["options"] | {"vocab_text": text, "axes": axes}
            prune_model(model, "thanos", sparsity, out=tmp_path / "x", **given)
    assert not (tmp_path / "x").exists()


def _command(inputs: dict[str, Any], sparsity: str, out: Path, *extra: str | Path) -> list[str]:
    """``thanos prune-model`` on the module's model and calibration, as a user runs it."""
    options = inputs["options"]
    return [
        "prune-model", "--model", str(inputs["model"]), "--method", "thanos", "--sparsity", sparsity,
        "--calibration", options["calibration"], "--nsamples", str(options["nsamples"]),
        "--seqlen", str(options["seqlen"]), "--device", "cpu", *map(str, extra), "--out", str(out),
    ]  # fmt: skip


def _popen(command: list[str], env: dict[str, str] | None = None) -> Any:
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "thanos", *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _refused_by(run: Any, out: Path, holder: Any) -> None:
    """``run`` exited 2 with one ERROR line, its last, naming ``holder`` (its pid and command) as the writer
    of ``out`` and how to go on."""
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]
    assert run.returncode == 2 and len(errors) == 1, run.stderr
    assert run.stderr.rstrip().endswith(errors[0]) and "Traceback" not in run.stderr, run.stderr
    assert f"--out {out} is being written by pid {holder.pid} (thanos prune-model --model " in errors[0]
    assert "wait for that run to finish" in errors[0] and "or give another --out" in errors[0], errors[0]


@pytest.mark.slow
def test_out_has_one_writer(inputs: dict[str, Any], tmp_path: Path) -> None:
    """Three writers of one ``--out`` at once: a Thanos run (a process of its own) holds it from its check to
    its last write; meanwhile a Wanda run and a ``thanos prune-vocab`` on it exit 2 in one ERROR line naming
    that run, having deleted nothing of their own (the Wanda run's working directory keeps the pruned layers
    an earlier run left there, untouched); the Thanos run then writes ``--out`` as it writes alone."""
    from conftest import stopped_holding, thanos_here

    from thanos.files.locks import out_lock

    shared, wanda_work = tmp_path / "shared", tmp_path / "wanda-work"
    wanda = [*_command(inputs, "0.5", tmp_path / "wanda", "--keep", "all", "--workdir", wanda_work)]
    wanda[wanda.index("thanos")] = "wanda"
    assert thanos_here(*wanda, cwd=tmp_path).returncode == 0
    before = {path: path.stat().st_mtime_ns for path in wanda_work.rglob("*") if path.is_file()}
    assert any("pruned" in path.parts and path.suffix == ".safetensors" for path in before)
    wanda[-1] = str(shared)
    vocab = ["prune-vocab", "--model", inputs["model"], "--sparsity", "vocab:0.3", "--text",
             inputs["options"]["calibration"], "--out", shared]  # fmt: skip
    proc = _popen(_command(inputs, "0.5", shared, "--workdir", tmp_path / "work"))
    with stopped_holding(proc, out_lock(shared)):
        refused = [thanos_here(*wanda, cwd=tmp_path), thanos_here(*vocab, cwd=tmp_path)]
    output = proc.communicate(timeout=600)[0].decode()
    assert proc.returncode == 0, output[-3000:]
    for run in refused:
        _refused_by(run, shared, proc)
    assert {path: path.stat().st_mtime_ns for path in wanda_work.rglob("*") if path.is_file()} == before
    assert json.loads((shared / "pruning_report.json").read_text())["recipe"]["name"] == "thanos_u50"
    options = inputs["options"] | {"workdir": tmp_path / "alone-work"}
    prune_model(inputs["model"], "thanos", 0.5, out=tmp_path / "alone", **options)
    assert weights(shared) == weights(tmp_path / "alone")


def test_a_combined_recipe_is_checked_whole_at_the_door(inputs: dict[str, Any], tmp_path: Path) -> None:
    """Every part of a combined recipe is checked on the input model before the first part runs: a vocab
    part that removes no token, or on a tokenizer that cannot lose tokens, and a heads part whose count
    the model type's config refuses are refused in one line naming the whole recipe and the part, with
    nothing pruned or written; a size leaves out, and says so, the axis the model cannot lose."""
    import io

    from conftest import make_tiny_model, thanos_here

    options = inputs["options"] | {"workdir": tmp_path / "w"}
    words = make_tiny_model(tmp_path, "llama", num_blocks=3)  # word-level; hidden 32, 4 heads in 4 groups
    refusals = [
        (inputs["model"], "depth:1+vocab:5000", "its part vocab:5000: keeps 5000 of the model's"),
        (words, "depth:1+vocab:0.3", "its part vocab:0.3: the tokenizer is WordLevel, not BPE"),
        (words, "depth:1+heads:0.25", "its part heads:0.25 leaves 3 query heads in 3 key/value groups, which "
         "the config of model_type 'llama' refuses (The hidden size (32) is not a multiple of the number of "
         "attention heads (3)); the settings it accepts: heads:0.5 (2 heads), heads:0.75 (1 head)"),
    ]  # fmt: skip
    for model, sparsity, message in refusals:
        with pytest.raises(ValueError) as err:
            prune_model(model, "thanos", sparsity, out=tmp_path / "out", **options)
        assert str(err.value).startswith(f"sparsity={sparsity}: {message}"), str(err.value)
    cli = ["prune-model", "--model", words, "--method", "thanos", "--sparsity", "depth:1+vocab:0.3",
           "--out", tmp_path / "out", "--calibration", options["calibration"],
           "--workdir", tmp_path / "w"]  # fmt: skip
    run = thanos_here(*cli, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("ERROR: --sparsity depth:1+vocab:0.3: its part vocab:0.3: the tokenizer is")
    assert not (tmp_path / "out").exists() and not (tmp_path / "w").exists()
    said = io.StringIO()
    prune_model(words, "thanos", "params:0.3", out=tmp_path / "out", dry_run=True, stream=said, **options)
    assert "mixing depth, heads, neurons; not vocab (its tokenizer is not byte-level BPE" in said.getvalue()
    from thanos.demo.tiny import build_tiny_model

    bytes_only = build_tiny_model(
        tmp_path / "bytes", hidden_size=32, num_blocks=2
    )  # no merge: every token kept
    said = io.StringIO()
    prune_model(bytes_only, "thanos", "params:0.3", out=tmp_path / "o2", dry_run=True, stream=said, **options)
    assert "not vocab (its vocabulary keeps all its " in said.getvalue(), said.getvalue()


def test_a_vocabulary_is_replaced_only_with_overwrite(inputs: dict[str, Any], tmp_path: Path) -> None:
    """An ``out`` holding ``vocab:0.2``'s model: ``vocab:0.3`` (another recipe) and ``depth:1+vocab:0.2``
    (its last part the same: refused before its first part runs) are refused naming what it holds, and
    replace it with ``overwrite``; the same recipe writes it again. A combined recipe whose ``out`` holds
    another result is refused before its first part, whatever its last part."""
    import io
    import re

    model, options, out = inputs["model"], inputs["options"], tmp_path / "out"
    prune_model(model, "thanos", "vocab:0.2", out=out, **options)
    before = weights(out)
    for sparsity in ("vocab:0.3", "depth:1+vocab:0.2"):
        said = io.StringIO()
        held = r"out=.* holds another pruned model \(thanos_v20 of .*dense\), not this run's \(recipe "
        with pytest.raises(ValueError, match=held):
            prune_model(model, "thanos", sparsity, out=out, stream=said, **options)
        assert weights(out) == before and "part 1/2" not in said.getvalue()  # refused before any part
    prune_model(model, "thanos", "vocab:0.2", out=out, **options)  # its own: written again
    report = prune_model(model, "thanos", "vocab:0.3", out=out, overwrite=True, **options)
    assert json.loads((out / "vocabulary.json").read_text())["recipe"] == report["recipe"]["sparsity"]
    assert report["recipe"]["sparsity"] == "vocab:0.3"
    assert weights(out) != before
    # a combined recipe's --out is checked before its first part, whatever its last part
    widths = tmp_path / "widths"
    prune_model(model, "thanos", "depth:1+neurons:0.3", out=widths, **options)
    refused = {
        (out, "depth:1+neurons:0.3"): "holds another pruned model (thanos_v30 of ",
        (widths, "depth:1+neurons:0.5"): "not this run's (recipe depth:1+neurons:0.3 -> depth:1+neurons:0.5)",
    }
    for (where, sparsity), message in refused.items():
        said = io.StringIO()
        with pytest.raises(ValueError, match=re.escape(message)):
            prune_model(model, "thanos", sparsity, out=where, stream=said, **options)
        assert "part 1/2" not in said.getvalue()


def test_a_size_beyond_the_reach_of_its_axes_is_refused(inputs: dict[str, Any], tmp_path: Path) -> None:
    """``params:0.99`` is refused before anything runs (a dry run too), naming the most the axes remove
    together and the size to ask for, which passes."""
    import io
    import re

    options = inputs["options"] | {"workdir": tmp_path / "w", "dry_run": True, "stream": io.StringIO()}
    most_of = r"and the most depth, heads, neurons, vocab can remove is [\d,]+ \([\d.]+ %: depth:1\+heads:"
    with pytest.raises(ValueError, match=r"sparsity=params:0.99 asks for .* " + most_of) as err:
        prune_model(inputs["model"], "thanos", "params:0.99", out=tmp_path / "out", **options)
    most = re.search(r"ask for (params:[\d.]+) or less, or allow more axes", str(err.value))
    assert most is not None, str(err.value)
    prune_model(inputs["model"], "thanos", most.group(1), out=tmp_path / "out", **options)
    assert not (tmp_path / "w").exists() and not (tmp_path / "out").exists()


def test_a_sizes_options_are_checked_on_each_axis_alone(inputs: dict[str, Any], tmp_path: Path) -> None:
    """The cost table prunes each axis alone: an option one axis refuses is refused of the size, naming
    that axis (not a pattern the user never gave); ``recover`` names the axes recovery trains, with which
    the size runs."""
    options = inputs["options"] | {"out": tmp_path / "out", "workdir": tmp_path / "w", "dry_run": True}
    recover = "recover with sparsity=params:0.2: its cost table measures each axis alone, and depth and "
    recover += "vocab prune no weight to recover; give axes=heads,neurons (the axes recovery trains), or"
    alpha = "alpha=0.1 with sparsity=params:0.2: its cost table prunes each axis alone, and depth:1: depth:1 "
    for changed, message in (({"recover": True}, recover), ({"alpha": 0.1}, alpha)):
        with pytest.raises(ValueError, match=re.escape(message)):
            prune_model(inputs["model"], "thanos", "params:0.2", **options, **changed)
    prune_model(inputs["model"], "thanos", "params:0.2", axes="heads,neurons", recover=True, **options)
    assert not (tmp_path / "w").exists() and not (tmp_path / "out").exists()


def test_a_size_refuses_at_the_door_what_its_write_would_refuse(
    searched: dict[str, Any], inputs: dict[str, Any], tmp_path: Path
) -> None:
    """What the size's write would refuse after its cost table (a missing calibration file, windows longer
    than the model's, too few windows to hold some out, a perplexity text that is not there, a foreign
    ``--out`` or one holding another result, a working directory inside ``--out``) is refused before any
    point is measured, naming the option, nothing written; an ``--out`` holding this size's earlier result
    is taken (its write replaces it), and ``--table-only`` reads none."""
    import io

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    missing = str(tmp_path / "missing.txt")
    earlier = searched["root"] / "out"  # params:0.3's result
    refused = {
        "calibration=": ({"calibration": missing}, tmp_path / "out"),
        "seqlen=100000 exceeds the model's": ({"seqlen": 100_000}, tmp_path / "out"),
        "holds out a quarter of the calibration documents and windows": ({"nsamples": 1}, tmp_path / "out"),
        "ppl_source=": ({"evaluate": "ppl", "ppl_source": missing}, tmp_path / "out"),
        "is not empty and is not a previous result": ({}, foreign),
        "holds another pruned model": ({}, earlier),
        "is inside out=": ({"workdir": tmp_path / "out" / "w"}, tmp_path / "out"),  # refused at the end
    }
    for message, (changed, out) in refused.items():
        options = inputs["options"] | {"workdir": tmp_path / "w", "stream": io.StringIO()} | changed
        with pytest.raises(ValueError, match=re.escape(message)):
            prune_model(inputs["model"], "thanos", "params:0.2", out=out, **options)
        assert not (tmp_path / "w").exists() and not (tmp_path / "out").exists(), message
    assert [path.name for path in foreign.iterdir()] == ["notes.txt"]
    options = inputs["options"] | {"workdir": tmp_path / "w", "evaluate": "ppl", "ppl_source": missing}
    with pytest.raises(ValueError, match="ppl_source="):  # several sizes: before their ``out`` is made
        prune_model(inputs["model"], "thanos", "params:0.2,0.3", out=tmp_path / "out", **options)
    assert not (tmp_path / "w").exists() and not (tmp_path / "out").exists()
    said = io.StringIO()
    prune_model(inputs["model"], "thanos", "params:0.3", out=earlier, workdir=tmp_path / "w", dry_run=True,
                stream=said, **inputs["options"])  # fmt: skip
    assert said.getvalue().rstrip().endswith("nothing was run or written"), said.getvalue()
    options = inputs["options"] | {"workdir": tmp_path / "w", "dry_run": True, "table_only": True}
    prune_model(inputs["model"], "thanos", "params:0.2", out=foreign, **options)  # writes no model


@pytest.mark.slow
def test_an_interrupted_candidate_says_how_to_resume(inputs: dict[str, Any], tmp_path: Path) -> None:
    """SIGTERM while the search measures its first candidate: the terminal's last line names the candidate
    and how to resume (it was said only in the candidate's ``run.log``), exit status 143."""
    import signal
    import time

    proc = _popen(_command(inputs, "params:0.3", tmp_path / "out", "--workdir", tmp_path / "work"))
    logs = tmp_path / "work" / "search" / "candidates"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not any(logs.glob("*/run.log")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    terminal = proc.communicate(timeout=300)[0].decode()
    last = terminal.rstrip().splitlines()[-1]
    assert proc.returncode == 143, terminal[-3000:]
    assert last.startswith("terminated (SIGTERM) while measuring the candidate ") and last.endswith(
        "the candidates measured are kept; run the same command to resume"
    ), terminal[-3000:]
    assert "Traceback" not in terminal


def test_a_failed_candidate_is_one_error_line(
    inputs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step failing inside a size's candidate (the blocks' choice, made to fail here) ends the command
    with one ERROR line on the terminal naming the candidate, the cause and the candidate's log (its full
    account is there); exit status 1, no traceback."""
    from conftest import thanos_here

    import thanos.stages.depth.blocks as blocks

    def broken(*args: Any, **kwargs: Any) -> None:
        raise ValueError("the block scores are not finite (injected)")

    monkeypatch.setattr(blocks, "depth_plan", broken)
    extra = ("--workdir", tmp_path / "work", "--axes", "depth,neurons")
    run = thanos_here(*_command(inputs, "params:0.3", tmp_path / "out", *extra), cwd=tmp_path)
    errors = [line for line in run.stderr.splitlines() if "ERROR" in line]
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith("ERROR: the candidate depth:"), run.stderr[-3000:]
    assert "the block scores are not finite (injected)" in errors[0] and errors[0].endswith("run.log)")
    assert not (tmp_path / "out").exists()


def test_a_size_says_its_plan(searched: dict[str, Any], inputs: dict[str, Any], tmp_path: Path) -> None:
    """The dry run of a size (and its run) says what it will measure: its first candidates, each axis
    alone; in the working directory of a finished search, those an earlier run measured (those from the
    same inputs read, the others measured again), the time the rest takes at the seconds a candidate took
    there, and the disk while a point is left to measure; without ``--seqlen`` too."""
    import io

    for workdir, earlier in ((tmp_path / "w", False), (searched["root"] / "work", True)):
        said = io.StringIO()
        prune_model(inputs["model"], "thanos", "params:0.3", out=tmp_path / "out", workdir=workdir,
                    dry_run=True, stream=said, **inputs["options"])  # fmt: skip
        plan = said.getvalue().splitlines()[1]
        count = int(plan.split("measures up to ")[1].split(" ")[0])
        first = f"params:0.3: measures up to {count} candidates first, the cost table of every size: each"
        assert plan.startswith(first + " axis alone (depth:1, "), plan
        assert count > 1
        # an earlier run's points: each read, or measured again where it was measured from other inputs (a
        # test before this one may have measured the vocabulary's points there with another vocab_text)
        read = re.search(rf"; (\d+) of the {count} were measured by an earlier run in ", plan)
        again = re.search(r"; (\d+) points? an earlier run measured there from other inputs", plan)
        found = (int(read[1]) if read else 0) + (int(again[1]) if again else 0)
        assert (0 < found <= count if earlier else found == 0) and (read is not None) == earlier, plan
        assert ("the rest takes up to about" in plan) == earlier, plan
        disk = "; the table's points take up to "  # what is left to measure takes
        left = not earlier or again is not None or found < count  # a point no run here measured yet
        assert (disk in plan) == left, plan
    # without --seqlen: the windows the calibration takes by default (the disk estimate failed on None)
    said = io.StringIO()
    options = {key: value for key, value in inputs["options"].items() if key != "seqlen"}
    prune_model(inputs["model"], "thanos", "params:0.3", out=tmp_path / "out", workdir=tmp_path / "w",
                dry_run=True, stream=said, **options)  # fmt: skip
    assert "; the table's points take up to " in said.getvalue().splitlines()[1], said.getvalue()
    assert not (tmp_path / "w").exists() and not (tmp_path / "out").exists()


def test_a_new_search_names_the_option_that_changed(
    inputs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A size run again with another option searches in a new directory: it says which option changed
    since the earlier search, names that directory and how to delete it."""
    import io

    root, options = tmp_path / "root", inputs["options"] | {"axes": "depth"}
    monkeypatch.setenv("THANOS_WORKDIR", str(root))
    prune_model(inputs["model"], "thanos", "params:0.2", out=tmp_path / "a", **options)
    (earlier,) = [path.name for path in root.glob("*-search-*")]
    said = io.StringIO()
    options |= {"damp": 0.02, "stream": said}
    prune_model(inputs["model"], "thanos", "params:0.2", out=tmp_path / "b", **options)
    assert f"option damp null -> 0.02 since the search in {earlier} (" in said.getvalue(), said.getvalue()
    assert f"`thanos workdirs --delete {earlier}` deletes it" in said.getvalue()


def test_several_sizes_share_one_search_and_draw_the_curve(
    searched: dict[str, Any], inputs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``params:0.3,0.2`` with ``table_only`` first: the cost table measured and each size's predicted mix
    said, nothing written; then each size's model under ``out`` (``params0.3``: what ``params:0.3`` alone
    chooses and writes), no candidate measured twice (the sizes read the table-only run's cost table, and
    each measured first the mix it predicted), the curve of
    every candidate measured (``sizes.csv``, one row per candidate, each size's choice marked; ``sizes.png``)
    and ``sizes.json``; the same call again measures nothing, and its dry run names the mix the table
    predicts for each size. A list with a size beyond reach is refused
    before anything runs, naming it and the most; the workflow takes one size per recipe."""
    import csv
    import io
    import re

    import thanos.evaluation.heldout as heldout
    from thanos.recipes.fields import ConfigError
    from thanos.runner.size_axes import knobs, recipe_of
    from thanos.runner.size_choice import table_points
    from thanos.workflow.config import expand

    options = inputs["options"] | {"workdir": tmp_path / "work"}
    original, measured = heldout.measure, []

    def counted(dense: Any, candidate: Path, *args: Any) -> dict[str, Any]:
        measured.append(measured_name(candidate))  # a point of the table, or a size's model written
        return original(dense, candidate, *args)

    monkeypatch.setattr(heldout, "measure", counted)
    out = tmp_path / "sizes"
    # --table-only: the cost table measured, the mix it predicts for each size said; no model, no out
    said = io.StringIO()
    frontier = prune_model(
        inputs["model"], "thanos", "params:0.3,0.2", out=out, table_only=True, stream=said, **options
    )
    assert not out.exists()
    # each point's run finished (its model deleted once measured): none is left to the next as unfinished
    logs = list((tmp_path / "work").glob("search*/candidates/*/run.log"))
    assert logs and not [log for log in logs if "unfinished recipe" in log.read_text()], logs
    tabled, predicted = list(measured), frontier["predicted"]
    assert set(predicted) == {"params:0.2", "params:0.3"}
    for size, mix in predicted.items():
        line = f"  {size}: {mix['recipe']}, {100 * mix['removed_fraction']:.1f} % fewer parameters, "
        assert line + f"held-out loss about {mix['loss']:.4f}" in said.getvalue(), said.getvalue()
        assert mix["removed_fraction"] >= float(size.partition(":")[2])
    measured.clear()
    report = prune_model(inputs["model"], "thanos", "params:0.3,0.2", out=out, **options)
    assert len(measured) == len(set(measured)), measured
    searches = {size: json.loads((out / size.replace(":", "") / "search.json").read_text())
                for size in ("params:0.2", "params:0.3")}  # fmt: skip
    # one cost table: both sizes start from it; the table-only run measured it, each size read it and
    # measured only the mixes it led to, the first of them the mix the table-only run predicted
    table = [recipe_of(m) for m in table_points(knobs(inputs["model"]), searches["params:0.2"]["axes"])]
    for search in searches.values():  # the points its mix reached (``windows``: a mix written, measured)
        points = [c["recipe"] for c in search["candidates"] if "windows" not in c]
        assert (
            set(points) <= set(table) and [c["recipe"] for c in search["candidates"]][: len(points)] == points
        )
    assert tabled == [slug(recipe) for recipe in table], tabled  # --table-only: every point
    assert not set(measured) & set(tabled), measured
    for size, search in searches.items():  # (or a point of the table, when that was the greedy mix)
        after = [c for c in search["candidates"] if "windows" in c]
        assert predicted[size]["recipe"] in ([after[0]["recipe"]] if after else table), size
    assert searches["params:0.3"]["chosen"] == searched["report"]["search"]["chosen"]
    assert weights(out / "params0.3") == weights(searched["out"])
    with (out / "sizes.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    every = {c["recipe"] for search in searches.values() for c in search["candidates"]}
    assert sorted(row["recipe"] for row in rows) == sorted(every) and len(rows) == len(report["curve"])
    for size, search in searches.items():
        (row,) = [row for row in rows if row["recipe"] == search["chosen"]]
        assert size in row["chosen_for"].split()
    candidates = [c for search in searches.values() for c in search["candidates"]]  # a written one's row
    errors = {c["recipe"]: c["loss_error"] for c in sorted(candidates, key=lambda c: "windows" in c)}
    assert all(float(row["loss_error"]) == pytest.approx(errors[row["recipe"]], abs=1e-6) for row in rows)
    assert (out / "sizes.png").stat().st_size > 0
    recorded = json.loads((out / "sizes.json").read_text())
    assert recorded["request"] == "params:0.2,0.3" and set(recorded["sizes"]) == set(searches)
    measured.clear()
    (out / "params0.5").mkdir()  # a size of an earlier request: kept, and said
    said.seek(0)
    said.truncate()
    prune_model(inputs["model"], "thanos", "params:0.2,0.3", out=out, stream=said, **options)
    assert measured == []
    assert f"{out} also holds params0.5, of an earlier request with other sizes" in said.getvalue()
    # the dry run reads the table: for each size, the mix it predicts, the first its search measured after
    # the table (or a point of the table, when that was the greedy mix: nothing measured after it)
    said.seek(0)
    said.truncate()
    prune_model(inputs["model"], "thanos", "params:0.2,0.3", out=out, dry_run=True, stream=said, **options)
    assert measured == []
    for size, search in searches.items():
        (line,) = [row for row in said.getvalue().splitlines() if row.startswith(f"{size}: the cost table")]
        predicted = re.search(r" predicts (\S+): [0-9.]+ % fewer parameters", line).group(1)
        after = [c for c in search["candidates"] if "windows" in c]
        if after:
            assert predicted == after[0]["recipe"], line
            assert f"about {after[0]['predicted_loss']:.4f} (" in line, line
        else:
            assert predicted in table, line
    lines = said.getvalue().splitlines()  # the table's plan said once, the dry run's last line once, last
    assert sum(" the cost table of every size" in line for line in lines) == 1, lines
    assert [line for line in lines if line.startswith("dry run:")] == lines[-1:], lines
    with pytest.raises(ValueError, match=r"sparsity=params:0\.99 asks for .* ask for params:0\.\d+ or less"):
        prune_model(inputs["model"], "thanos", "params:0.2,0.99", out=tmp_path / "far", **options)
    assert not (tmp_path / "far").exists() and measured == []
    inside = Path(inputs["model"]) / "sizes"  # nothing is written into the input model
    with pytest.raises(
        ValueError, match=r"out=.*/sizes is inside the input model .*; give a directory outside"
    ):
        prune_model(inputs["model"], "thanos", "params:0.2,0.3", out=inside, **options)
    assert not inside.exists()
    one_per_recipe = r"several sizes; the workflow takes one per recipe: give params:0\.2"
    with pytest.raises(ConfigError, match=one_per_recipe):
        expand({"recipes": {"s": {"method": "thanos", "sparsity": "params:0.2,0.3"}}})


@pytest.mark.parametrize("model_type", list(TESTED_MODELS))
def test_a_mix_is_counted_as_its_model_built_whole(tmp_path: Path, model_type: str) -> None:
    """``Knobs.predicted`` counts a mix's skeleton (parameters on the meta device, no initialisation, the
    embeddings tied after), from its first block's and first two's where every block after the first holds
    as many parameters as the second (``size_axes._uniform``): for every row of the tested matrix it counts
    what ``from_config`` with every initialisation counts (a tied head once), the dense model and every
    axis's first and last setting alone and together; a head count its model type does not build is no
    setting (OPT's config accepts 3 heads of 64 dimensions, its attention refuses them)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from thanos.demo.tiny import build_tiny_model
    from thanos.runner.size_axes import _uniform, knobs

    model = build_tiny_model(tmp_path / model_type, model_type, num_blocks=4, max_position_embeddings=64)
    dense = knobs(model)
    mixes: list[dict[str, str]] = [{}, {"depth": "depth:1"}]
    for axis in ("depth", "heads", "neurons", "vocab"):
        settings = dense.settings(axis)
        mixes += [{axis: settings[0]}, {axis: settings[-1]}] if settings else []
    mixes.append({k: v for mix in mixes[2::2] for k, v in mix.items()})  # each axis's first setting
    for mix in mixes:
        config = AutoConfig.from_pretrained(model)
        for key, value in dense.changes(mix).items():
            setattr(config, key, value)
        with torch.device("meta"):
            whole = AutoModelForCausalLM.from_config(config)
        assert dense.predicted(mix) == sum(p.numel() for p in whole.parameters()), (model_type, mix)
    # blocks of two sizes in turn (linear and full attention) are counted whole; experts after one dense
    # block (deepseek_v3, glm4_moe) from the second block's size
    assert _uniform(str(model)) == (model_type != "qwen3_next")


def test_workflow_sizes_differing_only_in_the_target_share_one_search() -> None:
    """The workflow's size recipes share a search (its cost table) with the first earlier size of the same
    method and options: another method or other axes is a search of its own; a vocabulary is none."""
    from thanos.workflow.config import expand, search_owners

    recipes = expand(
        {
            "recipes": {
                "p15": {"method": "thanos", "sparsity": "params:0.15"},
                "w25": {"method": "wanda", "sparsity": "params:0.25"},
                "p25": {"method": "thanos", "sparsity": "params:0.25"},
                "d25": {"method": "thanos", "sparsity": "params:0.25", "axes": "depth,neurons"},
                "d35": {"method": "thanos", "sparsity": "params:0.35", "axes": "depth,neurons"},
                "v30": {"method": "thanos", "sparsity": "vocab:0.3"},
            }
        }
    )
    owners = search_owners(recipes)
    assert owners == {"p15": "p15", "w25": "w25", "p25": "p15", "d25": "d25", "d35": "d25"}
