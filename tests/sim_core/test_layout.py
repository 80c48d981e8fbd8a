"""sim_core stays usable without the UI: it never imports streamlit or plotly."""

import ast
import subprocess
import sys
from pathlib import Path

SIM_CORE = Path(__file__).resolve().parents[2] / "sim_core"


def test_no_ui_imports_in_source():
    for path in SIM_CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] in ("streamlit", "plotly") for n in names), path


def test_runs_with_streamlit_and_plotly_blocked():
    code = ("import sys; sys.modules['streamlit'] = None; sys.modules['plotly'] = None; import sim_core; "
            "r = sim_core.run_simulation(sim_core.load_preset('chat-h100-llama8b')); print(r.summary.num_finished)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "300"
