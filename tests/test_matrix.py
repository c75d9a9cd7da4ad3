"""The tested models (``thanos/demo/tested_models.py``): every model type in it, block by block and through
the workflow, on tiny random models built from transformers' own config classes, through the generic
adapter (``thanos/models/generic.py``); on Llama, Mistral, Qwen2 and OPT it reproduces a forward written out
by hand (``tests/llama_oracle.py``) bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import llama_oracle
import pytest
import torch
import yaml
from conftest import (
    REPO,
    calibrated,
    expert_matrix,
    pruned_in_memory,
    snakemake,
    workflow_config,
    write_corpus,
)
from transformers import AutoModelForCausalLM

from thanos.demo.tested_models import TESTED_MODELS, readme_table
from thanos.demo.tiny import FAMILIES, build_tiny_model
from thanos.files.layout import Layout
from thanos.models import Checkpoint, get_adapter, open_model
from thanos.models.generic import StructureError

RECIPES = {"sparsegpt_u50": ("sparsegpt", 0.5), "thanos_2-4": ("thanos", "2:4")}  # alpha 0: every row 2:4


def tiny(root: Path, model_type: str) -> Path:
    """A 2-block model of ``model_type`` with random norms and biases (each of them changes the logits)."""
    return build_tiny_model(root / model_type, model_type, max_position_embeddings=64, jitter=0.1)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every tested type's tiny model, built once for this file: the block-by-block tests and the workflow
    run read the same directories (none of them writes there)."""
    root = tmp_path_factory.mktemp("models")
    return {model_type: tiny(root, model_type) for model_type in TESTED_MODELS}


def walk(adapter, checkpoint: Checkpoint, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list]:
    """embed -> every block alone, built from its own tensors -> head: (logits, every block's input, every
    block's {group: the input capture's hooks hand it})."""
    with torch.inference_mode():
        hidden = adapter.load_embedding(checkpoint)(ids)
        inputs, captured = [hidden], []
        for block in range(adapter.num_blocks):
            module, seen = adapter.load_block(checkpoint, block), {}
            handles = adapter.watch_inputs(
                module, block, lambda group, X, seen=seen: seen.setdefault(group, X)
            )
            hidden = adapter.run_block(module, block, hidden)
            for handle in handles:
                handle.remove()
            inputs.append(hidden)
            captured.append(seen)
        return adapter.load_head(checkpoint)(hidden)[1], inputs, captured


@pytest.mark.parametrize("model_type", list(TESTED_MODELS))
def test_block_by_block_gives_the_models_logits(models: dict[str, Path], model_type: str) -> None:
    """24 tokens (longer than the sliding windows of 16), batch 2, fp32: max abs difference <= 1e-5."""
    model_dir = models[model_type]
    _, adapter, checkpoint = open_model(model_dir)
    ids = torch.randint(4, 250, (2, 24), generator=torch.Generator().manual_seed(1))
    logits, _, _ = walk(adapter, checkpoint, ids)
    with torch.inference_mode():
        expected = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()(ids).logits
    assert (logits - expected).abs().max() <= 1e-5
    assert adapter.layers and all(adapter.group_of(layer) for layer in adapter.layers)


@pytest.mark.parametrize("family", FAMILIES)
def test_generic_adapter_reproduces_a_forward_written_by_hand(models: dict[str, Path], family: str) -> None:
    """On Llama, Mistral, Qwen2 and OPT the generic adapter gives bit-identical block inputs, captured
    group inputs and logits to the forward written out in ``tests/llama_oracle.py`` (what the hand-written
    adapters of earlier versions computed), the checkpoint prefix they used and their layers grouped the
    same way (groups named after their first layer instead of attn_in, attn_out, mlp_in, mlp_out)."""
    model_dir = models[family]
    _, adapter, checkpoint = open_model(model_dir)
    ids = torch.randint(4, 250, (2, 24), generator=torch.Generator().manual_seed(2))
    logits, inputs, captured = walk(adapter, checkpoint, ids)
    logits_o, inputs_o, captured_o = llama_oracle.forward(model_dir, ids)
    assert all(torch.equal(a, b) for a, b in zip(inputs[:-1], inputs_o, strict=True))  # [-1]: the head's
    for seen, expected in zip(captured, captured_o, strict=True):
        assert list(seen) == list(expected)
        assert all(torch.equal(seen[group], expected[group]) for group in expected)
    assert torch.equal(logits, logits_o)
    hand = HAND_WRITTEN["opt" if family == "opt" else "llama"]
    assert adapter.block_template == hand["block_template"]
    assert list(adapter.groups.values()) == hand["groups"]


# the names of the hand-written adapters: the checkpoint prefix of block i, the groups in pruning order
HAND_WRITTEN = {
    "llama": {
        "block_template": "model.layers.{i}.",
        "groups": [
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
            ("self_attn.o_proj",),
            ("mlp.gate_proj", "mlp.up_proj"),
            ("mlp.down_proj",),
        ],
    },
    "opt": {
        "block_template": "model.decoder.layers.{i}.",
        "groups": [
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
            ("self_attn.out_proj",),
            ("fc1",),
            ("fc2",),
        ],
    },
}


def test_models_that_cannot_work_are_refused_naming_why(tmp_path: Path) -> None:
    """GPT-2 (Conv1D projections), Llama 4 (experts outside transformers' experts interface) and an
    encoder-decoder model: one message with the model type, the reason and what is supported."""
    gpt2 = build_tiny_model(tmp_path / "gpt2", "gpt2", max_position_embeddings=64)
    with pytest.raises(StructureError, match=r"model_type 'gpt2': .*Conv1D.*; supported: .*tested types"):
        open_model(gpt2)
    from transformers import Llama4TextConfig, T5Config

    llama4 = Llama4TextConfig(hidden_size=32, intermediate_size=64, intermediate_size_mlp=64,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                              num_local_experts=4, num_experts_per_tok=1, vocab_size=64)  # fmt: skip
    with pytest.raises(
        StructureError, match=r"'llama4_text': .*3-D weights .*experts.gate_up_proj.*cannot be"
    ):
        get_adapter(llama4)

    config = T5Config(d_model=32, num_layers=1, num_heads=2, d_kv=16, d_ff=64, vocab_size=64)
    with pytest.raises(StructureError, match=r"model_type 't5' is an encoder-decoder model.*supported:"):
        get_adapter(config)


def test_the_schema_offers_every_tested_type() -> None:
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    tiny_spec = schema["properties"]["models"]["additionalProperties"]["properties"]["tiny"]
    assert tiny_spec["properties"]["family"]["enum"] == list(TESTED_MODELS)


def written_tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model directory's safetensors, by its name in the checkpoint."""
    from safetensors.torch import load_file

    return {
        name: t for shard in sorted(model_dir.glob("*.safetensors")) for name, t in load_file(shard).items()
    }


def has_pattern(weight: torch.Tensor, sparsity: float | str) -> bool:
    """2:4: at least 2 zeros in every 4 consecutive inputs of every row; 0.5: half the weights are zero."""
    if sparsity == "2:4":
        return bool(((weight.reshape(weight.shape[0], -1, 4) == 0).sum(-1) >= 2).all())
    return int((weight == 0).sum()) >= weight.numel() // 2


@pytest.mark.slow
def test_matrix_through_the_workflow(models: dict[str, Path], tmp_path: Path) -> None:
    """SparseGPT 50 % and Thanos 2:4 on every model type of the matrix, in one Snakemake run: each
    assembled model loads with from_pretrained, has the logits of the input model carrying the pruned
    weights in memory, the requested pattern in every pruned matrix, and a sparsity.json listing exactly
    the layers pruned and the linear layers left dense. The inputs are the local model directories the
    block-by-block tests read (the workflow's own tiny-model rule is run by tests/test_workflow.py)."""
    local = {t: {"path": str(models[t])} for t in TESTED_MODELS}
    recipes = {name: {"method": m, "sparsity": s, "alpha": 0} for name, (m, s) in RECIPES.items()}
    corpus = write_corpus(tmp_path / "calib.jsonl", docs=16)
    snakemake(tmp_path, workflow_config(corpus, local, recipes))
    paths = Layout(str(tmp_path / "results"), sequential=True)
    ids = torch.randint(4, 250, (2, 24), generator=torch.Generator().manual_seed(3))
    for model_type in TESTED_MODELS:
        model_dir = models[model_type]
        _, adapter, checkpoint = open_model(model_dir)
        expected_layers = {
            f"{adapter.block_prefix(b)}{layer}.weight"
            for b in range(adapter.num_blocks)
            for layer in adapter.block_layers(b)
        }
        for recipe, (_, sparsity) in RECIPES.items():
            out = Path(paths.model_dir(model_type, recipe))
            key = calibrated(tmp_path / "results" / model_type).name
            pruned = Path(paths.pruned(model_type, recipe, key))
            assembled = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
            with torch.inference_mode():
                got = assembled(ids).logits
                want = pruned_in_memory(model_dir, pruned, out)(ids).logits
            assert torch.equal(got, want), (model_type, recipe)
            weights = written_tensors(out)  # as the checkpoint stores them (a matrix, or all, per expert)
            sidecar = json.loads((out / "sparsity.json").read_text())
            assert set(sidecar["layers"]) == expected_layers, (model_type, recipe)
            for name in expected_layers:  # (out, in): the shape transformers' module multiplies by
                shape = tuple(checkpoint.shape(name))
                weight = weights[name] if name in weights else expert_matrix(weights, name, shape)
                assert has_pattern(weight, sparsity), (model_type, recipe, name)
            assert set(weights) == set(written_tensors(model_dir)), model_type  # the input's layout
            linear = {n for n, m in assembled.named_modules() if _multiplies_by_a_matrix(m)}
            assert set(sidecar["dense_linear"]) == linear - {
                n.removesuffix(".weight") for n in expected_layers
            }
            assert "lm_head" in sidecar["dense_linear"], model_type
            if adapter.experts:  # mixture of experts: the routers are dense, and said to be
                routers = {n for n in sidecar["dense_linear"] if n.endswith((".gate", ".router"))}
                assert len(routers) >= adapter.num_blocks - 1, (model_type, sidecar["dense_linear"])


def _multiplies_by_a_matrix(module: torch.nn.Module) -> bool:
    """An ``nn.Linear``, or a module with a 2-D weight of its own (a transformers 5 MoE router)."""
    weight = module._parameters.get("weight")
    two_d = weight is not None and weight.dim() == 2 and not isinstance(module, torch.nn.Embedding)
    return isinstance(module, torch.nn.Linear) or two_d


def test_the_readme_table_is_the_matrix() -> None:
    """docs/supported-models.md's table is generated from TESTED_MODELS (python docs/supported_models.py)."""
    assert readme_table() in (REPO / "docs" / "supported-models.md").read_text()
