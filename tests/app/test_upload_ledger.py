"""app/components/upload_ledger.py: the server counts the traces the sessions' configs hold, for as long as they
live, and refuses an upload past its limit with a message (the session keeps what it had)."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as hs

from app.components.runner import trace_bytes
from app.components.upload_ledger import UploadLedger
from sim_core.presets import DEFAULT_SCENARIO, load_preset
from tests.conftest import trace_config


def _traced(n: int, seed: int = 0):
    return trace_config([64 + i % 50 for i in range(n)], [8] * n, [0.05 * i for i in range(n)], seed=seed)


def test_a_config_is_counted_while_it_lives_and_once_by_identity():
    ledger = UploadLedger(1 << 30, trace_bytes)
    cfg = _traced(1_000)
    size = trace_bytes(cfg.workload.trace)
    assert size > 1_000 * 3 * 24  # (three columns of Python numbers: at least a float's 24 bytes each)
    ledger.hold(cfg)
    ledger.hold(cfg)
    assert ledger.num_bytes == size
    twin = cfg.model_copy(deep=True)  # equal, but another object: a second session holding its own copy holds it twice
    ledger.hold(twin)
    twin_size = trace_bytes(twin.workload.trace)  # (its lists' spare capacity may differ)
    assert twin == cfg and ledger.num_bytes == size + twin_size
    ledger.hold(load_preset(DEFAULT_SCENARIO))  # no trace: nothing held
    assert ledger.num_bytes == size + twin_size
    del cfg
    gc.collect()
    assert ledger.num_bytes == twin_size
    del twin
    gc.collect()
    assert ledger.num_bytes == 0


def test_an_upload_past_the_limit_is_refused_with_what_is_held_and_what_fits():
    first, second = _traced(2_000), _traced(2_000, seed=1)
    size = trace_bytes(first.workload.trace)
    ledger = UploadLedger(int(1.5 * size), trace_bytes)
    assert ledger.admit(first) is None and ledger.num_bytes == size
    said = ledger.admit(second)
    assert said is not None and ledger.num_bytes == size  # (not held)
    assert f"about {size / 2**10:,.0f} KiB" in said and f"of its {int(1.5 * size) / 2**10:,.0f} KiB" in said
    assert "the server setting uploads.max_bytes" in said and "your current config is unchanged" in said
    assert ledger.admit(first) is None  # (already held: not counted again)
    del first
    gc.collect()
    assert ledger.admit(second) is None and ledger.num_bytes == size  # the first session moved on: room again


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.tuples(hs.sampled_from(["hold", "admit", "drop"]), hs.integers(0, 5), hs.integers(1, 40)), max_size=40))
def test_the_count_is_the_live_configs_traces_whatever_the_order(ops):
    # generated: configs held, admitted and dropped in any order; the count is always the sum over the live ones held
    ledger = UploadLedger(200 * 40 * 100, trace_bytes)
    live: dict[int, object] = {}  # slot -> config
    held: dict[int, int] = {}  # id(config) -> bytes (the oracle)
    for op, slot, n in ops:
        if op == "drop":
            cfg = live.pop(slot, None)
            if cfg is not None:
                held.pop(id(cfg), None)
                del cfg
                gc.collect()
        else:
            cfg = live.setdefault(slot, _traced(n, seed=slot))
            size = trace_bytes(cfg.workload.trace)
            if op == "hold":
                ledger.hold(cfg)
                held[id(cfg)] = size
            elif ledger.admit(cfg) is None:
                held[id(cfg)] = size
            else:
                assert sum(held.values()) + size > ledger.max_bytes  # refused only past the limit
        assert ledger.num_bytes == sum(held.values())
