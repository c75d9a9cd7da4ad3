"""Llama family adapter: Llama 2, Llama 3/3.1/3.2, TinyLlama, Mistral (GQA, sliding window) and Qwen2
(q/k/v bias).

Pre-norm decoder layers with RMSNorm, rotary position embeddings computed once per model (outside the
layers) and passed to every layer as ``position_embeddings``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from thanos.models.base import ModelAdapter, causal_mask, module_from_state
from thanos.models.checkpoint import Checkpoint

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# model_type -> (transformers modeling module, class name prefix)
FAMILY = {
    "llama": ("transformers.models.llama.modeling_llama", "Llama"),
    "mistral": ("transformers.models.mistral.modeling_mistral", "Mistral"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2"),
}


class LlamaHead(nn.Module):
    """Final RMSNorm and lm_head: last block outputs -> (final hidden states, logits)."""

    def __init__(self, norm: nn.Module, lm_head: torch.Tensor) -> None:
        super().__init__()
        self.norm = norm
        self.lm_head = nn.Parameter(lm_head, requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.norm(hidden)
        return hidden, hidden @ self.lm_head.T


class LlamaAdapter(ModelAdapter):
    model_types = tuple(FAMILY)
    groups = {
        "attn_in": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "attn_out": ("self_attn.o_proj",),
        "mlp_in": ("mlp.gate_proj", "mlp.up_proj"),
        "mlp_out": ("mlp.down_proj",),
    }
    block_template = "model.layers.{i}."

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self._rotary: dict[torch.device, nn.Module] = {}

    def _modeling(self, name: str) -> type[nn.Module]:
        """transformers' ``{Family}{name}`` class, imported on first use (stages that only read tensors,
        such as prune, never import the modeling code: it costs seconds per process)."""
        module_name, prefix = FAMILY[self.config.model_type]
        return getattr(importlib.import_module(module_name), f"{prefix}{name}")

    @property
    def _layer_cls(self) -> type[nn.Module]:
        return self._modeling("DecoderLayer")

    @property
    def _rotary_cls(self) -> type[nn.Module]:
        return self._modeling("RotaryEmbedding")

    @property
    def _norm_cls(self) -> type[nn.Module]:
        return self._modeling("RMSNorm")

    def new_block(self, block: int) -> nn.Module:
        return self._layer_cls(self.config, layer_idx=block)

    def load_embedding(self, checkpoint: Checkpoint) -> nn.Module:
        weight = checkpoint.tensor("model.embed_tokens.weight")
        return nn.Embedding.from_pretrained(weight, freeze=True)

    def load_head(self, checkpoint: Checkpoint) -> nn.Module:
        norm = module_from_state(
            self._norm_cls, checkpoint.prefixed("model.norm."), self.hidden_size, eps=self.config.rms_norm_eps
        )
        name = "lm_head.weight" if "lm_head.weight" in checkpoint else "model.embed_tokens.weight"
        return LlamaHead(norm, checkpoint.tensor(name)).eval()

    def _sliding(self, block: int) -> bool:
        layer_types = getattr(self.config, "layer_types", None)
        if layer_types:
            return layer_types[block] == "sliding_attention"
        return getattr(self.config, "sliding_window", None) is not None

    def block_kwargs(self, block: int, hidden: torch.Tensor) -> dict[str, Any]:
        if hidden.device not in self._rotary:
            self._rotary[hidden.device] = self._rotary_cls(config=self.config).to(hidden.device)
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        return {
            "attention_mask": causal_mask(self.config, hidden, self._sliding(block)),
            "position_ids": positions,
            "position_embeddings": self._rotary[hidden.device](hidden, positions),
        }
