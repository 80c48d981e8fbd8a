"""Published comparisons hold as trends (direction and rough size), with the untuned cost model."""

from sim_core.trends import run_trends


def test_sarathi_beats_prefill_first_and_paging_beats_contiguous_reservation():
    trends = run_trends(num_requests=400)
    sarathi, sarathi_engine_overheads, paging = trends
    assert sarathi.ratio > 2.0 and sarathi_engine_overheads.ratio > 2.0  # paper: 2.6x
    assert paging.ratio > 1.7  # paper: 1.7-2.7x (Oracle), 2.7-8x (Max)
    assert all(t.baseline_capacity > 0 for t in trends)
