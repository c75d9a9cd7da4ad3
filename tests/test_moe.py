"""Mixture-of-experts models (Mixtral, Qwen3-MoE): every expert's matrices are pruned with the Hessian of
the calibration tokens the router sent to that expert; an expert sent too few is pruned with the Hessian
of every token through it, and the report says so; the checkpoint's own layout (one matrix per expert)
is read and written. Real stages on tiny random models built from transformers' config classes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model, thanos_here, write_corpus
from transformers import AutoModelForCausalLM

import thanos.stages.capture as capture_stage
from thanos.cli import main
from thanos.data.storage import Hessians, read_tokens
from thanos.models import open_model

NSAMPLES, SEQLEN = 6, 24


def cli(*args: str | Path) -> int:
    return main([str(a) for a in args])


def captured_block0(tmp_path: Path, model: Path) -> tuple[Path, Path, Path]:
    """The stages on ``model`` up to block 0's Hessians, each a ``python -m thanos`` command in this
    process: (the calibration corpus, the tokens store, the Hessians store)."""
    tokens, inputs, hessians = tmp_path / "tokens.zarr", tmp_path / "inputs.zarr", tmp_path / "hessians.zarr"
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    assert cli("calibrate", "--model", model, "--source", corpus, "--nsamples", NSAMPLES, "--seqlen", SEQLEN,
               "--out", tokens) == 0  # fmt: skip
    assert cli("embed", "--model", model, "--tokens", tokens, "--out", inputs) == 0
    assert cli("capture", "--model", model, "--block", 0, "--inputs", inputs, "--out", hessians,
               "--batch-size", 4, "--device", "cpu") == 0  # fmt: skip
    return corpus, tokens, hessians


def routed_inputs(
    model_dir: Path, tokens: Path, experts_path: str = "mlp.experts"
) -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module]:
    """The full transformers model over the tokens: what block 0's experts module (``experts_path`` in
    the block) receives (hidden states of every token, the router's top-k choice) and the module itself."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    experts = model.model.layers[0].get_submodule(experts_path)
    seen = {}
    handle = experts.register_forward_pre_hook(lambda m, args: seen.update(hidden=args[0], top_k=args[1]))
    with torch.inference_mode():
        model(torch.from_numpy(read_tokens(tokens)[0]).long())
    handle.remove()
    return seen["hidden"], seen["top_k"], experts


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_expert_hessians_are_the_routed_tokens(
    tmp_path: Path, family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against the full model's own routing: each expert group's Hessian is (2/N) X^T X over the tokens
    the router sent to it (its input projections) or over that expert's gated activations of them (its
    down projection); with the threshold raised to the mean share, the experts below it get every token
    instead, and the store and the pruning stats say which rule and how many tokens."""
    monkeypatch.setattr(capture_stage, "MIN_SHARE", 0.999)  # some expert is below the mean, some is not
    model = make_tiny_model(tmp_path, family, hidden_size=32, intermediate_size=48)
    _, tokens, hessians = captured_block0(tmp_path, model)

    _, adapter, _ = open_model(model)
    store = Hessians(hessians)
    hidden, top_k, experts = routed_inputs(model, tokens)
    hidden = hidden.clone()
    rules = store.attrs["experts"]
    assert set(rules) == {g for g in adapter.groups if g in adapter.experts}
    assert {r["hessian"] for r in rules.values()} == {"routed tokens", "every token"}
    for group, rule in rules.items():
        layer = adapter.experts[group]
        routed = (top_k == layer.expert).any(-1)
        assert rule["tokens"] == int(routed.sum())
        X = hidden if rule["hessian"] == "every token" else hidden[routed]
        if layer.role == "output":
            with torch.no_grad():
                gate, up = torch.nn.functional.linear(X, experts.gate_up_proj[layer.expert]).chunk(2, dim=-1)
                X = experts.act_fn(gate) * up
        H = (2 / NSAMPLES) * X.detach().double().T @ X.detach().double()
        torch.testing.assert_close(store.get(group).double(), H, rtol=1e-4, atol=1e-6)

    pruned = tmp_path / "pruned"
    assert cli("prune", "--model", model, "--block", 0, "--hessians", hessians, "--method", "sparsegpt",
               "--sparsity", "0.5", "--out-dir", pruned) == 0  # fmt: skip
    for group, members in adapter.groups.items():
        for layer in members:
            stats = json.loads((pruned / f"{layer}.json").read_text())
            assert stats.get("routing") == rules.get(group), layer


def test_fused_experts_in_the_checkpoint_are_refused_naming_why(tmp_path: Path) -> None:
    """A checkpoint whose experts are stored fused (save_pretrained(save_original_format=False)) is
    refused by model-info, the first job of every run, with one line saying what to do."""
    model = make_tiny_model(tmp_path, "mixtral", hidden_size=32)
    fused = tmp_path / "fused"
    AutoModelForCausalLM.from_pretrained(model).save_pretrained(fused, save_original_format=False)
    result = thanos_here("model-info", "--model", fused, "--out", tmp_path / "i.json", cwd=tmp_path)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "no tensor model.layers.0.block_sparse_moe.experts.0.w1.weight" in last
    assert "stored fused" in last and "save_pretrained" in last
    assert not (tmp_path / "i.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt_oss", "granitemoe"])
def test_experts_stored_fused_are_pruned_per_expert_and_written_back_fused(
    tmp_path: Path, family: str
) -> None:
    """gpt-oss ((E, H, 2I): (in, out) matrices) and GraniteMoE ((E, 2I, H)) ship their experts as one
    tensor each: every expert's matrix is pruned on its own, with the Hessian of the tokens the router
    sent to it, as an (out, in) layer ``{tensor}.{e}``, and written back into the fused tensor: the output
    has the input's tensors, shapes and dtypes, loads with from_pretrained without a key left over, every
    row of every expert is 2:4, and its logits are those of the input with the pruned layers in memory."""
    from conftest import expert_matrix, pruned_in_memory

    from thanos.demo.tested_models import TESTED_MODELS

    assert family in TESTED_MODELS
    model = make_tiny_model(tmp_path, family, hidden_size=32, intermediate_size=48)
    _, adapter, checkpoint = open_model(model)
    fused = {layer: e for layer, e in adapter.experts.items() if e.fused is not None}
    assert len(fused) == 2 * 4  # gate/up and down of 4 experts, in every block
    corpus, tokens, hessians = captured_block0(tmp_path, model)
    store = Hessians(hessians)
    (experts_path,) = {e.experts for e in fused.values()}
    hidden, top_k, _ = routed_inputs(model, tokens, experts_path)
    for layer, expert in fused.items():
        if expert.role != "input" or store.attrs["experts"][layer]["hessian"] != "routed tokens":
            continue
        X = hidden[(top_k == expert.expert).any(-1)].double()
        H = (2 / NSAMPLES) * X.T @ X
        # fp32 accumulation over the routed tokens, in another order: within 1e-6 of H's largest entry
        atol = 1e-6 * float(H.abs().max())
        torch.testing.assert_close(store.get(layer).double(), H, rtol=1e-4, atol=atol)
        assert checkpoint.shape(f"model.layers.0.{layer}.weight") == [2 * 48, 32]  # (out, in)

    out, work = tmp_path / "out", tmp_path / "work"
    run = thanos_here(
        "prune-model", "--model", model, "--method", "thanos", "--sparsity", "2:4", "--calibration", corpus,
        "--nsamples", "8", "--seqlen", "24", "--device", "cpu", "--workdir", work, "--out", out,
        "--keep", "all", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    from safetensors.torch import load_file

    before, after = ({k: v for f in sorted(d.glob("*.safetensors")) for k, v in load_file(f).items()}
                     for d in (model, out))  # fmt: skip
    assert {k: (v.shape, v.dtype) for k, v in before.items()} == {
        k: (v.shape, v.dtype) for k, v in after.items()
    }
    for layer in fused:
        for block in range(2):
            name = f"model.layers.{block}.{layer}.weight"
            W = expert_matrix(after, name, tuple(checkpoint.shape(name)))
            assert ((W.reshape(W.shape[0], -1, 4) == 0).sum(-1) >= 2).all(), name
    loaded, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    assert not any(info.values()), info  # no key missing, unexpected or mismatched
    facts = json.loads((out / "sparsity.json").read_text())
    assert facts["structure"] == "2:4" and f"model.layers.0.{next(iter(fused))}.weight" in facts["layers"]
    pruned = work / "results" / model.name / "thanos_2-4" / "pruned"
    full = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    ids = torch.randint(4, full.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        assert torch.equal(loaded.eval()(ids).logits, pruned_in_memory(model, pruned, out)(ids).logits)
        assert not torch.equal(loaded(ids).logits, full(ids).logits)
