"""Validation messages of checks across fields: each names the field to change by its full dotted path, its value,
and what is allowed (a hostile-input review found "model = dict: ..." and "(config): ..." lines)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as hs
from pydantic import ValidationError

from sim_core import PresetError, config_from_dict, format_validation_error, load_preset
from sim_core.config import ModelSpec, set_dotted

P = "chat-h100-llama8b"


def _error(*sets: tuple[str, object], preset: str = P) -> str:
    data = load_preset(preset).model_dump(mode="json")
    for path, value in sets:
        set_dotted(data, path, value)
    with pytest.raises(PresetError) as err:
        config_from_dict(data)
    return str(err.value)


@pytest.mark.parametrize(("sets", "line"), [
    ((("model.num_kv_heads", 7),),
     "model.num_kv_heads = 7: must divide model.num_heads (32) evenly (query heads share KV heads in equal groups); "
     "allowed: 1, 2, 4, 8, 16, 32"),
    ((("model.num_experts_per_token", 2),), "model.num_experts_per_token = 2: must be <= model.num_experts (1)"),
    ((("workload.prompt_tokens.mean", 99999),),
     "workload.prompt_tokens.mean = 99999: must lie between workload.prompt_tokens.min (16) and "
     "workload.prompt_tokens.max (8192) (workload.prompt_tokens.dist 'lognormal'); allowed: >= 16 and <= 8192"),
    ((("workload.prompt_tokens.min", 99999),), "workload.prompt_tokens.min = 99999: must be <= workload.prompt_tokens.max"),
    ((("hardware.interconnect", "nvlink-bridge"), ("hardware.num_gpus", 4)),
     "hardware.num_gpus = 4: an NVLink bridge (hardware.interconnect 'nvlink-bridge') joins a pair of GPUs; allowed "
     "with it: 1 or 2"),
    ((("scheduler.speculative.num_draft_tokens", 2),
      ("scheduler.speculative.acceptance_by_position", [0.5, 0.5, 0.5])),
     "scheduler.speculative.acceptance_by_position = [0.5, 0.5, 0.5]: has 3 entries; it needs one per draft token, "
     "scheduler.speculative.num_draft_tokens (2)"),
    ((("scheduler.max_num_batched_tokens", 1),),
     "scheduler.max_num_batched_tokens = 1: must be >= scheduler.max_num_seqs (256) under scheduler.prefill_mode "
     "'decode_first', so that every running decode fits in one tick; allowed: >= 256 and <= 1048576"),
    ((("scheduler.enable_chunked_prefill", False), ("scheduler.prefill_mode", "prefill_first"),
      ("scheduler.max_num_batched_tokens", 300)),
     "scheduler.max_num_batched_tokens = 300: smaller than the longest prompt (8192) while chunked prefill is off"),
    ((("kv_cache.enable_prefix_caching", True), ("kv_cache.layout", "contiguous")),
     "kv_cache.enable_prefix_caching = true: needs kv_cache.layout 'paged'"),  # (true as written: JSON)
    ((("scheduler.speculative.enabled", True), ("workload.num_samples", 2)),
     "workload.num_samples = 2: must be 1 while scheduler.speculative.enabled is true"),
    ((("model.max_model_len", 100),), "model.max_model_len = 100: the workload can produce"),
    ((("workload.classes", [{"share": 0.5}]),), "workload.classes.0.share = 0.5: the classes' shares must sum to 1, got 0.5"),
])  # fmt: skip
def test_a_check_across_fields_names_the_field_its_value_and_the_range(sets, line):
    text = _error(*sets)
    assert f"\n  {line}" in text, text
    assert "= dict" not in text and "(config)" not in text, text


def test_a_pools_section_is_named_by_the_pools_path():
    hw = load_preset(P).hardware.model_dump(mode="json") | {"interconnect": "nvlink-bridge", "num_gpus": 4}
    text = _error(("deployment.disaggregation.prefill.hardware", hw))
    assert ("deployment.disaggregation.prefill.hardware.num_gpus = 4: an NVLink bridge "
            "(deployment.disaggregation.prefill.hardware.interconnect 'nvlink-bridge')") in text, text


def test_a_model_checked_alone_names_its_own_fields():
    with pytest.raises(ValidationError) as err:
        ModelSpec(num_heads=32, num_kv_heads=7)
    assert "\n  num_kv_heads = 7: must divide num_heads (32) evenly" in format_validation_error(err.value, root=ModelSpec)


@pytest.mark.parametrize(("value", "line"), [
    ([0.5, 2, 0.5], "acceptance_by_position.1 (entry 2) = 2: out of range; allowed: >= 0 and <= 1"),
    ([float("nan"), 0.5, 0.5], "acceptance_by_position.0 (entry 1) = nan: Input should be a finite number; allowed: >= 0 and <= 1"),
    ([-0.1, 0.5, 0.5], "acceptance_by_position.0 (entry 1) = -0.1: out of range; allowed: >= 0 and <= 1"),
])  # fmt: skip
def test_an_acceptance_entry_out_of_range_is_named_with_its_index_and_range(value, line):
    text = _error(("scheduler.speculative.acceptance_by_position", value))
    assert f"\n  scheduler.speculative.{line}" in text, text


def test_an_unknown_draft_model_is_named_by_its_field_with_the_known_presets():
    text = _error(("scheduler.speculative.draft", "model"), ("scheduler.speculative.draft_model", "llama-3.2-1c"))
    assert ("\n  scheduler.speculative.draft_model = 'llama-3.2-1c': unknown model preset (did you mean 'llama-3.2-1b'?); "
            "allowed (with draft 'model'): gpt-175b, ") in text, text
    # a head draft does not read the field: its value is not checked
    data = load_preset(P).model_dump(mode="json")
    set_dotted(data, "scheduler.speculative.draft_model", "nosuch")
    assert config_from_dict(data).scheduler.speculative.draft_model == "nosuch"


def test_a_draft_model_of_another_vocabulary_is_refused_naming_the_drafts_that_fit():
    # Llama-2-7B (32,000 tokens) drafted for Llama-3.1-8B (128,256) and ran: vLLM refuses the pair at start-up
    text = _error(("scheduler.speculative.enabled", True), ("scheduler.speculative.draft", "model"),
                  ("scheduler.speculative.draft_model", "llama-2-7b"))
    assert (f"\n  scheduler.speculative.draft_model = 'llama-2-7b': its vocabulary (32,000 tokens) differs from the target "
            "model's (128,256)") in text and "allowed with this model: llama-3.1-70b, llama-3.1-8b, llama-3.2-1b" in text
    # the same draft for a Llama-2 target is fine, and an unread draft model (speculation off) is not checked
    ok = {"model": "llama-2-13b", "model.max_model_len": 16384, "scheduler.speculative.enabled": True, "scheduler.speculative.draft": "model",
          "scheduler.speculative.draft_model": "llama-2-7b"}
    from sim_core.presets import config_with

    assert config_with(load_preset(P), ok).scheduler.speculative.draft_model == "llama-2-7b"
    assert config_with(load_preset(P), {"scheduler.speculative.draft": "model", "scheduler.speculative.draft_model": "llama-2-7b"})


@pytest.mark.parametrize(("version", "said"), [
    (99, "schema_version = 99: the config was written by a newer version of the tool (schema version 99); this tool "
         "reads schema versions 1 to 3 (older ones are migrated): update the tool to read it"),
    (0, "schema_version = 0: not a schema version; this tool reads schema versions 1 to 3 (older ones are migrated); "
        "allowed: 1 to 3"),
])  # fmt: skip
def test_a_schema_version_it_cannot_read_says_which_it_reads(version, said):
    data = load_preset(P).model_dump(mode="json") | {"schema_version": version}
    with pytest.raises(PresetError) as err:
        config_from_dict(data)
    assert f"\n  {said}" in str(err.value), str(err.value)
    assert config_from_dict(data | {"schema_version": 2}).schema_version == 3  # (older ones are read)


@pytest.mark.parametrize("path", ["hardware.name", "model.name", "workload.name", "scheduler.name", "name",
                                  "hardware.source", "model.source", "description"])
def test_every_name_and_text_field_has_a_stated_length_limit(path):
    # a 15 MB hardware.name in a config file was accepted and printed back whole
    text = _error((path, "x" * 15_000_000))
    line = next(x for x in text.splitlines() if x.strip().startswith(f"{path} = "))
    # (once: "String should have at most 120 characters; allowed: 1 to 120 characters" said it twice)
    assert ": too long; allowed: " in line and line.endswith(" characters") and "String should" not in line, line
    assert len(text) < 2000, len(text)


@pytest.mark.parametrize("path", ["hardware.name", "model.name", "workload.name", "scheduler.name"])
def test_an_empty_section_name_is_refused_with_its_range(path):
    assert f"\n  {path} = '': too short; allowed: 1 to 120 characters" in _error((path, ""))


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_scenario_name_reads_as_the_default(blank):
    # (`--set name=` made the summary start with ": Llama-3.1-8B ...")
    data = load_preset(P).model_dump(mode="json") | {"name": blank}
    assert config_from_dict(data).name == "custom"


def test_a_pools_invalid_engine_is_named_by_the_pools_fields():
    # "deployment.disaggregation.prefill makes an invalid engine: scheduler.max_num_batched_tokens: ..." named the
    # top-level scheduler, which a pool with its own does not read, and neither the value nor the fields it needs
    pool = "deployment.disaggregation.prefill"
    text = _error((f"{pool}.scheduler.max_num_batched_tokens", 1), preset="cluster-distserve-opt13b-3xa100-p2d1")
    assert (f"{pool} makes an invalid engine: {pool}.scheduler.max_num_batched_tokens = 1: smaller than the longest "
            f"prompt (2003) while chunked prefill is off ({pool}.scheduler.enable_chunked_prefill false") in text, text


@pytest.mark.parametrize(("value", "line"), [
    (1e9, "scheduler.max_num_seqs = 1000000000: out of range; allowed: >= 1 and <= 8192"),
    (-4.0, "scheduler.max_num_seqs = -4: out of range; allowed: >= 1 and <= 8192"),
    (200.0, "scheduler.max_num_seqs = 200: write it as the whole number 200, without an exponent or a decimal point"),
    (2.5, "scheduler.max_num_seqs = 2.5: Input should be a valid integer; allowed: >= 1 and <= 8192"),
])
def test_a_whole_number_written_as_a_float_is_said_as_the_number_and_its_range(value, line):
    # a link's `scheduler.max_num_seqs=1e9` read "= 1000000000.0: Input should be a valid integer ... (write a whole
    # number without quotes or a decimal point)": neither the number meant nor that it is out of range
    assert line in _error(("scheduler.max_num_seqs", value))


@settings(max_examples=60, deadline=None)
@given(hs.integers(-10**15, 10**15).filter(lambda n: not 1 <= n <= 8192))
def test_every_whole_float_out_of_range_is_said_as_an_integer_with_its_range(n):
    assert f"scheduler.max_num_seqs = {n}: out of range; allowed: >= 1 and <= 8192" in _error(("scheduler.max_num_seqs", float(n)))


def test_a_refused_value_is_quoted_as_the_json_it_was_written_in(capsys):
    # "--set scheduler.max_num_seqs=true" read "= True", a link's null "= None": Python's words for JSON's
    from sim_core.cli import main
    from sim_core.config import shown_value

    assert [shown_value(v) for v in (True, False, None, [True, None, 2], {"a": False})] == [
        "true", "false", "null", "[true, null, 2]", "{'a': false}"]
    assert main(["run", "chat-h100-llama8b", "--set", "scheduler.max_num_seqs=true"]) == 2
    assert "scheduler.max_num_seqs = true: Input should be a valid integer" in capsys.readouterr().err


def test_an_unknown_key_of_any_length_is_quoted_cut_short(tmp_path, capsys):
    # a 100,000-character key was echoed whole (twice: 200 KB) by a config file, --set, and the upload's message
    from sim_core.cli import main
    from sim_core.config import MAX_SHOWN_PATH

    long = "k" * 100_000
    path = tmp_path / "long.json"
    path.write_text('{"' + long + '": 1}')
    for args in (["run", str(path)], ["run", "chat-h100-llama8b", "--set", f"{long}=1"],
                 ["run", "chat-h100-llama8b", "--set", f"workload.{long}=1"]):  # fmt: skip
        assert main(args) == 2
        err = capsys.readouterr().err
        assert len(err) < 1000 and "k" * MAX_SHOWN_PATH + "…" in err and "(100,000 characters)" in err, err[:300]


@settings(max_examples=60, deadline=None)
@given(text=hs.text(alphabet=hs.characters(max_codepoint=0xA0, exclude_categories=("Cs",)), max_size=20))
def test_text_fields_refuse_control_characters_but_tabs_and_line_breaks(text):
    # a config named "x\x1b[2J\x1b]0;pwned\x07" cleared the terminal of whoever ran it (the CLI prints names)
    from sim_core import SimConfig

    controls = [ch for ch in text if (ord(ch) < 0x20 and ch not in "\t\n\r") or 0x7F <= ord(ch) <= 0x9F]
    try:
        cfg = SimConfig.model_validate({"name": text})
    except ValidationError as err:
        said = format_validation_error(err)
        assert controls and f"control character U+{ord(controls[0]):04X}" in said and "name = " in said, said
        assert not any(ch in said for ch in controls)  # (quoted escaped)
    else:  # (none, or only ones the name's whitespace strip removed: "\x1f".isspace())
        assert not [ch for ch in cfg.name if (ord(ch) < 0x20 and ch not in "\t\n\r") or 0x7F <= ord(ch) <= 0x9F]
        assert all(ch.isspace() for ch in controls)


@settings(max_examples=25, deadline=None)
@example(field="engine", stem="A", times=3_000_000)  # (the link's)
@given(field=hs.sampled_from(["engine", "hardware", "model", "workload", "calibration", "trace.file",
                              "deployment.disaggregation.prefill.hardware"]),
       stem=hs.text(alphabet=hs.characters(max_codepoint=0x7E, min_codepoint=0x21), min_size=1, max_size=40),
       times=hs.integers(101, 200_000))
def test_a_preset_name_of_any_length_is_quoted_cut_short(field, stem, times):
    # a link's 3,000,000-character engine name (6.5 kB zipped) came back whole in a 3 MB warning that froze the tab
    from sim_core.config import MAX_SHOWN_PATH

    name = stem * times  # (over MAX_SHOWN_PATH characters)
    data = load_preset(P).model_dump(mode="json")
    if field == "deployment.disaggregation.prefill.hardware":
        data = load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d").model_dump(mode="json")
    if field == "trace.file":  # (a scenario's bundled trace)
        data["trace"] = {"file": name}
    else:
        set_dotted(data, field, name) if "." in field else data.__setitem__(field, name)
    with pytest.raises(PresetError) as err:
        config_from_dict(data)
    said = str(err.value)
    assert len(said) < 3_000 and name not in said, said[:300]
    assert f"{name[:MAX_SHOWN_PATH]!r}… ({len(name):,} characters)" in said, said[:300]


def test_a_config_with_thousands_of_problems_lists_a_dozen_and_counts_the_rest():
    # a 5,648-character link with 1,000 unknown scheduler keys made a 365,842-character warning (10,000: 3.7 MB)
    from sim_core.config import MAX_SHOWN_PROBLEMS

    data = load_preset(P).model_dump(mode="json")
    data["scheduler"].update({f"k{i}": 1 for i in range(10_000)})
    with pytest.raises(PresetError) as err:
        config_from_dict(data)
    lines = str(err.value).splitlines()
    assert len(lines) == 1 + MAX_SHOWN_PROBLEMS + 1 and lines[1].startswith("  scheduler.k0"), lines[:3]
    assert lines[-1] == f"  … and {10_000 - MAX_SHOWN_PROBLEMS:,} more problem(s) of the same config, listed once these are mended"
    # (the section's fields listed once, not on each of the dozen lines)
    assert str(err.value).count("fields here: admission") == 1 and lines[2] == "  scheduler.k1 = 1: unknown field 'k1' (fields here: as above)"
    assert len(str(err.value)) < 2_000


@pytest.mark.parametrize("digits", ["9" * 400, "-" + "9" * 400])
def test_an_integer_past_a_float_is_said_as_out_of_range_not_as_inf(digits):
    # a 400-digit seed in a link read "seed = inf: Input should be a valid integer"
    from sim_core import config_from_json

    with pytest.raises(PresetError) as err:
        config_from_json('{"seed": ' + digits + "}")
    sign = "-" if digits.startswith("-") else ""
    assert f"seed = a number past {sign}1e+308: out of range; allowed: >= 0 and <= 4294967295" in str(err.value)
