"""What a size's runs keep for each other (``thanos.pruning.kept``): a value is kept while a scope keeping its
kind is open, dropped when the scope it was kept in ends, and nothing is kept outside every scope."""

from __future__ import annotations

from thanos.pruning import kept

ONE = 10  # the bytes of each value here


def _kept(kind: str) -> kept.Kept:
    """A ``Kept`` of ``kind`` beside the package's own, each value ``ONE`` byte-count."""
    return kept.Kept(kind, lambda value: ONE)


def test_a_value_lives_as_long_as_the_scope_it_was_kept_in() -> None:
    """A size's table (every kind) inside several sizes' writes (scores and passes only): a value the table
    kept is dropped when the table is measured, one the writes kept stays for the next size; a kind the
    outer scope does not keep is kept only inside the table's; outside both, nothing."""
    passes, factors = _kept(kept.BLOCK_PASSES), _kept(kept.FACTORS)
    assert passes.budget() == 0 and not passes.put("outside", 1, passes.budget())
    with kept.keeping(5 * ONE, kinds=(kept.BLOCK_PASSES,)):
        assert passes.budget() == 5 * ONE and factors.budget() == 0
        with kept.keeping(3 * ONE) as table:
            assert passes.budget() == factors.budget() == 3 * ONE
            assert passes.put("table", 1, passes.budget()) and factors.put("table", 1, factors.budget())
            kept.stop_keeping(table)  # the table measured
            kept.stop_keeping(table)  # said again (each mix verified after it): nothing more
            assert not passes.values and not factors.values and factors.budget() == 0
        assert passes.put("size 1's write", 1, passes.budget())
        with kept.keeping() as table:  # size 2's table: its values go with it, the writes' stay
            assert passes.put("size 2's table", 1, passes.budget())
        assert list(passes.values) == ["size 1's write"] and passes.get("size 1's write") == 1
    assert not passes.values and passes.budget() == 0


def test_the_first_values_that_fit_are_kept() -> None:
    """Beside those kept before it, a value beyond the budget is not kept (the later points read the first
    blocks' values first); a trim drops the values kept last."""
    scores = _kept(kept.BLOCK_SCORES)
    with kept.keeping(2 * ONE):
        assert [scores.put(key, 0, scores.budget()) for key in "abc"] == [True, True, False]
        scores.trim(ONE)
        assert list(scores.values) == ["a"]
