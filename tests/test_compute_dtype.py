"""The compute-dtype policy: by default a bf16 checkpoint's blocks run in float32 on a CPU without bf16
instructions (AVX2; ``ONEDNN_MAX_CPU_ISA=AVX2`` makes any x86 CPU one) and in bf16 where the CPU or GPU
multiplies bf16 natively; the stores keep bf16; an explicit dtype is honoured; the evaluations follow the
same policy."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from conftest import write_corpus
from helpers.stages import NSAMPLES, calibrated, cli
from transformers import AutoModelForCausalLM

from thanos.data.storage import Activations, Hessians, read_tokens
from thanos.evaluation.loading import load_model
from thanos.models import get_adapter, load_config
from thanos.runner.api import prune_model
from thanos.stages import cpu_dtypes
from thanos.stages.common import Compute, compute_dtype

CPU = torch.device("cpu")


@pytest.fixture
def avx2(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's CPU as one without bf16 instructions (oneDNN's ISA limit, which the policy reads)."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")


def test_policy(avx2: None) -> None:
    assert not cpu_dtypes.faster_than_float32(torch.bfloat16)
    assert compute_dtype("auto", CPU, torch.bfloat16) == torch.float32
    assert compute_dtype("auto", CPU, torch.float16) == torch.float32
    assert compute_dtype("auto", CPU, torch.bfloat16, native=True) == torch.bfloat16
    assert compute_dtype("auto", torch.device("cuda"), torch.bfloat16) == torch.bfloat16
    assert compute_dtype("auto", torch.device("cuda"), torch.float32) == torch.float32
    assert compute_dtype("bfloat16", CPU, torch.float32) == torch.bfloat16
    assert compute_dtype("float16", CPU, torch.bfloat16) == torch.float16
    with pytest.raises(ValueError, match="compute dtype 'fp8'.*auto, float32, bfloat16, float16"):
        compute_dtype("fp8", CPU, torch.bfloat16)
    assert not Compute.of("cpu", "auto", torch.float32).converts  # an fp32 model runs exactly as loaded
    assert Compute.of("cpu", "auto", torch.bfloat16).converts


def test_the_cpus_answer_is_measured_once_and_read_back(tmp_path, monkeypatch) -> None:
    """The first process measures bf16 against float32 and records the answer; every later one reads it
    (even one that would measure otherwise), so that a run's dtype does not change between its jobs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cpu_dtypes._recorded.cache_clear()
    answer = cpu_dtypes._recorded(torch.bfloat16)
    (file,) = (tmp_path / "thanos-prune").glob("cpu-*.json")
    record = json.loads(file.read_text())
    assert record["faster"] is answer and record["faster"] == (record["speedup"] >= cpu_dtypes.MARGIN)
    file.write_text(json.dumps(record | {"faster": not answer}))  # another process's answer, recorded first
    cpu_dtypes._recorded.cache_clear()
    assert cpu_dtypes._recorded(torch.bfloat16) is (not answer)
    # a cache that cannot be written: this process measures and answers for itself
    monkeypatch.setenv("XDG_CACHE_HOME", str(file))
    cpu_dtypes._recorded.cache_clear()
    assert isinstance(cpu_dtypes._recorded(torch.bfloat16), bool)
    assert json.loads(file.read_text())["faster"] is (not answer)  # nothing written over it
    cpu_dtypes._recorded.cache_clear()


def reference_hidden(model: Path, tokens: Path, dtype: torch.dtype) -> tuple[torch.Tensor, dict]:
    """Block 0's outputs of the whole transformers model run in ``dtype``, and its layers' inputs."""
    full = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).eval()
    adapter = get_adapter(load_config(model))
    prefix = adapter.block_prefix(0)
    inputs: dict[str, torch.Tensor] = {}
    hooks = [
        full.get_submodule(prefix + members[0]).register_forward_pre_hook(
            lambda _m, args, g=group: inputs.__setitem__(g, args[0].reshape(-1, args[0].shape[-1]))
        )
        for group, members in adapter.groups.items()
    ]
    with torch.inference_mode():
        out = full(torch.from_numpy(read_tokens(tokens)[0]).long(), output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    return out.hidden_states[1], inputs


def test_bf16_model_computes_in_float32_on_an_avx2_cpu_and_stores_bf16(tmp_path: Path, avx2: None) -> None:
    model, tokens = calibrated(tmp_path, "llama", dtype="bfloat16")
    inputs0 = tmp_path / "inputs_0.zarr"
    assert cli("embed", "--model", model, "--tokens", tokens, "--out", inputs0, "--device", "cpu") == 0
    fp32_ref, fp32_inputs = reference_hidden(model, tokens, torch.float32)
    bf16_ref, _ = reference_hidden(model, tokens, torch.bfloat16)
    assert not torch.equal(fp32_ref.bfloat16(), bf16_ref)  # the two dtypes give different activations

    for spec, reference in (
        ("auto", fp32_ref.bfloat16()),
        ("float32", fp32_ref.bfloat16()),
        ("bfloat16", bf16_ref),
    ):
        out, hess = tmp_path / f"inputs_1-{spec}.zarr", tmp_path / f"hessians_0-{spec}.zarr"
        assert cli("propagate", "--model", model, "--block", 0, "--inputs", inputs0, "--out", out,
                   "--device", "cpu", "--compute-dtype", spec) == 0  # fmt: skip
        assert cli("capture", "--model", model, "--block", 0, "--inputs", inputs0, "--out", hess,
                   "--device", "cpu", "--compute-dtype", spec) == 0  # fmt: skip
        store = Activations(out)
        computed = "bfloat16" if spec == "bfloat16" else "float32"
        assert store.attrs["dtype"] == "bfloat16" and store.attrs["compute_dtype"] == computed
        assert Hessians(hess).attrs["compute_dtype"] == computed
        hidden = store.read(0, NSAMPLES)
        assert hidden.dtype == torch.bfloat16
        torch.testing.assert_close(hidden, reference, rtol=0, atol=0)
        if spec != "bfloat16":  # the Hessians of the float32 layer inputs
            for group, X in fp32_inputs.items():
                H = (2 / NSAMPLES) * X.double().T @ X.double()
                torch.testing.assert_close(Hessians(hess).get(group).double(), H, rtol=1e-5, atol=1e-6)


def test_evaluation_and_prune_model_follow_the_policy(tmp_path: Path, avx2: None) -> None:
    model, _ = calibrated(tmp_path, "llama", dtype="bfloat16")
    assert load_model(str(model), device="cpu").dtype == "float32"
    assert load_model(str(model), device="cpu", dtype="bfloat16").dtype == "bfloat16"

    corpus = write_corpus(tmp_path / "calib.jsonl")
    common = {"calibration": corpus, "nsamples": 4, "seqlen": 16, "workdir": tmp_path / "wd", "device": "cpu"}
    header = io.StringIO()
    prune_model(model, "sparsegpt", 0.5, out=tmp_path / "auto", stream=header, **common)
    assert "computes in float32 (checkpoint bfloat16)" in header.getvalue()
    header = io.StringIO()
    prune_model(
        model, "sparsegpt", 0.5, out=tmp_path / "bf16", compute_dtype="bfloat16", stream=header, **common
    )
    assert "computes in bfloat16 |" in header.getvalue()

    # another dtype is another computation: the stores and the pruned weights were computed again
    auto = (tmp_path / "auto" / "model.safetensors").read_bytes()
    assert auto != (tmp_path / "bf16" / "model.safetensors").read_bytes()
