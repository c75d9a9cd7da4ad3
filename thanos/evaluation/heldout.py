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
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from thanos.data.calibration import sample_windows


def held_out_texts(
    model: str | Path, documents: Sequence[str], windows: int, seqlen: int, seed: int
) -> list[str]:
    """``windows`` windows of ``seqlen`` tokens of ``documents`` (the calibration's sampling, its seed), as
    text: what every candidate is measured on."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    ids = sample_windows(documents, tokenizer, windows, seqlen, seed)
    return [tokenizer.decode(list(row), skip_special_tokens=False) for row in ids]


def _load(model: str | Path, device: str, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()

    loaded = AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype).to(device).eval()
    return loaded, AutoTokenizer.from_pretrained(str(model))


@torch.inference_mode()
def _log_probs(model: Any, ids: list[int], device: str) -> torch.Tensor:
    """Next-token log-probabilities at every position but the last (float32)."""
    logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, :-1].float()
    return logits.log_softmax(-1)


# the dense model's next-token log-probabilities kept for the KL of every candidate up to this many bytes
# (SmolLM2-135M, 16 windows of 256 tokens: 0.8 GB); beyond it they are computed again for each candidate
KEPT_BYTES = 1 << 30


class Reference:
    """The dense model's side of ``measure`` on ``texts`` (run in ``dtype``), computed once (on first use)
    and read by every candidate of a search: each text's token ids and summed negative log-likelihood, and
    its next-token log-probabilities (the KL's) while they fit in ``budget`` bytes. Beyond the budget, a
    candidate whose tokens are the dense model's runs the dense model again, as every candidate did before
    (the dense model is not kept between candidates: a candidate's pruning needs the memory)."""

    def __init__(
        self,
        dense: str | Path,
        texts: Sequence[str],
        device: str,
        dtype: torch.dtype = torch.float32,
        budget: int = KEPT_BYTES,
    ) -> None:
        self.dense, self.texts, self.device, self.budget = dense, list(texts), device, budget
        self.dtype = dtype
        self.ids: list[list[int]] = []
        self.nll: list[float] = []
        self.vocab = 0
        self._kept: list[torch.Tensor] | None = None
        self._model: Any = None

    def compute(self) -> None:
        """The ids and NLL of every text (and the log-probabilities within the budget), once."""
        if self.ids:
            return
        model, tokenizer = _load(self.dense, self.device, self.dtype)
        self.ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in self.texts]
        self.vocab = model.get_output_embeddings().weight.shape[0]
        keep, kept = self._fits(), []
        for ids in self.ids:
            p = _log_probs(model, ids, self.device)
            self.nll.append(-p.gather(-1, torch.tensor(ids[1:], device=self.device)[:, None]).sum().item())
            if keep:
                kept.append(p.cpu())
        self._kept = kept if keep else None

    def _fits(self) -> bool:
        """Whether every text's log-probabilities fit in the budget."""
        return sum(len(ids) - 1 for ids in self.ids) * self.vocab * 4 <= self.budget

    def record(self) -> dict[str, Any]:
        """What ``restore`` reads back: the token ids, the losses and the vocabulary's size (not the
        log-probabilities: computed again on the first ``log_probs`` after ``restore``)."""
        self.compute()
        return {"ids": self.ids, "nll": self.nll, "vocab": self.vocab}

    def restore(self, record: dict[str, Any]) -> None:
        """The ids, losses and vocabulary's size of an earlier ``record`` of the same model and texts."""
        self.ids, self.nll, self.vocab = record["ids"], record["nll"], record["vocab"]
        self._kept = None

    def log_probs(self, i: int) -> torch.Tensor:
        """Text ``i``'s next-token log-probabilities under the dense model (after ``restore``: every
        text's computed on the first call, kept within the budget)."""
        if self._kept is None and self._fits():
            model = _load(self.dense, self.device, self.dtype)[0]
            self._kept = [_log_probs(model, ids, self.device).cpu() for ids in self.ids]
        if self._kept is not None:
            return self._kept[i].to(self.device)
        if self._model is None:
            self._model = _load(self.dense, self.device, self.dtype)[0]
        return _log_probs(self._model, self.ids[i], self.device)

    def release(self) -> None:
        """Drop the dense model loaded for ``log_probs`` beyond the budget."""
        self._model = None


def measure(
    dense: str | Path,
    candidate: str | Path,
    texts: Sequence[str],
    device: str = "cpu",
    reference: Reference | None = None,
) -> dict[str, Any]:
    """The candidate's loss (and KL, where the tokens are the dense model's) against the dense model on
    ``texts``: ``{"loss", "kl", "tokens", "candidate_tokens"}``; ``reference``: the dense model's side, kept
    by the caller for the candidates after this one (else computed for this one, in float32); the candidate
    runs in the reference's dtype."""
    reference = reference or Reference(dense, texts, device)
    reference.compute()
    model, tokenizer = _load(candidate, device, reference.dtype)
    nll_dense = nll = kl = 0.0
    tokens = candidate_tokens = 0
    same = True
    try:
        for i, text in enumerate(texts):
            ids = reference.ids[i]
            own = tokenizer(text, add_special_tokens=False)["input_ids"]
            q = _log_probs(model, own, device)
            nll_dense += reference.nll[i]
            nll -= q.gather(-1, torch.tensor(own[1:], device=device)[:, None]).sum().item()
            tokens, candidate_tokens = tokens + len(ids) - 1, candidate_tokens + len(own) - 1
            same = same and own == ids and q.shape == (len(ids) - 1, reference.vocab)
            if same:
                p = reference.log_probs(i)
                kl += (p.exp() * (p - q)).sum().item()
    finally:
        reference.release()
    return {
        "loss": (nll - nll_dense) / tokens,
        "kl": kl / tokens if same else None,
        "tokens": tokens,
        "candidate_tokens": candidate_tokens,
    }
