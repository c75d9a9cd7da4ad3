"""Which tokens fill a pruned vocabulary after those the choosing text uses: each filler at each size, judged
on other text by the perplexity per original token over the dense model's (``exp`` of the held-out loss of
``thanos.evaluation.heldout.measure``, the size search's measurement).

Every filler keeps the special tokens, the byte alphabet and the tokens the choosing text uses at least
three times (most used first, ``thanos.models.vocabulary.MIN_USES``), then fills the budget with:

- ``scripts``: the earliest merges written in the choosing text's scripts first, then the other earliest
  merges (``choose_tokens`` with the text's characters: the default);
- ``merges``: the earliest merges (the lowest ids), whatever their script (the default before);
- ``probability``: the tokens of the largest mean next-token probability of the dense model over the
  choosing text's windows;
- ``log-probability``: the tokens of the largest mean log-probability there (a token likely at a few
  positions, a topic's word, counts less than one plausible at many).

The choosing text is ``--choose`` (the demo's calibration articles), the judging text ``--windows`` windows of
``--seqlen`` tokens of ``--judge`` (the demo's test articles, other topics).

    python -m thanos real-model --out smollm2 && python -m thanos demo-data --out-dir demo-data
    python -m thanos real-model --name gemma3-270m --out gemma3
    OMP_WAIT_POLICY=PASSIVE python bench/vocab_filler.py --model smollm2 --sizes 0.3,0.5 \\
        --choose demo-data/calib.jsonl --judge demo-data/test.jsonl --work filler-smollm2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import torch

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from thanos.data.calibration import sample_windows, text_documents  # noqa: E402
from thanos.evaluation.heldout import Reference, held_out_texts, measure  # noqa: E402
from thanos.models import load_tokenizer  # noqa: E402
from thanos.models.vocabulary import MIN_USES, choose_tokens  # noqa: E402
from thanos.models.vocabulary_files import (  # noqa: E402
    kept_count,
    model_vocabulary,
    prune_config,
    prune_tokenizer,
    prune_tokenizer_config,
)
from thanos.pruning.sparsity import parse_sparsity  # noqa: E402
from thanos.stages.vocab import REWRITTEN, STALE, slice_vocabulary  # noqa: E402

FILLERS = ("scripts", "merges", "probability", "log-probability")


def mean_probability(
    model_dir: Path, documents: list[str], windows: int, seqlen: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dense model's next-token probabilities averaged over ``windows`` windows of ``documents``, and
    their logarithms averaged (float32)."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(model_dir)
    ids = sample_windows(documents, tokenizer, windows, seqlen, 0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total = log_total = None
    with torch.inference_mode():
        for row in ids:
            log_p = model(input_ids=torch.as_tensor(row)[None]).logits[0].float().log_softmax(-1)
            p, log_sum = log_p.exp().sum(0), log_p.sum(0)
            total = p if total is None else total + p
            log_total = log_sum if log_total is None else log_total + log_sum
    assert total is not None and log_total is not None
    return total / (len(ids) * seqlen), log_total / (len(ids) * seqlen)


def ranked_uses(used: Counter, probability: torch.Tensor) -> dict[int, float]:
    """Counts that make ``choose_tokens`` offer the tokens used ``MIN_USES`` times first (by count), then
    every other by the dense model's mean probability."""
    top = max(used.values(), default=0) + 1
    order = torch.argsort(probability, descending=True).tolist()
    counts: dict[int, float] = {i: top + n for i, n in used.items() if n >= MIN_USES}
    for rank, i in enumerate(order):
        counts.setdefault(i, MIN_USES + (len(order) - rank) / (len(order) + 1))
    return counts


def write_pruned(model_dir: Path, kept: list[int], out: Path) -> None:
    """``model_dir`` with the ``kept`` tokens alone, written to ``out`` (the files ``thanos prune-model``
    writes for a vocab recipe, without its card and reports)."""
    from transformers import AutoModelForCausalLM

    tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto").eval()
    slice_vocabulary(model, kept)
    for key, value in prune_config(config, kept).items():
        if key.endswith("_token_id"):
            setattr(model.config, key, value)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    for source in model_dir.iterdir():
        skip = source.name in (*REWRITTEN, *STALE) or source.suffix in (".safetensors", ".bin")
        if source.is_file() and not skip:
            shutil.copy2(source, out / source.name)
    files = {"config.json": prune_config(config, kept), "tokenizer.json": prune_tokenizer(tokenizer, kept)}
    if (model_dir / "generation_config.json").is_file():
        generation = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
        files["generation_config.json"] = prune_config(generation, kept, vocab_size=False)
    if (model_dir / "tokenizer_config.json").is_file():
        tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        files["tokenizer_config.json"] = prune_tokenizer_config(tokenizer_config, kept)
    for name, content in files.items():
        (out / name).write_text(json.dumps(content, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--model", required=True, type=Path, help="the dense model's directory")
    parser.add_argument("--sizes", default="0.3,0.5", help="vocab:p sizes, comma-separated")
    parser.add_argument("--choose", required=True, help="the choosing text (jsonl, field text)")
    parser.add_argument("--judge", required=True, help="the judging text (jsonl, field text)")
    parser.add_argument("--work", required=True, type=Path, help="where the pruned models are written")
    parser.add_argument("--fillers", default=",".join(FILLERS))
    parser.add_argument("--windows", type=int, default=16, help="judging windows")
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--probability-windows", type=int, default=16, help="choosing windows of that filler")
    args = parser.parse_args()

    from tokenizers import Tokenizer

    choosing = text_documents(args.choose, "text")
    judging = held_out_texts(args.model, text_documents(args.judge, "text"), args.windows, args.seqlen, 0)
    vocab = model_vocabulary(args.model)
    tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    used = Counter(i for e in tokenizer.encode_batch(choosing, add_special_tokens=False) for i in e.ids)
    characters = Counter(c for document in choosing for c in document)
    reference = Reference(args.model, judging, "cpu", torch.bfloat16)
    fillers = args.fillers.split(",")
    probability = log_probability = None
    if {"probability", "log-probability"} & set(fillers):
        began = time.monotonic()
        probability, log_probability = mean_probability(
            args.model, choosing, args.probability_windows, args.seqlen
        )
        print(
            f"mean next-token probability over {args.probability_windows} windows: "
            f"{time.monotonic() - began:.0f} s"
        )
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes.split(","):
        keep = kept_count(vocab, parse_sparsity(f"vocab:{size}"))
        for filler in fillers:
            if filler == "scripts":
                kept = choose_tokens(vocab, keep, used, characters)
            elif filler == "merges":
                kept = choose_tokens(vocab, keep, used)
            else:
                by = probability if filler == "probability" else log_probability
                assert by is not None
                kept = choose_tokens(vocab, keep, ranked_uses(used, by))  # type: ignore[arg-type]
            out = args.work / f"vocab{size}-{filler}"
            write_pruned(args.model, kept, out)
            result = measure(args.model, out, judging, reference=reference)
            ratio = math.exp(result["loss"])
            rows.append((size, filler, len(kept), result["candidate_tokens"], result["tokens"], ratio))
            print(
                f"vocab:{size} {filler}: {len(kept):,} tokens kept, the judging text "
                f"{result['candidate_tokens']:,} tokens (dense {result['tokens']:,}), perplexity per "
                f"original token {ratio:.3f}x dense",
                flush=True,
            )
            shutil.rmtree(out)
    print("\n| size | filler | tokens kept | judging tokens | perplexity per original token / dense |")
    print("| --- | --- | --: | --: | --: |")
    for size, filler, kept_n, tokens, dense_tokens, ratio in rows:
        print(
            f"| vocab:{size} | {filler} | {kept_n:,} | {tokens:,} "
            f"(+{100 * (tokens / dense_tokens - 1):.1f} %) | {ratio:.3f}x |"
        )


if __name__ == "__main__":
    main()
