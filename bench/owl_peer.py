"""OWL's per-block sparsities: ours (the pipeline's ``owl.json``) against llm-compressor's, side by side.

Same model, same calibration windows (our ``tokens.zarr``), same M, lambda and target. Printed per block:

  ours (owl.json)      the workflow's artifact: ||X_j|| from the dense chain's Hessians, sqrt(N H_jj / 2),
                       the L2 norm of input j over every calibration token (OWL's and Wanda's definition);
  ours, in memory      the same rule on the dense Hugging Face model's activations in this process (a
                       check of the artifact: identical counts are expected);
  ours, peer's norm    the same rule with llm-compressor's activation norm (below), to locate differences;
  llm-compressor       ``_infer_owl_layer_sparsity`` of its ``WandaPruningModifier`` inside ``oneshot``,
                       run in its own virtual environment (``--venv``; see bench/peer_oneshot.py), batch 1;
                       where ``oneshot`` fails (0.14.0.1 on CPU: OWL's calibration pass runs before the
                       session is initialised), the function is called as llm-compressor's own OWL test
                       calls it (an initialised session, the decoder layers, a batch-1 data loader).

llm-compressor 0.14 accumulates, per calibration batch, ``sqrt(sum over the batch's tokens of x_j^2) /
128``: with batch size 1, the mean over sequences of each sequence's norm (up to a constant), not the norm
over all tokens. Outlier counts near the threshold can differ by that. It also normalises with the plain
mean over blocks (ours: parameter-weighted, the same for blocks of equal size).

    python bench/owl_peer.py --model results/demo/model --results results --model-name demo \\
        --recipe wanda_u70_owl --venv /tmp/llmc
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PEER_SCRIPT = """
import json, sys
import torch
from compressed_tensors.utils import match_named_modules
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM
from llmcompressor import oneshot
from llmcompressor.core.session_functions import create_session
from llmcompressor.modifiers.pruning import WandaPruningModifier
from llmcompressor.modifiers.pruning.sparsegpt.sgpt_base import SparsityModifierBase
from llmcompressor.utils.pytorch.module import infer_sequential_targets

model_dir, windows_file, sparsity, m, lam, out = sys.argv[1:7]
windows = json.loads(open(windows_file).read())
options = dict(sparsity=float(sparsity), sparsity_profile="owl", owl_m=float(m), owl_lmbda=float(lam))
found, how = {}, "oneshot"
infer = SparsityModifierBase._infer_owl_layer_sparsity


class Done(Exception):
    pass


def recording(self, model, layers, dataloader):
    found.update(infer(self, model, layers, dataloader))
    raise Done  # the per-block sparsities are what is compared; the pruning itself is not needed


SparsityModifierBase._infer_owl_layer_sparsity = recording
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
data = Dataset.from_dict({"input_ids": windows, "attention_mask": [[1] * len(w) for w in windows]})
try:
    oneshot(model=model, dataset=data, recipe=WandaPruningModifier(**options, ignore=["re:.*lm_head"]),
            max_seq_length=len(windows[0]), num_calibration_samples=len(windows), batch_size=1)
except Done:
    pass
except Exception as err:  # 0.14.0.1: OWL runs a calibration pass before the session is initialised
    how = f"oneshot failed ({type(err).__name__}: {err}); called as llm-compressor's own OWL test does"
    SparsityModifierBase._infer_owl_layer_sparsity = infer
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows = [{"input_ids": torch.tensor(w), "attention_mask": torch.ones(len(w), dtype=torch.int64)}
            for w in windows]
    with create_session() as session:
        session.initialize(model=model)
        modifier = WandaPruningModifier(**options)
        layers = dict(match_named_modules(model, infer_sequential_targets(model)))
        found = modifier._infer_owl_layer_sparsity(model, layers, DataLoader(rows, batch_size=1))
open(out, "w").write(json.dumps({"how": how, "sparsities": {k: float(v) for k, v in found.items()}}))
"""


def direct_norms(model_dir: Path, ids, per_sequence: bool) -> dict[int, dict[str, object]]:
    """Input norms of every linear layer of every block from the dense model in memory: the L2 norm over
    all tokens, or (``per_sequence``) llm-compressor's mean over sequences of each sequence's norm."""
    import torch
    from transformers import AutoModelForCausalLM

    from thanos.models import open_model

    _, adapter, _ = open_model(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sums: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for block, layer in enumerate(model.model.layers):
        for name in adapter.layers:

            def hook(_m, args, key=(block, name)):
                x = args[0].to(torch.float64)
                if per_sequence:
                    value = (x**2).sum(dim=1).sqrt().sum(0)  # (batch, seq, b) -> one norm per sequence
                else:
                    value = (x**2).reshape(-1, x.shape[-1]).sum(0)
                sums[key] = sums.get(key, 0) + value

            handles.append(layer.get_submodule(name).register_forward_pre_hook(hook))
    with torch.no_grad():
        for start in range(0, len(ids), 8):
            model(torch.as_tensor(ids[start : start + 8], dtype=torch.int64))
    for handle in handles:
        handle.remove()
    post = (lambda t: t) if per_sequence else torch.sqrt
    return {
        block: {adapter.group_of(name): post(sums[(block, name)]) for name in adapter.layers}
        for block in range(adapter.num_blocks)
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="the dense model directory")
    parser.add_argument("--results", type=Path, required=True, help="the workflow's results directory")
    parser.add_argument("--model-name", required=True, help="the model's name in the workflow config")
    parser.add_argument("--recipe", required=True, help="an OWL recipe of that run (its owl.json)")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/llmc"), help="llm-compressor's venv")
    parser.add_argument("--no-peer", action="store_true", help="ours only")
    args = parser.parse_args()

    import zarr

    from thanos.recipes.recipe import Recipe
    from thanos.stages.owl_plan import compute

    plan = json.loads((args.results / args.model_name / args.recipe / "owl.json").read_text())
    tokens = args.results / args.model_name / "calib" / "tokens.zarr"
    ids = zarr.open_group(str(tokens), mode="r")["tokens"][:]
    m, lam, target = plan["owl_m"], plan["owl_lambda"], plan["target"]
    columns = {"ours (owl.json)": plan}
    for label, per_sequence in (("ours, in memory", False), ("ours, peer's norm", True)):
        norms = direct_norms(args.model, ids, per_sequence)
        recipe = Recipe(None, "wanda", target, profile="owl", owl_m=m, owl_lambda=lam)
        columns[label] = compute(args.model, None, recipe, xnorms=norms)
    peer = None
    if not args.no_peer:
        python = args.venv / "bin" / "python"
        with tempfile.TemporaryDirectory() as tmp:
            windows, script, out = Path(tmp, "w.json"), Path(tmp, "peer.py"), Path(tmp, "owl.json")
            windows.write_text(json.dumps(ids.tolist()))
            script.write_text(PEER_SCRIPT)
            fraction = target.split(":")[-1]
            run = subprocess.run(
                [
                    str(python),
                    str(script),
                    str(args.model),
                    str(windows),
                    fraction,
                    str(m),
                    str(lam),
                    str(out),
                ],
                capture_output=True,
                text=True,
            )
            if run.returncode:
                print(f"llm-compressor failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
            else:
                found = json.loads(out.read_text())
                print(f"llm-compressor: {found['how']}")
                found = found["sparsities"]
                peer = [found[key] for key in sorted(found, key=lambda k: int(k.rsplit(".", 1)[-1]))]

    blocks = len(plan["blocks"])
    print(f"model {args.model} ({blocks} blocks), {len(ids)} x {ids.shape[1]} calibration tokens")
    print(f"target {target}, M {m:g}, lambda {lam:g}; outlier ratio % / block sparsity %")
    header = ["block", *columns, *(["llm-compressor"] if peer else [])]
    print(" | ".join(f"{h:>24}" for h in header))
    for b in range(blocks):
        cells = [f"{b:>24}"]
        for data in columns.values():
            entry = data["blocks"][b]
            cells.append(f"{100 * entry['outlier_ratio']:>9.4f} / {100 * entry['sparsity']:>10.4f}")
        if peer:
            cells.append(f"{'':>9}   {100 * peer[b]:>10.4f}")
        print(" | ".join(cells))
    if peer:
        ours = [entry["sparsity"] for entry in plan["blocks"]]
        same = [entry["sparsity"] for entry in columns["ours, peer's norm"]["blocks"]]
        gap = max(abs(a - c) for a, c in zip(ours, peer, strict=True))
        print(f"max |ours - llm-compressor|: {100 * gap:.4f} points")
        print(
            "max |ours with llm-compressor's norm - llm-compressor|: "
            f"{100 * max(abs(a - c) for a, c in zip(same, peer, strict=True)):.6f} points"
        )


if __name__ == "__main__":
    main()
