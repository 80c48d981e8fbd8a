import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim_core.kvcache import BlockManager


def make(num_blocks=100, n=1, contiguous=None):
    return BlockManager(num_blocks, 50, 16, 10, n, contiguous)


def test_blocks_round_up_to_block_size():
    kv = make()
    assert kv.blocks_for(np.array([0, 1, 16, 17, 32]), 0).tolist() == [0, 1, 1, 2, 2]


def test_parallel_samples_share_full_prompt_blocks_and_copy_the_partial_one():
    kv = make(n=4)
    prompt = 40  # 2 full blocks + 8 tokens
    assert int(kv.blocks_for(40, prompt)) == 3  # prefill: one sequence
    assert int(kv.blocks_for(41, prompt)) == 2 + 4 * 1  # divergence: each sample owns a tail block


@given(ctx=st.integers(0, 10**9), prompt=st.integers(0, 10**9), n=st.integers(1, 4), contiguous=st.sampled_from([None, 4096]))
def test_one_request_as_a_python_int_needs_the_blocks_its_array_form_needs(ctx, prompt, n, contiguous):
    # (blocks_for takes one request's context as a Python int without NumPy: the admission test of each tick)
    kv = make(n=n, contiguous=contiguous)
    one = kv.blocks_for(ctx, prompt)
    assert int(one) == int(kv.blocks_for(np.array([ctx]), np.array([prompt]))[0])
    if n == 1 and contiguous is None:
        assert type(one) is int


def test_contiguous_reserves_max_len_for_each_sequence():
    kv = make(contiguous=4096, n=2)
    assert int(kv.blocks_for(1, 10)) == 2 * 256


def test_grow_free_and_swap_conserve_blocks():
    kv = make()
    kv.grow_to(np.array([1, 2]), np.array([10, 5]))
    assert kv.num_free == 85
    kv.check_invariants()
    assert kv.can_swap_out(1)
    assert kv.swap_out(1) == 10 and kv.num_free == 95 and kv.num_host_free == 40
    kv.check_invariants()
    kv.swap_in(1)
    kv.free(np.array([1, 2]))
    assert kv.num_free == 100 and kv.num_host_free == 50
    kv.check_invariants()


def test_blocks_fit_exactly_up_to_what_is_free_less_the_reserve():
    # (`BlockManager.fits` is the one statement of the rule: admission, swap-out and the scheduler's swap-in count,
    # on the scheduler's path and the scalar core's, all ask it, so an off-by-one here moves every executor alike and no
    # equivalence test can see it)
    kv = make()
    kv.grow_to(np.array([1]), np.array([30]))  # 30 blocks held: 70 free, 50 on the host
    assert kv.can_allocate(70) and not kv.can_allocate(71)
    assert kv.can_allocate(68, reserve=2) and not kv.can_allocate(69, reserve=2)
    assert kv.fits(50, 0, 50) and not kv.fits(51, 0, 50)
    kv.grow_to(np.array([2]), np.array([50]))  # 50 blocks: exactly the host's room
    assert kv.can_swap_out(2)
    kv.grow_to(np.array([3]), np.array([1]))
    kv.swap_out(3)  # one host block taken: request 2 no longer fits there
    assert not kv.can_swap_out(2)


def test_invariant_violation_is_detected():
    kv = make()
    kv.held[3] = 5  # allocated behind the manager's back
    with pytest.raises(RuntimeError, match="not conserved"):
        kv.check_invariants()
