"""A Llama-family model (Llama, Mistral's sliding window, Qwen2's q/k/v biases) and an OPT model written out
in torch from a checkpoint's tensors: the oracle of the generic adapter's bit-for-bit test
(tests/test_matrix.py). They compute what the hand-written adapters of earlier versions computed, in
transformers' own order of operations (the fp32 results are then equal bit for bit): embeddings, every
block, the head, and the input of every group of linear layers (what capture sees).

``forward(model_dir, ids)`` -> (logits, every block's input, every block's {group: its input}).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

Oracle = tuple[torch.Tensor, list[torch.Tensor], list[dict[str, torch.Tensor]]]


def _tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    return {
        name: t for shard in sorted(model_dir.glob("*.safetensors")) for name, t in load_file(shard).items()
    }


def _linear(w: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None, scale: float
) -> torch.Tensor:
    """Causal attention (a sliding window of ``window`` tokens) over (batch, heads, seq, head_dim), as
    transformers' sdpa path runs it: no mask and grouped-query heads in sdpa, or a boolean mask and the
    key/value heads repeated."""
    groups, seq = q.shape[1] // k.shape[1], q.shape[2]
    if window is None:
        out = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=True, enable_gqa=groups > 1)
    else:
        i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
        mask = ((j <= i) & (j > i - window)).expand(q.shape[0], 1, seq, seq)
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).reshape(q.shape[0], seq, -1)


def _block(w: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors of one block, named within it."""
    return {k.removeprefix(prefix): t for k, t in w.items() if k.startswith(prefix)}


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama(config: dict, w: dict[str, torch.Tensor], ids: torch.Tensor) -> Oracle:
    """Pre-norm RMSNorm blocks, rotary embeddings, grouped-query attention, SwiGLU MLP."""
    heads, eps = config["num_attention_heads"], config["rms_norm_eps"]
    dim = config.get("head_dim") or config["hidden_size"] // heads
    inv_freq = 1.0 / (
        config["rope_parameters"]["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    )
    freqs = torch.arange(ids.shape[1])[None, :, None].float() * inv_freq
    cos, sin = torch.cat((freqs, freqs), -1).cos()[:, None], torch.cat((freqs, freqs), -1).sin()[:, None]
    window = config.get("sliding_window")
    hidden = F.embedding(ids, w["model.embed_tokens.weight"])
    inputs, captured = [], []
    for block in range(config["num_hidden_layers"]):
        b = _block(w, f"model.layers.{block}.")
        inputs.append(hidden)
        x = _rms_norm(hidden, b["input_layernorm.weight"], eps)
        q, k, v = (_linear(b, f"self_attn.{n}_proj", x) for n in "qkv")
        q, k, v = (t.view(*x.shape[:2], -1, dim).transpose(1, 2) for t in (q, k, v))
        q, k = (q * cos) + (_rotate_half(q) * sin), (k * cos) + (_rotate_half(k) * sin)
        attn = _attention(q, k, v, window, dim**-0.5)
        hidden = hidden + _linear(b, "self_attn.o_proj", attn)
        y = _rms_norm(hidden, b["post_attention_layernorm.weight"], eps)
        act = F.silu(_linear(b, "mlp.gate_proj", y)) * _linear(b, "mlp.up_proj", y)
        hidden = hidden + _linear(b, "mlp.down_proj", act)
        captured.append(
            {"self_attn.q_proj": x, "self_attn.o_proj": attn, "mlp.gate_proj": y, "mlp.down_proj": act}
        )
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return _rms_norm(hidden, w["model.norm.weight"], eps) @ head.T, inputs, captured


def opt(config: dict, w: dict[str, torch.Tensor], ids: torch.Tensor) -> Oracle:
    """Learned positions (offset 2), pre-norm LayerNorm blocks, scaled queries, ReLU MLP, tied lm_head."""
    hidden_size, heads = config["hidden_size"], config["num_attention_heads"]
    dim, p = hidden_size // heads, "model.decoder."
    positions = F.embedding(torch.arange(ids.shape[1])[None] + 2, w[f"{p}embed_positions.weight"])
    hidden = F.embedding(ids, w[f"{p}embed_tokens.weight"]) + positions
    norm = lambda x, b, name: F.layer_norm(x, (hidden_size,), b[f"{name}.weight"], b[f"{name}.bias"])  # noqa: E731
    inputs, captured = [], []
    for block in range(config["num_hidden_layers"]):
        b = _block(w, f"{p}layers.{block}.")
        inputs.append(hidden)
        x = norm(hidden, b, "self_attn_layer_norm")
        q = _linear(b, "self_attn.q_proj", x) * dim**-0.5
        k, v = _linear(b, "self_attn.k_proj", x), _linear(b, "self_attn.v_proj", x)
        q, k, v = (t.view(*x.shape[:2], heads, dim).transpose(1, 2) for t in (q, k, v))
        attn = _attention(q, k, v, None, 1.0)
        hidden = hidden + _linear(b, "self_attn.out_proj", attn)
        flat = hidden.reshape(-1, hidden_size)  # the MLP runs on (tokens, hidden)
        y = norm(flat, b, "final_layer_norm")
        act = F.relu(_linear(b, "fc1", y))
        hidden = (flat + _linear(b, "fc2", act)).view(hidden.shape)
        captured.append({"self_attn.q_proj": x, "self_attn.out_proj": attn, "fc1": y, "fc2": act})
    final = norm(hidden, w, f"{p}final_layer_norm")
    return final @ w.get("lm_head.weight", w[f"{p}embed_tokens.weight"]).T, inputs, captured


def forward(model_dir: Path, ids: torch.Tensor) -> Oracle:
    config = json.loads((model_dir / "config.json").read_text())
    family = opt if config["model_type"] == "opt" else llama
    with torch.inference_mode():
        return family(config, _tensors(model_dir), ids)
