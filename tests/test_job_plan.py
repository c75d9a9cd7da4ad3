"""What the workflow decides while Snakemake parses it, as plain functions (``thanos.jobs.plan``,
``thanos.workflow.config``): the models it builds, the device check, the granularity, each job's GPUs and
the environment every job reads. The Snakemake side is tested in test_workflow.py and test_granularity.py."""

from __future__ import annotations

import pytest

from thanos.jobs import plan
from thanos.recipes.fields import ConfigError
from thanos.workflow.config import builds, built_models, check_model_names

TINY = {"family": "llama", "hidden_size": 32}
DEMO = {"enabled": True, "data_dir": "results/demo/data", "model_dir": "results/demo/model"}


def test_the_models_the_workflow_builds_by_their_normalised_path() -> None:
    models = {
        "a": {"path": "models/./a", "tiny": TINY},
        "b": {"path": "models/a", "tiny": TINY},  # the same tiny model: one spec per path
        "r": {"path": "models/r/", "real": {"name": "SmolLM2-135M"}},
        "hub": {"path": "org/model"},
    }
    tiny, real = built_models(models)
    assert tiny == {"models/a": TINY} and real == {"models/r": {"name": "SmolLM2-135M"}}
    built = tiny.keys() | real.keys()
    for path, expected in [
        ("models/a/", True),
        ("org/model", False),
        ("results/demo/data/calib.jsonl", True),
        ("results/demo/model", True),
        ("results/demo/database", False),
    ]:
        assert builds(path, DEMO, built) == expected, path
    assert not builds("results/demo/model", DEMO | {"enabled": False}, built)


def test_two_tiny_specs_at_one_path_are_refused_naming_both() -> None:
    models = {"a": {"path": "m", "tiny": TINY}, "b": {"path": "./m", "tiny": TINY | {"hidden_size": 64}}}
    with pytest.raises(ConfigError, match="models.a and models.b build different tiny models at the same"):
        built_models(models)


def test_a_model_named_as_a_report_directory_is_refused() -> None:
    check_model_names(["llama"], "results")
    with pytest.raises(ConfigError, match="models: tables names a directory of the report"):
        check_model_names(["llama", "tables"], "results")


def test_device_cuda_is_refused_where_the_jobs_see_no_gpu() -> None:
    asked = []

    def gpus() -> int:
        asked.append(1)
        return 0

    plan.check_device("cpu", local=True, gpus=gpus)
    plan.check_device("cuda", local=False, gpus=gpus)  # a cluster's nodes have their own
    assert not asked  # nvidia-smi is not run where the answer does not matter
    with pytest.raises(ConfigError, match="device: cuda:1, but the jobs of this machine would see no GPU"):
        plan.check_device("cuda:1", local=True, gpus=gpus)
    plan.check_device("cuda", local=True, gpus=lambda: 1)
    assert plan.local_gpus("cpu", 4, "auto") == 0 and plan.local_gpus("cuda", 2, "auto") == 2


def test_a_slot_pool_on_device_auto_counts_the_gpus_this_machine_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert plan.local_gpus("auto", None, 3) == 3  # the slot pool's devices
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # none shown: the jobs run on the CPU
    assert plan.local_gpus("auto", None, 4) == 0 and plan.local_gpus("cuda", None, 4) == 4
    shows = plan.granularity(
        "auto", [], remote=False, cluster=False, gpus=lambda: plan.local_gpus("auto", None, 4), environ={}
    )
    assert shows[0] == "recipe" and "on the CPU" in shows[1]


def test_the_granularity_is_chosen_once_and_inherited_by_re_parsed_jobs() -> None:
    env = dict(zip(plan.GRANULARITY_ENV, ["layer", "auto: 2 GPUs"], strict=True))
    chosen = plan.granularity("auto", [], remote=False, cluster=False, gpus=lambda: 2, environ={})
    assert chosen[0] == "layer" and chosen[1].startswith("auto: 2 GPUs")
    assert plan.granularity("auto", [], remote=True, cluster=True, gpus=lambda: 0, environ=env) == (
        "layer",
        "auto: 2 GPUs",
    )
    with pytest.raises(ConfigError, match=r"granularity: layer: recipes with recover \(r1\)"):
        plan.granularity("layer", ["r1"], remote=False, cluster=False, gpus=lambda: 0, environ={})


def test_each_job_asks_for_its_gpus_and_reads_its_environment() -> None:
    config = {"device": "auto", "gpu_slots": "auto", "eval_gpus": 2, "distill_processes": 3}
    config["zeroshot"] = {"offline": True, "batch_size": 16}
    config["perplexity"] = {"batch_size": 2}
    env = plan.job_env(config, "recipe", "set in the config")
    assert (env["THANOS_WF_PPL_BATCH"], env["THANOS_WF_ZEROSHOT_BATCH"]) == ("2", "16")  # not params
    assert env["THANOS_WF_EVAL_GPU"] == "python -m thanos.jobs.devices --slots auto --count 2 --"
    assert env["THANOS_WF_EVAL_PLACEMENT"] == "--device-map auto"
    assert (
        env["THANOS_WF_DISTILL"].endswith("--nproc-per-node 3") and env["THANOS_WF_GRANULARITY"] == "recipe"
    )
    assert env["THANOS_WF_ZEROSHOT_ENV"] == "env HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1"
    cpu = plan.job_env(config | {"device": "cpu", "eval_gpus": 1, "distill_processes": 1}, "layer", "")
    assert cpu["THANOS_WF_GPU"] == cpu["THANOS_WF_DISTILL_GPU"] == ""
    assert cpu["THANOS_WF_EVAL_PLACEMENT"] == "--device cpu" and cpu["THANOS_WF_DISTILL"] == "python"
    assert plan.job_gpus("cpu", 4) == 0 and plan.job_gpus("cuda", 4) == 4
    assert plan.figure_processes(False, 16) == 8 and plan.figure_processes(False, None) == 1
    assert plan.figure_processes(True, 16) == 1
    plan.check_eval_gpus(2, "cuda")
    with pytest.raises(ConfigError, match="eval_gpus: 2 spreads evaluated models over several GPUs"):
        plan.check_eval_gpus(2, "cpu")
