"""docs/architecture.md's "Tests" section names every folder of tests/ (a new folder left out
of it is one a reader of the layout never finds)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_tests_section_names_every_folder():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    folders = sorted(path.name for path in (ROOT / "tests").iterdir()
                     if path.is_dir() and path.name != "__pycache__")
    missing = [name for name in folders if f"`{name}/`" not in section]
    assert not missing, f"docs/architecture.md, Tests: name these folders of tests/: {missing}"
