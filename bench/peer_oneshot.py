"""``thanos prune-model`` against llm-compressor's one-shot script, side by side on one small model.

For each recipe it times, each as a whole process:
  ours (fresh): ``thanos prune-model`` in a new ``--workdir`` (every stage, publish included);
  ours (again): the same command in one working directory shared by the recipes run before it
                (calibration and block 0 reused), what a user trying a second recipe waits;
  peer:         a script a user would write: import llm-compressor, load the model, load the same
                calibration windows (ours, saved as JSON), ``oneshot`` with ``SparseGPTModifier`` /
                ``WandaPruningModifier`` (targets Linear, lm_head ignored); timed from the process launch to
                the end of ``oneshot`` (saving not included), and ``oneshot`` alone; the model loaded in
                each dtype of ``--peer-dtypes`` (float32, bfloat16: which is faster depends on the CPU);
then the perplexity of every output (and of the dense model) with the same evaluation
(``python -m thanos perplexity --dtype float32`` on the held-out text, windows of ``--seqlen`` tokens).
``ONEDNN_MAX_CPU_ISA=AVX2`` before the command runs both sides as on a CPU without bf16 instructions.

llm-compressor runs in its own virtual environment (``--venv``; created on demand with
``python -m venv --system-site-packages`` and ``pip install llmcompressor==0.14.0.1``), never in the
project's. Without it (``--no-peer``, or the install fails) only our side is measured.

    python bench/peer_oneshot.py --model DIR --calibration calib.txt --heldout test.txt
    python bench/peer_oneshot.py --tiny --calibration calib.txt --heldout test.txt   # a random model
    python bench/peer_oneshot.py --model SMOLLM2_DIR --calibration calib.jsonl --heldout test.jsonl \\
        --recipes "SparseGPT 50 %" --peer-dtypes float32 bfloat16 --no-again
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LLMC = "llmcompressor==0.14.0.1"
RECIPES = {  # name: (method, sparsity, extra prune-model options, llm-compressor mask_structure or None)
    "SparseGPT 50 %": ("sparsegpt", "0.5", [], "0:0"),
    "SparseGPT 2:4": ("sparsegpt", "2:4", [], "2:4"),
    "Wanda 50 %": ("wanda", "0.5", [], "0:0"),
    "Wanda 2:4": ("wanda", "2:4", [], "2:4"),
    "Thanos 50 %": ("thanos", "0.5", [], None),
    "Thanos 2:4, alpha 0": ("thanos", "2:4", ["--alpha", "0"], None),
}
PEER_SCRIPT = """
import json, sys, time
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from llmcompressor import oneshot
from llmcompressor.modifiers.pruning import SparseGPTModifier, WandaPruningModifier

model_dir, windows_file, method, structure, out, dtype = sys.argv[1:7]
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
tokenizer = AutoTokenizer.from_pretrained(model_dir)
windows = json.loads(open(windows_file).read())
data = Dataset.from_dict({"input_ids": windows, "attention_mask": [[1] * len(w) for w in windows]})
modifier = {"sparsegpt": SparseGPTModifier, "wanda": WandaPruningModifier}[method]
recipe = modifier(sparsity=0.5, mask_structure=structure, targets=["Linear"], ignore=["re:.*lm_head"])
started = time.time()
oneshot(model=model, dataset=data, recipe=recipe, max_seq_length=len(windows[0]),
        num_calibration_samples=len(windows))
ended = time.time()
print("PEER_TIMES", json.dumps({"oneshot_s": ended - started, "ended": ended}), flush=True)
model.save_pretrained(out, save_compressed=False)
tokenizer.save_pretrained(out)
"""


def thanos(*args: str | Path, env: dict[str, str]) -> float:
    """Run ``python -m thanos args``; its wall seconds (raises with its output when it fails)."""
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "thanos", *map(str, args)], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if run.returncode:
        raise SystemExit(
            f"thanos {' '.join(map(str, args))} failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
        )
    return seconds


def peer_python(venv: Path) -> Path | None:
    """The virtual environment's python with llm-compressor installed (created on demand), or None."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import llmcompressor"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    print(f"installing {LLMC} into {venv} (its own virtual environment) ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", LLMC], check=True)
    except subprocess.CalledProcessError as err:
        print(f"llm-compressor could not be installed ({err}): measuring our side only", flush=True)
        return None
    return python if subprocess.run(check, capture_output=True).returncode == 0 else None


def run_peer(
    python: Path, model: Path, windows: Path, method: str, structure: str, out: Path, dtype: str
) -> tuple[float, float]:
    """(process seconds from launch to the end of oneshot, oneshot seconds) of the peer's script, the model
    loaded in ``dtype``."""
    script = out.parent / "peer_oneshot_script.py"
    script.write_text(PEER_SCRIPT)
    launched = time.time()
    run = subprocess.run(
        [str(python), str(script), str(model), str(windows), method, structure, str(out), dtype],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    line = next((x for x in run.stdout.splitlines() if x.startswith("PEER_TIMES ")), None)
    if run.returncode or line is None:
        raise SystemExit(f"llm-compressor script failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    times = json.loads(line.split(" ", 1)[1])
    return times["ended"] - launched, times["oneshot_s"]


def perplexity(model: Path, heldout: Path, seqlen: int, out: Path, env: dict[str, str]) -> float:
    thanos(
        "perplexity",
        "--model",
        model,
        "--source",
        heldout,
        "--seqlen",
        seqlen,
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--no-progress",
        "--out",
        out,
        env=env,
    )
    return json.loads(out.read_text())["ppl"]


def save_windows(workdir: Path, out: Path) -> None:
    """Our calibration windows (the tokens store of ``workdir``) as JSON lists of token ids."""
    import zarr

    (store,) = workdir.glob("results/*/calib/tokens.zarr")
    out.write_text(json.dumps(zarr.open_group(store, mode="r")["tokens"][:].tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, help="a Hugging Face Llama directory (e.g. the demo model)")
    parser.add_argument("--tiny", action="store_true", help="build a random 4-block hidden-256 Llama instead")
    parser.add_argument("--calibration", type=Path, required=True, help="local calibration text/jsonl")
    parser.add_argument("--heldout", type=Path, required=True, help="held-out text for perplexity")
    parser.add_argument("--nsamples", type=int, default=64)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--recipes", nargs="*", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument("--venv", type=Path, default=Path("/tmp/llmc"))
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument(
        "--peer-dtypes",
        nargs="+",
        choices=["float32", "bfloat16"],
        default=["float32"],
        help="the dtypes the peer loads the model in, each timed (its fastest CPU setting is the machine's)",
    )
    parser.add_argument(
        "--no-again", action="store_true", help="skip the second run of ours in a shared working directory"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "peer_oneshot")
    args = parser.parse_args()
    if args.model is None and not args.tiny:
        parser.error("give --model DIR or --tiny")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_WAIT_POLICY": "PASSIVE"}
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    model = args.model.resolve() if args.model else args.out / "model"
    if args.tiny:
        thanos("make-tiny-model", "--hidden-size", 256, "--num-blocks", 4, "--out", model, env=env)
    python = None if args.no_peer else peer_python(args.venv)
    common = [
        "--model",
        model,
        "--calibration",
        args.calibration.resolve(),
        "--nsamples",
        args.nsamples,
        "--seqlen",
        args.seqlen,
        "--device",
        "cpu",
        "--cores",
        args.cores,
    ]
    ppl = {"dense": perplexity(model, args.heldout, args.seqlen, args.out / "dense_ppl.json", env)}
    rows = []
    for index, label in enumerate(args.recipes):
        method, sparsity, extra, structure = RECIPES[label]
        base = args.out / f"r{index}"
        recipe = ["--method", method, "--sparsity", sparsity, *extra]
        fresh = thanos(
            "prune-model", *common, *recipe, "--workdir", base / "work", "--out", base / "ours", env=env
        )
        again = None
        if not args.no_again:
            again = thanos(
                "prune-model",
                *common,
                *recipe,
                "--workdir",
                args.out / "shared-work",
                "--out",
                base / "ours-again",
                env=env,
            )
        ours_ppl = perplexity(base / "ours", args.heldout, args.seqlen, base / "ours_ppl.json", env)
        peers = []
        if python is not None and structure is not None:
            windows = args.out / "windows.json"
            if not windows.exists():
                save_windows(base / "work", windows)
            for dtype in args.peer_dtypes:
                out = base / f"peer-{dtype}"
                process_s, oneshot_s = run_peer(python, model, windows, method, structure, out, dtype)
                ppl_file = base / f"peer_ppl-{dtype}.json"
                peers.append(
                    (dtype, perplexity(out, args.heldout, args.seqlen, ppl_file, env), process_s, oneshot_s)
                )
        rows.append((label, peers, ours_ppl, fresh, again, index > 0))
        print(f"{label}: done", flush=True)
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "unset")
    print(
        f"\ndense perplexity {ppl['dense']:.2f} (held-out {args.heldout.name}, seqlen {args.seqlen}, "
        f"computed in float32); {args.nsamples} x {args.seqlen} calibration windows, {args.cores} cores, "
        f"ONEDNN_MAX_CPU_ISA={isa}; ours: --compute-dtype auto"
    )
    print(
        "| recipe | llm-compressor ppl | ours ppl | llm-compressor s (model dtype: process / oneshot alone) "
        "| ours s (fresh workdir) | ours s (workdir of the recipes above) |"
    )
    print("|---|---|---|---|---|---|")
    for label, peers, ours_ppl, fresh, again, reused in rows:
        peer_ppl = " / ".join(f"{ppl:.2f}" for _, ppl, _, _ in peers) or "—"
        peer_s = "; ".join(f"{dtype}: {p:.1f} / {o:.1f}" for dtype, _, p, o in peers) or "—"
        again_s = "—" if again is None else f"{again:.1f}" if reused else "(first)"
        print(f"| {label} | {peer_ppl} | {ours_ppl:.2f} | {peer_s} | {fresh:.1f} | {again_s} |")


if __name__ == "__main__":
    main()
