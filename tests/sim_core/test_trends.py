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


def test_every_trend_points_the_papers_way_and_names_its_source(trends):
    # the band's lower edge is above 1 for these claims, but the direction is the claim: state it on its own
    import re

    for t in trends:
        assert t.contender_capacity > t.baseline_capacity, t.name
        assert re.search(r"(OSDI|SOSP)'\d\d", t.claim) and re.search(r"\bK5\d\d\b", t.claim), t.claim  # paper and data row
        assert re.search(r"(Sec\.|Fig\.|abstract)", t.claim), t.claim  # where in the paper
