"""An uploaded trace's requests are named by the file's lines, as the file's own messages name them."""

import pytest

from app.components.uploads import check_trace
from sim_core import PresetError, load_preset
from sim_core.traces import TraceOptions


def test_a_trace_request_the_config_refuses_is_named_by_its_line_in_the_file():
    # (a review: a request too long for max_model_len was "trace row 2", the second request replayed, which a
    # spreadsheet user reads as the wrong row; the file's own errors say "csv line 3")
    cfg = load_preset("chat-h100-llama8b")  # (max_model_len 131,072)
    text = b"arrival_s,prompt_tokens,output_tokens\n5,10,10\n9,100,20\n1,200000,200\n"  # replayed sorted by arrival
    with pytest.raises(PresetError) as err:
        check_trace(text, "t.csv", TraceOptions(), cfg, None)
    assert "csv line 4: prompt_tokens 200000 + output_tokens 200 = 200200 tokens" in str(err.value)
    assert "trace row" not in str(err.value)
    checked = check_trace(text.replace(b"200000,200", b"400,200"), "t.csv", TraceOptions(), cfg, None)
    assert checked.cfg.workload.trace.prompt_tokens == [400, 10, 100]


def test_a_file_named_like_a_trace_row_keeps_its_name():
    # (the first mapping renamed an upload "trace row 3.csv" "csv line 3.csv")
    cfg = load_preset("chat-h100-llama8b")
    with pytest.raises(PresetError) as err:
        check_trace(b"arrival_s,prompt_tokens,output_tokens\n0,200000,20\n", "trace row 3.csv", TraceOptions(), cfg, None)
    assert "'trace row 3.csv'" in str(err.value) and "csv line 2: prompt_tokens 200000" in str(err.value)
