"""The size search's choice (``thanos.runner.size_choice``) as a unit: pure logic over a model of known
sizes and measurements given as functions, no pruning. The end-to-end search (``tests/test_params.py``)
keeps the wiring to the real pruning honest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from thanos.runner.size_axes import recipe_of
from thanos.runner.size_choice import GRID, choose, cost, most_removed, predict, table_points

# each axis's settings and the parameters each removes (of 1,000): depth removes big steps, neurons small
REMOVES = {
    "depth": {"depth:1": 100, "depth:2": 200, "depth:3": 300},
    "neurons": {f"neurons:0.{k}": 40 * k for k in range(1, 6)},
    "vocab": {"vocab:0.1": 30, "vocab:0.2": 60, "vocab:0.3": 90},
}
PARAMETERS = 1000


@dataclass
class Sizes:
    """A model of ``PARAMETERS`` parameters whose axes remove ``REMOVES`` (additive, as the real counts
    nearly are): what ``choose`` asks of ``Knobs``."""

    removes: dict[str, dict[str, int]] = field(default_factory=lambda: REMOVES)

    def settings(self, axis: str) -> list[str]:
        return list(self.removes[axis])

    def predicted(self, mix: dict[str, str]) -> int:
        return PARAMETERS - sum(self.removes[axis][setting] for axis, setting in mix.items())


def measured_by(loss_per_parameter: dict[str, float], short: int = 0) -> tuple[Any, list[str]]:
    """A ``measure`` whose loss is each part's removal times its axis's rate, squared (losses grow faster
    than removals), removing ``short`` parameters fewer than predicted; and the recipes it measured."""
    seen: list[str] = []

    def measure(mix: dict[str, str]) -> dict[str, Any]:
        recipe = recipe_of(mix)
        seen.append(recipe)
        removed = PARAMETERS - Sizes().predicted(mix) - short
        loss = sum((REMOVES[a][s] * loss_per_parameter[a]) ** 2 for a, s in mix.items())
        return {"recipe": recipe, "removed": removed, "loss": loss}

    return measure, seen


def test_the_table_measures_each_axis_near_fractions_of_the_parameters() -> None:
    mixes = table_points(Sizes(), ["depth", "neurons"])
    assert GRID == (0.05, 0.1, 0.2, 0.3)
    # depth: 50 -> depth:1 (100, the smaller on the tie with nothing nearer), 100 -> depth:1, 200 -> depth:2,
    # 300 -> depth:3; neurons: 300 -> neurons:0.5 (200, its largest), already there
    assert mixes == [
        {"depth": "depth:1"},
        {"depth": "depth:2"},
        {"depth": "depth:3"},
        {"neurons": "neurons:0.1"},  # 40, nearest 50
        {"neurons": "neurons:0.2"},  # 80, nearest 100
        {"neurons": "neurons:0.5"},  # 200
    ]


def test_every_size_reads_one_table() -> None:
    """Sizes of 160, 100 and 250 parameters read one table: with the measurements kept (as the search's
    ledger keeps them), a later size measures only the points the earlier ones did not reach, and its mixes;
    each size's points are points of the table."""
    measure, seen = measured_by({"depth": 0.01, "neurons": 0.002, "vocab": 0.004})
    kept: dict[str, dict[str, Any]] = {}

    def once(mix: dict[str, str]) -> dict[str, Any]:
        recipe = recipe_of(mix)
        return kept[recipe] if recipe in kept else kept.setdefault(recipe, measure(mix))

    table = [recipe_of(mix) for mix in table_points(Sizes(), ["depth", "neurons", "vocab"])]
    for target in (160, 100, 250):
        before = len(seen)
        recipe = choose(Sizes(), ["depth", "neurons", "vocab"], target, PARAMETERS, once)
        assert PARAMETERS - Sizes().predicted(mix_of(recipe)) >= target
        points = [r for r in seen[before:] if "+" not in r and r in table]
        assert seen[before : before + len(points)] == points, (target, seen[before:])  # the points first
        assert len(seen) == len(set(seen))  # none measured twice
    assert 0 < len([r for r in seen if r in table]) <= len(table)


def test_the_first_size_measures_the_points_the_later_sizes_reach() -> None:
    """``later``: the first of several sizes measures, before its mix is verified (which releases the
    table), the points the later sizes' mixes reach: their searches measure no point, only their mixes."""
    axes, rates = ["depth", "neurons", "vocab"], {"depth": 0.01, "neurons": 0.002, "vocab": 0.004}

    def points_of(sizes: list[tuple[int, tuple[int, ...]]]) -> list[list[str]]:
        """The points each size measured, the measurements kept from one to the next."""
        measure, seen = measured_by(rates)
        verify, _ = measured_by(rates)
        kept: dict[str, dict[str, Any]] = {}

        def once(mix: dict[str, str]) -> dict[str, Any]:
            recipe = recipe_of(mix)
            return kept[recipe] if recipe in kept else kept.setdefault(recipe, measure(mix))

        each = []
        for target, later in sizes:
            before = len(seen)
            choose(Sizes(), axes, target, PARAMETERS, once, verify, later)
            each.append(seen[before:])
        return each

    first, second, third = points_of([(100, (160, 250)), (160, ()), (250, ())])
    assert second == third == []
    (alone,) = points_of([(100, ())])
    assert set(alone) < set(first)  # the later sizes reach points the first alone does not


@pytest.mark.parametrize("target", [100, 160, 250])
def test_the_axes_asked_first_change_only_the_order_of_the_points(target: int) -> None:
    """``first``: those axes' first points measured before any other (the search's width points, whose
    pass over the dense chain writes the inputs the depth points read): the same points measured, the
    same mix chosen."""
    axes, rates = ["depth", "neurons", "vocab"], {"depth": 0.01, "neurons": 0.002, "vocab": 0.004}
    measure, seen = measured_by(rates)
    plain = choose(Sizes(), axes, target, PARAMETERS, measure)
    before = list(seen)
    seen.clear()
    assert choose(Sizes(), axes, target, PARAMETERS, measure, first=("neurons",)) == plain
    assert seen[0] == "neurons:0.1" and before[0] == "depth:1"
    assert sorted(seen) == sorted(before)


@pytest.mark.parametrize("rates", [(0.01, 0.002, 0.004), (0.01, 0.001, 0.05), (0.002, 0.01, 0.003)])
def test_the_table_measured_as_the_mix_reaches_it_predicts_what_the_whole_table_predicts(
    rates: tuple[float, float, float],
) -> None:
    """Every target from 10 to the most: the mix ``predict`` names reading only the points the greedy mix
    reaches is the whole table's mix, with the same predicted loss; fewer points measured for the small
    targets."""
    axes = ["depth", "neurons", "vocab"]
    measure, _ = measured_by(dict(zip(axes, rates, strict=True)))
    whole = len(table_points(Sizes(), axes))
    fewer = 0
    for target in range(10, most_removed(Sizes(), axes)[0] + 1, 10):
        read: list[str] = []

        def counted(mix: dict[str, str], read: list[str] = read) -> dict[str, Any]:
            read.append(recipe_of(mix))
            return measure(mix)

        assert predict(Sizes(), axes, target, counted) == predict(Sizes(), axes, target, measure, whole=True)
        assert len(read) <= whole and len(read) == len(set(read))
        fewer += len(read) < whole
    assert fewer > 0


def mix_of(recipe: str) -> dict[str, str]:
    return {part.split(":")[0]: part for part in recipe.split("+")}


def test_the_cheap_axis_takes_the_whole_target() -> None:
    measure, seen = measured_by({"depth": 0.01, "neurons": 0.001, "vocab": 0.05})
    recipe = choose(Sizes(), ["depth", "neurons", "vocab"], 200, PARAMETERS, measure)
    assert recipe == "neurons:0.5"
    # each axis's first point, then neurons' as the greedy mix goes along it (depth and vocab never cheaper
    # than their first), then the greedy mix (measured: it was predicted)
    assert seen == ["depth:1", "neurons:0.1", "vocab:0.2", "neurons:0.2", "neurons:0.5", "neurons:0.5"]


def test_the_prediction_is_the_first_mix_the_search_measures() -> None:
    """``predict`` (a dry run's, from the table alone) names the mix ``choose`` measures first after the
    table's points, with the parameters it removes and the loss recorded beside that mix's measurement."""
    measure, seen = measured_by({"depth": 0.01, "neurons": 0.01, "vocab": 0.002})
    kept: dict[str, dict[str, Any]] = {}

    def once(mix: dict[str, str]) -> dict[str, Any]:
        recipe = recipe_of(mix)
        return kept[recipe] if recipe in kept else kept.setdefault(recipe, measure(mix))

    axes = ["depth", "neurons", "vocab"]
    choose(Sizes(), axes, 200, PARAMETERS, once)
    recipe, removed, loss = predict(Sizes(), axes, 200, once)
    assert "+" in recipe and removed >= 200 and [r for r in seen if "+" in r][0] == recipe
    assert kept[recipe]["predicted_loss"] == loss and len(seen) == len(kept)  # nothing measured again


def test_a_spread_mix_wins_when_losses_grow_faster_than_removals() -> None:
    """Two axes of the same rate: the squared loss makes 100 + 100 cheaper than 200 on one axis."""
    measure, seen = measured_by({"depth": 0.01, "neurons": 0.01, "vocab": 1.0})
    recipe = choose(Sizes(), ["depth", "neurons"], 200, PARAMETERS, measure)
    assert recipe in seen and "+" in recipe, (recipe, seen)
    assert PARAMETERS - Sizes().predicted(mix_of(recipe)) >= 200


def test_a_mix_that_removes_too_little_on_the_written_model_is_followed_by_a_larger_one() -> None:
    measure, _ = measured_by({"depth": 0.01, "neurons": 0.001, "vocab": 0.05}, short=10)
    verified: list[str] = []

    def verify(mix: dict[str, str]) -> dict[str, Any]:
        verified.append(recipe_of(mix))
        return measure(mix)

    recipe = choose(Sizes(), ["depth", "neurons"], 160, PARAMETERS, measure, verify)
    assert len(verified) > 1  # the greedy mix fell 10 short: at least one more was measured
    assert recipe == verified[-1] and PARAMETERS - Sizes().predicted(mix_of(recipe)) - 10 >= 160


def test_the_mix_is_measured_by_verify_and_chosen_over_a_point_measured_otherwise() -> None:
    """``verify`` measures the mixes (a size writes each as its model), ``measure`` the table's points; the
    chosen is the mix that removes enough, even where a point of the table that removes enough measured a
    lower loss on its own footing (fewer calibration windows)."""
    measure, points = measured_by({"depth": 0.01, "neurons": 0.01, "vocab": 1.0})
    verified: list[str] = []

    def verify(mix: dict[str, str]) -> dict[str, Any]:
        verified.append(recipe_of(mix))
        return measure(mix) | {"loss": 99.0}  # measured on the written model: another scale

    recipe = choose(Sizes(), ["depth", "neurons"], 200, PARAMETERS, measure, verify)
    assert verified == [recipe] and "+" in recipe and recipe not in points[: len(points) - 1]
    assert any(REMOVES["depth"].get(p, 0) >= 200 for p in points)  # a point of the table removed enough


def test_an_unreachable_target_names_the_axes_and_the_fix() -> None:
    measure, _ = measured_by({"depth": 0.01, "neurons": 0.01, "vocab": 0.01})
    with pytest.raises(ValueError, match=r"no mix of depth, vocab removes 500 of the 1,000 .*--axes"):
        choose(Sizes(), ["depth", "vocab"], 500, PARAMETERS, measure)


def test_most_removed_is_every_axis_at_its_largest_setting() -> None:
    assert most_removed(Sizes(), ["depth", "vocab"]) == (390, "depth:3+vocab:0.3")
    assert most_removed(Sizes(removes=REMOVES | {"vocab": {}}), ["depth", "vocab"]) == (300, "depth:3")


def test_cost_interpolates_through_zero_and_never_falls_beyond_the_points() -> None:
    curve = [(100, 1.0), (200, 3.0)]
    assert cost(curve, 0) == 0.0
    assert cost(curve, 50) == pytest.approx(0.5)
    assert cost(curve, 150) == pytest.approx(2.0)
    assert cost(curve, 300) == pytest.approx(5.0)  # the last slope, 2 per 100
    assert cost([(100, 1.0), (200, 0.5)], 300) >= 0.5  # a falling measurement does not fall further
