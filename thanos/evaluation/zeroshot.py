"""Zero-shot accuracy with lm-eval (EleutherAI LM Evaluation Harness), the paper's protocol.

Tasks (default): winogrande, openbookqa, boolq, piqa, hellaswag, arc_easy, arc_challenge, 0-shot. The
paper reports ``acc`` of every task and their plain mean; ``acc_norm`` (where the task has it), stderrs,
the lm-eval version and every task's version are recorded too. Accuracies are fractions in [0, 1], as
lm-eval reports them (the tables show percent).

Offline: the built-in tasks read their datasets through ``datasets`` (set the offline switches with
:func:`thanos.evaluation.loading.set_offline` and have them cached), or point ``include_path`` at a
directory of task YAMLs that read local files (e.g. ``dataset_path: json`` with ``data_files``); a task
there overrides the built-in task of the same name.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import math
import os
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from thanos.errors import MissingOption, Option, OptionError, PathError

log = logging.getLogger(__name__)

PAPER_TASKS = ("winogrande", "openbookqa", "boolq", "piqa", "hellaswag", "arc_easy", "arc_challenge")


def parse_tasks(tasks: str | list[str] | tuple[str, ...] | None) -> list[str]:
    if tasks is None:
        return list(PAPER_TASKS)
    if isinstance(tasks, str):
        tasks = tasks.split(",")
    names = [t.strip() for t in tasks if t.strip()]
    if not names:
        raise OptionError(
            Option("tasks"), " is empty; give comma-separated lm-eval task names, e.g. piqa,boolq"
        )
    return list(dict.fromkeys(names))


def _include_paths(include_path: str | os.PathLike | list[str] | None) -> list[str]:
    if include_path is None:
        return []
    if isinstance(include_path, str | os.PathLike):  # one path, or several joined by commas
        include_path = os.fspath(include_path).split(",")
    paths = list(include_path)
    paths = [p for p in (s.strip() for s in paths) if p]
    for p in paths:
        if not Path(p).is_dir():
            raise MissingOption(Option("include_path", p), "not a directory of lm-eval task YAMLs")
    return paths


def _task_yamls(paths: list[str]) -> Iterator[tuple[Path, Any]]:
    """Each task YAML under ``paths`` and what it holds (lm-eval's tags such as ``!function`` parsed, not
    resolved), or the ``yaml.YAMLError`` or ``UnicodeDecodeError`` that reading it raised (lm-eval skips
    those)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    for root in paths:
        for file in sorted(Path(root).rglob("*.yaml")):
            try:
                yield file, yaml.load(file.read_text(encoding="utf-8"), Loader=Loader)  # noqa: S506 - SafeLoader
            except (yaml.YAMLError, UnicodeDecodeError) as err:
                yield file, err


def _unreadable_yamls(paths: list[str]) -> list[str]:
    """``file: error`` for each task YAML under ``paths`` that is not valid YAML (lm-eval skips those)."""
    return [
        f"{file}: {' '.join(str(held).split())}"
        for file, held in _task_yamls(paths)
        if isinstance(held, Exception)
    ]


def _defined_names(paths: list[str]) -> set[str]:
    """The task, group and tag names the YAMLs under ``paths`` define (a group's list of tasks names tasks
    defined elsewhere, and is not counted)."""
    names: set[str] = set()
    for _, held in _task_yamls(paths):
        if not isinstance(held, dict):
            continue
        for key in ("task", "group", "tag"):
            value = held.get(key)
            if isinstance(value, str):
                names.add(value)
            elif key == "tag" and isinstance(value, list):  # a task may carry several tags
                names.update(name for name in value if isinstance(name, str))
    return names


def _builtin_names() -> set[str]:
    """lm-eval's built-in task names, kept in this machine's cache per lm-eval version (indexing them takes
    ~10 s: a workflow checks its tasks at every start)."""
    from importlib.metadata import version

    from thanos.files.atomic import write_json
    from thanos.pruning.machine import machine_cache

    cached = machine_cache() / f"lm-eval-{version('lm_eval')}-tasks.json"
    with contextlib.suppress(OSError, ValueError):
        return set(json.loads(cached.read_text()))
    names = sorted(_index([], include_defaults=True).all_tasks)
    with contextlib.suppress(OSError):
        write_json(cached, names)
    return set(names)


def check_task_names(tasks: str | list[str] | None, include_path: str | list[str] | None = None) -> None:
    """Refuse a task name that no YAML under ``include_path`` defines and that is not a built-in task, as
    ``task_manager`` does (its error), without lm-eval's index of the built-in tasks: the names the YAMLs
    define, the cache of the built-in names (``_builtin_names``), then lm-eval's index of the YAMLs alone."""
    names, paths = parse_tasks(tasks), _include_paths(include_path)
    known = _defined_names(paths)
    if not set(names) <= known:
        known |= _builtin_names()
    if paths and not set(names) <= known:  # a name its YAMLs define in a way read here as none
        known |= set(_index(paths, include_defaults=False).all_tasks)
    _refuse_unknown(names, sorted(known), paths)


def load_tasks(manager: Any, tasks: list[str]) -> None:
    """Load every task's documents now (before a model is loaded): a task whose data cannot be read is
    refused naming the task, its YAML file and the error."""
    for task in tasks:
        try:
            manager.load([task])
        except Exception as err:  # noqa: BLE001 - datasets and lm-eval raise many kinds
            entry = manager.task_index.get(task)
            yaml_path = getattr(entry, "yaml_path", None)
            fix = "check the data files the task's YAML names (dataset_path, data_files, custom_dataset)"
            if isinstance(err, ConnectionError) or "on the Hub" in str(err):  # a hub dataset, offline
                fix = (
                    "its dataset is on the hub, which cannot be reached, and not cached: run once where the "
                    "hub can be reached (the documents are cached), or give tasks of local YAMLs "
                    "(--tasks NAME --include-path DIR; thanos demo-data writes one)"
                )
            raise PathError(
                f"lm-eval task {task!r} cannot load its documents ({type(err).__name__}: {err})",
                yaml_path or task,
                fix,
            ) from err


# the tasks whose documents this process loaded at a run's door (``check_documents``), by their index's key
_LOADED: set[tuple[Any, ...]] = set()


def check_documents(tasks: list[str], include_path: str | list[str] | None = None) -> None:
    """Every task's documents loaded now (``load_tasks``: a task whose data cannot be read, a hub dataset
    offline and not cached, is refused naming the task and its YAML), once per process for the same tasks:
    a run's door, before the pruning that the evaluation follows."""
    key = (tuple(tasks), str(include_path))
    if key not in _LOADED:
        load_tasks(task_manager(tasks, include_path), tasks)
        _LOADED.add(key)


# lm-eval's task indexes this process built, by what they index: a run's door checks the task names (the
# built-in tasks' index takes ~10 s) and its evaluation, after the pruning, reads the same index
_INDEXES: dict[tuple[Any, ...], Any] = {}


def _index(paths: list[str], include_defaults: bool) -> Any:
    """lm-eval's ``TaskManager`` of the task YAMLs under ``paths`` (and the built-in tasks), built once per
    process while those files are unchanged."""
    from lm_eval.tasks import TaskManager

    files = tuple(
        (str(file), file.stat().st_mtime_ns, file.stat().st_size)
        for root in paths
        for file in sorted(Path(root).rglob("*"))
        if file.is_file()
    )
    key = (tuple(paths), include_defaults, files)
    if key not in _INDEXES:
        _INDEXES[key] = TaskManager(include_path=paths or None, include_defaults=include_defaults)
    return _INDEXES[key]


def task_manager(tasks: list[str], include_path: str | list[str] | None = None) -> Any:
    """An lm-eval ``TaskManager`` that knows every name in ``tasks``; ValueError naming the unknown ones.

    When every task is defined under ``include_path``, only that directory is indexed (indexing the
    built-in tasks takes seconds); otherwise the built-in tasks are indexed as well, the include path
    taking precedence.
    """
    paths = _include_paths(include_path)
    if paths:
        local = _index(paths, include_defaults=False)
        if all(t in local.all_tasks for t in tasks):
            return local
    manager = _index(paths, include_defaults=True)
    _refuse_unknown(tasks, manager.all_tasks, paths)
    return manager


def _refuse_unknown(tasks: list[str], known: Collection[str], paths: list[str]) -> None:
    """Raise the OptionError naming the tasks not in ``known`` (lm-eval's names with those under ``paths``)
    and the known names closest to each."""
    unknown = [t for t in tasks if t not in known]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3)
        hints.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    where: tuple[str | Option, ...] = (" or under ", Option("include_path", ",".join(paths))) if paths else ()
    unreadable = _unreadable_yamls(paths)
    if unreadable:
        where += (f" (task files that could not be read there: {'; '.join(unreadable)})",)
    raise OptionError(
        Option("tasks"),
        f"unknown lm-eval task(s): {'; '.join(hints)}; not a built-in task",
        *where,
        ". List valid names with `lm-eval ls tasks` (add `--include_path DIR` for local tasks), or pass ",
        Option("include_path", "DIR"),
        " with a task YAML defining the task",
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _task_metrics(entry: dict[str, Any]) -> dict[str, Any]:
    """``{"acc,none": x, "acc_stderr,none": y}`` -> ``{"acc": x, "acc_stderr": y}`` (filter "none")."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        metric, _, filt = key.partition(",")
        if filt in ("none", "") and metric in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr"):
            out[metric] = _number(value)
    return out


def summarize(results: dict[str, Any], tasks: list[str]) -> dict[str, Any]:
    """The zeroshot.json content from lm-eval's ``simple_evaluate`` output."""
    import lm_eval

    per_task: dict[str, Any] = {}
    for name, entry in results.get("results", {}).items():
        metrics = _task_metrics(entry)
        if "acc" not in metrics:
            continue
        metrics.setdefault("acc_stderr", None)
        if "acc_norm" in metrics:
            metrics.setdefault("acc_norm_stderr", None)
        n = results.get("n-samples", {}).get(name, {})
        metrics["samples"] = n.get("effective") if isinstance(n, dict) else None
        metrics["version"] = results.get("versions", {}).get(name)
        metrics["num_fewshot"] = results.get("n-shot", {}).get(name)
        per_task[name] = metrics
    missing = [t for t in tasks if t not in per_task or per_task[t]["acc"] is None]
    if missing:
        raise ValueError(f"lm-eval reported no 'acc' for task(s) {', '.join(missing)}")
    accs = [per_task[t]["acc"] for t in tasks]
    return {
        "tasks": {t: per_task[t] for t in tasks} | {k: v for k, v in per_task.items() if k not in tasks},
        "mean_acc": sum(accs) / len(accs),
        "mean_over": tasks,
        "lm_eval_version": getattr(lm_eval, "__version__", None),
        "task_versions": {t: per_task[t]["version"] for t in per_task},
    }


@contextlib.contextmanager
def _without_environment_report() -> Iterator[None]:
    """lm-eval's ``simple_evaluate`` ends with ``add_env_info``: torch's ``collect_env``, which runs
    ``pip list``, ``nvidia-smi`` and more in subprocesses (half a second of CPU per evaluation on the demo
    machine, seconds in a large environment) for an environment report that zeroshot.json does not keep
    (it records the lm-eval and task versions); and ``get_git_commit_hash``, ``git describe`` of the
    working directory, whose ``fatal: not a git repository`` went to the terminal past the command's log
    (a subprocess writes to the process's stderr). Left out for the duration of the call."""
    import lm_eval.evaluator

    left_out = {"add_env_info": lambda results: None, "get_git_commit_hash": lambda: None}
    kept = {name: getattr(lm_eval.evaluator, name) for name in left_out if hasattr(lm_eval.evaluator, name)}
    for name in kept:  # (another lm-eval layout: what it lacks is not left out)
        setattr(lm_eval.evaluator, name, left_out[name])
    try:
        yield
    finally:
        for name, function in kept.items():
            setattr(lm_eval.evaluator, name, function)


def evaluate_zeroshot(
    model_path: str,
    tasks: str | list[str] | None = None,
    include_path: str | list[str] | None = None,
    batch_size: int = 1,
    limit: int | float | None = None,
    num_fewshot: int = 0,
    device: str = "auto",
    dtype: str = "auto",
    device_map: str | None = None,
    loaded: Any = None,
) -> dict[str, Any]:
    """Run lm-eval on the model at ``model_path``; returns the zeroshot.json content. ``loaded``: the
    model already loaded by ``load_model`` (``thanos evaluate`` loads it once for both evaluations).

    ``limit``: at most this many documents per task (a fraction < 1: that share of each task); for quick
    checks only, the paper uses every document.
    """
    names = parse_tasks(tasks)
    if batch_size < 1:
        raise ValueError(f"--batch-size {batch_size}: must be at least 1")
    if limit is not None and limit <= 0:
        raise ValueError(f"--limit {limit}: must be positive")
    manager = task_manager(names, include_path)  # fail on bad names and data before loading a big model
    load_tasks(manager, names)

    import lm_eval
    from lm_eval.models.huggingface import HFLM

    from thanos.evaluation.loading import load_model

    if loaded is None:
        loaded = load_model(model_path, device=device, dtype=dtype, device_map=device_map)
    lm = HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, batch_size=batch_size)
    start = time.perf_counter()
    with _without_environment_report():
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=names,
            num_fewshot=num_fewshot,
            batch_size=batch_size,
            limit=limit,
            task_manager=manager,
            log_samples=False,
        )
    seconds = time.perf_counter() - start
    if results is None:  # non-zero rank of a distributed run
        raise ValueError("lm-eval returned no results (run one process per model)")
    summary = summarize(results, names)
    summary |= {
        "num_fewshot": num_fewshot,
        "limit": limit,
        "batch_size": batch_size,
        "include_path": _include_paths(include_path) or None,
        "model": str(model_path),
        "device": loaded.placement,
        "dtype": loaded.dtype,
        "seconds": round(seconds, 3),
    }
    log.info("zero-shot mean acc %.4f over %s", summary["mean_acc"], ", ".join(names))
    return summary
