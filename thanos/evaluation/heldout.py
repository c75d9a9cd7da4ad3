"""A pruned model's loss against the dense model on held-out text: what a size search (``params:p``,
``thanos.runner.size``) measures of each candidate (its parameters are counted by
``thanos.models.checkpoint.stored_parameters``).

**The loss** is the candidate's excess cross-entropy over the dense model's on the held-out texts, per
token of the dense model's tokenization (nats): ``(NLL_candidate - NLL_dense) / dense tokens predicted``,
each model reading the same text through its own tokenizer, so that a model with a pruned vocabulary (more
tokens for the same text) is measured on the same scale as the others. It is the log of the perplexity ratio
per original token on that text. Where the candidate's tokenizer cuts the texts into the dense model's
tokens (no vocab part), the **KL divergence** from the dense model's next-token distributions to the
candidate's is measured too, per token (nats): the same quantity where the text follows the dense model,
with less noise; it is recorded beside the loss, and is undefined across vocabularies.

**The dtype** both models run in is the caller's (a search's: the dtype its pruning computes in,
``thanos.stages.common.compute_dtype``: bfloat16 on a CPU that multiplies it faster than float32, the
checkpoint's on a GPU); the log-probabilities are taken in float32 whatever it is. The dense model's
side is computed in the same dtype, so the loss compares two models run alike.

**Batches**: the texts run through each model in batches padded on the right (``batches``: as many texts as
``BATCH_BYTES`` of float32 logits hold), where they ran one at a time; the KL is formed from the dense
model's kept probabilities and the candidate's logits (``DenseTerms``), the candidate's log-probabilities
never formed. A model's outputs in bfloat16 depend on its batch's shape by rounding alone (SmolLM2-135M:
about 0.003 nats, either way, from one batch size to another); the dense model's side and a candidate with
its tokens run in the same batches.

**The blocks a candidate shares** with the dense model are not run again: the dense model's side keeps each
batch's block outputs (``STATES_BYTES``), and a candidate whose first blocks, and all that is not a block
(embeddings, positions, final norm, head), are the dense model's to the byte, in a config that differs only
in its number of blocks (``shared_blocks``), starts from the dense model's output of the last of them
(``_replayed``): a ``depth:k`` candidate runs the blocks from its run on (SmolLM2-135M: 12 or 13 of its 30
blocks skipped). What it computes is what its whole forward pass computes, bit for bit (the same batch, the
same inputs to every block it runs); that the model's blocks pass nothing but their outputs is checked on the
dense model first (``replays``: a few tokens run whole and from its middle block), else every block runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from thanos.data.calibration import sample_windows

log = logging.getLogger(__name__)


def held_out_texts(
    model: str | Path, documents: Sequence[str], windows: int, seqlen: int, seed: int
) -> list[str]:
    """``windows`` windows of ``seqlen`` tokens of ``documents`` (the calibration's sampling, its seed), as
    text: what every candidate is measured on."""
    from thanos.models import load_tokenizer

    tokenizer = load_tokenizer(model)  # one that cannot be loaded is named, with its directory
    ids = sample_windows(documents, tokenizer, windows, seqlen, seed)
    return [tokenizer.decode(list(row), skip_special_tokens=False) for row in ids]


def _load(model: str | Path, device: str, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype).to(device).eval()


def _ids(model: str | Path, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids under ``model``'s tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


# a model directory's files that do not make its tokenizer: the config and generation config (their sizes
# change with a pruning, the model type does not), the card and sparsity this tool writes beside a model
# (and, ``thanos.stages.assemble.SKIP_FILES``, what it does not copy: the weights' index, its reports)
MODEL_FILES = ("config.json", "generation_config.json", "sparsity.json", "README.md")


def same_tokenizer(dense: str | Path, candidate: str | Path) -> bool:
    """Whether ``candidate`` holds the dense model's tokenizer: every file but the weights and the model's
    own (``MODEL_FILES``) the same, byte for byte (a pruning that keeps the vocabulary copies them); its
    token ids are then the dense model's, and its tokenizer is not loaded (0.26 s a candidate,
    SmolLM2-135M). Any other file that differs or is in one only (a tokenizer's of a kind not known here
    too) says no."""
    from thanos.files.layout import WEIGHT_SUFFIXES
    from thanos.stages.assemble import SKIP_FILES

    def tokenizer_files(model: Path) -> dict[str, bytes]:
        return {
            file.name: file.read_bytes()
            for file in model.iterdir()
            if file.is_file() and not file.name.startswith(".") and not file.name.endswith(WEIGHT_SUFFIXES)
            and file.name not in (*MODEL_FILES, *SKIP_FILES)
        }  # fmt: skip

    return tokenizer_files(Path(dense)) == tokenizer_files(Path(candidate))


# a forward pass's logits are kept up to this many bytes as float32 (texts x longest x vocabulary): the texts
# run in batches of that size (SmolLM2-135M, 16 windows of 256 tokens: one batch of 0.8 GB, 3.3 s where the
# texts one at a time took 4.6 s in bfloat16 on 2 cores)
BATCH_BYTES = 1 << 30


def batches(lengths: Sequence[int], vocab: int, budget: int | None = None) -> list[list[int]]:
    """The texts (their token counts ``lengths``) in consecutive batches whose logits (as many rows as the
    batch's longest text) fit in ``budget`` bytes (``BATCH_BYTES``) as float32; a text alone in a batch when
    it does not."""
    budget = budget or BATCH_BYTES
    groups: list[list[int]] = []
    longest = 0
    for i, length in enumerate(lengths):
        if groups and (len(groups[-1]) + 1) * max(longest, length) * vocab * 4 <= budget:
            groups[-1].append(i)
            longest = max(longest, length)
        else:
            groups.append([i])
            longest = length
    return groups


@torch.inference_mode()
def _logits(
    model: Any, rows: Sequence[list[int]], device: str, replay: AbstractContextManager | None = None
) -> Iterator[torch.Tensor]:
    """Each row's next-token logits at every position but its last, in the model's dtype (``Scores`` takes
    them to float32 a few positions at a time), the rows run as one batch padded on the right: a decoder's
    position t reads positions up to t only, so the padding changes nothing before it and is not read.
    ``replay``: the context the forward pass runs in (``_replayed``: its first blocks not run)."""
    batch = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for i, ids in enumerate(rows):
        batch[i, : len(ids)] = torch.tensor(ids)
    with replay or contextlib.nullcontext():
        logits = model(input_ids=batch.to(device), use_cache=False).logits
    for i, ids in enumerate(rows):
        yield logits[i, : len(ids) - 1]


def _blocks(model: Any, template: str | None) -> list[torch.nn.Module] | None:
    """The model's blocks, named by ``template`` (the checkpoint's block prefix, ``model.layers.{i}.``), in
    order; None without a template or where the model's modules are not named so."""
    if template is None:
        return None
    blocks = []
    while True:
        try:
            blocks.append(model.get_submodule(template.format(i=len(blocks)).rstrip(".")))
        except AttributeError:
            return blocks or None


def _digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """The digest of tensors: their names, dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for name, tensor in named:
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy())
    return digest.hexdigest()


def _tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """A module's parameters and buffers (the non-persistent ones too: rotary frequencies), by name."""
    return [*module.named_parameters(), *module.named_buffers()]


@dataclass(frozen=True)
class Prefix:
    """What a candidate's first blocks are compared with (``shared_blocks``): the dense model's blocks'
    digests, the digest of what is not in a block, its config."""

    blocks: tuple[str, ...]
    rest: str
    config: dict[str, Any]

    @classmethod
    def of(cls, model: Any, blocks: list[torch.nn.Module]) -> Prefix:
        return cls(tuple(_digest(_tensors(block)) for block in blocks), _rest(model, blocks),
                   model.config.to_dict())  # fmt: skip


def _rest(model: Any, blocks: list[torch.nn.Module]) -> str:
    """The digest of the model's parameters and buffers outside its blocks."""
    inside = {id(tensor) for block in blocks for _, tensor in _tensors(block)}
    return _digest((name, tensor) for name, tensor in _tensors(model) if id(tensor) not in inside)


# config keys that may differ between models whose first blocks compute the same: where it was loaded from,
# the library that wrote it, the dtype it is stored in (both models run in the reference's), its block count
CONFIG_FREE = ("_name_or_path", "transformers_version", "dtype", "torch_dtype", "num_hidden_layers")


def _same_config(dense: dict[str, Any], candidate: dict[str, Any], shared: int) -> bool:
    """Whether the configs differ only in ``CONFIG_FREE`` and in per-block lists past their first
    ``shared`` entries (``layer_types``)."""
    for key in dense.keys() | candidate.keys():
        a, b = dense.get(key), candidate.get(key)
        if key in CONFIG_FREE or a == b:
            continue
        if not (isinstance(a, list) and isinstance(b, list) and a[:shared] == b[:shared]):
            return False
        if len(a) != dense.get("num_hidden_layers") or len(b) != candidate.get("num_hidden_layers"):
            return False
    return True


def shared_blocks(prefix: Prefix, model: Any, blocks: list[torch.nn.Module]) -> int:
    """How many first blocks of ``model`` compute what the dense model's (``prefix``) compute: each the same
    to the byte, and all that is not a block the same, in configs that differ only in their block counts
    (``_same_config``); 0 where any of that differs."""
    shared = 0
    for block, digest in zip(blocks, prefix.blocks, strict=False):
        if _digest(_tensors(block)) != digest:
            break
        shared += 1
    if shared == 0 or _rest(model, blocks) != prefix.rest:
        return 0
    return shared if _same_config(prefix.config, model.config.to_dict(), shared) else 0


@torch.inference_mode()
def replays(model: Any, blocks: list[torch.nn.Module], device: str) -> bool:
    """Whether ``model``'s forward pass hands each block's output to the next and nothing else, as
    ``_replayed`` needs: a few tokens' logits, computed whole and again from its middle block's output,
    the same (the digests of ``shared_blocks`` say which blocks a candidate shares; this, that skipping
    them computes what running them does: an architecture whose blocks pass state beside their outputs is
    measured whole)."""
    if len(blocks) < 2:
        return False
    ids = (torch.arange(16) % model.get_input_embeddings().weight.shape[0])[None].to(device)
    middle, outputs = len(blocks) // 2, {}
    handle = blocks[middle - 1].register_forward_hook(lambda m, a, out: outputs.setdefault("out", out))
    try:
        whole = model(input_ids=ids, use_cache=False).logits
    finally:
        handle.remove()
    if "out" not in outputs:
        return False
    with _replayed(blocks, middle, outputs["out"]):
        again = model(input_ids=ids, use_cache=False).logits
    return whole.shape == again.shape and torch.allclose(whole.float(), again.float(), rtol=1e-3, atol=1e-3)


def _to(output: Any, device: str, copy: bool = False) -> Any:
    """A block's output (a tensor, or a tuple whose first item is one) on ``device`` (``copy``: copied
    even where it is there already)."""
    if isinstance(output, tuple):
        return tuple(_to(item, device, copy) for item in output)
    return output.to(device, copy=copy) if isinstance(output, torch.Tensor) else output


@contextlib.contextmanager
def _replayed(blocks: list[torch.nn.Module], count: int, output: Any) -> Iterator[None]:
    """Blocks ``0..count - 1`` not run: each returns ``output`` (what the dense model's block ``count - 1``
    returned for the batch), so block ``count`` reads it, as a whole forward pass hands it on."""

    def replay(*args: Any, **kwargs: Any) -> Any:
        return output

    # a block's forward of its own (a wrapper accelerate's hooks set) given back after
    before = [block.__dict__.get("forward") for block in blocks[:count]]
    for block in blocks[:count]:
        block.forward = replay
    try:
        yield
    finally:
        for block, forward in zip(blocks[:count], before, strict=True):
            if forward is None:
                del block.forward
            else:
                block.forward = forward


# the positions whose logits are taken to float32 at once (32 x 49,152: 6 MB, where a text's 255 positions
# took 50 MB a tensor, out of every cache: SmolLM2-135M, 16 texts' NLL and KL 1.0 s -> 0.3 s on 2 cores)
ROWS = 32


def _chunks(z: torch.Tensor) -> Iterator[tuple[slice, torch.Tensor]]:
    """The logits ``z`` (positions x vocabulary, any dtype) ``ROWS`` positions at a time, in float32."""
    for start in range(0, z.shape[0], ROWS):
        rows = slice(start, start + ROWS)
        yield rows, z[rows].float()


def _nll(z: torch.Tensor, ids: list[int], terms: DenseTerms | None = None) -> tuple[float, float | None]:
    """(the summed negative log-likelihood of ``ids[1:]`` under the logits ``z``, the summed KL from the
    dense model's ``terms`` to them: None without), in float32: ``logsumexp(z_t) - z_t[id]`` for the NLL,
    ``c - sum P z + sum_t s_t logsumexp(z_t)`` for the KL (``DenseTerms``), a few positions at a time."""
    lse = torch.empty(z.shape[0], dtype=torch.float32, device=z.device)
    Pz = 0.0
    for rows, chunk in _chunks(z):
        lse[rows] = torch.logsumexp(chunk, -1)
        if terms is not None:
            Pz += (terms.P[rows] * chunk).sum().item()
    targets = torch.tensor(ids[1:], device=z.device)[:, None]
    nll = (lse - z.gather(-1, targets)[:, 0].float()).sum().item()
    return nll, None if terms is None else terms.c - Pz + torch.dot(terms.s, lse).item()


@dataclass
class DenseTerms:
    """The dense model's side of one text's KL: its next-token probabilities ``P`` (positions x
    vocabulary, float32), their sums ``s`` per position and ``sum P log P`` (``c``), so that a candidate's
    logits ``z`` give ``KL = c - sum P z + sum_t s_t logsumexp(z_t)`` (``_nll``): products summed (pairwise
    within ``ROWS`` positions, as ``torch.sum`` sums: a dot product's running sum drops the tail's tiny
    terms, 0.4 % of the KL), the candidate's log-probabilities never formed."""

    P: torch.Tensor
    s: torch.Tensor
    c: float

    @classmethod
    def of(cls, z: torch.Tensor) -> DenseTerms:
        """The terms of the dense model's logits ``z`` (any dtype; taken to float32 ``ROWS`` positions at a
        time)."""
        P = torch.empty(z.shape, dtype=torch.float32, device=z.device)
        c = 0.0
        for rows, chunk in _chunks(z):
            log_p = chunk - torch.logsumexp(chunk, -1, keepdim=True)
            P[rows] = log_p.exp()
            c += (P[rows] * log_p).sum().item()
        return cls(P, P.sum(-1), c)

    def to(self, device: str) -> DenseTerms:
        return DenseTerms(self.P.to(device), self.s.to(device), self.c)


# the dense model's next-token probabilities kept for the KL of every candidate up to this many bytes
# (SmolLM2-135M, 16 windows of 256 tokens: 0.8 GB); beyond it they are computed again for each candidate
KEPT_BYTES = 1 << 30
# the dense model's block outputs kept for the candidates that share its first blocks, up to this many bytes
# (SmolLM2-135M, 16 windows of 256 tokens: 9.4 MB a block in float32, every block's); beyond it, evenly spaced
# blocks' (a candidate then starts from the last kept one before its first block of its own)
STATES_BYTES = 1 << 29


class Reference:
    """The dense model's side of ``measure`` on ``texts`` (run in ``dtype``), computed once (on first use)
    and read by every candidate of a search: each text's token ids and summed negative log-likelihood, and
    its KL terms (``DenseTerms``) while they fit in ``budget`` bytes. Beyond the budget, a candidate whose
    tokens are the dense model's runs the dense model again, a batch at a time (the dense model is not kept
    between candidates: a candidate's pruning needs the memory). ``blocks``: the checkpoint's block prefix
    (``model.layers.{i}.``): the dense model's block outputs are kept too (``STATES_BYTES``), and a candidate
    that shares its first blocks starts after them (``shared_blocks``)."""

    def __init__(
        self,
        dense: str | Path,
        texts: Sequence[str],
        device: str,
        dtype: torch.dtype = torch.float32,
        budget: int = KEPT_BYTES,
        blocks: str | None = None,
    ) -> None:
        self.dense, self.texts, self.device, self.budget = dense, list(texts), device, budget
        self.dtype, self.template = dtype, blocks
        self.ids: list[list[int]] = []
        self.nll: list[float] = []
        self.vocab = 0
        self._kept: dict[int, DenseTerms] = {}
        self._model: Any = None
        self.prefix: Prefix | None = None  # the dense model's blocks, compared with a candidate's
        self.states: dict[int, dict[int, Any]] = {}  # batch -> block -> the block's output (on the CPU)
        self.width = 0  # a block output's width (the embeddings')

    def compute(self) -> None:
        """The ids and NLL of every text (and the KL terms within the budget, the block outputs within
        theirs), once."""
        if self.ids:
            return
        model = self._load()
        self.ids = _ids(self.dense, self.texts)
        self.vocab = model.get_output_embeddings().weight.shape[0]
        self.nll = [0.0] * len(self.ids)
        keep = self._fits()
        for index, group in enumerate(self.batches()):
            for i, z in zip(group, self._pass(model, index, group), strict=True):
                self.nll[i] = _nll(z, self.ids[i])[0]
                if keep:
                    self._kept[i] = DenseTerms.of(z).to("cpu")
        self._model = None

    def _load(self) -> Any:
        """The dense model, loaded (its blocks' digests taken the first time)."""
        model = _load(self.dense, self.device, self.dtype)
        blocks = _blocks(model, self.template)
        self.width = model.get_input_embeddings().weight.shape[-1]
        if self.prefix is None and blocks is not None:
            if replays(model, blocks, self.device):
                self.prefix = Prefix.of(model, blocks)
            else:  # every candidate runs every block
                log.info("held-out measurement: %s's blocks are run whole for every candidate", self.dense)
                self.template = None
        return model

    def _pass(self, model: Any, index: int, group: list[int]) -> Iterator[torch.Tensor]:
        """The dense model's logits of batch ``index`` (the texts ``group``), its kept blocks' outputs
        recorded (``kept_blocks``)."""
        blocks = _blocks(model, self.template) or []
        kept = self.kept_blocks(len(blocks))
        outputs: dict[int, Any] = {}

        def keep(block: int) -> Any:
            return lambda module, args, output: outputs.__setitem__(block, _to(output, "cpu", copy=True))

        handles = [blocks[block].register_forward_hook(keep(block)) for block in kept]
        try:
            yield from _logits(model, [self.ids[i] for i in group], self.device)
        finally:
            for handle in handles:
                handle.remove()
        if kept:
            self.states[index] = outputs

    def kept_blocks(self, count: int) -> list[int]:
        """The blocks (of ``count``) whose outputs are kept: every one whose outputs of every batch fit in
        ``STATES_BYTES``, else as many as fit, evenly spaced."""
        if not count or self.template is None:
            return []
        size = torch.empty((), dtype=self.dtype).element_size() * self.width
        each = size * sum(len(group) * max(len(self.ids[i]) for i in group) for group in self.batches())
        fit = min(count, STATES_BYTES // max(each, 1))
        return sorted({round((j + 1) * count / fit) - 1 for j in range(fit)}) if fit else []

    def batches(self) -> list[list[int]]:
        """The texts' batches (``batches``): a candidate with the dense model's tokens runs the same."""
        return batches([len(ids) for ids in self.ids], self.vocab)

    def _fits(self) -> bool:
        """Whether every text's next-token probabilities fit in the budget."""
        return sum(len(ids) - 1 for ids in self.ids) * self.vocab * 4 <= self.budget

    def record(self) -> dict[str, Any]:
        """What ``restore`` reads back: the token ids, the losses and the vocabulary's size (not the
        KL terms nor the block outputs: computed again by the dense model's first pass after ``restore``)."""
        self.compute()
        return {"ids": self.ids, "nll": self.nll, "vocab": self.vocab}

    def restore(self, record: dict[str, Any]) -> None:
        """The ids, losses and vocabulary's size of an earlier ``record`` of the same model and texts."""
        self.ids, self.nll, self.vocab = record["ids"], record["nll"], record["vocab"]
        self._kept, self.states = {}, {}

    def _dense(self, index: int) -> None:
        """The dense model run again on batch ``index`` (every batch, within the budget): its texts' KL
        terms and its kept blocks' outputs."""
        if self._model is None:
            self._model = self._load()
        fits = self._fits()
        if not fits:  # beyond the budget: one batch's terms at a time
            self._kept = {}
        for other, batch in enumerate(self.batches()):
            if fits or other == index:
                logits = self._pass(self._model, other, batch)
                self._kept |= {j: DenseTerms.of(z).to("cpu") for j, z in zip(batch, logits, strict=True)}

    def terms(self, i: int) -> DenseTerms:
        """Text ``i``'s KL terms under the dense model: kept (after ``restore``: every text's computed on
        the first call, within the budget), else computed with the rest of its batch."""
        if i not in self._kept:
            self._dense(next(index for index, batch in enumerate(self.batches()) if i in batch))
        return self._kept[i].to(self.device)

    def start(self, model: Any) -> tuple[list[torch.nn.Module], int]:
        """A candidate ``model`` with the dense model's tokens: its blocks and how many of its first blocks
        it runs from the dense model's outputs (the last kept block among those it shares, plus one; 0:
        it runs them all)."""
        blocks = _blocks(model, self.template)
        if blocks is None:
            return [], 0
        if self.prefix is None:
            self._model = self._load()
        if self.prefix is None:  # its blocks do not replay (``replays``)
            return [], 0
        shared = shared_blocks(self.prefix, model, blocks)
        kept = [block for block in self.kept_blocks(len(self.prefix.blocks)) if block < shared]
        return blocks, (kept[-1] + 1 if kept else 0)

    def replay(self, blocks: list[torch.nn.Module], start: int, index: int) -> AbstractContextManager:
        """The context a candidate's batch ``index`` runs in: its first ``start`` blocks return the dense
        model's output of block ``start - 1`` (the dense model run for it where not kept)."""
        if not start:
            return contextlib.nullcontext()
        if start - 1 not in self.states.get(index, {}):
            self._dense(index)
        return _replayed(blocks, start, _to(self.states[index][start - 1], self.device))

    def release(self) -> None:
        """Drop the dense model loaded for ``terms``, and its terms beyond the budget."""
        self._model = None
        if not self._fits():
            self._kept = {}


def measure(
    dense: str | Path,
    candidate: str | Path,
    texts: Sequence[str],
    device: str = "cpu",
    reference: Reference | None = None,
) -> dict[str, Any]:
    """The candidate's loss (and KL, where the tokens are the dense model's) against the dense model on
    ``texts``: ``{"loss", "kl", "tokens", "candidate_tokens", "text_losses", "loss_error"}`` (each text's
    loss, and the standard error of their mean: how far the loss can be trusted); ``reference``: the dense
    model's side, kept by the caller for the candidates after this one (else computed for this one, in
    float32); the candidate runs in the reference's dtype, its texts in batches (``batches``)."""
    reference = reference or Reference(dense, texts, device)
    reference.compute()
    model = _load(candidate, device, reference.dtype)
    own = reference.ids if same_tokenizer(dense, candidate) else _ids(candidate, texts)
    vocab = model.get_output_embeddings().weight.shape[0]
    same = own == reference.ids and vocab == reference.vocab
    nll = [0.0] * len(own)
    kl = 0.0
    blocks, start = reference.start(model) if same else ([], 0)
    try:
        for index, group in enumerate(batches([len(ids) for ids in own], vocab)):
            replay = reference.replay(blocks, start, index)  # the batches are the dense model's
            for i, z in zip(group, _logits(model, [own[i] for i in group], device, replay), strict=True):
                nll[i], text_kl = _nll(z, own[i], reference.terms(i) if same else None)
                kl += text_kl or 0.0
    finally:
        reference.release()
    tokens = [len(ids) - 1 for ids in reference.ids]
    excess = [candidate_nll - dense_nll for candidate_nll, dense_nll in zip(nll, reference.nll, strict=True)]
    per_text = [e / max(n, 1) for e, n in zip(excess, tokens, strict=True)]  # a one-token text predicts none
    return {
        "loss": sum(excess) / sum(tokens),
        "kl": kl / sum(tokens) if same else None,
        "tokens": sum(tokens),
        "candidate_tokens": sum(len(ids) - 1 for ids in own),
        "text_losses": [round(loss, 6) for loss in per_text],
        "loss_error": _standard_error(per_text),
    }


def _standard_error(losses: Sequence[float]) -> float | None:
    """The standard error of the mean of the texts' losses (None for fewer than two texts): how far a
    difference between two candidates is more than the texts drawn."""
    if len(losses) < 2:
        return None
    return statistics.stdev(losses) / math.sqrt(len(losses))
