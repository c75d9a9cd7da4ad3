"""Stages through the CLI on tiny Llama, Mistral (GQA), Qwen2 (bias) and OPT models: stores match the
full transformers model, pruned weights are used, bad input fails clearly and loses nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from conftest import FAMILIES, make_tiny_model
from helpers.stages import NSAMPLES, SEQLEN, calibrated, cli
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from thanos.data.storage import Activations, Hessians, read_tokens, write_activations
from thanos.models import get_adapter, load_config


def reference_run(model_dir: Path, tokens: Path, block_weights: dict[str, torch.Tensor] | None = None):
    """The full transformers model over the tokens: hidden states and block 0's layer inputs (by name)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    adapter = get_adapter(load_config(model_dir))
    prefix = adapter.block_prefix(0)
    for layer, weight in (block_weights or {}).items():
        model.get_submodule(prefix + layer).weight.data.copy_(weight)
    inputs: dict[str, torch.Tensor] = {}
    hooks = [
        model.get_submodule(prefix + members[0]).register_forward_pre_hook(
            lambda _m, args, g=group: inputs.__setitem__(g, args[0].reshape(NSAMPLES, SEQLEN, -1))
        )
        for group, members in adapter.groups.items()
    ]
    ids = torch.from_numpy(read_tokens(tokens)[0]).long()
    with torch.inference_mode():
        out = model(ids, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    return out.hidden_states, inputs


@pytest.mark.parametrize("family", FAMILIES)
def test_stages_match_full_model(tmp_path: Path, family: str) -> None:
    model, tokens = calibrated(tmp_path, family)
    inputs0, hess0 = tmp_path / "inputs_0.zarr", tmp_path / "hessians_0.zarr"
    pruned, inputs1 = tmp_path / "pruned" / "block0", tmp_path / "inputs_1.zarr"
    dense1 = tmp_path / "dense_inputs_1.zarr"
    assert cli("embed", "--model", model, "--tokens", tokens, "--out", inputs0, "--batch-size", 4) == 0
    assert cli("capture", "--model", model, "--block", 0, "--inputs", inputs0, "--out", hess0,
               "--batch-size", 4, "--device", "cpu") == 0  # fmt: skip
    assert cli("prune", "--model", model, "--block", 0, "--hessians", hess0, "--method", "sparsegpt",
               "--sparsity", "0.5", "--out-dir", pruned) == 0  # fmt: skip
    assert cli("propagate", "--model", model, "--block", 0, "--inputs", inputs0, "--pruned-dir", pruned,
               "--out", inputs1, "--batch-size", 4) == 0  # fmt: skip
    assert cli("propagate", "--model", model, "--block", 0, "--inputs", inputs0, "--out", dense1) == 0

    hidden, layer_inputs = reference_run(model, tokens)
    first = Activations(inputs0)
    assert (first.block, first.nsamples, first.seqlen) == (0, NSAMPLES, SEQLEN)
    assert first.attrs["dtype"] == "float32"
    torch.testing.assert_close(first.read(0, NSAMPLES), hidden[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(Activations(dense1).read(0, NSAMPLES), hidden[1], rtol=1e-5, atol=1e-5)

    adapter = get_adapter(load_config(model))
    store = Hessians(hess0)
    assert store.attrs["nsamples"] == NSAMPLES and store.attrs["block"] == 0
    assert store.attrs["groups"] == {g: list(m) for g, m in adapter.groups.items()}
    for group, X in layer_inputs.items():
        H = (2 / NSAMPLES) * torch.einsum("nti,ntj->ij", X.double(), X.double())
        torch.testing.assert_close(store.get(group).double(), H, rtol=1e-4, atol=1e-6)

    weights = {}
    for layer in adapter.layers:
        stats = json.loads((pruned / f"{layer}.json").read_text())
        assert stats["block"] == 0 and stats["layer"] == layer and stats["achieved_sparsity"] == 0.5
        weights[layer] = load_file(pruned / f"{layer}.safetensors")["weight"]
        assert weights[layer].dtype == torch.float32 and float((weights[layer] == 0).float().mean()) == 0.5
    pruned_hidden, _ = reference_run(model, tokens, weights)
    second = Activations(inputs1)
    assert second.block == 1 and second.attrs["pruned_layers"] == sorted(adapter.layers)
    torch.testing.assert_close(second.read(0, NSAMPLES), pruned_hidden[1], rtol=1e-5, atol=1e-5)


def test_bfloat16_activations_are_lossless(tmp_path: Path) -> None:
    model, tokens = calibrated(tmp_path, "mistral", dtype="bfloat16")
    inputs0, inputs1 = tmp_path / "inputs_0.zarr", tmp_path / "inputs_1.zarr"
    assert cli("embed", "--model", model, "--tokens", tokens, "--out", inputs0) == 0
    assert cli("propagate", "--model", model, "--block", 0, "--inputs", inputs0, "--out", inputs1) == 0
    raw = zarr.open_group(str(inputs0), mode="r")
    assert raw["hidden"].dtype == np.uint16 and raw.attrs["dtype"] == "bfloat16"
    assert raw["hidden"].chunks == (1, SEQLEN, 32)
    index = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    weight = load_file(model / index["model.embed_tokens.weight"])["model.embed_tokens.weight"]
    ids = torch.from_numpy(read_tokens(tokens)[0]).long()
    first = Activations(inputs0).read(0, NSAMPLES)
    assert first.dtype == torch.bfloat16 and torch.equal(first, weight[ids])
    assert Activations(inputs1).read(0, 2).dtype == torch.bfloat16
    hess = tmp_path / "h.zarr"
    assert cli("capture", "--model", model, "--block", 0, "--inputs", inputs0, "--out", hess) == 0
    assert Hessians(hess).get("mlp.gate_proj").dtype == torch.float32


def test_magnitude_needs_no_hessians_and_layers_subset(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path, "opt")
    out = tmp_path / "pruned"
    assert cli("prune", "--model", model, "--block", 1, "--method", "magnitude", "--sparsity", "2:4",
               "--layers", "fc1,self_attn.out_proj", "--out-dir", out) == 0  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == [
        "fc1.json",
        "fc1.safetensors",
        "self_attn.out_proj.json",
        "self_attn.out_proj.safetensors",
    ]
    assert json.loads((out / "fc1.json").read_text())["objective"] is None
    assert cli("prune", "--model", model, "--block", 1, "--method", "wanda", "--sparsity", "0.5",
               "--out-dir", out) == 2  # fmt: skip
    assert cli("prune", "--model", model, "--block", 1, "--method", "magnitude", "--sparsity", "0.5",
               "--layers", "mlp.gate_proj", "--out-dir", out) == 2  # fmt: skip


def test_prune_reads_the_layers_from_model_info(tmp_path: Path) -> None:
    """With --model-info the layers' names come from model_info.json (the workflow's jobs): the same files
    as the adapter's names give, and a layer model_info.json does not list is not pruned."""
    model = make_tiny_model(tmp_path, "opt")
    info = tmp_path / "info.json"
    assert cli("model-info", "--model", model, "--out", info) == 0
    recipe = ("--method", "magnitude", "--sparsity", "2:4")
    assert cli("prune", "--model", model, "--block", 1, *recipe, "--out-dir", tmp_path / "adapter") == 0
    assert cli("prune", "--model", model, "--block", 1, *recipe, "--model-info", info,
               "--out-dir", tmp_path / "info") == 0  # fmt: skip
    written = sorted(p.name for p in (tmp_path / "adapter").glob("*.safetensors"))
    assert written == sorted(p.name for p in (tmp_path / "info").glob("*.safetensors")) and len(written) == 6
    assert all(
        (tmp_path / "adapter" / n).read_bytes() == (tmp_path / "info" / n).read_bytes() for n in written
    )
    content = json.loads(info.read_text())
    content["layers"].remove("fc1")
    del content["groups"]["fc1"]
    info.write_text(json.dumps(content))
    assert cli("prune", "--model", model, "--block", 1, *recipe, "--model-info", info,
               "--out-dir", tmp_path / "edited") == 0  # fmt: skip
    assert not (tmp_path / "edited" / "fc1.safetensors").exists()
    assert (tmp_path / "edited" / "fc2.safetensors").is_file()


def drop_block(model_dir: Path, block: int) -> None:
    """Remove every tensor of ``block`` from the checkpoint (shards and index)."""
    index_path = model_dir / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    prefix = get_adapter(load_config(model_dir)).block_prefix(block)
    for shard in sorted(set(index["weight_map"].values())):
        tensors = load_file(model_dir / shard)
        save_file({k: v for k, v in tensors.items() if not k.startswith(prefix)}, model_dir / shard)
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if not k.startswith(prefix)}
    index_path.write_text(json.dumps(index))


def test_stages_read_only_their_block(tmp_path: Path) -> None:
    model, tokens = calibrated(tmp_path, "qwen2", num_blocks=3)
    drop_block(model, 0)
    drop_block(model, 2)
    inputs1 = tmp_path / "inputs_1.zarr"
    with write_activations(inputs1, NSAMPLES, SEQLEN, 32, torch.float32, block=1) as writer:
        writer.write(0, torch.randn(NSAMPLES, SEQLEN, 32, generator=torch.Generator().manual_seed(0)))
    hess, pruned = tmp_path / "h1.zarr", tmp_path / "p1"
    assert cli("capture", "--model", model, "--block", 1, "--inputs", inputs1, "--out", hess) == 0
    assert cli("prune", "--model", model, "--block", 1, "--hessians", hess, "--method", "thanos",
               "--sparsity", "0.5", "--out-dir", pruned) == 0  # fmt: skip
    assert cli("propagate", "--model", model, "--block", 1, "--inputs", inputs1, "--pruned-dir", pruned,
               "--out", tmp_path / "inputs_2.zarr") == 0  # fmt: skip
    assert cli("capture", "--model", model, "--block", 2, "--inputs", inputs1, "--out", tmp_path / "x") == 2


def test_bad_input_fails_clearly_and_keeps_outputs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, tokens = calibrated(tmp_path, "llama")
    inputs0, hess0 = tmp_path / "inputs_0.zarr", tmp_path / "hessians_0.zarr"
    assert cli("embed", "--model", model, "--tokens", tokens, "--out", inputs0) == 0
    assert cli("capture", "--model", model, "--block", 0, "--inputs", inputs0, "--out", hess0) == 0
    before = Hessians(hess0).get("self_attn.q_proj")

    def failing(*args: str | Path, match: str) -> None:
        caplog.clear()
        assert cli(*args) == 2
        assert match in caplog.text, caplog.text

    failing("capture", "--model", model, "--block", 2, "--inputs", inputs0, "--out", hess0,
            match="block 2 out of range: the model has blocks 0..1")  # fmt: skip
    failing("capture", "--model", model, "--block", 1, "--inputs", inputs0, "--out", hess0,
            match="holds the inputs of block 0, not block 1")  # fmt: skip
    failing("capture", "--model", tmp_path, "--block", 0, "--inputs", inputs0, "--out", hess0,
            match="no config.json in the model directory")  # fmt: skip
    wide = make_tiny_model(tmp_path, "llama", hidden_size=64)
    failing("capture", "--model", wide, "--block", 0, "--inputs", inputs0, "--out", hess0,
            match="hidden size 32, the model has 64")  # fmt: skip
    failing("prune", "--model", wide, "--block", 0, "--hessians", hess0, "--method", "thanos",
            "--sparsity", "0.5", "--layers", "mlp.down_proj", "--out-dir", tmp_path / "p",
            match="belongs to another model")  # fmt: skip
    bad = tmp_path / "nan.zarr"
    clean = Activations(inputs0).read(0, NSAMPLES)
    clean[4, 3, 7] = float("nan")
    with write_activations(bad, NSAMPLES, SEQLEN, 32, torch.float32, block=0) as writer:
        writer.write(0, clean)
    failing("capture", "--model", model, "--block", 0, "--inputs", bad, "--out", hess0,
            match="NaN or Inf in the inputs of block 0, sample 4")  # fmt: skip
    failing("propagate", "--model", model, "--block", 0, "--inputs", bad, "--out", inputs0,
            match="sample 4")  # fmt: skip
    failing("propagate", "--model", model, "--block", 0, "--inputs", inputs0, "--out", tmp_path / "o.zarr",
            "--pruned-dir", tmp_path / "nowhere", match="pruned-layer directory not found")  # fmt: skip
    del zarr.open_group(str(bad), mode="r+").attrs["complete"]
    failing("capture", "--model", model, "--block", 0, "--inputs", bad, "--out", tmp_path / "h.zarr",
            match=f"delete {bad}")  # fmt: skip
    # nothing already written was lost or replaced
    torch.testing.assert_close(Hessians(hess0).get("self_attn.q_proj"), before, rtol=0, atol=0)
    assert Activations(inputs0).nsamples == NSAMPLES
    assert not (tmp_path / "h.zarr").exists() and not (tmp_path / "o.zarr").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_device_resolution_names_the_fix() -> None:
    """One resolver for stages, evaluation and the demo trainer: auto, cpu, cuda[:N] if visible."""
    from thanos.stages.common import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" Auto ").type == ("cuda" if torch.cuda.is_available() else "cpu")
    missing = f"cuda:{torch.cuda.device_count()}"  # one past the last visible GPU
    with pytest.raises(ValueError, match=rf"--device {missing}: .*use --device cpu or auto"):
        resolve_device(missing)
    with pytest.raises(ValueError, match="unknown 'gpu'; use auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")
