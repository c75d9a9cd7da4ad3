"""The demo model: a byte-level BPE tokenizer and a small Llama (GQA) trained from scratch on the demo
train split, deterministically, on CPU in a few minutes (or on a GPU when there is one).

The training stream is the train documents joined with blank lines and tokenized once (as the perplexity
protocol does with the test documents), cut into windows of ``seq_len`` tokens whose order is shuffled by a
seeded generator every epoch. Held-out perplexity follows the evaluation protocol of
``thanos.evaluation.perplexity``: test documents joined with "\\n\\n", tokenized once, non-overlapping
windows of min(2048, max_position_embeddings) tokens, remainder dropped, ppl = exp(mean token NLL).
"""

from __future__ import annotations

import contextlib
import logging
import math
import platform
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from thanos.demo.train_state import TrainState
from thanos.stages.common import random_state, set_random_state

log = logging.getLogger(__name__)

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
REPORTED_CONFIG = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
)


@dataclass
class TrainOptions:
    """Defaults (measured on 2 CPU cores): 2.90M parameters (tied embeddings), 360 steps of 16 x 256 tokens
    = 1.47M tokens (~1.5 epochs of the demo train split), ~0.65 s/step (~4 min), held-out perplexity ~49
    at vocab 512 (windows of 256; docs/demo.md has the measured values). A small vocabulary
    leaves more of the parameters to the blocks, so pruning them shows (at 2048 tokens the model stayed
    near bigram level, perplexity ~175, and every method with weight updates matched dense). Training
    windows match the evaluation windows (max_position_embeddings = seq_len = 256), so no position is
    scored that training never saw."""

    vocab_size: int = 512
    hidden_size: int = 256
    intermediate_size: int = 688
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 2
    max_position_embeddings: int = 256
    seq_len: int = 256
    batch_size: int = 16
    steps: int = 360
    lr: float = 6e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 40
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    eval_batch_size: int = 4
    log_every: int = 10

    def validate(self) -> None:
        if self.num_heads % self.num_kv_heads or self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden size {self.hidden_size}, heads {self.num_heads}, kv heads {self.num_kv_heads}: "
                "need hidden % heads == 0 and heads % kv_heads == 0"
            )
        if self.seq_len > self.max_position_embeddings:
            raise ValueError(f"--seq-len {self.seq_len} exceeds --max-position-embeddings")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("--steps and --batch-size must be positive")
        if self.vocab_size < 300:
            raise ValueError("--vocab-size must be at least 300 (256 bytes + special tokens + merges)")


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """Byte-level BPE trained on ``texts``, as a ``PreTrainedTokenizerFast`` that prepends ``<s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, model_max_length=1 << 30
    )


def token_stream(tokenizer, documents: Sequence[str]) -> torch.Tensor:
    """Documents joined with "\\n\\n", tokenized once (1-D int64)."""
    ids = tokenizer("\n\n".join(documents), add_special_tokens=True)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def build_model(opts: TrainOptions, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=opts.hidden_size,
        intermediate_size=opts.intermediate_size,
        num_hidden_layers=opts.num_layers,
        num_attention_heads=opts.num_heads,
        num_key_value_heads=opts.num_kv_heads,
        max_position_embeddings=opts.max_position_embeddings,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )
    torch.manual_seed(opts.seed)
    return LlamaForCausalLM(config)


@torch.no_grad()
def perplexity(model, stream: torch.Tensor, seq_len: int, batch_size: int, device: torch.device) -> dict:
    """exp(mean NLL) over non-overlapping windows of ``seq_len`` tokens (remainder dropped)."""
    windows = stream.numel() // seq_len
    if windows == 0:
        raise ValueError(f"held-out text has {stream.numel()} tokens, fewer than one window of {seq_len}")
    data = stream[: windows * seq_len].view(windows, seq_len)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, windows, batch_size):
        batch = data[start : start + batch_size].to(device)
        logits = model(input_ids=batch).logits.float()
        nll = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
        )
        total += float(nll)
        count += batch[:, 1:].numel()
    model.train(was_training)
    return {"ppl": math.exp(total / count), "nll": total / count, "tokens": count, "windows": windows}


def _lr_at(step: int, opts: TrainOptions) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    if step < opts.warmup_steps:
        return opts.lr * (step + 1) / opts.warmup_steps
    progress = (step - opts.warmup_steps) / max(1, opts.steps - opts.warmup_steps)
    return opts.lr * (opts.min_lr_ratio + (1 - opts.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _batches(stream: torch.Tensor, opts: TrainOptions, generator: torch.Generator):
    """Endless (epoch, batch) of windows; every epoch a new seeded permutation and a shifted window grid."""
    epoch = 0
    while True:
        offset = (epoch * opts.seq_len // 3) % opts.seq_len
        usable = (stream.numel() - offset) // opts.seq_len
        windows = stream[offset : offset + usable * opts.seq_len].view(usable, opts.seq_len)
        order = torch.randperm(usable, generator=generator)
        for start in range(0, usable - opts.batch_size + 1, opts.batch_size):
            yield epoch, windows[order[start : start + opts.batch_size]]
        epoch += 1


def train_demo(
    train_docs: Sequence[str],
    test_docs: Sequence[str],
    out_dir: Path,
    opts: TrainOptions,
    device: torch.device,
    held_out: bool = True,
    state: TrainState | None = None,
) -> dict:
    """Train tokenizer and model, save both into ``out_dir`` (an existing, empty directory) with
    ``save_pretrained`` (safetensors) and return the report (the caller writes it as train_report.json).
    ``held_out``: score the test documents at the end (the report's ``held_out``; None when False, for a
    caller that evaluates the written model itself with the same protocol, as the workflow does).
    ``state``: where the training keeps its state every few steps and resumes from (``train_state``)."""
    opts.validate()
    started = time.perf_counter()
    torch.manual_seed(opts.seed)
    with _deterministic(device):
        return _train_demo(train_docs, test_docs, out_dir, opts, device, held_out, started, state)


@contextlib.contextmanager
def _deterministic(device: torch.device) -> Iterator[None]:
    """torch's deterministic algorithms for the duration (warnings only on CUDA), then the caller's setting
    again: the training may run in a process that goes on (``thanos_here``, the job worker's fork)."""
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _train_demo(
    train_docs: Sequence[str],
    test_docs: Sequence[str],
    out_dir: Path,
    opts: TrainOptions,
    device: torch.device,
    held_out: bool,
    started: float,
    state: TrainState | None,
) -> dict:
    """``train_demo``'s work, deterministic."""
    tokenizer, train_stream, test_stream = _tokenize(train_docs, test_docs, opts, started)
    model = build_model(opts, tokenizer).to(device)
    params = sum(p.numel() for p in model.parameters())
    log.info(
        "model: Llama %d layers, hidden %d, heads %d/%d kv, %.2fM parameters, device %s",
        opts.num_layers,
        opts.hidden_size,
        opts.num_heads,
        opts.num_kv_heads,
        params / 1e6,
        device,
    )
    curve, train_seconds = _train(model, train_stream, opts, device, state)
    scores = _held_out(model, test_stream, opts, device) if held_out else None

    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to("cpu").save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    tokens_seen = opts.steps * opts.batch_size * opts.seq_len
    return {
        "model": {
            "architecture": "LlamaForCausalLM",
            "parameters": params,
            "non_embedding_parameters": params - model.get_input_embeddings().weight.numel(),
            **{key: getattr(model.config, key) for key in REPORTED_CONFIG},
        },
        "options": asdict(opts),
        "data": {
            "train_tokens": train_stream.numel(),
            "test_tokens": test_stream.numel(),
            "tokens_seen": tokens_seen,
            "epochs": round(tokens_seen / train_stream.numel(), 2),
        },
        "steps": opts.steps,
        "seconds": round(time.perf_counter() - started, 2),
        "train_seconds": round(train_seconds, 2),
        "tokens_per_second": round(tokens_seen / train_seconds, 1),
        "final_train_loss": curve[-1]["loss"],
        "held_out": scores,
        "loss_curve": curve,
        "device": str(device),
        "versions": _versions(),
    }


def _tokenize(
    train_docs: Sequence[str], test_docs: Sequence[str], opts: TrainOptions, started: float
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """(tokenizer trained on the train split, train tokens, test tokens); a train split shorter than one
    batch is refused."""
    tokenizer = train_tokenizer(train_docs, opts.vocab_size)
    train_stream = token_stream(tokenizer, train_docs)
    test_stream = token_stream(tokenizer, test_docs)
    min_tokens = opts.seq_len * opts.batch_size
    if train_stream.numel() < min_tokens:
        raise ValueError(
            f"train split has {train_stream.numel()} tokens, fewer than one batch "
            f"({opts.batch_size} x {opts.seq_len}); lower --batch-size or --seq-len"
        )
    log.info(
        "tokenizer: vocab %d, train %d tokens, test %d tokens (%.1fs)",
        len(tokenizer),
        train_stream.numel(),
        test_stream.numel(),
        time.perf_counter() - started,
    )
    return tokenizer, train_stream, test_stream


def _train(
    model: torch.nn.Module,
    train_stream: torch.Tensor,
    opts: TrainOptions,
    device: torch.device,
    state: TrainState | None = None,
) -> tuple[list[dict], float]:
    """AdamW (no weight decay on norms and biases), warmup and cosine schedule, gradient clipping: the
    loss curve (every ``log_every`` steps) and the training seconds. ``state``: kept every few steps, and
    the training resumed from the one an earlier run kept (the same bytes as without the stop)."""
    from tqdm import tqdm

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opts.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=opts.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    generator = torch.Generator().manual_seed(opts.seed)
    batches = _batches(train_stream, opts, generator)
    curve: list[dict] = []
    running, running_n, first, before = 0.0, 0, 0, 0.0
    kept = state.load() if state is not None else None
    if kept is not None:
        model.load_state_dict(kept["model"])
        optimizer.load_state_dict(kept["optimizer"])
        set_random_state(kept["rng"], device)
        curve, running, running_n = kept["curve"], kept["running"], kept["running_n"]
        first, before = kept["step"], kept["seconds"]
        for _ in range(first):  # the windows the steps done trained on: the stream goes on after them
            next(batches)
        log.info("resumed at step %d of %d (the state kept in %s)", first, opts.steps, state.where)
    model.train()
    train_started = time.perf_counter()
    epoch = 0
    progress = tqdm(range(first, opts.steps), desc="train-demo", unit="step", mininterval=5.0, disable=None,
                    initial=first, total=opts.steps)  # fmt: skip
    for step in progress:
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, opts)
        epoch, batch = next(batches)
        batch = batch.to(device)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opts.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        running += loss.item()
        running_n += 1
        if (step + 1) % opts.log_every == 0 or step + 1 == opts.steps:
            mean = running / running_n
            curve.append({"step": step + 1, "loss": round(mean, 4), "lr": _lr_at(step, opts), "epoch": epoch})
            progress.set_postfix(loss=f"{mean:.3f}", epoch=epoch)
            log.info("step %d/%d  loss %.4f  epoch %d", step + 1, opts.steps, mean, epoch)
            running, running_n = 0.0, 0
        if state is not None and state.due(step + 1, opts.steps):
            seconds = before + time.perf_counter() - train_started
            state.save({"step": step + 1, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "rng": random_state(device), "curve": curve, "running": running,
                        "running_n": running_n, "seconds": seconds})  # fmt: skip
    return curve, before + time.perf_counter() - train_started


def _held_out(
    model: torch.nn.Module, test_stream: torch.Tensor, opts: TrainOptions, device: torch.device
) -> dict:
    """The held-out perplexity of the trained model (the evaluation protocol: windows of min(2048, max
    positions))."""
    eval_len = min(2048, opts.max_position_embeddings)
    ppl = perplexity(model, test_stream, eval_len, opts.eval_batch_size, device)
    log.info(
        "held-out perplexity %.2f (%d tokens, %d windows of %d)",
        ppl["ppl"],
        ppl["tokens"],
        ppl["windows"],
        eval_len,
    )
    rounded = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in ppl.items()}
    return {"dataset": "test.jsonl", "seqlen": eval_len, **rounded}


def _versions() -> dict:
    from importlib.metadata import version

    out = {"python": platform.python_version(), "torch": torch.__version__}
    for pkg in ("transformers", "tokenizers"):
        out[pkg] = version(pkg)
    return out
