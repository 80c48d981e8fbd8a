"""sim_core.words: counts with their nouns, latencies and shares as every message writes them."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as hs

from sim_core.words import counted, latency_text, percent, usd_text


def test_a_count_is_singular_for_one():
    assert counted(1, "tick") == "1 tick" and counted(1_200, "replica") == "1,200 replicas"
    assert counted(3, "stalled stretch", "stalled stretches") == "3 stalled stretches"


def test_a_latency_switches_to_seconds_at_one():
    assert latency_text(0.0419) == "41.9 ms" and latency_text(7.1735) == "7.17 s"


def test_a_share_keeps_the_decimals_a_miss_needs():
    # (299 of 300 requests meeting the SLOs read "100%", the same as all 300)
    assert percent(299 / 300) == "99.7%" and percent(1.0) == "100%" and percent(0.42) == "42%"
    assert percent(1 / 300) == "0.3%" and percent(0.0) == "0%" and percent(math.nan) == "n/a"
    assert percent(1 - 1e-7) == "≥99.9%" and percent(1e-7) == "≤0.1%"
    assert percent(0.9999999999999997) == "100%" == percent(1.0000000000000042)  # (a float sum's error is no miss)


@given(hs.floats(0, 1))
def test_only_all_reads_100_and_only_none_reads_0(share):
    text = percent(share)
    assert (text == "100%") == (round(share, 9) == 1) and (text == "0%") == (round(share, 9) == 0)
    assert text.endswith("%") and (text[0] in "≤≥" or abs(float(text[:-1]) - share * 100) <= 0.5)


def test_dollars_take_the_decimals_their_size_needs():
    # ($ per million output tokens at a tiny target rate read "$23789.164": three decimals on five digits)
    assert usd_text(23789.164) == "$23,789" and usd_text(2.414) == "$2.41" and usd_text(0.0534) == "$0.053"
    assert usd_text(4551.544, "") == "4,552"


@given(usd=hs.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_dollars_keep_three_significant_digits_or_whole_dollars(usd):
    text = usd_text(usd)
    digits = text.lstrip("$").replace(",", "").replace(".", "").lstrip("0")
    assert text.startswith("$") and (len(digits) >= 3 or usd < 0.1) and len(text) <= len(f"${usd:,.0f}") + 4
    assert abs(float(text[1:].replace(",", "")) - usd) <= max(0.5, usd * 0.005)
