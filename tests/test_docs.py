"""The docs hold together and stay true as the code moves: every link in the README and docs/ reaches a file,
every file under docs/results is cited by a page, every path a page or a code docstring/comment cites exists,
and no page carries what goes stale: a commit hash, a date in a guide's prose, or the story of how the code
changed. Results pages (docs/results.md and docs/results/) and table rows may carry dates, since a figure names
the day it was taken; guides (the README and the other pages of docs/) teach what the code does, in the present.
Each finding names the file, the line and the offending text, so a failure says what to fix."""
import ast
import io
import re
import sys
import tokenize
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")

DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b\d{1,2}:\d\d(-\d{1,2}:\d\d)? UTC\b"
                  r"|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}(st|nd|rd|th)?,? 20\d\d\b")
# 7-40 hex digits with a letter and a digit in them, the way a commit is named (not a number, not a word)
HASH = re.compile(r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])")
# words that tell how the code or the page changed, in any tense; bare "was"/"were"/"later" are left alone, as a
# result's past tense ("what was measured") and a run's order ("later steps") are not history
HISTORY = re.compile(
    r"\b(now|nowadays|no longer|any ?more(?=[.,;:)]|$)|previously|formerly|originally|since then|these days"
    r"|until recently|recently|today(?:'s)?|(?<!is )(?<!are )(?<!be )(?<!been )used to"
    r"|before (this|the) (change|commit|fix|page|session|rewrite|version)|the tree before"
    r"|(later|earlier|previous|last) (session|stop|commit|code|task|tree)s?|this (session|stop)"
    r"|git history|lab notebook|the old (default|rule|code|diagnostic|engine|task|policy|tree)s?|was/now"
    r"|stop \d+|runs? \d+(-\d+)?(?!\.\d|%|\d)"
    r"|(the|this|that) issue(?:'s)?|issue \d+)\b", re.IGNORECASE)
# a path cited from the repository's root: docs/..., specrl/..., tests/..., and the folders that left the tree
# a path broken after a slash at a line's end goes on on the next line, past its indent or comment mark
PATH = re.compile(r"(?<![\w./~$<-])((?:docs|specrl|tests|configs|experiments)/(?:[\w.*-]|/(?:\n[ \t#]*)?)*)")
# NAME, DIR, RUN_DIR in specrl/bench/NAME.py stand for any name; README and its kin are names
PLACEHOLDER = re.compile(r"(?!README|LICENSE|CHANGELOG)[A-Z][A-Z0-9_]*(?![a-z])")


class Finding(NamedTuple):
    file: str
    line: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.kind}: {self.text!r}"


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def is_result(page: Path, root: Path = ROOT) -> bool:
    """Results pages may carry dates; every other page is a guide."""
    rel = page.relative_to(root).as_posix()
    return rel == "docs/results.md" or rel.startswith("docs/results/")


def prose(text: str):
    """(line number, line, in a code block, a table row) for each line of a markdown page."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            yield n, line, True, False
            continue
        yield n, line, fenced or line.startswith("    "), line.lstrip().startswith("|")


def path_exists(cited: str, root: Path) -> bool:
    """A cited path exists, as written or as a pattern: `*` and an upper-case placeholder (NAME, DIR) match
    any name."""
    cited = cited.rstrip(".,:;")
    if (root / cited).exists():
        return True
    pattern = PLACEHOLDER.sub("*", cited)
    return ("*" in pattern and pattern.strip("/*") != "" and any(root.glob(pattern.rstrip("/"))))


def dead_paths(text: str, rel: str, root: Path, first_line: int = 1) -> list[Finding]:
    cited = ((m, re.sub(r"\n[ \t#]*", "", m.group(1)).rstrip(".,:;")) for m in PATH.finditer(text))
    return [Finding(rel, first_line + text[:m.start()].count("\n"), "missing path", path)
            for m, path in cited if not path_exists(path, root)]


def check_page(page: Path, root: Path = ROOT) -> list[Finding]:
    rel, result = page.relative_to(root).as_posix(), is_result(page, root)
    found = dead_paths(page.read_text(), rel, root)
    for n, line, code, table in prose(page.read_text()):
        found += [Finding(rel, n, "commit hash", m.group(0)) for m in HASH.finditer(line)]
        if not (result or code or table):
            found += [Finding(rel, n, "date in a guide", m.group(0)) for m in DATE.finditer(line)]
        found += [Finding(rel, n, "history", m.group(0)) for m in HISTORY.finditer(INLINE_CODE.sub("``", line))]
    return found


def comments_and_docstrings(source: str):
    """(first line, text) of every comment and docstring of a Python file."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                yield first.lineno, first.value.value


def check_code(path: Path, root: Path = ROOT) -> list[Finding]:
    rel = path.relative_to(root).as_posix()
    found = [f for line, text in comments_and_docstrings(path.read_text()) for f in dead_paths(text, rel, root, line)]
    return sorted(found, key=lambda f: f.line)


def code_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in ("specrl", "tests") for p in (root / folder).rglob("*.py"))



def test_every_page_and_docstring_holds_no_stale_text():
    found = [f for page in pages() for f in check_page(page)]
    found += [f for path in code_files() for f in check_code(path)]
    assert found == [], "\n".join(map(str, found))


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A temporary copy of the tree's layout holding `files` (and what their citations need)."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_date_in_a_guides_prose_is_found_and_a_results_page_or_table_may_carry_one(tmp_path):
    root = plant(tmp_path, {
        "README.md": "# x\n",
        "docs/guide.md": "# Guide\n\nIt runs fast.\nMeasured 2026-11-23 on the CPU.\n| run | 2026-11-23 |\n",
        "docs/results/run.md": "Measured 2026-11-23, 02:06-02:39 UTC.\n",
        "docs/results.md": "| claim | 2026-11-24 |\nThe drafters were trained on 2026-11-24.\n"})
    found = [f for page in pages(root) for f in check_page(page, root)]
    assert found == [Finding("docs/guide.md", 4, "date in a guide", "2026-11-23")]


def test_a_dead_path_in_a_docstring_or_comment_is_found(tmp_path):
    root = plant(tmp_path, {
        "docs/memory.md": "",
        "specrl/heap.py": '"""Why: docs/memory.md says."""\n\n\ndef f():\n    """Figures: docs/results/house.md\n'
                          '    and specrl/bench/NAME.py, docs/results/\n    gone.md."""\n'
                          '    return 1  # see tests/gone.py\n',
        "specrl/bench/train_memory.py": ""})
    found = check_code(root / "specrl" / "heap.py", root)
    assert found == [Finding("specrl/heap.py", 5, "missing path", "docs/results/house.md"),
                     Finding("specrl/heap.py", 6, "missing path", "docs/results/gone.md"),
                     Finding("specrl/heap.py", 8, "missing path", "tests/gone.py")]


def test_a_history_word_in_the_readme_is_found(tmp_path):
    root = plant(tmp_path, {"README.md": "# specrl\n\nThe audit reads every row.\n"
                                         "`specrl generate --seed` now gives each prompt its own stream.\n"
                                         "It no longer skips rows; it used to.\n"})
    assert check_page(root / "README.md", root) == [Finding("README.md", 4, "history", "now"),
                                                    Finding("README.md", 5, "history", "no longer"),
                                                    Finding("README.md", 5, "history", "used to")]


def copy_of_the_tree(tmp_path: Path) -> Path:
    """README.md and docs/ copied (to be edited), the code folders linked (to be cited)."""
    import shutil
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(DOCS, tmp_path / "docs")
    for folder in ("specrl", "tests", "configs"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    return tmp_path


def insert(path: Path, after: int, line: str) -> int:
    """Put `line` after line `after` of a file; its line number."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:after] + [line + "\n"] + lines[after:]))
    return after + 1


def test_each_fault_planted_in_a_copy_of_the_tree_is_reported_and_nothing_else(tmp_path):
    root = copy_of_the_tree(tmp_path)
    guide, readme = root / "docs" / "real_models.md", root / "README.md"
    prose_at = next(n for n, line, code, table in prose(guide.read_text()) if line and not (code or table)
                    and not line.startswith("#"))
    date_at = insert(guide, prose_at, "Measured 2026-11-23 on the 2-core CPU.")
    word_at = insert(readme, 3, "The audit now reads every row.")
    docstring = root / "planted.py"
    docstring.write_text((ROOT / "specrl" / "heap.py").read_text().replace('"""', '"""See docs/results/house.md. ', 1))
    found = [f for page in pages(root)
             for f in check_page(page, root)] + check_code(docstring, root)
    assert found == [Finding("README.md", word_at, "history", "now"),
                     Finding("docs/real_models.md", date_at, "date in a guide", "2026-11-23"),
                     Finding("planted.py", 1, "missing path", "docs/results/house.md")]


def test_commit_hashes_and_dead_paths_on_a_page_are_found_and_technical_prose_is_not(tmp_path):
    root = plant(tmp_path, {
        "README.md": "Rows were measured at commit 31e0992 by `python experiments/kv_paging.py`.\n"
                     "The loader is used to read 0x7d074bdc-free tensors; later steps run; what was measured.\n"
                     "Run `specrl audit` on docs/results/ (the file is specrl/bench/NAME.py; any more tokens).\n",
        "docs/results/x.md": "", "specrl/bench/audit.py": ""})
    assert check_page(root / "README.md", root) == [
        Finding("README.md", 1, "missing path", "experiments/kv_paging.py"),
        Finding("README.md", 1, "commit hash", "31e0992")]


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
