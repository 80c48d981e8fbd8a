"""The README is the front door and docs/ holds each section's full text: every relative link in them resolves (file
and heading), every topic file is reachable from the README, and the README stays short enough to read."""

import re

from tests.documents import ROOT, path, text

DOCUMENTS = ["README", *sorted(p.stem for p in (ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _outside_code(markdown: str) -> str:
    """The text with fenced blocks and inline code dropped (a bracket there is code, not a link)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"(?ms)^\s*```.*?^\s*```", "", markdown))


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"(?m)^#+ (.+)$", _outside_code(markdown))}


def _links(name: str) -> list[str]:
    return [t for t in LINK.findall(_outside_code(text(name))) if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    broken = []
    for name in DOCUMENTS:
        for target in _links(name):
            file, _, anchor = target.partition("#")
            dest = (path(name).parent / file).resolve() if file else path(name)
            heading_missing = anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8"))
            if not dest.is_file() or heading_missing:
                broken.append((name, target))
    assert not broken
    assert len(_links("README")) >= len(DOCUMENTS) - 1  # (the check saw the README's links)


def test_the_readme_links_every_topic_file_and_each_links_back():
    linked = {t.partition("#")[0] for t in _links("README")}
    for name in DOCUMENTS[1:]:
        assert f"docs/{name}.md" in linked or any(f"{name}.md" in t for n in DOCUMENTS[1:] for t in _links(n)), name
        assert any(t.startswith("../README.md") for t in _links(name)), name


def test_the_readme_stays_a_front_door():
    # it had grown to 1,462 lines with table cells of 3,400 characters; the full text lives in docs/
    readme = text()
    assert len(readme.splitlines()) <= 450
    cells = [c for line in readme.splitlines() if line.startswith("|") for c in line.strip("|").split(" | ")]
    assert cells and max(len(c) for c in cells) <= 250


def test_the_readme_opens_with_the_two_commands_ci_runs():
    # .ci/run runs "exactly that second command": the README's second code block, byte for byte
    blocks = re.findall(r"```bash\n(.+?)\n```", text())
    assert blocks[0] == "pip install -e . && streamlit run app/streamlit_app.py"
    assert blocks[1] == (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
