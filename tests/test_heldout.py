"""A size search's measurement of a candidate (``thanos.evaluation.heldout``): its loss, KL and per-text
losses are those of each text run alone through both models (float32 log-softmax, the KL summed term by
term), whatever the texts' batches (padded on the right) and whether the dense side is kept or computed
again."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest
import torch
from conftest import corpus_sentences, make_tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from thanos.evaluation import heldout


def _noisy_copy(model: Path, out: Path) -> Path:
    """``model`` with noise added to every weight (its tokenizer, its config)."""
    shutil.copytree(model, out)
    loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in loaded.parameters():
            weight.add_(0.05 * torch.randn(weight.shape, generator=generator))
    loaded.save_pretrained(out)
    return out


def _alone(model: Path, texts: list[str]) -> list[tuple[list[int], torch.Tensor]]:
    """Each text's token ids and next-token log-probabilities, the text run alone (float32)."""
    loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model)
    out = []
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            out.append((ids, loaded(input_ids=torch.tensor([ids])).logits[0, :-1].log_softmax(-1)))
    return out


@pytest.mark.parametrize("batch_texts, kept", [(8, True), (1, True), (2, False)])
def test_a_measurement_is_each_text_run_alone(tmp_path, monkeypatch, batch_texts, kept):
    dense = make_tiny_model(tmp_path, "llama")
    candidate = _noisy_copy(dense, tmp_path / "candidate")
    texts = [" ".join(corpus_sentences(n, seed=i)) for i, n in enumerate((1, 4, 2, 3, 1))]  # lengths differ
    p, q = _alone(dense, texts), _alone(candidate, texts)
    nll = [
        [-lp.gather(-1, torch.tensor(ids[1:])[:, None]).sum().item() for ids, lp in side] for side in (p, q)
    ]
    tokens = [len(ids) - 1 for ids, _ in p]
    assert len(set(tokens)) > 2  # the batches are padded
    kl = sum((a.exp() * (a - b)).sum().item() for (_, a), (_, b) in zip(p, q, strict=True))

    vocab = AutoModelForCausalLM.from_pretrained(dense).config.vocab_size
    monkeypatch.setattr(heldout, "BATCH_BYTES", batch_texts * (max(tokens) + 1) * vocab * 4)
    reference = heldout.Reference(dense, texts, "cpu", budget=heldout.KEPT_BYTES if kept else 0)
    measured = heldout.measure(dense, candidate, texts, "cpu", reference)

    assert len(reference.batches()) == -(-len(texts) // min(batch_texts, len(texts)))
    excess = [b - a for a, b in zip(*nll, strict=True)]
    assert measured["loss"] == pytest.approx(sum(excess) / sum(tokens), rel=1e-5)
    assert measured["kl"] == pytest.approx(kl / sum(tokens), rel=1e-5)
    assert measured["kl"] > 0.01  # the noise is measured
    assert measured["tokens"] == measured["candidate_tokens"] == sum(tokens)
    expected = [e / n for e, n in zip(excess, tokens, strict=True)]
    assert measured["text_losses"] == pytest.approx(expected, abs=1e-5)
    spread = statistics.stdev(expected) / len(expected) ** 0.5
    assert measured["loss_error"] == pytest.approx(spread, abs=1e-5)


def test_the_dense_side_of_a_measurement_is_computed_once(tmp_path: Path) -> None:
    """``heldout.measure`` with the dense model's side kept by the caller (``Reference``: once for every
    candidate) gives what measuring each candidate from nothing gives, bit for bit, with the dense terms
    kept and beyond the budget (the dense model run again for the KL, a batch at a time, none kept after)."""
    dense = make_tiny_model(tmp_path / "dense", "llama")
    candidates = [make_tiny_model(tmp_path / f"c{seed}", "llama", seed=seed) for seed in (1, 2)]
    texts = [" ".join(corpus_sentences(3, seed=i)) for i in range(3)]
    kept = heldout.Reference(dense, texts, "cpu")
    recomputed = heldout.Reference(dense, texts, "cpu", budget=0)
    for candidate in candidates:
        alone = heldout.measure(dense, candidate, texts)
        assert alone["kl"] is not None and alone["loss"] != 0
        assert heldout.measure(dense, candidate, texts, "cpu", kept) == alone
        assert heldout.measure(dense, candidate, texts, "cpu", recomputed) == alone
    assert len(kept._kept) == len(texts) and not recomputed._kept and recomputed._model is None


def test_a_candidate_with_the_dense_tokenizer_is_not_tokenized_again(tmp_path, monkeypatch):
    """A candidate whose tokenizer files are the dense model's (a pruning that keeps the vocabulary copies
    them) reads the dense model's token ids; one whose tokenizer files differ in a byte is tokenized with
    its own, and both measure the same."""
    import json

    dense = make_tiny_model(tmp_path, "llama")
    candidate = _noisy_copy(dense, tmp_path / "candidate")
    other = shutil.copytree(candidate, tmp_path / "other")
    config = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps(config | {"comment": "the same tokens"}))
    assert heldout.same_tokenizer(dense, candidate) and not heldout.same_tokenizer(dense, other)

    tokenized: list[str] = []
    original = heldout._ids

    def counted(model: Path, texts: list[str]) -> list[list[int]]:
        tokenized.append(Path(model).name)
        return original(model, texts)

    monkeypatch.setattr(heldout, "_ids", counted)
    texts = [" ".join(corpus_sentences(n, seed=i)) for i, n in enumerate((2, 3))]
    reference = heldout.Reference(dense, texts, "cpu")
    measured = heldout.measure(dense, candidate, texts, "cpu", reference)
    assert tokenized == [dense.name]  # the dense model's, once
    assert heldout.measure(dense, other, texts, "cpu", reference) == measured
    assert tokenized == [dense.name, "other"]


def _later_blocks_changed(model: Path, out: Path, first: int, blocks: int, **config: object) -> Path:
    """``model`` with noise in its blocks from ``first`` on, cut to ``blocks`` blocks, its config's other
    keys set to ``config`` (a depth point's model: blocks removed, the block before them changed)."""
    shutil.copytree(model, out)
    loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in loaded.model.layers[first:]:
            for weight in layer.parameters():
                weight.add_(0.05 * torch.randn(weight.shape, generator=generator))
    loaded.model.layers = loaded.model.layers[:blocks]
    loaded.config.num_hidden_layers = blocks
    for key, value in config.items():
        setattr(loaded.config, key, value)
    loaded.save_pretrained(out)
    return out


@pytest.mark.parametrize("states, start", [(heldout.STATES_BYTES, 3), (0.5, 2), (0, 0)])
def test_a_candidate_starts_after_the_blocks_it_shares(tmp_path, monkeypatch, states, start):
    """A candidate whose first blocks are the dense model's (a ``depth:k`` point: its run removed, the block
    before it changed) runs from the dense model's output of the last of them that is kept (every block's
    within ``STATES_BYTES``, else evenly spaced ones: half of them here; none kept, none skipped), and
    measures what its whole forward pass measures, bit for bit; a change before them, or in the config,
    runs every block."""
    dense = make_tiny_model(tmp_path, "llama", num_blocks=6)
    texts = [" ".join(corpus_sentences(n, seed=i)) for i, n in enumerate((2, 3, 1))]
    depth = _later_blocks_changed(dense, tmp_path / "depth", first=3, blocks=4)
    early = _later_blocks_changed(dense, tmp_path / "early", first=0, blocks=4)
    other = _later_blocks_changed(dense, tmp_path / "config", first=3, blocks=4, rms_norm_eps=1e-3)
    vocab = AutoModelForCausalLM.from_pretrained(dense).config.vocab_size
    monkeypatch.setattr(heldout, "BATCH_BYTES", 2 * 40 * vocab * 4)  # two texts a batch at most
    whole = {path: heldout.measure(dense, path, texts) for path in (depth, early, other)}
    assert whole[depth]["kl"] > 0.001  # the noise is measured
    reference = heldout.Reference(dense, texts, "cpu", blocks="model.layers.{i}.")
    reference.compute()
    per_block = sum(len(g) * max(len(reference.ids[i]) for i in g) for g in reference.batches()) * 32 * 4
    monkeypatch.setattr(heldout, "STATES_BYTES", int(states * 6 * per_block))
    reference = heldout.Reference(dense, texts, "cpu", blocks="model.layers.{i}.")
    starts: list[int] = []
    replayed, replays, checking = heldout._replayed, heldout.replays, []

    def counted(blocks: list, count: int, output: object):
        if not checking:  # a candidate's batch, not the check that the model replays
            starts.append(count)
        return replayed(blocks, count, output)

    def checked(*args: object) -> bool:
        checking.append(True)
        try:
            return replays(*args)
        finally:
            checking.pop()

    monkeypatch.setattr(heldout, "_replayed", counted)
    monkeypatch.setattr(heldout, "replays", checked)
    for path, expected in ((depth, start), (early, 0), (other, 0)):
        starts.clear()
        assert heldout.measure(dense, path, texts, "cpu", reference) == whole[path]
        assert starts == [expected] * len(reference.batches()) if expected else not starts
    assert len(reference.batches()) == 2
    restored = heldout.Reference(dense, texts, "cpu", blocks="model.layers.{i}.")
    restored.restore(reference.record())  # a search run again: the block outputs computed again
    starts.clear()
    assert heldout.measure(dense, depth, texts, "cpu", restored) == whole[depth]
    assert starts == ([start] * 2 if start else [])


@pytest.mark.parametrize("family", ["llama", "qwen2", "opt", "mixtral"])
def test_a_model_whose_blocks_pass_only_their_outputs_is_replayed(tmp_path: Path, family: str) -> None:
    """``replays``: a model's blocks skipped from the middle compute what running them does (the dense
    families and a mixture of experts); one whose block reads what the block before it left beside its
    output (a side channel) is not replayed, so its candidates run every block."""
    from thanos.models import open_model

    path = make_tiny_model(tmp_path, family, num_blocks=4)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    blocks = heldout._blocks(model, open_model(path)[1].block_template)
    assert blocks is not None and len(blocks) == 4 and heldout.replays(model, blocks, "cpu")
    left: list[bool] = []
    first, second = blocks[1].forward, blocks[2].forward

    def leaves(*args, **kwargs):
        left.append(True)
        return first(*args, **kwargs)

    def reads(hidden, *args, **kwargs):
        out = second(hidden, *args, **kwargs)
        scale = 2.0 if left and left.pop() else 1.0
        return tuple([out[0] * scale, *out[1:]]) if isinstance(out, tuple) else out * scale

    blocks[1].forward, blocks[2].forward = leaves, reads
    assert not heldout.replays(model, blocks, "cpu")
    assert blocks[1].forward is leaves  # its own forward given back


def test_a_search_of_a_model_that_does_not_replay_runs_every_block(tmp_path, monkeypatch):
    """Where the dense model does not replay (``replays`` false), a depth candidate is measured whole, from
    a new reference and from a restored one, and measures the same."""
    dense = make_tiny_model(tmp_path, "llama", num_blocks=6)
    texts = [" ".join(corpus_sentences(n, seed=i)) for i, n in enumerate((2, 3, 1))]
    depth = _later_blocks_changed(dense, tmp_path / "depth", first=3, blocks=4)
    whole = heldout.measure(dense, depth, texts)
    monkeypatch.setattr(heldout, "replays", lambda *args: False)
    monkeypatch.setattr(heldout, "_replayed", None)  # never called
    reference = heldout.Reference(dense, texts, "cpu", blocks="model.layers.{i}.")
    assert heldout.measure(dense, depth, texts, "cpu", reference) == whole and not reference.states
    restored = heldout.Reference(dense, texts, "cpu", blocks="model.layers.{i}.")
    restored.restore(reference.record())
    assert heldout.measure(dense, depth, texts, "cpu", restored) == whole
