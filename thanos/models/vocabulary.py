"""The vocabulary as a structure (``vocab:N``, ``vocab:p``): which token ids a smaller vocabulary keeps.

A BPE tokenizer produces a token only by merging its two parts, so a kept set is usable when it is closed
under the merges (``closure``: a kept token's parts kept, recursively) and holds what every text starts
from: the byte alphabet (byte-level BPE: the 256 byte symbols; SentencePiece-style BPE with byte fallback:
the 256 ``<0xNN>`` tokens), with which any text still encodes and decodes back to itself (a byte symbol
the tokenizer lacks, as SmolLM2's lacks 21 never seen in training, was not encoded by it before either).
The special tokens (``added_tokens``, the unknown token, the config's bos/eos/pad ids) are kept too.

``choose_tokens`` fills the budget in one rank order, each token inserted together with the part of its
closure not yet kept, skipped when that does not fit: the tokens a text uses at least ``MIN_USES`` times
(most used first), then the rest by id: the earliest merges, which BPE learned from the most frequent
pairs of its training corpus, those written in the text's scripts first where the vocabulary is
multilingual (``in_scripts``: every letter of the token in a script of the text's letters; more than
``OTHER_SCRIPTS_SHARE`` of the vocabulary outside them). Measured on SmolLM2-135M (docs/structures.md, "The
vocabulary"), that prior beats both the text's rare tokens and the dense model's mean next-token
probability over the text, on held-out text: a token a text uses once or twice is as often one of its
names as a word of the language. The scripts matter for a multilingual vocabulary kept for one language,
whose earliest merges serve its other languages too (Gemma 3 270M's 262k tokens kept for English prose:
1.98x -> 1.48x dense perplexity at ``vocab:0.7``); an English-only one's earliest merges are nearly all in
the text's script, and stay in their order.
The budget is an exact count: the kept set never exceeds it, and reaches it unless every remaining token's
closure is larger than the room left.

Pure functions of the tokenizer's JSON (``tokenizer.json``) and of token counts; ``thanos.models.
vocabulary_files`` rewrites the files, ``thanos.stages.vocab`` applies it to a model directory.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

MIN_USES = 3  # a token the text uses once or twice is no better a choice than the earliest merges
SCRIPT_SHARE = 0.01  # a script is the text's when it holds this share of the text's letters
# the text's scripts come first where more than this share of the vocabulary is written in others (a
# multilingual vocabulary: Gemma 3's 262k tokens, 36 % outside English prose's Latin; SmolLM2's 49k, 1.3 %)
OTHER_SCRIPTS_SHARE = 0.1
BYTE_FALLBACK_TOKENS = tuple(f"<0x{byte:02X}>" for byte in range(256))


def byte_level_alphabet() -> tuple[str, ...]:
    """The 256 symbols byte-level BPE writes bytes as (GPT-2's ``bytes_to_unicode``), by byte value."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    symbols = {byte: chr(byte) for byte in printable}
    shifted = (byte for byte in range(256) if byte not in symbols)
    symbols |= {byte: chr(256 + i) for i, byte in enumerate(shifted)}
    return tuple(symbols[byte] for byte in range(256))


def _types(node: Any) -> set[str]:
    """Every component type in a normalizer, pre-tokenizer or decoder (``Sequence`` opened)."""
    if not isinstance(node, Mapping):
        return set()
    inner = node.get("pretokenizers") or node.get("decoders") or node.get("normalizers") or []
    return {str(node.get("type"))}.union(*(_types(child) for child in inner))


def merge_pair(merge: str | Sequence[str]) -> tuple[str, str]:
    """A merge as its two parts, in either format tokenizer.json writes (``"a b"`` or ``["a", "b"]``)."""
    if isinstance(merge, str):
        left, _, right = merge.partition(" ")
        return left, right
    return merge[0], merge[1]


@dataclass(frozen=True)
class BPEVocabulary:
    """A BPE tokenizer's tokens by id: ``merges`` as (left, right, result) ids in rank order (merges whose
    result is not a token left out), ``always`` the ids every pruned vocabulary keeps, ``size`` one past the
    largest id, ``kind`` byte-level or byte-fallback."""

    tokens: Mapping[str, int]
    merges: tuple[tuple[int, int, int], ...]
    always: frozenset[int]
    size: int
    kind: str

    def parts(self) -> dict[int, list[int]]:
        """Each token's merge parts (every merge that produces it)."""
        found: dict[int, list[int]] = {}
        for left, right, result in self.merges:
            found.setdefault(result, []).extend((left, right))
        return found


def read_bpe(tokenizer: Mapping[str, Any], special_ids: Iterable[int] = ()) -> BPEVocabulary:
    """The BPE vocabulary of a ``tokenizer.json``'s content; ``special_ids`` (the config's bos/eos/pad ids)
    are kept with the added tokens. Any other tokenizer model, and BPE that cannot encode every text
    without its merges (neither byte-level nor with byte fallback), is refused in one line naming it."""
    model = tokenizer.get("model") or {}
    kind = model.get("type", "unknown")
    if kind != "BPE":
        raise ValueError(
            f"vocab: the tokenizer is {kind}, not BPE: only byte-level BPE and SentencePiece-style BPE with "
            "byte fallback can lose tokens (every text must still encode); prune another structure"
        )
    vocab: dict[str, int] = dict(model["vocab"])
    if model.get("byte_fallback"):
        alphabet, byte_kind = BYTE_FALLBACK_TOKENS, "byte-fallback"
    elif "ByteLevel" in _types(tokenizer.get("pre_tokenizer")):
        alphabet, byte_kind = byte_level_alphabet(), "byte-level"
    else:
        raise ValueError(
            "vocab: the tokenizer is BPE without byte-level pre-tokenization or byte fallback, so a text "
            "could need a removed token; only byte-level BPE and BPE with byte fallback can lose tokens"
        )
    added = {entry["id"]: entry["content"] for entry in tokenizer.get("added_tokens") or []}
    size = max([*vocab.values(), *added, -1]) + 1
    unknown = [vocab[model["unk_token"]]] if model.get("unk_token") in vocab else []
    specials = {i for i in special_ids if 0 <= i < size}
    always = frozenset({*added, *unknown, *specials, *(vocab[t] for t in alphabet if t in vocab)})
    merges = []
    for merge in model.get("merges") or []:
        left, right = merge_pair(merge)
        result = _merged(left, right, model)
        if left in vocab and right in vocab and result in vocab:
            merges.append((vocab[left], vocab[right], vocab[result]))
    return BPEVocabulary(vocab, tuple(merges), always, size, byte_kind)


def _merged(left: str, right: str, model: Mapping[str, Any]) -> str:
    """The token a merge produces (the continuing-subword prefix of its right part dropped)."""
    prefix = model.get("continuing_subword_prefix") or ""
    return left + (right[len(prefix) :] if prefix and right.startswith(prefix) else right)


def closure(tokens: Iterable[int], parts: Mapping[int, Sequence[int]], kept: Iterable[int] = ()) -> set[int]:
    """The tokens ``tokens`` need beyond ``kept``: themselves and their merge parts, recursively. A set
    ``kept`` is read, not copied (``choose_tokens`` asks once per token offered, its kept set growing to tens
    of thousands)."""
    have = kept if isinstance(kept, AbstractSet) else set(kept)
    found: set[int] = set()
    stack = [token for token in tokens if token not in have]
    while stack:
        token = stack.pop()
        if token in found:
            continue
        found.add(token)
        stack.extend(part for part in parts.get(token, ()) if part not in have and part not in found)
    return found


def rank_order(
    ids: Iterable[int], used: Mapping[int, int], written: AbstractSet[int] | None = None
) -> list[int]:
    """The order tokens are offered to the budget: those used at least ``MIN_USES`` times by count (most
    first), then the others by id (the earliest merges first), those in ``written`` (the text's scripts,
    ``in_scripts``; None: every token) before the rest; ties by id."""
    ids = list(ids)
    first = sorted((i for i in ids if used.get(i, 0) >= MIN_USES), key=lambda i: (-used[i], i))
    chosen = set(first)
    rest = sorted(i for i in ids if i not in chosen)
    if written is None:
        return first + rest
    return first + [i for i in rest if i in written] + [i for i in rest if i not in written]


def _lettered(character: str) -> bool:
    """Whether a character belongs to a script: a letter, or a mark written on one (Devanagari's vowel
    signs); digits, punctuation, symbols and spaces belong to none."""
    return unicodedata.category(character)[0] in "LM"


def _script(character: str) -> str:
    """A letter's script, as the first word of its Unicode name (``LATIN``, ``CYRILLIC``, ``CJK``)."""
    return unicodedata.name(character, "?").split(" ")[0]


@functools.cache
def _byte_of() -> dict[str, int]:
    """Each byte-level symbol's byte."""
    return {symbol: byte for byte, symbol in enumerate(byte_level_alphabet())}


def token_text(token: str, kind: str) -> str | None:
    """The text a token stands for (its bytes as UTF-8; SentencePiece's ``▁`` a space), None where they
    are not whole UTF-8 characters (a piece of one) or it is a byte of byte fallback."""
    if kind == "byte-level":
        byte_of = _byte_of()
        if any(symbol not in byte_of for symbol in token):
            return None
        try:
            return bytes(byte_of[symbol] for symbol in token).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if token in BYTE_FALLBACK_TOKENS:
        return None
    return token.replace("\u2581", " ")


def in_scripts(vocab: BPEVocabulary, characters: Mapping[str, int]) -> set[int]:
    """The tokens written in the scripts of a text whose characters are counted by ``characters``: each of
    their letters (and marks) in a script (``_script``) that holds at least ``SCRIPT_SHARE`` of the text's
    letters (a few Greek or Cyrillic names in English prose do not make those scripts the text's); digits,
    punctuation, symbols and spaces are in every script."""
    letters = Counter()
    for character, count in characters.items():
        if _lettered(character):
            letters[_script(character)] += count
    scripts = {script for script, count in letters.items() if count >= SCRIPT_SHARE * letters.total()}
    found = set()
    for token, i in vocab.tokens.items():
        text = token_text(token, vocab.kind)
        if text and all(_script(c) in scripts for c in text if _lettered(c)):
            found.add(i)
    return found


def minimum_kept(vocab: BPEVocabulary) -> int:
    """The fewest tokens a pruned vocabulary can have: the special tokens and the byte alphabet, closed."""
    return len(closure(vocab.always, vocab.parts()))


def choose_tokens(
    vocab: BPEVocabulary, keep: int, used: Mapping[int, int], characters: Mapping[str, int] | None = None
) -> list[int]:
    """The ``keep`` token ids kept, in increasing order (see the module's docstring): refused when ``keep``
    is below ``minimum_kept`` or not below the vocabulary's size. ``characters``: the choosing text's, counted
    (``in_scripts``: its scripts first, in a multilingual vocabulary); None: the earliest merges."""
    parts = vocab.parts()
    kept = closure(vocab.always, parts)
    if keep < len(kept):
        raise ValueError(
            f"vocab: keeping {keep} tokens is fewer than the {len(kept)} special and byte tokens every "
            f"vocabulary keeps; keep at least {len(kept)}"
        )
    ids = sorted(set(vocab.tokens.values()) | set(vocab.always))
    if keep >= len(ids):
        raise ValueError(f"vocab: keeping {keep} tokens removes none of the tokenizer's {len(ids)}")
    written = in_scripts(vocab, characters) if characters else None
    if written is not None and len(written) >= (1 - OTHER_SCRIPTS_SHARE) * len(vocab.tokens):
        written = None  # a vocabulary of the text's scripts: its earliest merges as they are
    for token in rank_order(ids, used, written):
        if len(kept) == keep:
            break
        if token not in kept:
            new = closure([token], parts, kept)
            if len(kept) + len(new) <= keep:
                kept |= new
    return sorted(kept)
