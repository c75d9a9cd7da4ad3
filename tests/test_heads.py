"""Attention-head removal (``heads:p``, ``kv_heads:p``) and its compact output: the counts, the kernels'
choice and update, every dense family of the tested matrix compacted to the logits of the zero-filled model,
the refusals (named), ``thanos prune-model`` and llama.cpp's converter on a model with fewer heads."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model, snakemake, thanos_here, workflow_config, write_corpus
from helpers.models import (
    HEADS_REFUSED,
    HEADS_ROWS,
    logits,
    prune_with_magnitude,
    stored_parameters,
)
from helpers.tools import (
    converted_to_gguf,
)

from thanos.demo.tiny import build_tiny_model
from thanos.models import open_layout
from thanos.models.heads import HeadsError, attention_layout, check_expressible
from thanos.pruning.algorithms.masks import head_columns
from thanos.pruning.layer import prune_layer
from thanos.pruning.sparsity import head_count, parse_sparsity
from thanos.recipes.names import from_name
from thanos.recipes.recipe import Recipe
from thanos.stages.assemble import assemble
from thanos.stages.model_info import model_info


def test_head_count_per_group_or_whole_groups() -> None:
    heads = parse_sparsity("heads:0.33")
    assert heads.kind == "heads" and str(heads) == "heads:0.33"
    assert str(parse_sparsity("kv-heads:0.25")) == "kv_heads:0.25"
    assert head_count(heads, 9, 3) == (1, False)  # SmolLM2: 1 of the 3 query heads of each group
    assert head_count(heads, 32, 32) == (11, True)  # one head per group: whole groups, ceil(0.33 x 32)
    assert head_count(parse_sparsity("kv_heads:0.25"), 32, 8) == (2, True)
    with pytest.raises(ValueError, match="leaves none; use kv_heads:p"):
        head_count(parse_sparsity("heads:0.9"), 8, 2)
    with pytest.raises(ValueError, match="leaves none; give a smaller fraction"):
        head_count(parse_sparsity("kv_heads:0.9"), 8, 2)
    assert from_name("thanos_h33") == {"method": "thanos", "sparsity": "heads:0.33", "alpha": None}
    assert from_name("wanda_g25") == {"method": "wanda", "sparsity": "kv_heads:0.25", "alpha": None}
    assert Recipe("r", "thanos", "heads:0.33").compact is True
    assert Recipe(None, "thanos", "heads:0.33", compact=False).name == "thanos_h33_zeros"


def test_head_columns_keep_every_group_valid() -> None:
    """The lowest heads of each group, or the lowest groups, each head's columns together."""
    score = torch.tensor([5.0, 1.0, 3.0, 4.0, 0.5, 9.0]).repeat_interleave(2)  # 6 heads of 2 columns
    per_group = head_columns(score, 6, 2, 1, whole_groups=False).reshape(6, 2)
    assert per_group.all(dim=1).tolist() == [False, True, False, False, True, False]
    assert (per_group.any(dim=1) == per_group.all(dim=1)).all()
    groups = head_columns(score, 6, 2, 1, whole_groups=True).reshape(6, 2)
    assert groups.all(dim=1).tolist() == [True, True, True, False, False, False]  # 9 < 13.5


@pytest.mark.parametrize("method", ["thanos", "sparsegpt", "wanda", "magnitude"])
def test_prune_layer_removes_whole_heads(method: str) -> None:
    generator = torch.Generator().manual_seed(0)
    W = torch.randn(16, 48, generator=generator)
    X = torch.randn(48, 400, generator=generator) * torch.rand(48, 1, generator=generator) * 3
    H = 2 * X @ X.T / 400
    result = prune_layer(W, None if method == "magnitude" else H, method, "heads:0.33", heads=(6, 2))
    removed = result.columns.reshape(-1, 8) // 8  # two heads of 8 columns, one per group
    assert result.columns.numel() == 16 and (removed == removed[:, :1]).all()
    assert sorted(int(h) // 3 for h in removed[:, 0]) == [0, 1]
    assert (result.weight[:, result.columns] == 0).all() and int((result.weight == 0).all(0).sum()) == 16
    with pytest.raises(ValueError, match=r"heads:0.33 needs the layer's \(query heads, key/value groups\)"):
        prune_layer(W, H, method, "heads:0.33")
    with pytest.raises(ValueError, match="must divide"):
        prune_layer(W, H, method, "heads:0.33", heads=(5, 1))


def test_thanos_heads_update_is_the_least_squares_optimum() -> None:
    """Thanos' multi-column update (eq. 13) on a head's columns gives the kept columns that minimise
    ||(W - W') X||^2 exactly (the least-squares solution with those columns zero)."""
    generator = torch.Generator().manual_seed(1)
    W = torch.randn(8, 24, generator=generator, dtype=torch.float64)
    X = torch.randn(24, 300, generator=generator, dtype=torch.float64) * torch.linspace(0.1, 4, 24).unsqueeze(
        1
    )
    H = 2 * X @ X.T / 300
    result = prune_layer(W.float(), H.float(), "thanos", "heads:0.5", heads=(4, 2), damp=0)
    kept = torch.ones(24, dtype=torch.bool)
    kept[result.columns] = False
    best = torch.linalg.lstsq(X[kept].T, (W @ X).T).solution.T  # (8, kept)
    assert torch.allclose(result.weight[:, kept].double(), best, atol=2e-3)
    magnitude = prune_layer(W.float(), None, "magnitude", "heads:0.5", heads=(4, 2))

    def error(pruned: torch.Tensor) -> float:
        return float(((W - pruned.double()) @ X).pow(2).sum())

    assert error(result.weight) < error(magnitude.weight)


@pytest.mark.parametrize("model_type", HEADS_ROWS)
def test_fewer_heads_give_the_logits_of_the_zero_filled_model(tmp_path: Path, model_type: str) -> None:
    """Every dense family of the tested matrix: the compact model (heads cut, config changed) and the same
    pruned layers written with zeros in the original shape give the same logits (fp32, <= 1e-5), both
    loaded with plain from_pretrained; the parameters counted are the ones stored."""
    model = build_tiny_model(tmp_path / model_type, model_type, max_position_embeddings=64, jitter=0.1)
    sparsity = "kv_heads:0.5" if model_type == "qwen2" else "heads:0.5"
    pruned = tmp_path / "pruned"
    prune_with_magnitude(model, pruned, sparsity)
    base = {"name": "m", "method": "magnitude", "sparsity": sparsity}
    info = tmp_path / "model_info.json"  # as the workflow and prune-model pass it (gpt-oss' fused experts)
    model_info(model, info)
    zeros = assemble(model, pruned, Recipe.from_dict(base | {"compact": False}), tmp_path / "zeros", info)
    compact = assemble(model, pruned, Recipe.from_dict(base), tmp_path / "compact", info)
    facts = compact["compact"]
    assert "compact" not in zeros and facts["structure"] == "heads"
    original = json.loads((model / "config.json").read_text())
    config = json.loads((tmp_path / "compact" / "config.json").read_text())
    heads, kv = (
        original["num_attention_heads"],
        original.get("num_key_value_heads") or original["num_attention_heads"],
    )
    whole = sparsity.startswith("kv") or heads == kv
    assert facts["kept_kv_heads"] == (kv // 2 if whole else kv)
    assert config["num_attention_heads"] == facts["kept_heads"] == heads // 2
    assert config["num_key_value_heads"] == facts["kept_kv_heads"] and config["head_dim"] == facts["head_dim"]
    assert {
        k: v for k, v in config.items() if k not in ("num_attention_heads", "num_key_value_heads", "head_dim")
    } == {
        k: v
        for k, v in original.items()
        if k not in ("num_attention_heads", "num_key_value_heads", "head_dim")
    }
    sidecar = json.loads((tmp_path / "compact" / "sparsity.json").read_text())
    assert sidecar["structure"] == "heads" and sidecar["compact"]["kept_heads"] == heads // 2
    assert (
        f"keeps {heads // 2} of its {heads} query heads" in (tmp_path / "compact" / "README.md").read_text()
    )
    ids = torch.randint(4, 120, (2, 24), generator=torch.Generator().manual_seed(1))
    a, b = logits(tmp_path / "compact", ids), logits(tmp_path / "zeros", ids)
    assert (a - b).abs().max() <= 1e-5
    assert not torch.allclose(b, logits(model, ids), atol=1e-3)  # the heads mattered
    assert facts["parameters"]["kept"] == stored_parameters(tmp_path / "compact")
    assert facts["parameters"]["original"] == stored_parameters(model) > facts["parameters"]["kept"]


@pytest.mark.parametrize("model_type", list(HEADS_REFUSED))
def test_models_whose_heads_cannot_be_removed_are_refused(tmp_path: Path, model_type: str) -> None:
    """Fused or latent attention, linear attention, code that derives head_dim: one line naming the
    model type and why, before anything is pruned."""
    model = build_tiny_model(tmp_path / model_type, model_type, max_position_embeddings=64)
    with pytest.raises(
        HeadsError,
        match=rf"model_type '{model_type}': cannot remove attention heads \(.*{HEADS_REFUSED[model_type]}",
    ):
        model_dir, layout, checkpoint = open_layout(model)
        check_expressible(
            model_dir, attention_layout(model_dir, layout, checkpoint), parse_sparsity("heads:0.5")
        )


@pytest.mark.parametrize("derived", [False, True], ids=["head_dim", "derived_head_dim"])
@pytest.mark.parametrize("model_type", HEADS_ROWS)
def test_every_head_count_offered_loads_or_is_refused_at_the_door(
    tmp_path: Path, model_type: str, derived: bool
) -> None:
    """Every ``heads:p`` and ``kv_heads:p`` setting of every family that can lose heads, with ``head_dim``
    in its config and derived from hidden size / heads: the config the compact model would have loads
    (``AutoConfig.from_pretrained``) and builds its model, or the setting is refused before anything runs,
    naming transformers' reason and exactly the settings it accepts; the size search offers only those.
    (transformers 5 refuses a Llama whose hidden size is not a multiple of its head count, head_dim set or
    not: the tiny Llama's 64 with 3 heads.)"""
    from transformers import AutoConfig, AutoModelForCausalLM

    from thanos.errors import OptionError
    from thanos.models.heads import config_refusal
    from thanos.pruning.sparsity import head_settings
    from thanos.runner.size_axes import knobs

    model = build_tiny_model(tmp_path / model_type, model_type, max_position_embeddings=64)
    original = json.loads((model / "config.json").read_text())
    if derived and original.pop("head_dim", None) is not None:  # (a config without one: both cases alike)
        (model / "config.json").write_text(json.dumps(original))
    model_dir, layout, checkpoint = open_layout(model)
    attention = attention_layout(model_dir, layout, checkpoint)
    refused = []
    for kind in ("heads", "kv_heads"):
        offered = head_settings(kind, attention.heads, attention.kv_heads)
        loads = [text for text, heads, groups in offered
                 if config_refusal(model, attention.config({}, heads, groups)) is None]  # fmt: skip
        for text, heads, groups in offered:
            if text not in loads:
                refused.append(text)
                with pytest.raises(OptionError, match=r"refuses \(.*\); the settings it accepts: ") as err:
                    check_expressible(model_dir, attention, parse_sparsity(text))
                accepted = [f"{t} ({h} head{'s' * (h != 1)})" for t, h, _ in offered if t in loads]
                assert str(err.value).endswith(", ".join(accepted) or "none"), str(err.value)
                continue
            check_expressible(model_dir, attention, parse_sparsity(text))
            written = tmp_path / text.replace(":", "")
            written.mkdir()
            (written / "config.json").write_text(json.dumps(attention.config(original, heads, groups)))
            config = AutoConfig.from_pretrained(written)
            with torch.device("meta"):
                AutoModelForCausalLM.from_config(config)
            assert (config.num_attention_heads, config.num_key_value_heads) == (heads, groups)
        if kind == "heads":
            assert knobs(model).settings("heads") == loads
    assert refused == (["heads:0.25", "kv_heads:0.25"] if model_type == "llama" else []), refused


@pytest.mark.slow
def test_prune_model_writes_fewer_heads(tmp_path: Path) -> None:
    """``thanos prune-model --sparsity heads:0.5`` as a user types it (run in this process); an OPT model
    is refused up front."""
    model = make_tiny_model(tmp_path, "qwen3")
    corpus = write_corpus(tmp_path / "calib.jsonl")
    command = [sys.executable, "-m", "thanos", "prune-model", "--model", str(model), "--method", "thanos"]
    command += ["--sparsity", "heads:0.5", "--calibration", str(corpus), "--nsamples", "8", "--seqlen", "32"]
    command += ["--device", "cpu", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out")]
    run = thanos_here(*command[3:], cwd=tmp_path)  # the command line, in this process
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    width = 2 * config["head_dim"]  # the width written: the output projection's columns
    assert f"compact: attention heads 4 -> 2 per block (key/value heads 2 -> 2; {width} = 2 x " in run.stderr
    assert config["num_attention_heads"] == 2 and config["num_key_value_heads"] == 2
    report = json.loads((tmp_path / "out" / "pruning_report.json").read_text())
    assert report["recipe"]["name"] == "thanos_h50"
    assert [entry["layer"] for entry in report["layers"]] == ["self_attn.o_proj"] * 2
    opt = make_tiny_model(tmp_path / "o", "opt")
    refused = thanos_here(*command[3:5], str(opt), *command[6:-1], str(tmp_path / "out2"), cwd=tmp_path)
    assert refused.returncode != 0
    assert "model_type 'opt': cannot remove attention heads" in refused.stderr
    assert not (tmp_path / "out2").exists()


@pytest.mark.slow
def test_llama_cpp_converts_a_model_with_fewer_heads(tmp_path: Path) -> None:
    """llama.cpp's converter reads the model: its head counts are the kept ones."""

    model = build_tiny_model(tmp_path / "tiny-llama", hidden_size=64, num_blocks=2, tokenizer="llama")
    pruned = tmp_path / "pruned"
    prune_with_magnitude(model, pruned, "heads:0.5")
    report = assemble(model, pruned, Recipe("m", "magnitude", "heads:0.5"), tmp_path / "compact")
    kept = report["compact"]["kept_heads"]
    with converted_to_gguf(tmp_path / "compact", tmp_path / "compact.gguf") as (_, reader):
        field = reader.fields["llama.attention.head_count"]
        assert int(field.parts[field.data[0]][0]) == kept
        shapes = {t.name: [int(d) for d in t.shape] for t in reader.tensors}
    assert shapes["blk.0.attn_q.weight"][1] == kept * report["compact"]["head_dim"]
    assert Fraction(kept, report["compact"]["original_heads"]) == Fraction(1, 2)


@pytest.mark.slow
def test_workflow_prunes_heads(tmp_path: Path) -> None:
    """A heads recipe in the workflow (Thanos, the recipe's job): the published model has the kept heads."""
    model = make_tiny_model(tmp_path, "mistral")
    corpus = write_corpus(tmp_path / "calib.jsonl")
    recipes = {"h50": {"method": "thanos", "sparsity": "heads:0.5"}}
    snakemake(tmp_path / "run", workflow_config(corpus, {"tiny": {"path": str(model)}}, recipes))
    out = tmp_path / "run" / "results" / "tiny" / "h50" / "model"
    config = json.loads((out / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (2, 2, 8)
    report = json.loads((out / "pruning_report.json").read_text())
    assert [entry["layer"] for entry in report["layers"]] == ["self_attn.o_proj"] * 2
    assert report["compact"]["kept_heads"] == 2
