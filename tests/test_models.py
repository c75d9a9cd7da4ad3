"""The adapter: walking the blocks one at a time reproduces the full transformers model; lazy loading; the
layout that model_info.json holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model
from transformers import AutoModelForCausalLM, GPT2Config

from thanos.demo.tiny import build_tiny_model
from thanos.models import Checkpoint, ModelLayout, get_adapter, load_config, open_model


def walk_blocks(model_dir: Path, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """embed -> block 0..L-1 -> head, one block module in memory at a time."""
    _, adapter, checkpoint = open_model(model_dir)
    with torch.inference_mode():
        hidden = adapter.load_embedding(checkpoint)(input_ids)
        for block in range(adapter.num_blocks):
            hidden = adapter.run_block(adapter.load_block(checkpoint, block), block, hidden)
        return adapter.load_head(checkpoint)(hidden)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "opt"])
def test_block_walk_matches_full_model(tmp_path: Path, family: str) -> None:
    model_dir = make_tiny_model(tmp_path, family, num_blocks=3, max_position_embeddings=64)
    input_ids = torch.randint(4, 60, (2, 24), generator=torch.Generator().manual_seed(1))
    final, logits = walk_blocks(model_dir, input_ids)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.inference_mode():
        out = model(input_ids, output_hidden_states=True)
    torch.testing.assert_close(final, out.hidden_states[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)


def test_layout_and_groups(tmp_path: Path) -> None:
    """The layout's names; groups are named after their first layer."""
    llama = get_adapter(load_config(make_tiny_model(tmp_path, "llama")))
    info = llama.layout.to_info()
    assert info["layers"][:3] == ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
    assert info["groups"]["mlp.gate_proj"] == ["mlp.gate_proj", "mlp.up_proj"]
    assert info["block_prefix"] == "model.layers.{i}." and info["num_blocks"] == 2
    assert info["mlp_config"] == {"intermediate_size": 64}
    opt = get_adapter(load_config(make_tiny_model(tmp_path, "opt")))
    assert opt.layers == [
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.out_proj",
        "fc1",
        "fc2",
    ]
    assert opt.group_of("fc2") == "fc2" and opt.group_of("self_attn.v_proj") == "self_attn.q_proj"
    assert opt.layout.mlp_config == {"ffn_dim": 64}
    with pytest.raises(ValueError, match="out of range"):
        opt.block_prefix(2)


@pytest.mark.parametrize("model_type", ["qwen3", "glm4_moe"])
def test_model_info_holds_the_layout(tmp_path: Path, model_type: str, capsys) -> None:
    """``thanos model-info`` writes the layout (blocks of two kinds too: GLM-4-MoE's dense first block) and
    prints whether the type is tested; ``open_layout`` reads it back equal to the adapter's, without
    transformers (a fresh process: the prune, owl and compact jobs)."""
    from thanos.cli import main

    model = build_tiny_model(tmp_path / model_type, model_type, max_position_embeddings=64)
    assert main(["model-info", "--model", str(model), "--out", str(tmp_path / "info.json")]) == 0
    info = json.loads((tmp_path / "info.json").read_text())
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["tested"] is True
    assert info["path"] == str(model)
    _, adapter, _ = open_model(model)
    assert ModelLayout.from_info(info) == adapter.layout
    assert ("block_kind" in info) == (model_type == "glm4_moe")
    assert ModelLayout.from_info({k: v for k, v in info.items() if k != "mlp_config"}) is None  # older file
    script = (
        "import sys; from thanos.models import open_layout; "
        f"_, layout, _ = open_layout({str(model)!r}, {str(tmp_path / 'info.json')!r}); "
        "print(layout.block_prefix(1), [m for m in sys.modules if m.startswith('transformers')])"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == [adapter.block_prefix(1), "[]"]


def test_unsupported_model_type_says_what_is_supported() -> None:
    """The message names the model type, why, what is supported and where the tested types are listed (the
    models layer does not import the table of tested models: ``thanos model-info`` says ``tested``)."""
    supported = "supported: decoder-only causal LMs .*tested types: the README's table of supported models"
    with pytest.raises(ValueError, match=f"model_type 'gpt2': .*; {supported}"):
        get_adapter(GPT2Config(n_layer=2, n_embd=32, n_head=4))


def test_lazy_loading_reads_only_the_block(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path, "qwen2", num_blocks=4)
    checkpoint = Checkpoint(model_dir)
    adapter = get_adapter(load_config(model_dir))
    state = checkpoint.prefixed(adapter.block_prefix(2))
    assert state and all(not k.startswith("model.") for k in state)
    assert "self_attn.q_proj.bias" in state  # Qwen2's q/k/v bias
    block = adapter.load_block(checkpoint, 2)
    assert not any(p.is_meta for p in block.parameters())
    assert sum(p.numel() for p in block.parameters()) == sum(t.numel() for t in state.values())


def test_shapes_read_each_shards_header_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A layout check asks every block's shapes from every block's job (SmolLM2: 16k asks a run): each
    shard's header is read once, and the shapes are the stored ones."""
    from safetensors import safe_open

    import thanos.models.checkpoint as checkpoint_module

    model_dir = make_tiny_model(tmp_path, "llama", num_blocks=4)
    checkpoint = Checkpoint(model_dir)
    shards = set(checkpoint.weight_map.values())
    assert len(shards) > 1
    opened: list[Path] = []
    real_open = checkpoint_module.open_safetensors

    def counting(path: Path, *args: object) -> object:
        opened.append(Path(path))
        return real_open(path, *args)

    monkeypatch.setattr(checkpoint_module, "open_safetensors", counting)
    for _ in range(3):
        shapes = {name: checkpoint.shape(name) for name in checkpoint.names()}
    assert sorted(opened) == sorted(shards)
    for name, shard in checkpoint.weight_map.items():
        with safe_open(str(shard), framework="pt") as handle:
            assert shapes[name] == list(handle.get_slice(name).get_shape())
    shapes[name].append(7)  # a caller's list is its own
    assert checkpoint.shape(name) != shapes[name]


def test_single_file_checkpoint(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path, "llama", max_shard_size="100MB")
    assert (model_dir / "model.safetensors").is_file()
    assert not (model_dir / "model.safetensors.index.json").exists()
    input_ids = torch.randint(4, 60, (1, 16))
    final, _ = walk_blocks(model_dir, input_ids)
    assert final.shape == (1, 16, 32)


def test_missing_config_or_weights(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json"):
        open_model(tmp_path)
    model_dir = make_tiny_model(tmp_path, "opt")
    for shard in model_dir.glob("*.safetensors"):
        shard.unlink()
    (model_dir / "model.safetensors.index.json").unlink()
    torch.save({}, model_dir / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="safe_serialization=True"):
        open_model(model_dir)


def test_bf16_block_runs_in_bf16(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path, "mistral", dtype="bfloat16")
    assert json.loads((model_dir / "config.json").read_text())["dtype"] == "bfloat16"
    _, adapter, checkpoint = open_model(model_dir)
    assert adapter.dtype == torch.bfloat16
    hidden = adapter.load_embedding(checkpoint)(torch.randint(4, 60, (1, 8)))
    out = adapter.run_block(adapter.load_block(checkpoint, 0), 0, hidden)
    assert out.dtype == torch.bfloat16 and out.shape == hidden.shape


def test_make_tiny_model_builds_every_family(tmp_path: Path) -> None:
    """``python -m thanos make-tiny-model``: every family, a byte-level tokenizer that encodes any text."""
    from transformers import AutoTokenizer

    from thanos.cli import main
    from thanos.demo.tiny import FAMILIES

    for family in FAMILIES:
        out = tmp_path / family
        assert main(["make-tiny-model", "--family", family, "--hidden-size", "32", "--out", str(out)]) == 0
        adapter = get_adapter(load_config(out))
        assert adapter.model_type == family and adapter.num_blocks == 2 and adapter.hidden_size == 32
        tied = family in ("qwen2", "opt")  # the output layer reuses the token embeddings
        assert Checkpoint(out).names("lm_head") == ([] if tied else ["lm_head.weight"])
        tokenizer = AutoTokenizer.from_pretrained(out)
        text = "any text: ü, 2:4 ="
        assert tokenizer.decode(tokenizer(text).input_ids) == text
    with pytest.raises(ValueError, match="vocab_size 3 is smaller than the tokenizer's 5 tokens"):
        build_tiny_model(tmp_path / "small", words=["word"], vocab_size=3)
    with pytest.raises(ValueError, match="unknown model_type 'no_such_model' for a tiny model"):
        build_tiny_model(tmp_path / "nothing", family="no_such_model")
