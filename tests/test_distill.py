"""`thanos distill`: a pruned tiny model trained toward its dense model on text.

One uninterrupted run (in this process, one thread) is the reference: it lowers the held-out KL, keeps every
zero, writes a model that loads and describes itself. A run killed at a random step and started again with
the same command ends with the reference's bytes; two processes through torchrun (gloo) end with its weights
to 1e-5, whole in each (DistributedDataParallel) or sharded (FSDP, stopped and resumed on the way).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_tiny_model, thanos_here, write_corpus
from safetensors.torch import load_file

# 24 steps of 4 windows of 32 tokens, checkpoints every 4 steps, 4 windows held out
OPTIONS = ["--tokens", "3072", "--seqlen", "32", "--batch-size", "4", "--micro-batch", "2", "--lr", "3e-4"]
OPTIONS += ["--checkpoint-every", "4", "--heldout", "4", "--device", "cpu", "--no-progress"]
STEPS = 24
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def weights(model: Path) -> dict[str, torch.Tensor]:
    return {name: t for shard in sorted(model.glob("*.safetensors")) for name, t in load_file(shard).items()}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A dense tiny Llama whose output embeddings are scaled up (a random tiny model predicts nearly
    uniformly: little for a student to learn), its magnitude 50 % student, a text, and the reference run."""
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("distill")
    dense = make_tiny_model(root, "llama")
    shard = next(f for f in dense.glob("*.safetensors") if "lm_head.weight" in load_file(f))
    tensors = load_file(shard)
    tensors["lm_head.weight"] *= 30
    save_file(tensors, shard, metadata={"format": "pt"})
    text = write_corpus(root / "text.jsonl", docs=60, words=60)
    env = {"THANOS_WORKDIR": str(root / "cache")}
    pruned = thanos_here(
        "prune-model", "--model", dense, "--method", "magnitude", "--sparsity", "0.5", "--out", "student",
        cwd=root, env=env,
    )  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    paths = {"root": root, "dense": dense, "student": root / "student", "text": text}
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = thanos_here(*command(paths, "reference"), cwd=root, env=env)
    finally:
        torch.set_num_threads(torch_threads)
    assert ref.returncode == 0, ref.stderr
    return paths | {"reference": root / "reference", "log": ref.stderr}


def command(paths: dict[str, Path], out: str, *extra: str) -> list[str]:
    return [
        "distill", "--student", paths["student"], "--teacher", paths["dense"], "--source", paths["text"],
        *OPTIONS, "--out", out, "--work", paths["root"] / f"work-{out}", *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_distillation_lowers_the_heldout_kl_and_keeps_every_zero(setup: dict[str, Path]) -> None:
    from thanos.evaluation.loading import load_model

    out = setup["reference"]
    record = json.loads((out / "distillation.json").read_text())
    before, best = record["heldout"][0], record["best"]
    assert record["steps"] == STEPS and record["tokens"] == STEPS * 4 * 32
    assert best["kl"] < 0.8 * before["kl"], record["heldout"]
    gap = [abs(h["student_nll"] - h["teacher_nll"]) for h in (before, best)]
    assert gap[1] < gap[0], record["heldout"]  # the student predicts the text as the teacher does
    assert [h["step"] for h in record["heldout"]] == [0, 4, 8, 12, 16, 20, 24]
    student, distilled = weights(setup["student"]), weights(out)
    assert student.keys() == distilled.keys()
    masked = [name for name, W in student.items() if W.dim() == 2 and bool((W == 0).any())]
    assert len([name for name in masked if ".layers." in name]) == 14  # q k v o gate up down of 2 blocks
    for name in masked:
        zero = student[name] == 0
        assert bool((distilled[name][zero] == 0).all()), name  # every pruned weight still exactly zero
        assert not torch.equal(distilled[name], student[name]), name  # the kept ones trained
    assert record["zeros_kept"] == sum(int((student[name] == 0).sum()) for name in masked)
    assert {t.dtype for t in distilled.values()} == {torch.float32}
    # the files it says it holds, a sparsity counted on them, a card saying what was done
    loaded = load_model(str(out), device="cpu")
    assert loaded.model.lm_head.weight.shape[0] == 128
    report = json.loads((out / "pruning_report.json").read_text())
    assert report["distillation"]["best"] == best
    sparsity = json.loads((out / "sparsity.json").read_text())
    assert sparsity["pruned_layers"]["zeros"] == 10240 and sparsity["pruned_layers"]["sparsity"] == 0.5
    card = (out / "README.md").read_text()
    assert "## Distillation" in card and f"{record['tokens']:,} tokens of `text.jsonl`" in card
    assert "## Achieved sparsity per layer type" in card  # its pruned layers, counted again
    assert record["device"] == "cpu" and record["compute_dtype"] == "float32"
    assert "`thanos perplexity --model reference --out ppl.json`" in card  # commands that evaluate it
    assert "prune-model --evaluate" not in card
    # the header: what runs where, in which dtype, and what happens to the checkpoints
    header = setup["log"].splitlines()[:6]
    assert header[0] == f"thanos distill: {setup['student']} -> reference", header
    assert "  device cpu, computes in float32 | 1 thread" in header, header
    work = setup["root"] / "work-reference"
    assert f"  checkpoints {work}: every 4 steps, " in "\n".join(header)
    assert "deleted once --out holds the model (--keep needed)" in header[4], header
    assert "distilled: 3,072 tokens" in setup["log"] and "Traceback" not in setup["log"]
    assert not work.exists()  # deleted once the model was written


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_uninterrupted_runs_bytes(setup: dict[str, Path]) -> None:
    root = setup["root"]
    at = random.Random(time.time_ns()).randint(5, STEPS - 1)
    env = os.environ | ONE_THREAD | {"THANOS_WORKDIR": str(root / "cache")}
    args = [sys.executable, "-m", "thanos", "-v", *map(str, command(setup, "killed"))]
    proc = subprocess.Popen(args, cwd=root, env=env, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if f"distill: step {at}/{STEPS}:" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"not killed at step {at}:\n{''.join(seen[-20:])}"
    assert not (root / "killed").exists()
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cache = {"THANOS_WORKDIR": str(root / "cache")}
        rerun = thanos_here(*command(setup, "killed", "--keep", "all"), cwd=root, env=cache)
    finally:
        torch.set_num_threads(torch_threads)
    assert rerun.returncode == 0, rerun.stderr
    # the checkpoint of step `at` (a multiple of 4) may or may not be written when the signal lands
    resumed = int(re.search(r"resumed from the checkpoint of step (\d+)", rerun.stderr).group(1))
    assert resumed % 4 == 0 and 4 <= resumed <= at < resumed + 8, (at, resumed)
    about = json.loads((root / "work-killed" / "about.json").read_text())  # --keep all: kept, finished
    assert (root / "work-killed" / "checkpoint" / "best.pt").is_file() and "finished" in about
    assert f"checkpoints kept (--keep all): {root / 'work-killed'}" in rerun.stderr
    for shard in sorted(setup["reference"].glob("*.safetensors")):
        assert shard.read_bytes() == (root / "killed" / shard.name).read_bytes(), f"killed at step {at}"
    ref = json.loads((setup["reference"] / "distillation.json").read_text())
    resumed = json.loads((root / "killed" / "distillation.json").read_text())
    assert resumed["heldout"] == ref["heldout"] and resumed["train_kl"] == ref["train_kl"]


@pytest.mark.slow
def test_two_processes_give_the_one_process_weights(setup: dict[str, Path]) -> None:
    """torchrun, 2 processes of 2 windows each per step (gloo), against 1 process of 4: the same global
    batch; gradients averaged in another order, so equal to rounding (1e-5)."""
    root = setup["root"]
    env = os.environ | ONE_THREAD | {"THANOS_WORKDIR": str(root / "cache"), "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "thanos", *map(str, command(setup, "two"))],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((root / "two" / "distillation.json").read_text())
    assert record["processes"] == 2 and record["steps"] == STEPS
    one, two = weights(setup["reference"]), weights(root / "two")
    for name, W in one.items():
        assert torch.allclose(two[name], W, rtol=0, atol=1e-5), (name, float((two[name] - W).abs().max()))
    assert run.stderr.count("distilled: 3,072 tokens") == 1  # one process reports and writes


@pytest.mark.slow
def test_sharded_processes_stopped_and_resumed_give_the_one_process_weights(setup: dict[str, Path]) -> None:
    """torchrun, 2 processes, --shard (FSDP: each holds half of every weight, gradient and moment, gloo),
    stopped at a random step after the first checkpoint and started again: the whole weights gathered into
    the checkpoints and scattered back on resume; the reference's weights to rounding (1e-5)."""
    root = setup["root"]
    at = random.Random(time.time_ns()).randint(5, STEPS - 1)
    env = os.environ | ONE_THREAD | {"THANOS_WORKDIR": str(root / "cache"), "PYTHONPATH": str(REPO)}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    args = [*launch, "-m", "thanos", "-v", *map(str, command(setup, "sharded", "--shard"))]
    proc = subprocess.Popen(args, cwd=root, env=env, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if f"distill: step {at}/{STEPS}:" in line:
            proc.send_signal(signal.SIGTERM)  # torchrun stops its processes
            break
    proc.wait(timeout=60)
    assert proc.returncode != 0, f"not stopped at step {at}:\n{''.join(seen[-20:])}"
    assert not (root / "sharded").exists()
    rerun = subprocess.run(
        [*launch, "-m", "thanos", *map(str, command(setup, "sharded", "--shard"))],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resumed from the checkpoint of step" in rerun.stderr, rerun.stderr[-3000:]
    record = json.loads((root / "sharded" / "distillation.json").read_text())
    assert record["processes"] == 2 and record["sharded"] is True and record["steps"] == STEPS
    reference = json.loads((setup["reference"] / "distillation.json").read_text())
    assert record["zeros_kept"] == reference["zeros_kept"]
    one, two = weights(setup["reference"]), weights(root / "sharded")
    for name, W in one.items():
        assert torch.allclose(two[name], W, rtol=0, atol=1e-5), (name, float((two[name] - W).abs().max()))


def test_bad_options_are_named_before_anything_runs(tmp_path: Path) -> None:
    from thanos.errors import OptionError
    from thanos.recipes.training import Distillation

    for options, named in (
        ({"tokens": 0}, "--tokens 0"),
        ({"tokens": 10, "seqlen": 1}, "--seqlen 1"),
        ({"tokens": 10, "lr": -1.0}, "--lr -1.0"),
        ({"tokens": 10, "micro_batch": 0}, "--micro-batch 0"),
    ):
        with pytest.raises(OptionError, match=named):
            Distillation(**options)
    assert Distillation(tokens=1000, seqlen=100, batch_size=3).steps == 4  # ceil(ceil(10) / 3)


@pytest.mark.slow
def test_bad_input_is_refused_named_and_nothing_is_written(setup: dict[str, Path]) -> None:
    root = setup["root"]
    env = {"THANOS_WORKDIR": str(root / "cache")}
    student_bytes = {f.name: f.read_bytes() for f in setup["student"].iterdir()}
    (root / "text.jsonl.d").mkdir(exist_ok=True)
    for change, named in (
        ({"--out": setup["student"]}, "is the student; give a new directory"),
        ({"--seqlen": "65"}, "--seqlen 65 is longer than the model's 64 positions; give at most 64"),
        ({"--student": root / "nowhere"}, "is not a directory; give the pruned model's directory"),
        ({"--teacher": root / "text.jsonl.d"}, "no config.json in the model directory"),  # a directory
        ({"--teacher": root / "nowhere"}, "no such directory; give the dense model the student was pruned"),
        ({"--source": root / "nothing.jsonl"}, "nothing.jsonl: no such file or directory (or give 'c4')"),
        ({"--work": root / "refused" / "w"}, "refused/w is inside --out"),  # the model would replace it
    ):
        args = [str(a) for a in command(setup, "refused")]
        for flag, value in change.items():
            args[args.index(flag) + 1] = str(value)
        run = thanos_here(*args, cwd=root, env=env)
        assert run.returncode == 2 and named in run.stderr.splitlines()[-1], run.stderr[-800:]
    assert not (root / "refused").exists() and not (root / "work-refused").exists()
    assert {f.name: f.read_bytes() for f in setup["student"].iterdir()} == student_bytes
    # an --out holding the distillation of other options is replaced only with --overwrite
    reference = {f.name: f.read_bytes() for f in setup["reference"].iterdir()}
    other = [str(a) for a in command(setup, "reference")]
    other[other.index("--out") + 1] = str(setup["reference"])
    other[other.index("--work") + 1] = str(root / "work-refused")
    run = thanos_here(*other, "--lr", "0.02", cwd=root, env=env)
    named = "holds the distillation of another student, teacher, text or options; give another --out, or"
    assert run.returncode == 2 and named in run.stderr.splitlines()[-1], run.stderr[-800:]
    assert {f.name: f.read_bytes() for f in setup["reference"].iterdir()} == reference
    assert not (root / "work-refused").exists()


@pytest.mark.slow
def test_prune_model_distills_what_it_pruned(setup: dict[str, Path]) -> None:
    """`prune-model --distill-*` = `prune-model`, then `thanos distill` with the same options: the same bytes
    (one core); its summary says what distillation did; the same command again does nothing. Bad
    --distill-* input is refused before anything runs, naming the option."""
    root = setup["root"]
    env = {"THANOS_WORKDIR": str(root / "cache")}
    kept = OPTIONS[: OPTIONS.index("--device")]  # the training options, as --distill-* flags
    flags = [f"--distill-{flag[2:]}" if flag.startswith("--") else flag for flag in kept]
    args = ["prune-model", "--model", setup["dense"], "--method", "magnitude", "--sparsity", "0.5"]
    args += ["--cores", "1", "--device", "cpu", "--distill-source", setup["text"], *flags, "--out", "kd"]
    run = thanos_here(*args, cwd=root, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "distill: checkpoint at step 24/24" in run.stderr and "distilled: 3,072 tokens" in run.stderr
    for shard in sorted(setup["reference"].glob("*.safetensors")):
        assert shard.read_bytes() == (root / "kd" / shard.name).read_bytes()
    report = json.loads((root / "kd" / "pruning_report.json").read_text())
    assert (
        report["distillation"]["steps"] == STEPS and report["distillation"]["teacher"] == setup["dense"].name
    )
    card = (root / "kd" / "README.md").read_text()  # its command rebuilds the distilled model, not the pruned
    assert (
        "--distill-tokens 3072 --distill-source text.jsonl --distill-text-field text --distill-seqlen 32"
        in card
    )
    again = thanos_here(*args, cwd=root, env=env)
    assert again.returncode == 0 and "nothing to do" in again.stderr and "unchanged" in again.stderr
    undistilled = thanos_here(*args[: args.index("--cores")], "--out", "kd", cwd=root, env=env)
    assert "holds another pruned model (magnitude_u50 distilled of" in undistilled.stderr
    other_lr = [*args[:-2], "--distill-lr", "1e-3", "--out", "kd"]  # it replaced the distilled model
    refused = thanos_here(*other_lr, cwd=root, env=env)
    assert refused.returncode == 2 and "(distillation.lr 0.0003 -> 0.001)" in refused.stderr, refused.stderr[
        -800:
    ]
    for shard in sorted(setup["reference"].glob("*.safetensors")):
        assert shard.read_bytes() == (root / "kd" / shard.name).read_bytes()
    for change, named in (
        (["--distill-tokens", "0"], "--distill-tokens 0: give a whole number >= 1"),
        (["--distill-seqlen", "65"], "--distill-seqlen 65 exceeds the model's 64 positions"),
        (["--distill-source", "nowhere.jsonl"], "--distill-source nowhere.jsonl: no such file"),
    ):
        bad = [*args[:-2], *change, "--out", "refused"]
        refused = thanos_here(*bad, cwd=root, env=env)
        assert refused.returncode == 2 and named in refused.stderr.splitlines()[-1], refused.stderr[-800:]
    lone = thanos_here(*args[: args.index("--cores")], "--distill-lr", "1e-3", "--out", "refused", cwd=root)
    assert "--distill-lr: distillation options without --distill-tokens" in lone.stderr
    assert not (root / "refused").exists()


def test_a_student_of_a_smaller_vocabulary_learns_from_its_teacher(tmp_path: Path) -> None:
    """``prune-model`` sends a ``vocab:P`` model to ``thanos distill``, which refused it (``--teacher
    ... has N output tokens ...: not the model the student was pruned from``): the teacher reads the
    student's windows in its own ids and teaches its distribution over the student's tokens, so that the
    student, which is the teacher with tokens removed, starts at a KL of almost nothing (rows of the
    teacher's probabilities renormalised). A teacher of another vocabulary is refused before any weight is
    read."""
    from helpers.vocabulary import PROSE, bpe_model

    dense = bpe_model(tmp_path / "dense")
    text = tmp_path / "text.txt"
    lines = [line for line in PROSE if line]
    text.write_text("\n\n".join(" ".join(lines[i:] + lines[:i]) for i in range(len(lines))) + "\n")
    cut = thanos_here("prune-vocab", "--model", dense, "--sparsity", "vocab:0.3", "--text", text,
                      "--out", tmp_path / "student", cwd=tmp_path)  # fmt: skip
    assert cut.returncode == 0, cut.stderr[-2000:]
    args = [
        "distill",
        "--student",
        tmp_path / "student",
        "--source",
        text,
        "--tokens",
        "512",
        "--seqlen",
        "32",
    ]
    args += [
        "--batch-size",
        "4",
        "--heldout",
        "2",
        "--checkpoint-every",
        "2",
        "--device",
        "cpu",
        "--no-progress",
    ]
    run = thanos_here(*args, "--teacher", dense, "--out", tmp_path / "kd", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads((tmp_path / "kd" / "distillation.json").read_text())
    assert record["heldout"][0]["kl"] < 0.05, record["heldout"][0]
    other = make_tiny_model(tmp_path, "llama")  # a byte vocabulary: not the student's teacher
    refused = thanos_here(*args, "--teacher", other, "--out", tmp_path / "kd2", cwd=tmp_path)
    assert refused.returncode == 2 and "output tokens" in refused.stderr.splitlines()[-1], refused.stderr[
        -800:
    ]


def test_a_hub_dataset_is_streamed_as_far_as_the_budget_needs(setup: dict[str, Path], tmp_path: Path) -> None:
    """`hf:NAME` (here a local dataset directory, read by `datasets` in streaming mode as a hub dataset is):
    the same windows as the file it holds; a field the records lack is named."""
    import shutil

    from thanos.models import load_tokenizer
    from thanos.stages.distill.text import load_text, stream_documents

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    shutil.copy(setup["text"], dataset / "train.jsonl")
    tokenizer = load_tokenizer(str(setup["dense"]))
    streamed = load_text(f"hf:{dataset}", tokenizer, seqlen=32, heldout=4, tokens=640)
    local = load_text(str(setup["text"]), tokenizer, seqlen=32, heldout=4, tokens=640)
    assert torch.equal(streamed.train, local.train) and torch.equal(streamed.heldout, local.heldout)
    assert streamed.sha256 == local.sha256 and streamed.provenance["streamed"] is True
    assert streamed.train.shape == (20, 32)
    with pytest.raises(ValueError, match="no field 'body'"):
        next(stream_documents(f"hf:{dataset}", "body"))


def test_hidden_states_are_matched_to_the_blocks_they_stand_for() -> None:
    """The student's block outputs against the teacher blocks they replace (a kept block before a removed run
    stands for the run's last block), and the loss as the mean relative squared error of those pairs."""
    from thanos.pruning.distillation import hidden_loss, hidden_pairs

    assert hidden_pairs(4, 4, []) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert hidden_pairs(4, 6, [2, 3]) == [(0, 0), (1, 3), (2, 4), (3, 5)]
    assert hidden_pairs(3, 5, [3, 4]) == [(0, 0), (1, 1), (2, 4)]  # a run at the end: the last output
    with pytest.raises(ValueError, match="the student has 5 blocks, the teacher 6 less 2 removed: 4"):
        hidden_pairs(5, 6, [2, 3])
    gen = torch.Generator().manual_seed(0)
    student = [torch.randn(2, 3, 8, generator=gen) for _ in range(3)]
    teacher = [torch.randn(2, 3, 8, generator=gen) for _ in range(4)]
    pairs = [(0, 0), (1, 3), (2, 3)]
    expected = sum(((student[i] - teacher[j]) ** 2).sum() / (teacher[j] ** 2).sum() for i, j in pairs) / 3
    assert torch.allclose(hidden_loss(student, teacher, pairs), expected)
    assert float(hidden_loss(teacher, teacher, [(0, 0), (3, 3)])) == 0.0


def test_a_checkpoint_of_an_earlier_version_resumes() -> None:
    """AdamW's state as earlier versions saved it (``optimizer.state_dict()``: keyed by position) is restored
    as the one saved by name now (``get_optimizer_state_dict``)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    from thanos.stages.distill.train import _by_name

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    names = [name for name, _ in model.named_parameters()]
    again = torch.optim.AdamW(model.parameters(), lr=1e-3)
    set_optimizer_state_dict(model, again, _by_name(optimizer.state_dict(), names))
    restored, saved = get_optimizer_state_dict(model, again), get_optimizer_state_dict(model, optimizer)
    assert restored["state"].keys() == saved["state"].keys() == set(names)
    for name in names:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(restored["state"][name][key], saved["state"][name][key]), (name, key)
    assert _by_name(saved, names) is saved  # saved by name: as it is


def test_an_out_is_replaced_only_by_its_own_run(tmp_path: Path) -> None:
    """``check_previous``: an empty or new --out, or this run's own result, passes; another model, another
    run's distillation or an earlier version's are refused, each named."""
    from thanos.errors import OptionError
    from thanos.stages.distill.distill import check_previous

    out = tmp_path / "out"
    check_previous(out, "mine")  # new
    out.mkdir()
    check_previous(out, "mine")  # empty
    (out / "pruning_report.json").write_text("{}")
    for record, named in (
        (None, "holds another model;"),
        ({"steps": 8}, r"holds a distillation by an earlier version \(no run_sha256"),
        ({"run_sha256": "theirs"}, "holds the distillation of another student, teacher, text or options"),
    ):
        if record is not None:
            (out / "distillation.json").write_text(json.dumps(record))
        with pytest.raises(OptionError, match=named):
            check_previous(out, "mine")
    (out / "distillation.json").write_text(json.dumps({"run_sha256": "mine"}))
    assert check_previous(out, "mine") is None  # the same command, its result not whole: trained again


def test_the_same_distillation_again_has_nothing_to_do(setup: dict[str, Path]) -> None:
    """The reference run's command again: ``--out`` holds its result, so nothing is trained (it trained
    every step again and wrote the same bytes); its files as they were."""
    root = setup["root"]
    before = {path.name: path.stat().st_mtime_ns for path in setup["reference"].iterdir()}
    again = thanos_here(*command(setup, "reference"), cwd=root, env={"THANOS_WORKDIR": str(root / "cache")})
    assert again.returncode == 0 and again.stderr.startswith("nothing to do: "), again.stderr[-1500:]
    assert "holds this distillation" in again.stderr and "distill: checkpoint" not in again.stderr
    assert {path.name: path.stat().st_mtime_ns for path in setup["reference"].iterdir()} == before


def test_a_teacher_other_than_the_base_model_is_named(setup: dict[str, Path]) -> None:
    from thanos.stages.distill.distill import other_teacher

    student, dense = str(setup["student"]), str(setup["dense"])
    assert other_teacher(student, dense) is None and "toward another model" not in setup["log"]
    said = other_teacher(student, str(setup["reference"]))  # a model, but not the one it came from
    assert said is not None and f"pruned from {dense}" in said and f"give --teacher {dense}" in said
    assert other_teacher(str(setup["reference"] / "nothing"), dense) is None  # no report: nothing to tell


def test_a_warm_up_as_long_as_the_run_is_named(setup: dict[str, Path], tmp_path: Path) -> None:
    """``--warmup`` at or beyond the run's steps (the learning rate never reaches its peak) is said before
    the run (it was taken without a word, and the held-out KL barely moved)."""
    from thanos.recipes.training import Distillation
    from thanos.stages.distill.distill import prepare

    options = Distillation(
        tokens=256, source=str(setup["text"]), seqlen=32, batch_size=4, heldout=4, warmup=9
    )
    prepared = prepare(str(setup["student"]), str(setup["dense"]), tmp_path / "out", tmp_path / "w", options,
                       device="cpu")  # fmt: skip
    assert any("the warm-up of 9 steps is not below the run's 2: the learning rate never" in w
               for w in prepared.warnings), prepared.warnings  # fmt: skip


@pytest.mark.slow
def test_a_failure_once_it_runs_is_one_error_line(setup: dict[str, Path], tmp_path: Path) -> None:
    """A teacher whose weights cannot be read is found once the models are read, after the header: with
    stderr not a terminal (a file, as here), one ``ERROR:`` line naming it, no traceback (it is in the run's
    log), exit status 1, nothing written. A teacher with more output tokens than the student (not the model
    it was pruned from) is refused by its config before the header (it was found once both were read)."""
    import shutil

    root = setup["root"]
    env = {"THANOS_WORKDIR": str(root / "cache")}
    wider = make_tiny_model(tmp_path, "llama", vocab_size=256)
    args = [str(a) for a in command(setup, "wrong")]
    args[args.index("--teacher") + 1] = str(wider)
    run = thanos_here(*args, cwd=root, env=env)
    assert run.returncode == 2 and run.stderr.splitlines() == [
        f"ERROR: --teacher {wider} has 256 output tokens, the student 128: not the model the student was "
        "pruned from; give the dense model it was pruned from"
    ], run.stderr
    broken = tmp_path / "broken"
    shutil.copytree(setup["dense"], broken)
    for shard in broken.glob("*.safetensors"):
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    args[args.index("--teacher") + 1] = str(broken)
    run = thanos_here(*args, cwd=root, env=env)
    assert run.returncode == 1, run.stderr
    errors = [line for line in run.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: --teacher {broken} cannot be loaded"), (
        run.stderr
    )
    assert "Traceback" not in run.stderr and run.stderr.startswith("thanos distill: "), run.stderr
    assert " failed" not in run.stderr and "FAILED after 0:0" in run.stderr, run.stderr  # said once
    log_file = root / "work-wrong" / "distill.log"
    assert f"--- the traceback and the full log: {log_file}" in run.stderr
    assert run.stderr.rstrip().endswith(
        "run the same command again: no checkpoint was written: it starts over"
    )
    assert "Traceback" in log_file.read_text()
    assert not (root / "wrong").exists() and not (root / "work-wrong" / "checkpoint").exists()


@pytest.mark.parametrize("width", [80, 60, 40, 24])
def test_the_status_line_fits_the_terminal_numbers_first(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distillation's status line (``thanos.runner.progress``) within the terminal's columns less one: the
    step, KL, tokens/s and time left first, as many as fit; the step's label (its path shortened to the
    file's name) where there is room."""
    import io

    from thanos.events import DistillStep, StepStarted
    from thanos.runner.progress import StepProgress

    monkeypatch.setenv("COLUMNS", str(width))
    stream = io.StringIO()
    label = "distill: 8,192 tokens of /data/a/rather/long/path/to/the/corpus.jsonl"
    with StepProgress(stream, interactive=True) as progress:
        progress.on_event(StepStarted(label))
        progress.on_event(DistillStep(3, 24, kl=0.5132, tokens_per_second=5120, seconds_left=20, lr=3e-4))
        status = stream.getvalue().split("\r\x1b[K")[-1]
    assert len(status) <= width - 1 and status.startswith("[0:00] step 3/24: KL"), status
    shown = status.removeprefix("[0:00] ").split(" | ")[0].split(", ")
    full = ["step 3/24: KL 0.5132", "5,120 tokens/s", "0:20 left", "lr 0.0003"]
    if width > 30:  # else the first one is cut: "[0:00] step 3/24: KL..."
        assert shown == full[: len(shown)], status  # the first ones, whole
    if width >= 60:
        assert "0:20 left" in shown, status
    wide = StepProgress(io.StringIO(), interactive=True)
    monkeypatch.setenv("COLUMNS", "200")
    with wide:
        wide.on_event(StepStarted(label))
        wide.block = "step 3/24: KL 0.5132, 5,120 tokens/s, 0:20 left, lr 0.0003"
        wide._refresh()
    assert wide.stream.getvalue().split("\r\x1b[K")[-2].endswith(f" | {label} (0:00)")
