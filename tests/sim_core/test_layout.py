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


def test_documents_named_in_the_repository_are_in_it():
    # A clone is all a reader has: a comment, docstring, README line or lesson that sends them to a Markdown document
    # by its bare name (as 'DESIGN.md §8' did, a design brief kept outside the repository) must name one the clone
    # holds. (A path, 'docs/gpt_guide.md', cites another project's document: a source, not one of ours.)
    import re

    root = SIM_CORE.parent
    held = {p.name for p in root.rglob("*.md") if ".git" not in p.parts}
    sources = [p for pattern in ("sim_core/**/*.py", "app/**/*.py", "scripts/*.py", "tests/**/*.py", "presets/**/*.json", "*.md")
               for p in root.glob(pattern)]
    assert len(sources) > 100
    named = {(p.relative_to(root).as_posix(), name) for p in sources if p.name != "test_layout.py"
             for name in re.findall(r"(?<![\w./-])([A-Za-z][\w-]*\.md)\b", p.read_text(encoding="utf-8"))}
    assert not {(path, name) for path, name in named if name not in held}
    # and a section cited by document name, 'DESIGN §8' or 'published_measurements.md §3', is in a document held here
    # ('article §5' is the source article's section: cited like a paper)
    cited = {(p.relative_to(root).as_posix(), name) for p in sources if p.name != "test_layout.py"
             for name in re.findall(r"(?<![\w./'-])([A-Z][\w-]*|[\w-]+\.md) §\d", p.read_text(encoding="utf-8"))}
    stems = {name.removesuffix(".md") for name in held}
    assert not {(path, name) for path, name in cited if name.removesuffix(".md") not in stems and name != "Article"}
