"""The calibrated cost model against published measurements (../shared/calibration)."""

import pytest

from sim_core.config import CalibrationConfig
from sim_core.validate import CALIBRATION_CSV, build_rows, error_stats, evaluate, fit, load_rows, research_calibration

pytestmark = pytest.mark.skipif(not CALIBRATION_CSV.exists(), reason="shared/calibration not beside the repo")


@pytest.fixture(scope="module")
def rows():
    return build_rows(load_rows())


def test_held_out_error_meets_the_target(rows):
    n, median, p90 = error_stats(evaluate(rows))
    assert n >= 60
    assert median <= 15 and p90 <= 35


def test_every_section_is_replayed(rows):
    sections = {r.id[0] for r in rows}
    assert {"A", "E", "H", "I"} <= sections


def test_defaults_are_what_the_fit_produces(rows):
    default, research = fit(rows)
    assert CalibrationConfig().model_dump() == pytest.approx(default)
    assert research_calibration() == pytest.approx(research)
