"""A pruned vocabulary written into a model's files: pure functions of their JSON content and of tensors.

The kept ids (``thanos.models.vocabulary.choose_tokens``) are renumbered 0..N-1 in their old order
(``renumbering``). ``tokenizer.json``: the model's vocab, the merges whose parts and result are all kept
(a merge whose result is removed goes, or the tokenizer would produce it), the added tokens' ids, the
post-processor's special-token ids and the padding id. ``config.json`` and ``generation_config.json``:
``vocab_size`` and every ``*_token_id`` (one id or a list). ``tokenizer_config.json``: the keys of
``added_tokens_decoder``. The input embedding and the output head keep their kept rows (``kept_rows``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from thanos.files.fingerprint import file_key
from thanos.models.vocabulary import BPEVocabulary, merge_pair, minimum_kept, read_bpe


def renumbering(kept: Sequence[int]) -> dict[int, int]:
    """Old id -> new id: the kept ids numbered 0..N-1 in increasing old id."""
    return {old: new for new, old in enumerate(sorted(kept))}


def prune_tokenizer(tokenizer: Mapping[str, Any], kept: Sequence[int]) -> dict[str, Any]:
    """A ``tokenizer.json``'s content with only the ``kept`` ids (renumbered); the input is not changed."""
    new_id = renumbering(kept)
    # copied but for the vocabulary and the merges (built anew below, never changed: 0.7 s of deep copy)
    rebuilt = ("vocab", "merges")
    data = {key: {} if key == "model" else copy.deepcopy(value) for key, value in tokenizer.items()}
    model = data["model"]
    for key, value in tokenizer["model"].items():
        model[key] = value if key in rebuilt else copy.deepcopy(value)
    vocab = {token: new_id[i] for token, i in model["vocab"].items() if i in new_id}
    model["vocab"] = dict(sorted(vocab.items(), key=lambda item: item[1]))
    prefix = model.get("continuing_subword_prefix") or ""
    merges = []
    for merge in model.get("merges") or []:
        left, right = merge_pair(merge)
        result = left + (right[len(prefix) :] if prefix and right.startswith(prefix) else right)
        if left in vocab and right in vocab and result in vocab:
            merges.append(merge)
    model["merges"] = merges
    for entry in data.get("added_tokens") or []:
        entry["id"] = new_id[entry["id"]]
    if data.get("post_processor"):
        data["post_processor"] = _post_processor(data["post_processor"], new_id)
    if isinstance(data.get("padding"), dict) and "pad_id" in data["padding"]:
        data["padding"]["pad_id"] = new_id[data["padding"]["pad_id"]]
    return data


def _post_processor(node: dict[str, Any], new_id: Mapping[int, int]) -> dict[str, Any]:
    """A post-processor with its special-token ids renumbered (TemplateProcessing, Bert/Roberta's ``cls``
    and ``sep``, each processor of a Sequence); ids of removed tokens are refused."""

    def renumber(i: int) -> int:
        if i not in new_id:
            raise ValueError(f"vocab: the tokenizer's post-processor adds token {i}, which is not kept")
        return new_id[i]

    kind = node.get("type")
    if kind == "Sequence":
        node["processors"] = [_post_processor(child, new_id) for child in node.get("processors", [])]
    elif kind == "TemplateProcessing":
        for special in (node.get("special_tokens") or {}).values():
            special["ids"] = [renumber(i) for i in special["ids"]]
    else:
        for key in ("cls", "sep"):
            if isinstance(node.get(key), list) and len(node[key]) == 2:
                node[key] = [node[key][0], renumber(node[key][1])]
    return node


def token_ids(config: Mapping[str, Any]) -> list[int]:
    """Every id a config's ``*_token_id`` fields name (one id or a list of ids)."""
    found: list[int] = []
    for key, value in config.items():
        if key.endswith("_token_id"):
            values = value if isinstance(value, list) else [value]
            found.extend(v for v in values if isinstance(v, int) and not isinstance(v, bool))
    return found


def prune_config(config: Mapping[str, Any], kept: Sequence[int], vocab_size: bool = True) -> dict[str, Any]:
    """A ``config.json`` (``generation_config.json``: ``vocab_size=False``) with ``vocab_size`` the kept
    count and every ``*_token_id`` renumbered."""
    new_id = renumbering(kept)
    data = dict(config)
    for key, value in config.items():
        if key.endswith("_token_id") and value is not None:
            values = value if isinstance(value, list) else [value]
            missing = [v for v in values if v not in new_id]
            if missing:
                raise ValueError(f"vocab: {key} names token {missing[0]}, which is not kept")
            renumbered = [new_id[v] for v in values]
            data[key] = renumbered if isinstance(value, list) else renumbered[0]
    if vocab_size:
        data["vocab_size"] = len(new_id)
    return data


def prune_tokenizer_config(config: Mapping[str, Any], kept: Sequence[int]) -> dict[str, Any]:
    """A ``tokenizer_config.json`` with the keys of ``added_tokens_decoder`` (ids as text) renumbered."""
    new_id = renumbering(kept)
    data = dict(config)
    if isinstance(config.get("added_tokens_decoder"), Mapping):
        data["added_tokens_decoder"] = {
            str(new_id[int(key)]): value
            for key, value in config["added_tokens_decoder"].items()
            if int(key) in new_id
        }
    return data


def kept_rows(weight: Any, kept: Sequence[int]) -> Any:
    """An embedding or output head (a tensor of one row per token, or a head's bias) with only the kept
    rows, in increasing old id: row i of the result is the old row ``sorted(kept)[i]``."""
    import torch

    index = torch.tensor(sorted(kept), dtype=torch.long, device=weight.device)
    return weight.index_select(0, index).clone()


# llama.cpp's ``convert_hf_to_gguf.py`` names a byte-level BPE pre-tokenizer by the sha256 of the ids this
# text encodes to (``get_vocab_base_pre``'s ``chktxt``), so a vocabulary with other ids is not recognized
LLAMA_CPP_CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis "
    "concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, "
    "'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"
)


def llama_cpp_hash(model_dir: str | Path) -> str:
    """The hash llama.cpp's converter computes for the tokenizer of ``model_dir`` (``chkhsh``): the sha256 of
    the ids of ``LLAMA_CPP_CHECK_TEXT`` as ``AutoTokenizer`` encodes it, written as a Python list."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model_dir).encode(LLAMA_CPP_CHECK_TEXT)
    return hashlib.sha256(str(ids).encode()).hexdigest()


def model_vocabulary(model_dir: str | Path) -> BPEVocabulary:
    """The BPE vocabulary of the model at ``model_dir``: its ``tokenizer.json``, with the special ids of its
    config and generation config kept; refused in one line where it cannot lose tokens (``read_bpe``)."""
    model_dir = Path(model_dir)
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise ValueError(f"vocab: {model_dir} has no tokenizer.json, so no tokens can be chosen to remove")
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    generation = model_dir / "generation_config.json"
    special = token_ids(config)
    if generation.is_file():
        special += token_ids(json.loads(generation.read_text(encoding="utf-8")))
    return read_bpe(json.loads(path.read_text(encoding="utf-8")), special)


# the files a model's vocabulary is read from (``model_vocabulary``)
VOCABULARY_FILES = ("tokenizer.json", "config.json", "generation_config.json")


def vocabulary_sizes(model_dir: str | Path) -> tuple[int, int]:
    """(the size of the model's BPE vocabulary, the fewest tokens a pruned one keeps: ``minimum_kept``),
    read once while its files (``VOCABULARY_FILES``) stay the same: a size search asks it at its door and of
    every vocabulary point (SmolLM2-135M: 0.3 s a read); refused as ``model_vocabulary`` refuses."""
    model_dir = Path(model_dir)
    return _sizes(str(model_dir), tuple(file_key(model_dir / name) for name in VOCABULARY_FILES))


@lru_cache(maxsize=8)
def _sizes(model_dir: str, stamps: tuple[Any, ...]) -> tuple[int, int]:
    vocab = model_vocabulary(model_dir)
    return vocab.size, minimum_kept(vocab)


def check_vocab_pattern(model_dir: str | Path, pattern: Any) -> int:
    """The tokens ``pattern`` (``vocab:N``, ``vocab:p``) keeps of the model at ``model_dir``, refused before
    anything runs where the tokenizer cannot lose tokens, the count removes none, or it keeps fewer than the
    special and byte tokens every vocabulary keeps."""
    return _kept(*vocabulary_sizes(model_dir), pattern)


def kept_count(vocab: BPEVocabulary, pattern: Any) -> int:
    """The tokens ``pattern`` keeps of ``vocab``; refused where it removes none or keeps fewer than the
    special and byte tokens every vocabulary keeps."""
    return _kept(vocab.size, minimum_kept(vocab), pattern)


def _kept(size: int, fewest: int, pattern: Any) -> int:
    from thanos.pruning.sparsity import vocab_count

    keep = vocab_count(pattern, size)
    if keep < fewest:
        raise ValueError(
            f"{pattern} keeps {keep} tokens, fewer than the {fewest} special and byte tokens every "
            f"vocabulary keeps; keep at least {fewest}"
        )
    return keep
