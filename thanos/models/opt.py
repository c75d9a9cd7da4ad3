"""OPT adapter: learned positional embeddings (offset 2), biases everywhere, ReLU MLP (fc1/fc2), LayerNorm,
lm_head tied to the token embeddings, optional project_in/project_out (e.g. OPT-350m)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from thanos.models.base import ModelAdapter, causal_mask, module_from_state
from thanos.models.checkpoint import Checkpoint

PREFIX = "model.decoder."


def _modeling_opt() -> Any:
    """transformers' OPT modeling module, imported on first use (seconds; prune never needs it)."""
    from transformers.models.opt import modeling_opt

    return modeling_opt


class OPTEmbedding(nn.Module):
    """Token embeddings (+ project_in) plus learned positions: token ids -> block 0 inputs."""

    def __init__(self, tokens: nn.Embedding, positions: nn.Module, project_in: nn.Module | None) -> None:
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.project_in = project_in

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.tokens(input_ids)
        if self.project_in is not None:
            embeds = self.project_in(embeds)
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        return embeds + self.positions(None, 0, position_ids=position_ids).to(embeds.dtype)


class OPTHead(nn.Module):
    """Final LayerNorm (if any), project_out (if any) and the lm_head."""

    def __init__(self, norm: nn.Module | None, project_out: nn.Module | None, lm_head: torch.Tensor) -> None:
        super().__init__()
        self.norm = norm
        self.project_out = project_out
        self.lm_head = nn.Parameter(lm_head, requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.norm is not None:
            hidden = self.norm(hidden)
        if self.project_out is not None:
            hidden = self.project_out(hidden)
        return hidden, hidden @ self.lm_head.T


def _linear(checkpoint: Checkpoint, prefix: str, shape: tuple[int, int]) -> nn.Module:
    return module_from_state(nn.Linear, checkpoint.prefixed(prefix), shape[1], shape[0], bias=False)


class OPTAdapter(ModelAdapter):
    model_types = ("opt",)
    groups = {
        "attn_in": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "attn_out": ("self_attn.out_proj",),
        "mlp_in": ("fc1",),
        "mlp_out": ("fc2",),
    }
    block_template = PREFIX + "layers.{i}."

    def new_block(self, block: int) -> nn.Module:
        return _modeling_opt().OPTDecoderLayer(self.config, layer_idx=block)

    def _projection(self, checkpoint: Checkpoint, name: str, out_dim: int, in_dim: int) -> nn.Module | None:
        if self.config.word_embed_proj_dim == self.config.hidden_size:
            return None
        return _linear(checkpoint, f"{PREFIX}{name}.", (out_dim, in_dim))

    def load_embedding(self, checkpoint: Checkpoint) -> nn.Module:
        tokens = nn.Embedding.from_pretrained(checkpoint.tensor(f"{PREFIX}embed_tokens.weight"), freeze=True)
        positions = module_from_state(
            _modeling_opt().OPTLearnedPositionalEmbedding,
            checkpoint.prefixed(f"{PREFIX}embed_positions."),
            self.config.max_position_embeddings,
            self.hidden_size,
        )
        proj_dim = self.config.word_embed_proj_dim
        project_in = self._projection(checkpoint, "project_in", self.hidden_size, proj_dim)
        return OPTEmbedding(tokens, positions, project_in).eval()

    def load_head(self, checkpoint: Checkpoint) -> nn.Module:
        norm = None
        if self.config.do_layer_norm_before and not getattr(self.config, "_remove_final_layer_norm", False):
            norm = module_from_state(
                nn.LayerNorm,
                checkpoint.prefixed(f"{PREFIX}final_layer_norm."),
                self.hidden_size,
                elementwise_affine=self.config.layer_norm_elementwise_affine,
            )
        project_out = self._projection(
            checkpoint, "project_out", self.config.word_embed_proj_dim, self.hidden_size
        )
        name = "lm_head.weight" if "lm_head.weight" in checkpoint else f"{PREFIX}embed_tokens.weight"
        return OPTHead(norm, project_out, checkpoint.tensor(name)).eval()

    def block_kwargs(self, block: int, hidden: torch.Tensor) -> dict[str, Any]:
        return {
            "attention_mask": causal_mask(self.config, hidden, sliding=False),
            "position_ids": torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0),
        }
