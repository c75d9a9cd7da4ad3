"""Block-input recording: each decoder layer of the skeleton replaced by a :class:`Recorder` that records
what the layer receives (the hidden states, rotary embeddings, the attention mask of its layer type,
position ids, anything new) and returns its input, so that the model's own forward hands over a block's
inputs; a :class:`RecordingPlan` says what the recorders do during one forward (stop at a layer, feed the
head).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


class StopForward(Exception):
    """Ends the skeleton's forward at a recorder (the rest of the model is not needed)."""


@dataclass
class RecordingPlan:
    """What the recorders do during one skeleton forward."""

    stop_at: int | None = None  # raise StopForward when this layer is called
    replace_last: torch.Tensor | None = None  # the last layer returns this (the head's input)
    as_tuple: bool = False  # layers return (hidden,) instead of a tensor
    calls: dict[int, tuple[torch.Tensor, tuple, dict]] = field(default_factory=dict)


class Recorder(nn.Module):
    """Stands in for decoder layer ``index``: records its call and returns its hidden-states input."""

    def __init__(self, index: int, last: int) -> None:
        super().__init__()
        self.index, self.last = index, last
        self.plan = RecordingPlan()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            hidden, rest = args[0], args[1:]
        else:
            hidden, rest = kwargs.pop("hidden_states"), ()
        self.plan.calls[self.index] = (hidden, rest, kwargs)
        if self.plan.stop_at == self.index:
            raise StopForward
        if self.index == self.last and self.plan.replace_last is not None:
            hidden = self.plan.replace_last
        return (hidden,) if self.plan.as_tuple else hidden


def tree_map(fn: Callable[[Any], Any], value: Any) -> Any:
    """``fn`` applied to every leaf of nested tuples, lists and dicts (their types kept)."""
    if isinstance(value, tuple | list):
        return type(value)(tree_map(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: tree_map(fn, v) for k, v in value.items()}
    return fn(value)
