"""The generic adapter: any decoder-only causal LM that transformers can run, from the model's own code.

Nothing here names a module or a model type. Everything is found on the model itself:

- the skeleton: the model's ``*ForCausalLM`` class built from its config with every parameter on the meta
  device (no memory; buffers such as rotary frequencies are computed as usual; ``thanos.models.skeleton``);
- the blocks: the ``nn.ModuleList`` holding ``num_hidden_layers`` modules of one class (the outermost
  one); its path is the checkpoint prefix (``model.layers.{i}.``, ``gpt_neox.layers.{i}.``, ...). Block i
  is a copy of the skeleton's layer i, given exactly its own tensors;
- what a block receives besides the hidden states (rotary embeddings, the attention mask of its layer type
  -- full, sliding, chunked --, position ids, anything new): recorded from the model's own forward with
  every layer replaced by a ``Recorder`` that returns its input (``thanos.models.recording``);
- block 0's inputs: the model's own forward up to its first layer (Gemma's scaled embeddings, OPT's and
  GPT-2's learned positions); the head: the model's own forward after its last layer (final norm,
  ``lm_head``, tied or not, logit soft-capping), fed the last block's outputs;
- the prunable layers of a block and which of them share an input (one Hessian): the ``nn.Linear``
  modules a forward of the block calls, in call order, grouped by the tensor they receive. Fused layers
  (``qkv_proj``, ``gate_up_proj``) are one layer; routers of mixture-of-experts blocks stay dense
  (``DENSE_LAYERS``; ``thanos.models.discovery``).

Only the tensors a stage uses are read: the embedding part reads the parameters of the modules the forward
calls before block 0, the head those called after the last block, a block its own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from thanos.models.base import ModelAdapter, block_output, module_from_state
from thanos.models.checkpoint import Checkpoint
from thanos.models.discovery import DENSE_LAYERS, DISCOVERY_TOKENS, discover_groups, routers
from thanos.models.experts import (
    Conversion,
    ExpertLayer,
    expert_groups,
    expert_layers,
    find_experts,
    watch_experts,
)
from thanos.models.layout import ModelLayout
from thanos.models.neurons import mlp_config
from thanos.models.recording import Recorder, RecordingPlan, StopForward, tree_map
from thanos.models.skeleton import (
    StructureError,
    build_skeleton,
    find_layers,
    params_on_meta,
    set_tensor,
    tensor_aliases,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# the names this module has always offered, some now defined beside it
__all__ = [
    "DENSE_LAYERS",
    "DISCOVERY_TOKENS",
    "GenericAdapter",
    "GenericEmbedding",
    "GenericHead",
    "Recorder",
    "StructureError",
    "discover_groups",
    "find_layers",
    "params_on_meta",
    "routers",
]


def _signature(block: nn.Module) -> tuple:
    """What makes two blocks alike: their modules' names and classes, and their parameters' shapes."""
    modules = tuple((name, type(m).__name__) for name, m in block.named_modules())
    return modules + tuple((name, tuple(p.shape)) for name, p in block.named_parameters())


@dataclass
class _Kind:
    """One kind of block: its groups (checkpoint names), expert matrices, and the module of each linear
    layer whose checkpoint name differs."""

    groups: dict[str, tuple[str, ...]]
    experts: dict[str, ExpertLayer]
    module_name: dict[str, str]


class GenericAdapter(ModelAdapter):
    """Any decoder-only causal LM of the installed transformers (see the module docstring)."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.skeleton = build_skeleton(config)
        self.layers_path, layers = find_layers(self.skeleton, int(config.num_hidden_layers))
        self._blocks = list(layers)  # the model's own layers (meta parameters, real buffers)
        # every tensor name as the modules say it (read before the layers become recorders)
        self._conversion = Conversion(self.skeleton, self.skeleton.state_dict())
        self._disk_names: dict[str, dict[str, str]] = {}
        last = len(layers) - 1
        self._recorders = [Recorder(i, last) for i in range(len(layers))]
        self.skeleton.get_submodule(self.layers_path)._modules.update(
            {str(i): rec for i, rec in enumerate(self._recorders)}
        )
        self._free_params()
        self._as_tuple: bool | None = None
        self._kwargs: dict[tuple, tuple[tuple, dict]] = {}
        # blocks of one kind have the same modules; the first block of each kind is traced for all of them
        # (DeepSeek-V3 and GLM-4-MoE: dense blocks first, mixture-of-experts blocks after)
        signatures = [_signature(module) for module in self._blocks]
        order = list(dict.fromkeys(signatures))
        block_kind = tuple(order.index(signature) for signature in signatures)
        kinds = [self._describe(signatures.index(signature)) for signature in order]
        self._experts: dict[str, ExpertLayer] = {}
        self._module_name: dict[str, str] = {}  # checkpoint name -> module name (one meaning in every kind)
        for kind in kinds:
            self._experts |= kind.experts
            self._module_name |= kind.module_name
        self._layout = self._layout_of(kinds, block_kind)

    def _layout_of(self, kinds: list[_Kind], block_kind: tuple[int, ...]) -> ModelLayout:
        """The layout of blocks of ``kinds``; refused when a group has other members in another kind."""
        groups: dict[str, tuple[str, ...]] = {}
        for kind in kinds:
            for group, members in kind.groups.items():
                if groups.setdefault(group, members) != members:
                    raise StructureError(
                        f"model_type {self.model_type!r}: group {group} has other members in other blocks "
                        f"({', '.join(members)} / {', '.join(groups[group])})"
                    )
        return ModelLayout(
            model_type=self.model_type,
            block_template=f"{self.layers_path}.{{i}}.",
            kinds=tuple(kind.groups for kind in kinds),
            block_kind=block_kind,
            hidden_size=self.hidden_size,
            dtype=str(self.dtype).removeprefix("torch."),
            max_positions=self.max_positions,
            mlp_config=mlp_config(self.config),
            fused=tuple(
                sorted(
                    {
                        (layer.rpartition(".")[0], expert.fused, expert.transposed)
                        for kind in kinds
                        for layer, expert in kind.experts.items()
                        if expert.fused is not None
                    }
                )
            ),
        )

    def _describe(self, block: int) -> _Kind:
        """Block ``block``'s prunable layers, named as the checkpoint stores them, and their groups: its
        ``nn.Linear`` modules (traced) and the matrices of its mixture-of-experts experts. The short
        ``nn.Conv1d`` of state-space and linear-attention layers (Mamba, gated DeltaNet: a few kernel taps
        per channel) stay dense, as the embeddings do; any other 3-D weight is refused, named (it would be
        left dense without a word)."""
        module = self._blocks[block]
        fused = {f"{path}.{name}" for path, m in find_experts(module).items() for name, _ in
                 m.named_parameters(recurse=False)}  # fmt: skip
        convolutions = {f"{path}.{name}" for path, m in module.named_modules() if isinstance(m, nn.Conv1d)
                        for name, _ in m.named_parameters(recurse=False)}  # fmt: skip
        other = [n for n, p in module.named_parameters() if p.ndim >= 3 and n not in fused | convolutions]
        if other:
            raise StructureError(
                f"model_type {self.model_type!r}: its blocks hold 3-D weights that are neither nn.Linear, "
                f"transformers' mixture-of-experts experts nor nn.Conv1d ({', '.join(other[:3])}): they "
                "cannot be pruned"
            )
        prefix = f"{self.layers_path}.{block}."
        try:
            experts = expert_layers(self._conversion, module, prefix)
        except ValueError as err:
            raise StructureError(f"model_type {self.model_type!r}: {err}") from None
        linear_groups = discover_groups(self, block)
        # a layer is named as the checkpoint stores it (a renamed module keeps its checkpoint name)
        module_name = {}
        for members in linear_groups.values():
            for layer in members:
                disk = self._conversion.disk_name(f"{prefix}{layer}.weight").removeprefix(prefix)
                module_name[disk.removesuffix(".weight")] = layer
        disk = {m: d for d, m in module_name.items()}
        groups = {
            disk[group]: tuple(disk[layer] for layer in members) for group, members in linear_groups.items()
        } | expert_groups(experts)
        return _Kind(groups, experts, module_name)

    # ---- description -------------------------------------------------------------------------------
    @property
    def layout(self) -> ModelLayout:
        return self._layout

    @property
    def experts(self) -> dict[str, ExpertLayer]:  # type: ignore[override]
        return self._experts

    # ---- the skeleton ------------------------------------------------------------------------------
    def _free_params(self) -> None:
        """Every parameter of the skeleton as zeros that take no memory (a stride-0 view of one zero):
        enough for a forward that records the layers' calls; the embedding and head load real ones."""
        for ids in tensor_aliases(self.skeleton).values():
            param = self.skeleton.get_parameter(ids[0])
            if param.is_meta:
                set_tensor(self.skeleton, ids, torch.zeros((), dtype=param.dtype).expand(param.shape))

    def _forward(self, plan: RecordingPlan, model: nn.Module | None = None, **inputs: Any) -> Any:
        """The forward of ``model`` (default: the skeleton; copies share its recorders) under ``plan``;
        None when a recorder stopped it."""
        for rec in self._recorders:
            rec.plan = plan
        try:
            with torch.inference_mode():
                return (model or self.skeleton)(**inputs, use_cache=False)
        except StopForward:
            return None

    def _layer_returns_tuple(self, hidden: torch.Tensor) -> bool:
        """Whether the model's loop indexes its layers' outputs (``layer(...)[0]``): a tensor returned
        there hands the next layer one sample's rows instead of the batch. Seen at the second layer (the
        forward stops there); a one-layer model is run to its logits instead."""
        if self._as_tuple is None:
            probe = torch.zeros((2, DISCOVERY_TOKENS, hidden.shape[-1]), dtype=hidden.dtype)
            plan = RecordingPlan(stop_at=1 if len(self._recorders) > 1 else None, replace_last=probe)
            out = self._forward(plan, inputs_embeds=torch.zeros_like(probe))
            shapes = [call[0].shape for call in plan.calls.values()]
            if out is not None:
                shapes.append(out.logits.shape[:-1] + (probe.shape[-1],))
            self._as_tuple = any(shape != probe.shape for shape in shapes)
        return self._as_tuple

    def _record(self, stop_at: int, hidden: torch.Tensor) -> tuple[torch.Tensor, tuple, dict]:
        try:
            plan = RecordingPlan(stop_at=stop_at, as_tuple=self._layer_returns_tuple(hidden))
            self._forward(plan, inputs_embeds=torch.zeros_like(hidden))
        except Exception as err:  # noqa: BLE001 - any failure means the same: no block-by-block run
            text = " ".join(str(err).split())[:200]
            raise StructureError(
                f"model_type {self.model_type!r}: its own forward fails when given a block's inputs instead "
                f"of token ids ({type(err).__name__}: {text}); models whose layers need more than the "
                "hidden states (Gemma 4's per-layer inputs from the token ids) cannot be run block by block"
            ) from err
        if stop_at not in plan.calls:
            raise StructureError(
                f"model_type {self.model_type!r}: its forward never called decoder layer {stop_at}; the "
                "model cannot be run block by block"
            )
        return plan.calls[stop_at]

    def disk_names(self, checkpoint: Checkpoint) -> dict[str, str]:
        """Module tensor name -> checkpoint tensor name, where they differ: the renamings transformers
        applies when it loads the checkpoint (GPT-NeoX's ``embed_out`` is ``lm_head``). A tensor that
        transformers builds from several (the per-expert weights of a mixture of experts, fused on load)
        is refused, naming it."""
        key = str(checkpoint.model_dir)
        if key not in self._disk_names:
            names = {}
            blocks = f"{self.layers_path}."  # block tensors are converted one block at a time (load_block)
            for disk in checkpoint.names():
                if disk.startswith(blocks):
                    continue
                target, converted = self._conversion.target(disk)
                if converted is not None:
                    raise StructureError(
                        f"model_type {self.model_type!r}: transformers builds {target} from several "
                        f"tensors of the checkpoint ({disk}, ...); such layouts (fused mixture-of-experts "
                        "weights) are not supported yet"
                    )
                if target != disk:
                    names[target] = disk
            self._disk_names[key] = names
        return self._disk_names[key]

    def load_block(
        self, checkpoint: Checkpoint, block: int, overrides: dict[str, torch.Tensor] | None = None
    ) -> nn.Module:
        """Block ``block`` from its checkpoint tensors, through transformers' conversion (per-expert
        matrices fused, renamed modules); ``overrides`` are keyed by layer (checkpoint) names."""
        prefix = self.block_prefix(block)
        state = self.block_state(checkpoint, block, overrides)
        modules = self._conversion.to_modules({prefix + name: t for name, t in state.items()})
        return module_from_state(
            self.new_block, {k.removeprefix(prefix): t for k, t in modules.items()}, block
        )

    def watch_inputs(
        self,
        module: nn.Module,
        block: int,
        add: Callable[[str, torch.Tensor], None],
        only: set[str] | None = None,
        every_token: bool = False,
    ) -> list[Any]:
        """The base class's hooks on the block's ``nn.Linear`` groups, and ``watch_experts``'s."""
        wanted = [g for g in self.block_groups(block) if only is None or g in only]
        experts = [g for g in wanted if g in self._experts]
        linear = super().watch_inputs(module, block, add, {g for g in wanted if g not in self._experts})
        return linear + watch_experts(module, self._experts, experts, add, every_token)

    def linear(self, module: nn.Module, layer: str) -> nn.Linear:
        """The ``nn.Linear`` of a block module that the checkpoint calls ``layer`` (its own name, unless
        transformers renames it on load)."""
        return super().linear(module, self._module_name.get(layer, layer))

    def _load_used(self, checkpoint: Checkpoint, called: Callable[[], set[str]]) -> nn.Module:
        """The skeleton with real tensors for the parameters of the modules ``called()`` names."""
        # a copy sharing the skeleton's free parameters (a deep copy of a stride-0 view would allocate it in
        # full); the real tensors replace them in the copy only
        model = copy.deepcopy(self.skeleton, {id(p): p for p in self.skeleton.parameters()})
        modules = called()
        wanted = [
            ids
            for ids in tensor_aliases(model).values()
            if any(name.rpartition(".")[0] in modules for name in ids)
        ]
        for ids in wanted:
            disk = self.disk_names(checkpoint)
            source = next((disk.get(n, n) for n in ids if disk.get(n, n) in checkpoint), None)
            if source is None:
                raise StructureError(
                    f"{checkpoint.model_dir}: no tensor {' or '.join(ids)} in the checkpoint (model_type "
                    f"{self.model_type!r}); it names its tensors differently from the model's modules"
                )
            set_tensor(model, ids, checkpoint.tensor(source))
        for name, _ in model.named_buffers():
            source = self.disk_names(checkpoint).get(name, name)
            if source in checkpoint and name.rpartition(".")[0] in modules:
                set_tensor(model, [name], checkpoint.tensor(source))
        for i, rec in enumerate(self._recorders):  # the copy's recorders are its own
            model.get_submodule(self.layers_path)._modules[str(i)] = rec
        return model.eval()

    def _called(self, phase: str) -> set[str]:
        """Modules the forward calls before the first layer (``"before"``) or after the last (``"after"``),
        by name, found on a forward of a few tokens with free parameters."""
        seen: set[str] = set()
        state = {"phase": "before"}
        handles = []
        first, last = self._recorders[0], self._recorders[-1]

        def mark(module: nn.Module, *_: Any, name: str) -> None:
            if module is first:
                state["phase"] = "layers"
            elif module is last:
                state["phase"] = "after"
            elif state["phase"] == phase:
                seen.add(name)

        for name, module in self.skeleton.named_modules():
            if module is last:
                handles.append(module.register_forward_hook(lambda m, *a, n=name: mark(m, name=n)))
            elif not isinstance(module, Recorder) or module is first:
                handles.append(module.register_forward_pre_hook(lambda m, *a, n=name: mark(m, name=n)))
        try:
            ids = torch.zeros((1, DISCOVERY_TOKENS), dtype=torch.long)
            as_tuple = self._layer_returns_tuple(torch.zeros((1, 1, self.hidden_size), dtype=self.dtype))
            # "before" stops at the first layer: the head (lm_head of free parameters) is not run for it
            plan = RecordingPlan(stop_at=0 if phase == "before" else None, as_tuple=as_tuple)
            self._forward(plan, input_ids=ids)
        finally:
            for handle in handles:
                handle.remove()
        return seen

    # ---- building modules from the checkpoint ------------------------------------------------------
    def new_block(self, block: int) -> nn.Module:
        return copy.deepcopy(self._blocks[block])

    def load_embedding(self, checkpoint: Checkpoint) -> nn.Module:
        return GenericEmbedding(self, self._load_used(checkpoint, lambda: self._called("before")))

    def load_head(self, checkpoint: Checkpoint) -> nn.Module:
        return GenericHead(self, self._load_used(checkpoint, lambda: self._called("after")))

    # ---- running one block alone --------------------------------------------------------------------
    def block_call(self, block: int, hidden: torch.Tensor) -> tuple[tuple, dict]:
        """What block ``block`` receives besides ``hidden``: extra positional and keyword arguments, as the
        model's own forward passes them (cached per shape, dtype and device)."""
        key = (block, tuple(hidden.shape), hidden.dtype, hidden.device)
        if key not in self._kwargs:  # recorded on the CPU (where the skeleton lives), then moved
            _, args, kwargs = self._record(block, torch.zeros(hidden.shape, dtype=hidden.dtype))
            move = lambda v: v.to(hidden.device) if isinstance(v, torch.Tensor) else v  # noqa: E731
            self._kwargs[key] = (tree_map(move, args), tree_map(move, kwargs))
        return self._kwargs[key]

    def block_kwargs(self, block: int, hidden: torch.Tensor) -> dict[str, Any]:
        return self.block_call(block, hidden)[1]

    def run_block(self, module: nn.Module, block: int, hidden: torch.Tensor) -> torch.Tensor:
        args, kwargs = self.block_call(block, hidden)
        with torch.inference_mode():
            return block_output(module(hidden, *args, **kwargs))

    def trained_parameters(self, module: nn.Module, layers: list[str]) -> dict[str, nn.Parameter]:
        """A layer's module weight, or the fused experts parameter that holds an expert's matrix."""
        names = set()
        for layer in layers:
            expert = self.experts.get(layer)
            names.add(
                f"{expert.experts}.{expert.param}"
                if expert is not None
                else f"{self._module_name.get(layer, layer)}.weight"
            )
        params = dict(module.named_parameters())
        return {name: params[name] for name in sorted(names)}

    def layer_weights(self, module: nn.Module, block: int, layers: list[str]) -> dict[str, torch.Tensor]:
        """Through transformers' reverse conversion (fused experts split into the checkpoint's matrices)."""
        prefix = self.block_prefix(block)
        state = {prefix + name: tensor.detach() for name, tensor in module.state_dict().items()}
        disk = self._conversion.to_disk(state)
        weights = {}
        for layer in layers:
            expert = self.experts.get(layer)
            if expert is not None and expert.fused is not None:  # a slice of the fused tensor, as (out, in)
                W = disk[f"{prefix}{expert.fused}"][expert.expert]
                weights[layer] = W.T if expert.transposed else W
            else:
                weights[layer] = disk[f"{prefix}{layer}.weight"]
        return weights

    def train_block(self, module: nn.Module, block: int, hidden: torch.Tensor) -> torch.Tensor:
        args, kwargs = self.block_call(block, hidden)
        # arguments recorded under inference mode cannot be saved for backward: plain copies of them
        plain = lambda v: v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v  # noqa: E731
        return block_output(module(hidden, *tree_map(plain, args), **tree_map(plain, kwargs)))


class GenericEmbedding(nn.Module):
    """Token ids -> block 0's inputs: the model's own forward, stopped at its first layer."""

    def __init__(self, adapter: GenericAdapter, model: nn.Module) -> None:
        super().__init__()
        # registered first, so that the module's first parameter is the token embeddings (their dtype is
        # the dtype of the activations the embed stage stores)
        self.tokens = model.get_input_embeddings()
        self.model = model
        self.adapter = adapter

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        plan = RecordingPlan(stop_at=0)
        self.adapter._forward(plan, self.model, input_ids=input_ids)
        return plan.calls[0][0]


class GenericHead(nn.Module):
    """The last block's outputs -> (final hidden states, logits): the model's own forward after its last
    layer (final norm, lm_head, soft-capping); the final hidden states are what ``lm_head`` receives."""

    def __init__(self, adapter: GenericAdapter, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.adapter = adapter

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        plan = RecordingPlan(replace_last=hidden, as_tuple=self.adapter._layer_returns_tuple(hidden))
        seen: list[torch.Tensor] = []
        handle = self.model.get_output_embeddings().register_forward_pre_hook(lambda m, a: seen.append(a[0]))
        try:
            out = self.adapter._forward(plan, self.model, inputs_embeds=torch.zeros_like(hidden))
        finally:
            handle.remove()
        return seen[-1], out.logits
