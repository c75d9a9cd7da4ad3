"""How a size search (``thanos.runner.size``) chooses its mix from measured candidates: each axis's cost
curve from its settings pruned alone (the cost table: the same settings whatever the size asked, so that
every size of a model, calibration and method reads one table; a point measured when the mix first reads
it, ``Table``), a greedy mix on the marginal cost per parameter removed, that mix measured (``verify``: the
size's search writes it as its model), and the mix of least loss that removes enough. ``measure(mix)``
prunes and measures a point of the table (or returns its measurement of an earlier run):
``{"removed": counted, "loss": ...}``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thanos.runner.size_axes import Knobs, recipe_of

Measure = Callable[[dict[str, str]], dict[str, Any]]
# the cost table: each axis measured alone at its settings nearest these fractions of the model's parameters,
# whatever the size asked (a second size measures none of them again). Small points, because every axis's
# loss grows faster than its parameters (SmolLM2: vocab:0.3 removes 6.3 % for 0.15 nats, vocab:0.6 12.6 % for
# 0.56), so the least loss spreads a size over several axes; a large one, because a curve extended past its
# last point underestimates it (SmolLM2: depth:10 measured 2.0 nats with a mix where the curve through 21 %
# gave 1.4; ``cost`` goes on at the steepest slope so far, which the 30 % point makes steep where it is).
GRID = (0.05, 0.1, 0.2, 0.3)
TRIES = 3  # mixes measured after the first when it removes too little


def choose(
    dense: Knobs,
    axes: list[str],
    target: int,
    parameters: int,
    measure: Measure,
    verify: Measure | None = None,
    later: tuple[int, ...] = (),
    first: tuple[str, ...] = (),
) -> str:
    """The explicit recipe that removes at least ``target`` of the dense model's ``parameters``: the table's
    points measured by ``measure`` as the greedy mix reaches them (``Table``), then the mix they predict
    measured by ``verify`` (the size's search writes a mix as its model and measures that; default
    ``measure``), one more step while it removes too little. The chosen: the mix of least measured loss
    among those that remove enough (measured alike), else the point of the table of least loss that does.
    Each mix's result gets ``predicted_loss``: the sum of its parts' costs on the table's curves, before it
    was measured. ``later``: the targets of the sizes searched after this one (``--sparsity
    params:0.15,0.25``), the points their mixes reach measured too before a mix is verified (``verify``
    releases the table: what its points computed more than once is dropped then, and their stages).
    ``first``: axes whose first point is measured before any other (the greedy's first step reads every
    axis's first point: only the order changes), those whose pruning computes what the others read."""
    mixes: list[dict[str, Any]] = []
    table = Table(dense, axes, measure)
    for axis in first:
        if table.grid[axis]:
            table.cost(axis, table.grid[axis][0])
    for goal in later:
        _greedy(dense, table, {axis: -1 for axis in axes}, goal)
    state = _greedy(dense, table, {axis: -1 for axis in axes}, target)
    for _ in range(TRIES):  # the prediction fell short on the written model: one more step
        mix = table.mix(state)
        if not mix:
            break
        predicted = _predicted_loss(table, state)
        result = (verify or table.measured)(mix)
        mixes.append(result)
        if verify is not None or mix not in table.points:  # beside what was measured (search.json, the card)
            result["predicted_loss"] = predicted
        if result["removed"] >= target or not _advance(dense, table, state):
            break
    enough = lambda found: [m for m in found if m["removed"] >= target]  # noqa: E731
    found = enough(mixes) or enough(table.results)
    if not found:
        raise ValueError(
            f"no mix of {', '.join(axes)} removes {target:,} of the {parameters:,} parameters; ask for less, "
            "or allow more axes (--axes)"
        )
    return min(found, key=lambda m: (m["loss"], m["removed"]))["recipe"]


def predict(
    dense: Knobs, axes: list[str], target: int, measure: Measure, whole: bool = False
) -> tuple[str, int, float]:
    """The mix the cost table predicts for ``target``, the first ``choose`` measures after the table: (its
    recipe, the parameters it removes, predicted on the meta device, its loss predicted by the curves);
    ``measure`` gives the table's points (a search's earlier measurements: nothing is pruned here);
    ``whole``: every point of the table measured first (``--table-only``), not only those the mix reads."""
    table = Table(dense, axes, measure)
    if whole:
        for axis in axes:
            table.cost(axis, len(table.settings[axis]) - 1)
    state = _greedy(dense, table, {axis: -1 for axis in axes}, target)
    mix = table.mix(state)
    removed = dense.predicted({}) - dense.predicted(mix)
    return recipe_of(mix), removed, _predicted_loss(table, state)


class Table:
    """The cost table as the greedy mix reads it: each axis's cost curve through its points
    (``table_points``), a point measured (``measure``) only when a cost asked of its axis lies on or before
    it, so that a size measures the points its mix reaches and the next on each axis (SmolLM2-135M,
    ``params:0.25``: 8 of the 13), and chooses what the whole table chooses: a cost between two points
    reads those two alone, one beyond the last point reads the whole curve."""

    def __init__(self, dense: Knobs, axes: list[str], measure: Measure) -> None:
        self.settings, self.alone = _alone(dense, axes)
        points = _points(self.alone, dense.predicted({}))
        # each axis's points, the least removal first
        self.grid = {axis: sorted((i for a, i in points if a == axis), key=self.alone[axis].__getitem__)
                     for axis in axes}  # fmt: skip
        self.curves: dict[str, list[tuple[int, float]]] = {axis: [] for axis in axes}
        self.points: list[dict[str, str]] = []  # measured, in the order the greedy reached them
        self.results: list[dict[str, Any]] = []  # every measurement, the table's points and the mixes
        self._measure = measure

    def measured(self, mix: dict[str, str]) -> dict[str, Any]:
        """``mix`` measured by the table's ``measure``, its result kept among the candidates."""
        self.results.append(self._measure(mix))
        return self.results[-1]

    def cost(self, axis: str, i: int) -> float:
        """The axis's loss at its ``i``-th setting (-1: none, no loss) on its curve (``cost``), the points
        that curve reads there measured first."""
        if i < 0:
            return 0.0
        removed = self.alone[axis][i]
        for k in self.grid[axis]:
            point = {axis: self.settings[axis][k]}
            if point not in self.points:
                loss = self.measured(point)["loss"]
                self.points.append(point)
                self.curves[axis].append((self.alone[axis][k], max(0.0, loss)))
            if self.alone[axis][k] >= removed:
                break
        return cost(self.curves[axis], removed)

    def mix(self, state: dict[str, int]) -> dict[str, str]:
        """The settings of ``state`` (each axis's setting index, -1: none) as a mix."""
        return {axis: self.settings[axis][i] for axis, i in state.items() if i >= 0}


def _alone(dense: Knobs, axes: list[str]) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
    """(each axis's settings, the parameters each setting removes alone), predicted on the meta device."""
    base = dense.predicted({})
    settings = {axis: dense.settings(axis) for axis in axes}
    return settings, {axis: [base - dense.predicted({axis: s}) for s in settings[axis]] for axis in axes}


def _predicted_loss(table: Table, state: dict[str, int]) -> float:
    """A mix's loss predicted by the table: the sum of its parts' costs on their axes' curves."""
    return sum(table.cost(axis, i) for axis, i in state.items() if i >= 0)


def most_removed(dense: Knobs, axes: list[str]) -> tuple[int, str]:
    """The most parameters the axes can remove together, and the mix that removes them (each axis at its
    largest setting), predicted before anything is pruned."""
    mix = {axis: settings[-1] for axis in axes if (settings := dense.settings(axis))}
    return dense.predicted({}) - dense.predicted(mix), recipe_of(mix)


def table_points(dense: Knobs, axes: list[str]) -> list[dict[str, str]]:
    """The cost table's points, those of them ``choose`` reaches measured before any mix, whatever they
    measure: each axis alone at its settings nearest ``GRID`` of the model's parameters (independent of
    each other and of the size: the workflow measures every one as a job of its own,
    workflow/rules/search.smk)."""
    settings, alone = _alone(dense, axes)
    return [{axis: settings[axis][i]} for axis, i in _points(alone, dense.predicted({}))]


def _points(alone: dict[str, list[int]], parameters: int) -> list[tuple[str, int]]:
    """(axis, index of its setting) of each point of the cost table, axis by axis."""
    return [
        (axis, i)
        for axis, removals in alone.items()
        for i in sorted({_nearest(removals, share * parameters) for share in GRID})
    ]


def _nearest(removals: list[int], goal: float) -> int:
    """The index of the removal nearest ``goal`` (the smaller on a tie)."""
    return min(range(len(removals)), key=lambda i: (abs(removals[i] - goal), i))


def cost(curve: list[tuple[int, float]], removed: int) -> float:
    """The axis's loss at ``removed`` parameters: piecewise linear through (0, 0) and the measured points,
    the last slope beyond them (never falling)."""
    points = [(0, 0.0), *sorted(curve)]
    for (r0, c0), (r1, c1) in zip(points, points[1:], strict=False):
        if removed <= r1:
            return c0 + (c1 - c0) * (removed - r0) / max(1, r1 - r0)
    (r0, c0), (r1, c1) = points[-2], points[-1]
    slope = max((c1 - c0) / max(1, r1 - r0), c1 / max(1, r1))
    return c1 + slope * (removed - r1)


def _advance(dense: Knobs, table: Table, state: dict[str, int]) -> bool:
    """Advance ``state`` (in place) by the step of least added cost per parameter removed; False when no
    axis has a next setting."""
    removed = dense.predicted({}) - dense.predicted(table.mix(state))
    best: tuple[float, str] | None = None
    for axis, i in state.items():
        if i + 1 >= len(table.settings[axis]):
            continue
        gained = dense.predicted({}) - dense.predicted(table.mix(state | {axis: i + 1})) - removed
        if gained > 0:
            rate = (table.cost(axis, i + 1) - table.cost(axis, i)) / gained
            best = min(best, (rate, axis)) if best else (rate, axis)
    if best is None:
        return False
    state[best[1]] += 1
    return True


def _greedy(dense: Knobs, table: Table, start: dict[str, int], target: int) -> dict:
    """From ``start``, advance until the predicted removal reaches ``target``, then step back every axis
    that can go back and still reach it (the largest saving first)."""
    state = dict(start)
    base = dense.predicted({})
    while base - dense.predicted(table.mix(state)) < target:
        if not _advance(dense, table, state):
            return state
    while True:
        backs = [
            (table.cost(axis, i) - table.cost(axis, i - 1), axis)
            for axis, i in state.items()
            if i >= 0 and base - dense.predicted(table.mix(state | {axis: i - 1})) >= target
        ]
        if not backs:
            return state
        state[max(backs)[1]] -= 1
