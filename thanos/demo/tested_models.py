"""The tested models: the model types the test suite prunes end to end (``tests/test_matrix.py``), and the
tiny configs they are built from (transformers' own config classes, a few hundred kilobytes of weights).

It is a sample, not the list of what works: any decoder-only causal LM of the installed transformers goes
through the generic adapter (``thanos.models.generic``) without a line written for it. The table of
supported models (docs/supported-models.md) and ``thanos model-info`` (its ``tested``) read this table.
"""

from __future__ import annotations

from typing import Any

SLIDING_WINDOW = 16  # shorter than the test sequences, so that a sliding window matters

# DeepSeek-style mixture of experts (GLM-4-MoE shares the config): 4 routed experts, top 2, one group, and
# a dense first block, so that the tiny model has blocks of both kinds
DENSE_FIRST_MOE = {
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "moe_intermediate_size": 48,
    "n_group": 1,
    "topk_group": 1,
}
# model_type -> the models of that type (docs/supported-models.md), and options its tiny config needs beyond
# the sizes every tiny model gets (thanos.demo.tiny)
TESTED_MODELS: dict[str, dict[str, Any]] = {
    "llama": {"family": "Llama 2/3.x, TinyLlama, Vicuna"},
    "mistral": {"family": "Mistral, Ministral (sliding window)"},
    "qwen2": {"family": "Qwen2, Qwen2.5 (q/k/v bias, tied embeddings)"},
    "qwen3": {"family": "Qwen3 (q/k norms)"},
    "gemma2": {"family": "Gemma 2 (soft-capping, alternating sliding window)"},
    "gemma3_text": {"family": "Gemma 3 text (scaled embeddings, local/global rotary)"},
    "phi3": {"family": "Phi-3, Phi-4 (fused qkv_proj, gate_up_proj)"},
    "olmo2": {"family": "OLMo 2 (post-norms)"},
    "granite": {"family": "Granite 3 (scaled residuals and logits)"},
    "smollm3": {"family": "SmolLM3 (layers without rotary)"},
    "cohere2": {"family": "Command R7B, Cohere 2 (parallel attention and MLP)"},
    "opt": {"family": "OPT (learned positions, ReLU MLP)"},
    "gpt_neox": {"family": "Pythia, GPT-NeoX (fused query_key_value)", "config": {"rotary_pct": 0.25}},
    "mixtral": {
        "family": "Mixtral (mixture of experts: experts pruned one by one, router dense)",
        "config": {"num_local_experts": 4, "num_experts_per_tok": 2},
    },
    "qwen3_moe": {
        "family": "Qwen3-MoE (mixture of experts, q/k norms)",
        "config": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 96},
    },
    "gpt_oss": {
        "family": "gpt-oss (experts stored fused, (in, out) matrices; attention sinks, alternating windows)",
        "config": {"num_local_experts": 4, "num_experts_per_tok": 2},
    },
    "granitemoe": {
        "family": "Granite 3 MoE (experts stored fused in input_linear/output_linear)",
        "config": {"num_local_experts": 4, "num_experts_per_tok": 2},
    },
    "glm4_moe": {
        "family": "GLM-4.5/4.6 (dense first block, then mixture of experts with a shared expert)",
        "config": DENSE_FIRST_MOE,
    },
    "deepseek_v3": {
        "family": "DeepSeek-V3/R1, Kimi K2 (multi-head latent attention, dense first block, then MoE)",
        "config": DENSE_FIRST_MOE
        | {
            "q_lora_rank": None,
            "kv_lora_rank": 16,
            "qk_rope_head_dim": 16,
            "qk_nope_head_dim": 16,
            "v_head_dim": 16,
            "num_key_value_heads": 4,  # latent attention: one value head per query head
        },
    },
    "qwen3_next": {
        "family": "Qwen3-Next (gated linear attention with a convolution, 3 of 4 blocks; MoE)",
        "config": {
            "num_hidden_layers": 4,  # its 4th block is the first with full attention
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 48,
            "shared_expert_intermediate_size": 48,
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
        },
    },
}


def tiny_config(model_type: str, **options: Any) -> Any:
    """A tiny ``PretrainedConfig`` of ``model_type`` with ``options`` (the sizes, vocabulary and special
    token ids ``thanos.demo.tiny`` gives every tiny model) and the type's own options from ``TESTED_MODELS``,
    which take precedence;
    sliding windows of ``SLIDING_WINDOW`` tokens on every other layer where the type has them. A type
    outside the table gets ``options`` alone (config classes keep names they do not use)."""
    from transformers import AutoConfig

    options = options | TESTED_MODELS.get(model_type, {}).get("config", {})  # the type's own options win
    try:
        try:
            config = AutoConfig.for_model(model_type, **options)
        except AttributeError:  # a config whose head_dim is derived (a property without setter)
            config = AutoConfig.for_model(model_type, **{k: v for k, v in options.items() if k != "head_dim"})
    except ValueError as err:
        raise ValueError(f"unknown model_type {model_type!r} for a tiny model: {err}") from None
    if getattr(config, "sliding_window", None) is not None:
        config.sliding_window = SLIDING_WINDOW
    if getattr(config, "layer_types", None) and getattr(config, "sliding_window", None):
        config.layer_types = [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(config.num_hidden_layers)
        ]
    return config


BEGIN, END = "<!-- supported-models:begin -->", "<!-- supported-models:end -->"


def readme_table() -> str:
    """The table of docs/supported-models.md (between ``BEGIN`` and ``END``), from ``TESTED_MODELS``."""
    rows = ["| `model_type` | models |", "| --- | --- |"]
    rows += [f"| `{model_type}` | {row['family']} |" for model_type, row in TESTED_MODELS.items()]
    return "\n".join(
        [
            BEGIN,
            "<!-- generated by `python docs/supported_models.py` from thanos/demo/tested_models.py -->",
            *rows,
            END,
        ]
    )
