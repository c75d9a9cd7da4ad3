"""The tested matrix: the model types the test suite prunes end to end (``tests/test_matrix.py``), and the
tiny configs they are built from (transformers' own config classes, a few hundred kilobytes of weights).

It is a sample, not the list of what works: any decoder-only causal LM of the installed transformers goes
through the generic adapter (``thanos.models.generic``) without a line written for it. The README's table
of supported models and ``thanos model-info`` read this table.
"""

from __future__ import annotations

from typing import Any

SLIDING_WINDOW = 16  # shorter than the test sequences, so that a sliding window matters

# model_type -> what the test of that type shows, and the config options that differ from COMMON
MATRIX: dict[str, dict[str, Any]] = {
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
    "opt": {
        "family": "OPT (learned positions, ReLU MLP)",
        "config": {"ffn_dim": 128, "word_embed_proj_dim": 64},
    },
    "gpt_neox": {"family": "Pythia, GPT-NeoX (fused query_key_value)", "config": {"rotary_pct": 0.25}},
}

# every tiny config: 2 blocks, hidden 64, 4 heads of 16 (2 KV heads), a 128-wide MLP
COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "pad_token_id": 3,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def tiny_config(model_type: str, vocab_size: int, **sizes: Any) -> Any:
    """A tiny ``PretrainedConfig`` of ``model_type``: ``COMMON`` (``sizes`` override it), the type's own
    options from ``MATRIX``, sliding windows of ``SLIDING_WINDOW`` tokens on every other layer where the
    type has them. A type outside the matrix gets ``COMMON`` alone (config classes keep unknown names)."""
    from transformers import AutoConfig

    options = COMMON | MATRIX.get(model_type, {}).get("config", {}) | sizes | {"vocab_size": vocab_size}
    try:
        config = AutoConfig.for_model(model_type, **options)
    except ValueError as err:
        raise ValueError(f"unknown model_type {model_type!r} for a tiny model: {err}") from None
    if getattr(config, "sliding_window", None) is not None:
        config.sliding_window = SLIDING_WINDOW
    if getattr(config, "layer_types", None) and getattr(config, "sliding_window", None):
        config.layer_types = [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(config.num_hidden_layers)
        ]
    return config
