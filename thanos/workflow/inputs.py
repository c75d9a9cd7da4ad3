"""The inputs a workflow config names, checked for content at the config check (``snakemake -n`` too), so
that a run is refused before any job starts (and before Snakemake deletes the outputs of a job it reruns)
rather than failing in the job that reads them.

Checked, for each input that exists at parse time and that the workflow does not build itself (the demo's
data and model, tiny and real models are skipped; a tiny model's sizes are the config's, checked as a local
model's ``config.json`` is, and sizes its family cannot have are refused):

- a local model directory (``models.NAME.path``): ``config.json`` readable JSON; ``calibration.seqlen``,
  ``perplexity.seqlen`` and a distillation's ``seqlen`` within its positions; each recipe's blocks
  (``depth:k``), heads (``heads:p``, ``kv_heads:p``) and tokens (``vocab:N``) within its counts there, as
  the job refuses them (``thanos.pruning.sparsity``);
- the calibration text (``calibration.source``), the perplexity text (``perplexity.source``) and each
  distillation's text (``recipes.NAME.distill.source``): ``thanos.data.textdata.check_files`` (supported
  files, UTF-8, the first record of a jsonl with its field, not empty), then long enough for the windows
  asked: a calibration document longer than ``calibration.seqlen`` tokens, one perplexity window, a
  distillation's held-out windows and one more.

Lengths are counted in tokens with the model's own ``tokenizer.json`` (the ``tokenizers`` library, no
transformers import) when the model is on disk and the text is at most ``TOKENIZE_BYTES``; otherwise as an
upper bound from the text's UTF-8 bytes (no tokenizer makes more than one token per byte beyond a few
special tokens), so a text is refused only when it is certainly too short. A text over ``READ_BYTES`` is
not read at parse time (its files are only looked at by ``check_files``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thanos.data.textdata import check_files, read_documents, text_files
from thanos.errors import PathError
from thanos.pruning.sparsity import Sparsity, depth_count, head_count, parse_sparsity, vocab_count
from thanos.recipes.recipe import Recipe
from thanos.recipes.training import Distillation, streamed_dataset

# what the hub takes as a model's id: a path that does not exist and is not one (absolute, ./, three parts)
# is a typo, refused before the model's first job
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
TOKEN_SLACK = 4  # tokens a tokenizer may add to a text beyond its count (BOS, EOS, a leading prefix)
TOKENIZE_BYTES = 4 << 20  # texts up to this size are tokenized with the model's tokenizer when it is there
READ_BYTES = 64 << 20  # texts up to this size are read at parse time to measure their documents
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
DEFAULT_PPL_SEQLEN = 2048  # thanos.evaluation.perplexity.DEFAULT_SEQLEN (not imported: it imports torch)


def input_problems(
    config: dict[str, Any], recipes: dict[str, Recipe], built: Callable[[str], bool]
) -> list[str]:
    """What is wrong with the inputs ``config`` names (a validated workflow config; ``recipes`` its expanded
    recipes), one line each naming the key, the path, what is wrong and the fix; ``built(path)``: whether
    the workflow builds ``path`` itself (not checked)."""
    problems: list[str] = []
    models = {}  # name -> (config.json, model directory) of the models on disk
    for name, spec in config["models"].items():
        path = spec["path"]
        if not built(path) and not os.path.exists(path) and not HUB_ID.fullmatch(path):
            problems.append(
                f"models.{name}.path: {path!r}: no such directory, and not a hub id (name or "
                "namespace/name); give a Hugging Face model directory or a hub id"
            )
        if spec.get("tiny") is not None:  # built by the workflow: its sizes are the config's
            found, problem = _tiny_config(f"models.{name}.tiny", spec["tiny"])
            problems += [problem] if problem else []
            models[name] = (found, None)
            continue
        if built(path) or not os.path.exists(path):
            models[name] = (None, path if os.path.isdir(path) else None)
            continue
        model_config, problem = _model_config(f"models.{name}.path", path)
        problems += [problem] if problem else []
        models[name] = (model_config, path)
    problems += _count_problems(models, recipes)
    calibration = config["calibration"]
    if any(recipe.needs_calibration for recipe in recipes.values()):
        problems += _text_problems("calibration", calibration, "c4", models, built, _calibration_need)
    if config["perplexity"]["enabled"]:
        perplexity = {**config["perplexity"], "text_field": "text"}
        problems += _text_problems("perplexity", perplexity, "wikitext2", models, built, _perplexity_need)
    for key, distill in _distillations(config).items():
        if not streamed_dataset(distill.source):
            problems += _text_problems(key, distill.to_dict(), "c4", models, built, _distill_need)
    for name, entry in (config.get("recipes") or {}).items():
        text = entry.get("vocab_text")
        if text is not None and str(text).lower() != "c4" and not built(text) and not os.path.exists(text):
            problems.append(
                f"recipes.{name}.vocab_text: {text}: no such file or directory; give the text/jsonl/parquet "
                "file or directory whose tokens the vocabulary keeps"
            )
    return list(dict.fromkeys(problems))


def _count_problems(
    models: dict[str, tuple[dict[str, Any] | None, str | None]], recipes: dict[str, Any]
) -> list[str]:
    """Each recipe's parts that remove more blocks, heads or tokens than a model's config.json counts: the
    job refuses them, after the calibration and the dense chain (and Snakemake deleted a finished run's
    outputs of that recipe first); a size is checked against its axes' reach (``check_size_reach``)."""
    problems = []
    for name, recipe in recipes.items():
        parts = getattr(recipe, "parts", None)
        if parts is not None:  # a combined recipe, one job a part
            patterns = [part.sparsity for part in parts]
        elif isinstance(recipe, Recipe):
            patterns = [recipe.sparsity]
        elif not recipe.is_size:  # a `thanos prune-model` job: its pattern as written
            patterns = [parse_sparsity(part) for part in str(recipe.sparsity).split("+")]
        else:
            continue
        for model, (model_config, _) in models.items():
            counts = _counts(model_config)
            for pattern in patterns:
                try:
                    _check_counts(pattern, counts)
                except ValueError as err:
                    problems.append(f"recipe {name} on models.{model}: {err}")
    return problems


def _counts(model_config: dict[str, Any] | None) -> dict[str, int]:
    """The blocks, query heads, key/value groups and tokens a config.json states (a multimodal model's in
    its ``text_config``), those that are positive integers."""
    found = dict(model_config or {})
    found = {**found, **(found.get("text_config") if isinstance(found.get("text_config"), dict) else {})}
    names = {"blocks": "num_hidden_layers", "query_heads": "num_attention_heads",
             "groups": "num_key_value_heads", "tokens": "vocab_size"}  # fmt: skip
    counts = {count: found.get(key) for count, key in names.items()}
    return {count: value for count, value in counts.items() if type(value) is int and value > 0}


def _check_counts(pattern: Sparsity, counts: dict[str, int]) -> None:
    """Raise what the job would raise when ``pattern`` removes every block, head or token of ``counts``."""
    if pattern.structure.whole_blocks and "blocks" in counts:
        depth_count(pattern, counts["blocks"])
    elif pattern.structure.tokens and "tokens" in counts:
        vocab_count(pattern, counts["tokens"])
    elif pattern.structure.one_layer == "attention" and "query_heads" in counts:
        heads = counts["query_heads"]
        groups = counts.get("groups", heads)
        if heads % groups == 0:
            head_count(pattern, heads, groups)


def _distillations(config: dict[str, Any]) -> dict[str, Distillation]:
    """Each recipe entry's ``distill`` by its key (``recipes.NAME.distill``, ``recipe_grid[I].distill``)."""
    entries = [(f"recipe_grid[{i}]", entry) for i, entry in enumerate(config.get("recipe_grid") or [])]
    entries += [(f"recipes.{name}", entry) for name, entry in (config.get("recipes") or {}).items()]
    found = {f"{key}.distill": Distillation.parse(key, entry.get("distill")) for key, entry in entries}
    return {key: distill for key, distill in found.items() if distill is not None}


def _model_config(key: str, path: str) -> tuple[dict[str, Any] | None, str | None]:
    """A local model directory's config.json, or the line saying why it cannot be read."""
    if not os.path.isdir(path):
        return None, f"{key}: {path}: not a directory; give a Hugging Face model directory or a hub id"
    file = Path(path) / "config.json"
    try:
        loaded = json.loads(file.read_text())
    except FileNotFoundError:
        return None, f"{key}: {path}: no config.json; give a Hugging Face model directory (save_pretrained)"
    except (OSError, ValueError) as err:
        return None, f"{key}: {file}: not readable JSON ({err}); copy the model's config.json again"
    if not isinstance(loaded, dict):
        return None, f"{key}: {file}: not a JSON object; copy the model's config.json again"
    return loaded, None


def _tiny_config(key: str, tiny: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The config.json counts of the tiny model ``tiny`` describes (``thanos.demo.tiny``: its blocks, heads
    and positions; its vocabulary is its tokenizer's), or the line saying why it cannot be built."""
    from dataclasses import fields

    from thanos.demo.tiny import TinyArchitecture

    sizes = {field.name for field in fields(TinyArchitecture)}
    try:
        built = TinyArchitecture.of({k: v for k, v in tiny.items() if k in sizes}).for_family(tiny["family"])
    except ValueError as err:
        return None, f"{key}: {err}; give sizes a model of this family can have"
    return {
        "num_hidden_layers": built.num_blocks,
        "num_attention_heads": built.num_heads,
        "num_key_value_heads": built.num_kv_heads,
        "max_position_embeddings": built.max_position_embeddings,
    }, None


def max_positions(model_config: dict[str, Any] | None) -> int | None:
    """The longest sequence a model's config.json states (None: not stated, or no config)."""
    for name in POSITION_KEYS:
        value = (model_config or {}).get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class Need:
    """What a stage needs of its text for one model: ``tokens`` in its longest document (``longest``) or in
    the whole text, for windows of ``seqlen`` (checked against the model's positions); ``what`` and ``fix``
    say it when the text falls short, ``{found}`` standing for the tokens it has."""

    seqlen: int
    tokens: int
    longest: bool
    what: str
    fix: str

    def problem(self, lengths: list[int]) -> tuple[str, str] | None:
        """(what is wrong, the fix) when ``lengths`` (each document's tokens) fall short, else None."""
        found = max(lengths) if self.longest else sum(lengths)
        return None if found >= self.tokens else (self.what.format(found=found), self.fix.format(found=found))


def _calibration_need(options: dict[str, Any], positions: int | None, key: str) -> Need | None:
    seqlen = options["seqlen"]
    return Need(
        seqlen,
        seqlen + 1,
        True,
        f"no document is longer than {key}.seqlen={seqlen} tokens (the longest: at most {{found}})",
        f"give longer documents (a blank line ends a .txt document) or a smaller {key}.seqlen",
    )


def _perplexity_need(options: dict[str, Any], positions: int | None, key: str) -> Need | None:
    if not options.get("seqlen") and positions is None:
        return None  # the window is the model's positions (at most 2048), not known before it is there
    seqlen = options.get("seqlen") or min(DEFAULT_PPL_SEQLEN, positions or DEFAULT_PPL_SEQLEN)
    return Need(
        seqlen,
        seqlen,
        False,
        f"the text has at most {{found}} tokens, fewer than one window of {seqlen}",
        f"give a longer text or set {key}.seqlen to {{found}} or less",
    )


def _distill_need(options: dict[str, Any], positions: int | None, key: str) -> Need | None:
    seqlen, heldout = options["seqlen"], options["heldout"]
    return Need(  # each document's end-of-text token is within TOKEN_SLACK
        seqlen,
        (heldout + 1) * seqlen,
        False,
        f"the text has at most {{found}} tokens: no more than {heldout} held-out window(s) of {seqlen}",
        f"give a longer text, a smaller {key}.seqlen or fewer {key}.heldout windows",
    )


def _text_problems(
    key: str,
    options: dict[str, Any],
    hub: str,
    models: dict[str, tuple[dict[str, Any] | None, str | None]],
    built: Callable[[str], bool],
    need: Callable[[dict[str, Any], int | None, str], Need | None],
) -> list[str]:
    """The problems of one text (``options['source']``, ``options['text_field']``; ``hub``: the hub's
    dataset it may name instead) for every model."""
    source, field = options["source"], options["text_field"]
    if source == hub or built(source):
        return _positions_problems(key, options, models, need)
    if not os.path.exists(source):
        return [f"{key}.source: {source}: no such file or directory; give an existing text file or directory"]
    try:
        check_files(source, field)
    except (PathError, FileNotFoundError) as err:
        return [_path_line(key, source, err)]
    problems = _positions_problems(key, options, models, need)
    if problems or _bytes(source) > READ_BYTES:
        return problems
    try:
        documents = read_documents(source, field)
    except PathError as err:
        return [_path_line(key, source, err)]
    for name, (model_config, directory) in models.items():
        required = need(options, max_positions(model_config), key)
        if required is None:
            continue
        lengths, counted = token_counts(documents, directory, _bytes(source))
        if (found := required.problem(lengths)) is not None:
            what, fix = found
            return [f"{key}.source: {source}: {what} ({counted}, model {name}); {fix}"]
    return []


def _positions_problems(
    key: str,
    options: dict[str, Any],
    models: dict[str, tuple[dict[str, Any] | None, str | None]],
    need: Callable[[dict[str, Any], int | None, str], Need | None],
) -> list[str]:
    """The window asked of a text against each model's positions (where its config.json states them)."""
    problems = []
    for name, (model_config, _) in models.items():
        positions = max_positions(model_config)
        required = need(options, positions, key)
        if required is not None and positions is not None and required.seqlen > positions:
            problems.append(
                f"{key}.seqlen: {required.seqlen} exceeds the {positions} positions of model {name}; "
                f"set {key}.seqlen to {positions} or less"
            )
    return problems


def token_counts(documents: Sequence[str], model_dir: str | None, size: int) -> tuple[list[int], str]:
    """Per document, at most how many tokens it makes (``TOKEN_SLACK`` added), and how that was counted:
    the model's ``tokenizer.json`` where it is on disk and the text (``size`` bytes) is small, else the
    document's UTF-8 bytes."""
    tokenizer_file = Path(model_dir) / "tokenizer.json" if model_dir else None
    if tokenizer_file is not None and tokenizer_file.is_file() and size <= TOKENIZE_BYTES:
        try:
            from tokenizers import Tokenizer

            encodings = Tokenizer.from_file(str(tokenizer_file)).encode_batch(list(documents))
            return [len(e.ids) + TOKEN_SLACK for e in encodings], "counted with the model's tokenizer"
        except Exception:  # noqa: BLE001 - a tokenizer.json `tokenizers` cannot read: counted by bytes
            pass
    return [len(d.encode("utf-8")) + TOKEN_SLACK for d in documents], "counted as one token per byte"


def _bytes(source: str) -> int:
    return sum(file.stat().st_size for file in text_files(source))


def _path_line(key: str, source: str, err: Exception) -> str:
    """A text's PathError as a config line: the key, the file, what is wrong, the fix in config words."""
    if not isinstance(err, PathError):
        return f"{key}.source: {source}: {err}"
    hint = err.hint.replace("--text-field", f"{key}.text_field")
    return f"{key}.source: {err.path}: {err.what}; {hint}"
