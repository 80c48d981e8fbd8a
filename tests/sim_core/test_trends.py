"""Published comparisons reproduced with each paper's setup: the simulated ratio stays within 1.5x of the paper."""

import pytest

from sim_core.trends import run_trends


@pytest.fixture(scope="module")
def trends():
    return run_trends(num_requests=400)


def test_every_trend_is_within_its_band(trends):
    for t in trends:
        assert t.baseline_capacity > 0, t.name
        assert t.holds, f"{t.name}: simulated {t.ratio:.2f}x, paper {t.claim}, band {t.band}"


def test_bands_are_one_and_a_half_times_the_published_range(trends):
    for t in trends:
        assert t.band == pytest.approx((t.paper_low / 1.5, t.paper_high * 1.5))
