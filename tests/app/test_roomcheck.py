"""The room check (app/roomcheck.py) against a real server: sessions at once over the browser's websocket, each page
complete and without an exception; its own arguments refused with a message."""

from __future__ import annotations

import tempfile

import pytest

from app import roomcheck


def test_a_room_of_sessions_on_a_real_server_each_gets_its_whole_page():
    port = roomcheck._free_port()
    with tempfile.TemporaryDirectory() as cache_dir:
        server = roomcheck.start_server(port, [], cache_dir)
        try:
            results = roomcheck.measure(port, 3, ["one link, new", "one Sweep link"])
        finally:
            server.terminate()
            server.wait(10)
    assert list(results) == ["one link, new", "one Sweep link"]
    for visits in results.values():
        assert len(visits) == 3 and all(v.num_exceptions == 0 and v.seconds > 0 for v in visits)
    table = roomcheck.format_table(results)
    assert "one Sweep link" in table and table.count("\n") == 2


@pytest.mark.parametrize("argv, said", [(["--sessions", "2"], "--sessions 2: at least 3"),
                                        (["--streamlit-option", "runner.postScriptGC"], "KEY=VALUE")])  # fmt: skip
def test_its_arguments_are_checked(argv, said, capsys):
    with pytest.raises(SystemExit) as stop:
        roomcheck.main(argv)
    assert stop.value.code == 2 and said in capsys.readouterr().err
