"""The URL codec: every preset round-trips; a tampered link is a named problem, not a crash."""

import base64
import zlib

import pytest

from app.state import MAX_LINK_CHARS, config_from_query, config_to_query, decode_config, encode_config
from sim_core import PresetError, list_presets, load_preset
from sim_core.presets import DEFAULT_SCENARIO
from tests.conftest import make_config


@pytest.mark.parametrize("name", list_presets())
def test_unmodified_preset_gives_a_short_link(name):
    assert config_to_query(load_preset(name), name) == {"preset": name}


@pytest.mark.parametrize("name", list_presets())
def test_modified_config_round_trips_exactly(name):
    cfg = load_preset(name).model_copy(update={"seed": 12345})
    q = config_to_query(cfg, name)
    assert set(q) == {"cfg"} and len(q["cfg"]) < MAX_LINK_CHARS
    back, preset, warning = config_from_query(q)
    assert back == cfg and warning is None and preset is None


def test_link_of_a_config_equal_to_a_preset_recovers_its_name():
    cfg = load_preset("engine-orca")
    back, preset, _ = config_from_query({"cfg": encode_config(cfg)})
    assert back == cfg and preset == "engine-orca"


@pytest.mark.parametrize(
    "param,needle",
    [
        ({"cfg": "!!!not-base64!!!"}, "base64"),
        ({"cfg": base64.urlsafe_b64encode(b"plain text").decode()}, "compressed"),
        ({"cfg": base64.urlsafe_b64encode(zlib.compress(b"{oops")).decode()}, "JSON"),
        ({"cfg": base64.urlsafe_b64encode(zlib.compress(b'{"scheduler": {"max_num_seqs": -1}}')).decode()}, "scheduler.max_num_seqs = -1"),
        ({"preset": "no-such-thing"}, "unknown preset"),
    ],
)
def test_bad_link_falls_back_to_default_with_a_named_problem(param, needle):
    cfg, preset, warning = config_from_query(param)
    assert cfg == load_preset(DEFAULT_SCENARIO) and preset == DEFAULT_SCENARIO
    assert needle in warning and "default scenario" in warning


def test_zip_bomb_is_refused():
    bomb = base64.urlsafe_b64encode(zlib.compress(b"{" + b" " * (50 * 2**20) + b"}", 9)).decode()
    with pytest.raises(PresetError, match="too large"):
        decode_config(bomb)


def test_encoding_is_canonical():
    a = make_config(seed=5)
    b = make_config(seed=5)
    assert encode_config(a) == encode_config(b)
