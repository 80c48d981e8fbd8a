"""scripts/tick_cost.py: the fit and the saving it reports, and what its counting relies on (without valgrind)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

_ROOT = Path(__file__).parents[2]
_SPEC = importlib.util.spec_from_file_location("tick_cost", _ROOT / "scripts" / "tick_cost.py")
cost = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cost)


def _runs(fixed, decode, composed, request):
    shapes = {("a", 2): (130, 2), ("a", 64): (600, 60), ("a", 512): (3400, 450), ("b", 64): (400, 100), ("b", 512): (1650, 740)}
    return {key: (t, c, round(fixed + decode * (t - c) + composed * c + request * key[1])) for key, (t, c) in shapes.items()}


def test_the_fit_prices_each_part():
    assert cost.fit(_runs(4e6, 17e3, 40e3, 18e3)) == pytest.approx([4e6, 17e3, 40e3, 18e3], rel=1e-6)


def test_the_saving_brings_the_ratio_to_the_target():
    runs = _runs(4e6, 17e3, 40e3, 18e3)
    run, ref = runs[("b", 512)], runs[("a", 512)]
    x = cost.composed_saving(run, ref, 1.3)
    assert x > 0
    (t, c, i), (rt, rc, ri) = run, ref
    assert ((i - c * x) / t) / ((ri - rc * x) / rt) == pytest.approx(1.3)
    assert cost.composed_saving(run, ref, 2.0) <= 0  # (already under 2x)


def test_the_counted_run_is_the_only_operator_call(capsys):
    """Counts are collected inside `operator.call`: sim_core must never call it, and the child says its ticks."""
    for path in (_ROOT / "sim_core").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"\boperator\.call\b|from operator import[^\n]*\bcall\b", text), path
    cost._child(cost.REFERENCE, 2)
    ticks, composed = cost.ticks_of(capsys.readouterr().out)
    assert ticks > composed > 0


def test_the_child_says_the_collections_and_no_gc_turns_them_off(capsys):
    """`_child` reports the collections that fell in the counted run; `no_gc` counts it with the collector off, and
    the collector is on again afterwards. (A threshold of one allocation makes collections certain when it is on.)"""
    import gc

    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        cost._child(cost.REFERENCE, 2)
        on = cost.collections_of(capsys.readouterr().out)
        cost._child(cost.REFERENCE, 2, no_gc=True)
        off = cost.collections_of(capsys.readouterr().out)
    finally:
        gc.set_threshold(*thresholds)
    assert on[0] > on[1] > 0  # (each generation counted apart: a gen-1 collection takes every 2nd young one here)
    assert off == (0, 0, 0)
    assert gc.isenabled()
