"""Tokens removed from the vocabulary (``vocab:N``, ``vocab:p``): the model directory written without them.

**Which** (``thanos.models.vocabulary``): the special tokens and the byte alphabet, then the tokens a text
uses at least three times (the calibration text by default), then, up to the budget, the earliest merges (the
lowest ids; in a multilingual vocabulary those written in the text's scripts first), every kept token with
its merge parts. The dense model is not run: it is only sliced.

**Written without them** (``thanos.models.vocabulary_files``): the kept ids renumbered 0..N-1 in their old
order; ``tokenizer.json``, ``tokenizer_config.json``, ``config.json`` and ``generation_config.json``
rewritten; the input embedding and the output head (tied or not) keep their kept rows. On a text of kept
tokens the model gives the dense model's logits restricted to the kept tokens. A SentencePiece
``tokenizer.model`` and the slow tokenizer's ``vocab.json`` / ``merges.txt`` would describe the old
vocabulary and are not copied: ``tokenizer.json`` is the tokenizer.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from thanos.files import digests
from thanos.files.atomic import atomic_path, write_json
from thanos.models.vocabulary import choose_tokens
from thanos.models.vocabulary_files import (
    kept_count,
    kept_rows,
    llama_cpp_hash,
    model_vocabulary,
    prune_config,
    prune_tokenizer,
    prune_tokenizer_config,
    renumbering,
)
from thanos.pruning.sparsity import Sparsity

log = logging.getLogger(__name__)

# Files a pruned vocabulary rewrites, or leaves out because they describe the old one
REWRITTEN = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
STALE = ("tokenizer.model", "vocab.json", "merges.txt", "model.safetensors.index.json", "README.md")


def slice_vocabulary(model: torch.nn.Module, kept: Sequence[int]) -> None:
    """Keep only the ``kept`` rows (renumbered in increasing old id) of ``model``'s input embedding and output
    head (its bias too; a tied head stays tied), in place; ``config.vocab_size`` follows."""
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embedding.weight
    embedding.weight = torch.nn.Parameter(kept_rows(embedding.weight.data, kept))
    embedding.num_embeddings = len(kept)
    if getattr(embedding, "padding_idx", None) is not None:
        embedding.padding_idx = renumbering(kept).get(embedding.padding_idx)
    if head is not None:
        head.weight = embedding.weight if tied else torch.nn.Parameter(kept_rows(head.weight.data, kept))
        if getattr(head, "bias", None) is not None:
            head.bias = torch.nn.Parameter(kept_rows(head.bias.data, kept))
        head.out_features = len(kept)
    model.config.vocab_size = len(kept)


def prune_vocabulary(
    model_dir: str | Path,
    out: str | Path,
    pattern: Sparsity,
    documents: Sequence[str],
    text_name: str,
    combined: dict[str, Any] | None = None,
    alone: dict[str, Any] | None = None,
    describe: bool = True,
) -> dict[str, Any]:
    """Write ``model_dir`` to ``out`` (atomically) with the vocabulary ``pattern`` keeps, chosen by
    ``documents`` (named ``text_name`` in the report); returns the report (also ``vocabulary.json``).
    ``describe`` false: no card, ``sparsity.json``, llama.cpp's hashes or digests of its files (a size's table
    point, measured where it is written and deleted); its ``pruning_report.json`` is written all the same.
    ``combined``: the run's record of the combined recipe whose last part this is (its ``sparsity``, the
    whole recipe, recorded as ``recipe``; its ``base_model``; its earlier ``parts``); None: ``pattern`` alone.
    ``alone``: the recipe's record (``Recipe.to_dict``): on a model this tool has not pruned, ``out`` gets
    a ``pruning_report.json`` and a ``sparsity.json`` of its own (``describe_alone``); over a pruned model,
    the vocabulary's part is recorded with its name (``describe_whole``)."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    model_dir = Path(model_dir)
    vocab = model_vocabulary(model_dir)
    keep = kept_count(vocab, pattern)
    tokenizer_data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    generation = _read_optional(model_dir / "generation_config.json")
    dense = Tokenizer.from_str(json.dumps(tokenizer_data))
    encoded = [e.ids for e in dense.encode_batch(list(documents), add_special_tokens=False)]
    used = Counter(i for ids in encoded for i in ids)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto").eval()
    kept = choose_tokens(vocab, keep, used, Counter(c for document in documents for c in document))
    before = sum(p.numel() for p in model.parameters())
    slice_vocabulary(model, kept)
    for key, value in prune_config(config, kept).items():
        if key.endswith("_token_id"):
            setattr(model.config, key, value)
    after = sum(p.numel() for p in model.parameters())
    pruned_tokenizer = prune_tokenizer(tokenizer_data, kept)
    pruned = Tokenizer.from_str(json.dumps(pruned_tokenizer))
    longer = sum(len(e.ids) for e in pruned.encode_batch(list(documents), add_special_tokens=False))
    report = {
        "structure": "vocab",
        "sparsity": str(pattern),
        "recipe": (combined or {}).get("sparsity") or str(pattern),
        "text": text_name,
        "tokenizer": vocab.kind,
        "tokens_before": vocab.size,
        "tokens_kept": len(kept),
        "tokens_the_text_uses": len(used),
        "used_tokens_kept": len(used.keys() & set(kept)),
        "parameters_before": before,
        "parameters_after": after,
        "text_tokens_before": sum(len(ids) for ids in encoded),
        "text_tokens_after": longer,
        "kept_ids": kept,
    }
    files = {
        "config.json": prune_config(config, kept),
        "tokenizer.json": pruned_tokenizer,
        "vocabulary.json": report,
    }
    if generation is not None:
        files["generation_config.json"] = prune_config(generation, kept, vocab_size=False)
    if (tokenizer_config := _read_optional(model_dir / "tokenizer_config.json")) is not None:
        files["tokenizer_config.json"] = prune_tokenizer_config(tokenizer_config, kept)
    _write(model, model_dir, Path(out), files, alone, combined, describe)
    return report


def write_vocabulary(
    model_dir: str | Path,
    out: Path,
    recipe: Any,
    text: tuple[str, str],
    combined: dict[str, Any] | None = None,
    describe: bool = True,
) -> dict[str, Any]:
    """The engine's step of a ``vocab:`` ``recipe`` (a ``thanos.recipes.Recipe``): ``model_dir`` written to
    ``out`` with the tokens ``text`` (its source and field: ``c4``'s first ``C4_DOCUMENTS``) chooses, the
    recipe recorded (``prune_vocabulary``, ``describe`` as it takes it)."""
    from thanos.data.calibration import text_documents

    documents = text_documents(*text)
    return prune_vocabulary(
        model_dir, out, recipe.sparsity, documents, text[0], combined, recipe.to_dict(), describe
    )


def summary(report: dict[str, Any], out: Path) -> str:
    """What was written to ``out``, as ``summary_lines`` say it."""
    first, *rest = summary_lines(report, out)
    return "\n".join([f"wrote {out}: {first}", *rest])


def summary_lines(report: dict[str, Any], out: Path) -> list[str]:
    """What a vocabulary's model holds: tokens kept, parameters, how much longer the choosing text became,
    and for byte-level BPE that llama.cpp's converter needs a line added (``out``'s card says which)."""
    before, after = report["parameters_before"], report["parameters_after"]
    text_before, text_after = report["text_tokens_before"], report["text_tokens_after"]
    kept, total, used = report["tokens_kept"], report["tokens_before"], report["used_tokens_kept"]
    lines = [
        f"{report['sparsity']} kept {kept:,} of {total:,} tokens ({used:,} of the "
        f"{report['tokens_the_text_uses']:,} the text uses), {after:,} of {before:,} parameters "
        f"({100 * (1 - after / before):.1f} % fewer)",
        f"{report['text']}: {text_after:,} tokens instead of {text_before:,} "
        f"({100 * (text_after / text_before - 1):+.1f} %)",
    ]
    if "llama_cpp_hash" in report:
        lines.append(
            "llama.cpp: convert_hf_to_gguf.py stops with 'BPE pre-tokenizer was not recognized' (the "
            f"token ids of its check text changed: chkhsh {report['llama_cpp_hash']['pruned']}); "
            f"{out / 'README.md'} gives the line that converts it"
        )
    return lines


def card(report: dict[str, Any]) -> str:
    """The model card's section on the vocabulary."""
    return (
        "## Vocabulary\n\n"
        f"Pruned with `{report['sparsity']}` by thanos-prune: {report['tokens_kept']:,} of the "
        f"{report['tokens_before']:,} tokens kept ({report['tokenizer']} BPE): the special tokens, the byte "
        f"alphabet, {report['used_tokens_kept']:,} of the {report['tokens_the_text_uses']:,} tokens the text "
        f"*{report['text']}* uses (those it uses at least three times, the most used first), then the "
        "earliest merges (the lowest ids; in a multilingual vocabulary those in the text's scripts first), "
        "each with its merge parts. Token ids are "
        "renumbered in their old order (`vocabulary.json` lists the kept original ids). "
        f"Parameters: {report['parameters_after']:,} of {report['parameters_before']:,}. That text is "
        f"{report['text_tokens_after']:,} tokens instead of {report['text_tokens_before']:,}; any text still "
        "encodes and decodes back to itself.\n\n" + llama_cpp_note(report)
    )


def llama_cpp_note(report: dict[str, Any]) -> str:
    """The card's paragraph on llama.cpp's converter: what it does with this vocabulary, and for byte-level
    BPE, why it stops and the line that lets it convert."""
    if "llama_cpp_hash" not in report:
        return (
            "**llama.cpp**: `convert_hf_to_gguf.py` reads this vocabulary from `tokenizer.json` for "
            "Llama and Mistral models; a converter that reads only a SentencePiece `tokenizer.model` "
            "(Gemma's) stops with `File not found: tokenizer.model`: none is written, since the dense one "
            "lists the removed tokens.\n"
        )
    hashes = report["llama_cpp_hash"]
    return (
        "**llama.cpp**: `convert_hf_to_gguf.py` stops with `BPE pre-tokenizer was not recognized`: it names "
        "a byte-level pre-tokenizer by the sha256 of the token ids of a check text (`chkhsh`), and removing "
        f"tokens changed those ids (`{hashes['pruned']}`; the dense model's `{hashes['dense']}`). The "
        "pre-tokenizer itself is the dense model's. To convert, add to `get_vocab_base_pre()` (in "
        "`conversion/base.py`; `convert_hf_to_gguf.py` in older llama.cpp) the line "
        f'`if chkhsh == "{hashes["pruned"]}": res = NAME`, with the `NAME` given there to the dense '
        f"model's hash `{hashes['dense']}`.\n"
    )


def card_text(model_dir: Path, report: dict[str, Any], evaluation: dict[str, Any] | None, out: Path) -> str:
    """The card of a model whose vocabulary was pruned (``report``: ``vocabulary.json``'s content): over
    a pruned model (``pruning_report.json``, rewritten by ``describe_whole``), that model's card, named
    after the whole recipe, then the vocabulary's section; alone, the vocabulary's section. ``out``: where
    the model is published (the card's loading and reproduce commands)."""
    from thanos.stages.describe.card import evaluation_lines, model_card
    from thanos.stages.describe.sparsity import SIDECAR, combined_record, read_sidecar

    text = card(report)
    if evaluation:
        text += "\n" + "\n".join(["## Evaluation", "", *evaluation_lines(evaluation, str(out))]) + "\n"
    if not (model_dir / "pruning_report.json").is_file():
        return text
    pruned = json.loads((model_dir / "pruning_report.json").read_text(encoding="utf-8"))
    if "vocabulary" in pruned and not combined_record(pruned):  # ``describe_alone``'s: the vocabulary alone
        return _alone_card(pruned, report, out) + "\n" + text
    return model_card(pruned, read_sidecar(model_dir / SIDECAR, pruned), None, out) + "\n" + text


def _alone_card(pruned: dict[str, Any], report: dict[str, Any], out: Path) -> str:
    """The head of a card of a vocabulary pruned alone: front matter, title, what the model is, how to load
    it and the command that writes it again; the vocabulary's section follows."""
    from thanos.recipes.labels import public_name
    from thanos.stages.describe.card import front_matter

    base, recipe = public_name(pruned["model"]["path"]), pruned["recipe"]
    before, after = report["parameters_before"], report["parameters_after"]
    text = recipe.get("vocab_text") or report["text"]
    option = "--vocab-text" if recipe.get("vocab_text") else "--calibration"
    command = (
        f"thanos prune-model --model {base} --method {recipe['method']} --sparsity {report['sparsity']} "
        f"{option} {public_name(text)} --out {public_name(out)}"
    )
    return "\n".join(
        [
            *front_matter(base, "vocabulary"),
            f"# {base}: vocabulary `{report['sparsity']}`",
            "",
            f"`{base}` with its vocabulary pruned by thanos-prune: {report['tokens_kept']:,} of its "
            f"{report['tokens_before']:,} tokens kept, {after:,} of {before:,} parameters "
            f"({100 * (1 - after / before):.1f} % fewer); no weight of its blocks is changed. "
            "`sparsity.json` counts every parameter on these weights; `vocabulary.json` lists the kept "
            "tokens' old ids.",
            "",
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'model = AutoModelForCausalLM.from_pretrained("{public_name(out)}")',
            f'tokenizer = AutoTokenizer.from_pretrained("{public_name(out)}")',
            "```",
            "",
            f"Written again by `{command}`.",
            "",
        ]
    )


def describe_whole(
    model_dir: Path,
    report: dict[str, Any],
    name: str | None = None,
    combined: dict[str, Any] | None = None,
    sidecar: bool = True,
) -> None:
    """A vocabulary written over a pruned model (an earlier part of a combined recipe, or a model pruned
    before): the ``pruning_report.json`` and ``sparsity.json`` it copied are rewritten to describe what
    ``model_dir`` holds: the whole recipe, this vocabulary (its recipe's ``name``) after the recipe of the
    report (``combined``'s ``then``), the base model, every parameter counted on the written weights.
    ``combined``: the run's record of the whole recipe (its last earlier part is the report's own); None:
    the report's record, this vocabulary added. Nothing for a model that holds no pruning report (or one of
    another tool). ``sidecar`` false: the report alone (no ``sparsity.json``)."""
    from thanos.stages.describe.sparsity import combined_record, write_sidecar

    path = model_dir / "pruning_report.json"
    if not path.is_file():
        return
    pruned = json.loads(path.read_text(encoding="utf-8"))
    if (pruned.get("recipe") or {}).get("sparsity") is None or "model" not in pruned:
        return  # not a report this tool wrote: left as it was
    earlier = combined_record(pruned)
    part = vocabulary_part(report) | ({"name": name} if name else {})
    whole = {
        "sparsity": f"{earlier.get('sparsity') or pruned['recipe']['sparsity']}+{report['sparsity']}",
        "base_model": earlier.get("base_model") or pruned["model"]["path"],
        "parts": earlier.get("parts") or [],
    }
    if combined:  # the run's record: the parts before the one whose model this vocabulary read
        whole = {key: combined[key] for key in ("sparsity", "base_model")} | {"parts": combined["parts"][:-1]}
    pruned["workflow"] = (pruned.get("workflow") or {}) | {
        "combined": whole | {"then": [*(earlier.get("then") or []), part]}
    }
    write_json(path, pruned)
    if sidecar:
        write_sidecar(model_dir, pruned)


def describe_alone(
    model_dir: Path, report: dict[str, Any], base: str, recipe: dict[str, Any], sidecar: bool = True
) -> None:
    """A vocabulary pruned on a model this tool had not pruned (``base``): ``model_dir``'s
    ``pruning_report.json`` and ``sparsity.json``, as every recipe's model has them: the recipe, the input
    model, the vocabulary removed as the compact record (tokens and parameters before and after), every
    parameter counted on the written weights. No layer is pruned. ``sidecar`` false: the report alone."""
    from thanos.stages.describe.provenance import package_versions
    from thanos.stages.describe.sparsity import write_sidecar

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    described = {
        "recipe": recipe,
        "model": {
            "path": base,
            "model_type": config.get("model_type"),
            "num_blocks": config.get("num_hidden_layers"),
        },
        "vocabulary": {key: report[key] for key in ("text", "tokenizer", "tokens_the_text_uses")},
        "compact": vocabulary_part(report)["compact"],
        "layers": [],
        "versions": package_versions(),
    }
    write_json(model_dir / "pruning_report.json", described)
    if sidecar:
        write_sidecar(model_dir, described)


def vocabulary_part(report: dict[str, Any]) -> dict[str, Any]:
    """What a pruning report records of a vocabulary (``vocabulary.json``'s ``report``): its pattern, and
    the tokens and parameters before and after as a width part's ``compact`` says them."""
    return {
        "sparsity": report["sparsity"],
        "compact": {
            "structure": "vocab",
            "original_tokens": report["tokens_before"],
            "kept_tokens": report["tokens_kept"],
            "parameters": {"original": report["parameters_before"], "kept": report["parameters_after"]},
        },
    }


def vocab_out_problem(out: Path, model_dir: str | Path) -> str | None:
    """What is wrong with ``out`` as a vocabulary's output, in words that follow its name (a file, the input
    model or inside it, or a non-empty directory that is not a previous vocabulary result,
    ``vocabulary.json``: it would be replaced); None when it may be written."""
    if out.resolve() == Path(model_dir).resolve() or Path(model_dir).resolve() in out.resolve().parents:
        return "is the input model or inside it; give another directory"
    if out.exists() and not out.is_dir():
        return "is a file; give a directory"
    if out.is_dir() and any(out.iterdir()) and not (out / "vocabulary.json").is_file():
        return "is not empty and is not a previous result (no vocabulary.json); give a new or empty directory"
    return None


def _dense_hash(model_dir: Path) -> str:
    """llama.cpp's hash of the dense model's pre-tokenizer (the one llama.cpp knows): ``model_dir``'s, or
    for a vocabulary pruned before, the dense model's its ``vocabulary.json`` recorded."""
    earlier = _read_optional(model_dir / "vocabulary.json") or {}
    return (earlier.get("llama_cpp_hash") or {}).get("dense") or llama_cpp_hash(model_dir)


def _read_optional(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _write(
    model: torch.nn.Module,
    model_dir: Path,
    out: Path,
    files: dict[str, dict[str, Any]],
    alone: dict[str, Any] | None,
    combined: dict[str, Any] | None,
    describe: bool = True,
) -> None:
    """The model's weights, ``files`` and every other file of ``model_dir`` (not its weights, not
    ``STALE``), written to ``out`` at once, described (``describe_whole``, ``describe_alone``; without
    ``describe``, its report alone)."""
    report = files["vocabulary.json"]
    with atomic_path(out, is_dir=True) as tmp:
        model.save_pretrained(tmp)
        for source in model_dir.iterdir():
            skip = source.name in (*REWRITTEN, *STALE) or source.suffix in (".safetensors", ".bin")
            if source.is_file() and not skip:
                shutil.copy2(source, tmp / source.name)
        for name, content in files.items():
            if name != "vocabulary.json":
                _write_json(tmp / name, content)
        if report["tokenizer"] == "byte-level" and describe:
            report["llama_cpp_hash"] = {"dense": _dense_hash(model_dir), "pruned": llama_cpp_hash(tmp)}
        _write_json(tmp / "vocabulary.json", report)
        describe_whole(tmp, report, (alone or {}).get("name"), combined, describe)
        if alone is not None and not (tmp / "pruning_report.json").is_file():
            describe_alone(tmp, report, str(model_dir), alone, describe)
        if describe:
            (tmp / "README.md").write_text(card_text(tmp, report, None, out), encoding="utf-8")
            # a pruned model's report (a combined recipe's part) records these files
            digests.record_again(tmp)


def _write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
