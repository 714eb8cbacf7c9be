"""The docs hold together: every link in the README and docs/ reaches a file, every file under docs/results is
cited by a page (the rest belongs to git history), and no page tells the story of how it was written."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
HISTORY = re.compile(r"\b(stop \d+|runs? \d+(-\d+)?|lab notebook|this session|previous session|earlier session)\b",
                     re.IGNORECASE)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def links(page: Path) -> list[str]:
    """Local link targets of a page, without their #anchors."""
    targets = [t.split("#")[0] for t in LINK.findall(page.read_text())]
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


def test_every_link_reaches_a_file():
    missing = [f"{page.relative_to(ROOT)}: {target}" for page in pages() for target in links(page)
               if not (page.parent / target).exists()]
    assert missing == []


def test_the_link_check_sees_a_missing_file(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("[here](here.md) [gone](gone.md#part) [web](https://example.com) [top](#top)\n")
    (tmp_path / "here.md").write_text("")
    assert [t for t in links(page) if not (page.parent / t).exists()] == ["gone.md"]


def cited(path: Path, texts: str) -> bool:
    """A page names the file (its path under docs/results) or a folder above it."""
    rel = path.relative_to(RESULTS)
    names = [rel.as_posix()] + [parent.as_posix() + "/" for parent in rel.parents if parent != Path(".")]
    return any(name in texts for name in names)


def test_every_raw_file_under_docs_results_is_cited_by_a_page():
    texts = "\n".join(page.read_text() for page in pages())
    uncited = [p.relative_to(ROOT).as_posix() for p in sorted(RESULTS.rglob("*"))
               if p.is_file() and p.suffix != ".md" and not cited(p, texts)]
    assert uncited == [], "cite these from a results page, or delete them (git history keeps them)"


def test_a_results_folder_cites_what_it_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "RESULTS", tmp_path)
    (tmp_path / "a").mkdir()
    assert cited(tmp_path / "a" / "x.jsonl", "rows: [a/](results/a/)")
    assert cited(tmp_path / "y.jsonl", "[y.jsonl](results/y.jsonl)")
    assert not cited(tmp_path / "z.jsonl", "[y.jsonl](results/y.jsonl)")


# the README is regenerated as a guide; the audit's page is rewritten with the audit (specrl/audit/)
NOT_YET = {"README.md", "docs/results/sampler_audit.md"}


def test_no_page_tells_its_history():
    told = [f"{page.relative_to(ROOT)}: {m.group(0)!r}" for page in pages()
            if page.relative_to(ROOT).as_posix() not in NOT_YET
            for m in HISTORY.finditer(page.read_text())]
    assert told == []
