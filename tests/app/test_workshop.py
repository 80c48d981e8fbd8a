"""Presenter-mode styling scales every chart text; normal mode leaves the cached figure untouched."""

from app.components import timeline, workshop
from sim_core import run_simulation
from tests.conftest import make_config


def test_presenter_mode_scales_every_text_of_a_copy():
    fig = timeline.timeline_figure(run_simulation(make_config(workload__num_requests=20)))
    big = workshop.style_figure(fig, presenter=True)
    size = workshop.PRESENTER_FONT_PX
    assert big is not fig and fig.layout.font.size is None  # the cached figure stays as built
    assert big.layout.font.size == size and big.layout.legend.font.size == size - 1
    assert big.layout.xaxis4.tickfont.size == size - 1 and all(a.font.size == size + 1 for a in big.layout.annotations)
    assert big.layout.height > fig.layout.height
    assert workshop.style_figure(fig, presenter=False) is fig


def test_a_full_url_without_a_browser_is_the_query():
    assert workshop.full_url({"preset": "chat-h100-llama8b"}) == "?preset=chat-h100-llama8b"
