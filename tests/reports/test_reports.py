"""The reports as a user meets them: the files a run writes, the page in a real browser, the
JUnit a CI system reads, and a failure's repro pasted into ``python``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markupsafe import escape

from tck.cli import main
from tck.reports import junit_xml, load_results
from tck.reports.causes import root_causes

MUTANT = "mutants.mask_polarity_inverted"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# .ci/run installs chromium and sets this: there the browser test must run, not skip.
REQUIRE_BROWSER = os.environ.get("TCK_REQUIRE_BROWSER") == "1"

EVIL_ADAPTER = """
from tck.adapters import Adapter, Subject

class Evil(Adapter):
    name = '<script>alert("name")</script>'

    def subjects(self):
        return [Subject(
            'layer_norm<img src=x onerror=alert("subject")>',
            "layer_norm",
            notes=('<script>alert("note")</script>',),
        )]

    def build(self, subject, config, *, seed, **options):
        return config

    def run(self, handle, inputs):
        raise ValueError('<script>alert("message")</script> & more')

adapter = Evil()
"""


def tck(*args: str, cwd: Path | None = None, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "tck", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def mutant_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, dict]:
    out = tmp_path_factory.mktemp("mutant")
    proc = tck("run", "--adapter", MUTANT, "--out", str(out))
    return proc, out, json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def evil_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    where = tmp_path_factory.mktemp("evil")
    (where / "evil_adapter.py").write_text(EVIL_ADAPTER)
    env = {**os.environ, "PYTHONPATH": str(where)}
    proc = tck("run", "--adapter", "evil_adapter:adapter", "--out", str(where / "out"), env=env)
    return proc, where / "out"


def failures(document: dict) -> list[dict]:
    return [r for r in document["results"] if r["status"] == "fail"]


def test_a_run_writes_page_results_and_junit(mutant_run):
    proc, out, _ = mutant_run
    assert proc.returncode == 1, proc.stderr[-2000:]
    for name in ("index.html", "results.json", "junit.xml"):
        assert (out / name).stat().st_size > 0
        assert str(out / name) in proc.stdout
    assert f"tck {MUTANT}:" in proc.stdout
    assert "mask.polarity_inverted" in proc.stdout  # the summary names the diagnosis


def test_the_page_shows_each_failure_with_diagnosis_and_repro(mutant_run):
    _, out, document = mutant_run
    page = (out / "index.html").read_text()
    assert failures(document)
    for r in failures(document):
        assert escape(r["diagnosis"]["message"]) in page  # as jinja2 escapes it
        assert escape(r["repro"]) in page
        assert f'id="r-{document["results"].index(r)}"' in page
    for section in ("summary", "clauses", "fingerprint", "checks", "environment"):
        assert f'<section id="{section}">' in page
    assert "<svg" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # opens from disk, offline


def test_junit_counts_and_messages_match_results(mutant_run):
    _, out, document = mutant_run
    root = ET.parse(out / "junit.xml").getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(document["results"])
    assert int(root.get("failures")) == document["summary"]["failed"] == len(failures(document))
    codes = sorted(f.get("type") for f in root.iter("failure"))
    assert codes == sorted(r["diagnosis"]["code"] for r in failures(document))
    causes = {c["code"] for c in root_causes(document["results"])}
    for f in root.iter("failure"):  # the message leads with the root cause
        assert f.get("message").split(" ")[0] in causes
        assert f.get("type") in f.get("message")
    assert len(list(root.iter("skipped"))) == document["summary"]["skipped"]


def test_a_failures_repro_fails_the_same_way(mutant_run, tmp_path):
    """Each kind of snippet: an oracle replay, and a rerun of a property check."""
    _, _, document = mutant_run
    replays = [r for r in failures(document) if "expected(" in r["repro"]]
    reruns = [r for r in failures(document) if "pytest.main" in r["repro"]]
    assert replays and reruns
    for r in (replays[0], reruns[0]):
        proc = subprocess.run(
            [sys.executable, "-c", r["repro"]],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert proc.returncode != 0, r["repro"]
        message = r["diagnosis"]["message"]
        if r is replays[0]:  # the same comparison, the same numbers as the report
            numbers = re.search(r"max \|test - oracle\| = \S+ > bound \S+", message)
            assert numbers and numbers.group(0) in proc.stderr, proc.stderr[-2000:]
        else:  # the same check, the same diagnosis code
            assert f"[{r['diagnosis']['code']}]" in proc.stdout, proc.stdout[-2000:]


def test_report_rerenders_and_builds_a_scoreboard(mutant_run, tmp_path, capsys):
    _, mutant_out, _ = mutant_run
    (mutant_out / "index.html").unlink()
    assert main(["report", str(mutant_out)]) == 0
    assert (mutant_out / "index.html").exists()
    reference_out = tmp_path / "reference"
    proc = tck("run", "--adapter", "reference", "--only", "attention", "--out", str(reference_out))
    assert proc.returncode == 0, proc.stdout[-2000:]
    board = tmp_path / "board"
    assert main(["report", str(mutant_out), str(reference_out), "--out", str(board)]) == 0
    page = (board / "scoreboard.html").read_text()
    mutant_link = os.path.relpath(mutant_out / "index.html", board)
    assert f'href="{mutant_link}#clause-4-1"' in page
    assert f'href="{os.path.relpath(reference_out / "index.html", board)}"' in page
    row = re.search(r"<td>§4\.1</td>.*?</tr>", page, flags=re.S).group(0)
    assert "status-fail" in row and "status-pass" in row  # the mutant fails §4.1, reference not
    assert "scoreboard:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "nothing_here", "does not exist"),
        (lambda tmp: _write(tmp / "r", "{not json"), "not valid JSON"),
        (lambda tmp: _write(tmp / "r", '{"schema": 1}'), "not a tck results file"),
        (lambda tmp: _write(tmp / "r", _doc(schema=99)), "schema 99"),
    ],
)
def test_report_on_a_bad_folder_is_a_one_line_usage_error(make, message, tmp_path, capsys):
    assert main(["report", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def _doc(**overrides) -> str:
    doc = {"schema": 1, "adapter": {"name": "x"}, "summary": {}, "results": []}
    return json.dumps({**doc, **overrides})


def _write(folder: Path, text: str) -> Path:
    folder.mkdir()
    (folder / "results.json").write_text(text)
    return folder


def test_adapter_text_is_escaped_everywhere(evil_run):
    proc, out = evil_run
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = load_results(out)
    assert document["summary"]["errors"] > 0
    page = (out / "index.html").read_text()
    for raw in ('<script>alert("', "<img src=x"):
        assert raw not in page
    assert "&lt;script&gt;alert(&#34;name&#34;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(&#34;subject&#34;)&gt;" in page
    assert "&lt;script&gt;alert(&#34;message&#34;)&lt;/script&gt; &amp; more" in page
    root = ET.fromstring(junit_xml(document))  # well-formed, the text intact
    assert any("<script>" in (e.text or "") for e in root.iter("error"))


def test_junit_of_a_passing_run_has_no_failures():
    document = {
        "adapter": {"name": "a"},
        "summary": {"failed": 0, "errors": 0, "skipped": 1},
        "duration_s": 1.0,
        "results": [
            {"check": "c.one", "component": "mha", "subject": "mha", "status": "pass",
             "clause": ["3.1"], "diagnosis": {"code": "", "message": ""}},
            {"check": "c.two", "component": "mha", "subject": "mha", "status": "convention",
             "clause": ["4.4"], "diagnosis": {"code": "convention.x", "message": "It ..."}},
            {"check": "c.three", "component": "ffn", "subject": "ffn", "status": "skip",
             "clause": ["6.1"], "diagnosis": {"code": "skip", "message": "no ffn"}},
        ],
    }  # fmt: skip
    root = ET.fromstring(junit_xml(document))
    assert [s.get("name") for s in root.iter("testsuite")] == ["tck.a.mha", "tck.a.ffn"]
    assert not list(root.iter("failure")) and len(list(root.iter("skipped"))) == 1
    assert "convention.x" in next(root.iter("system-out")).text


# ---------------------------------------------------------------------------- browser


def _browser():
    if CHROMIUM is None:
        if REQUIRE_BROWSER:
            pytest.fail("TCK_REQUIRE_BROWSER=1 but no chromium: apt install chromium")
        pytest.skip("chromium is not installed (apt install chromium); .ci/run installs it")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if REQUIRE_BROWSER:
            pytest.fail("TCK_REQUIRE_BROWSER=1 but playwright is not installed")
        pytest.skip("playwright is not installed (pip install -e .[browser])")
    return sync_playwright


def _launch(p):
    return p.chromium.launch(
        executable_path=CHROMIUM,
        # the flags that keep chromium from reaching for the network (closed here)
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )


def _not_blank(png: Path) -> bool:
    import matplotlib.image

    pixels = matplotlib.image.imread(str(png))[..., :3]
    return pixels.std() > 0.05 and (pixels.mean(axis=-1) < 0.9).mean() > 0.02


def test_the_page_in_a_real_browser(mutant_run, tmp_path):
    _, out, document = mutant_run
    shot = tmp_path / "page.png"
    sync_playwright = _browser()
    with sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto((out / "index.html").resolve().as_uri())
        page.screenshot(path=str(shot))
        assert page.locator("#summary").is_visible()
        assert page.locator("#fingerprint table").count() >= 1
        failed = failures(document)[0]
        result = page.locator(f"#r-{document['results'].index(failed)}")
        assert result.is_visible()  # groups with a failure start open
        assert failed["diagnosis"]["code"] in result.inner_text()
        repro = result.locator("details.repro")
        assert not repro.locator("pre").is_visible()  # folded: the page stays short
        repro.locator("summary").click()
        assert repro.locator("pre").is_visible()
        assert page.locator("svg").count() >= 1
        browser.close()
    assert not errors, errors
    assert all(url.startswith("file:") for url in requests), requests  # nothing from the net
    assert _not_blank(shot)


def test_escaped_text_stays_text_in_the_browser(evil_run, tmp_path):
    _, out = evil_run
    sync_playwright = _browser()
    with sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto((out / "index.html").resolve().as_uri())
        text = page.inner_text("body")
        browser.close()
    assert not dialogs  # no injected script ran
    assert '<script>alert("name")</script>' in text  # shown as the adapter wrote it


# The text box of each cell of a column, and of its header, as the browser laid them out.
_COLUMN_BOXES = """
(table) => {
  const box = (cell) => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    const r = range.getBoundingClientRect();
    return {left: r.left, right: r.right, text: cell.textContent.trim()};
  };
  const heads = Array.from(table.querySelectorAll("thead th"));
  return Array.from(table.querySelectorAll("tbody tr")).flatMap((row) =>
    Array.from(row.children).map((cell, i) => ({head: box(heads[i]), cell: box(cell),
                                                 numeric: cell.classList.contains("n")})));
}
"""


def _assert_numbers_under_headers(page, selector: str) -> int:
    """Every number of the table ends where its header's text ends (both right-aligned), so
    it cannot be read as the next column's; returns how many numbers were looked at."""
    seen = 0
    for pair in page.locator(selector).evaluate(_COLUMN_BOXES):
        if not pair["numeric"] or not pair["cell"]["text"]:
            continue
        seen += 1
        head, cell = pair["head"], pair["cell"]
        assert abs(cell["right"] - head["right"]) <= 2.0, (selector, pair)
        assert cell["left"] >= head["left"] - 40, (selector, pair)  # under it, not beside it
    return seen


def _page_height(page) -> int:
    return page.evaluate("document.documentElement.scrollHeight")


def test_counts_stand_under_their_own_headers(mutant_run):
    _, out, _ = mutant_run
    sync_playwright = _browser()
    with sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto((out / "index.html").resolve().as_uri())
        headers = page.locator("#by-component thead th").all_inner_texts()
        # the terminal summary's column order
        assert headers[1:7] == ["pass", "fail", "error", "convention", "unverified", "skip"]
        assert _assert_numbers_under_headers(page, "#by-component") >= 4
        assert _assert_numbers_under_headers(page, "#by-clause") >= 10
        # a check cites several clauses: the page says why the clause counts add up to more
        assert "counted under each" in page.locator("#clauses").inner_text()
        browser.close()


def test_hundreds_of_failures_stay_readable(mutant_run, tmp_path):
    """Each failing row of the mutant run copied onto 10 subjects (410 failures): the
    symptoms beyond the first few fold under their cause, passing rows fold under each
    component, and the page grows far less than the failures do."""
    from tck.reports.html import render_report

    _, out, document = mutant_run
    many = dict(document)
    many["results"] = [
        {**r, "subject": f"{r['subject']}#{i}"} if r["status"] == "fail" else r
        for i in range(10)
        for r in document["results"]
        if r["status"] == "fail" or i == 0
    ]
    assert sum(r["status"] == "fail" for r in many["results"]) >= 400
    (tmp_path / "many.html").write_text(render_report(many), encoding="utf-8")
    sync_playwright = _browser()
    with sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto((out / "index.html").resolve().as_uri())
        few = _page_height(page)
        page.goto((tmp_path / "many.html").resolve().as_uri())
        page.screenshot(path=str(tmp_path / "many.png"))
        folded = page.locator("#root-causes details.more")
        assert folded.count() >= 1 and not folded.first.locator("ul").is_visible()
        tall = _page_height(page)
        browser.close()
    assert _not_blank(tmp_path / "many.png")
    assert tall < 5 * few, (few, tall)  # ten times the failures, not ten times the page


def test_report_files_follow_the_users_umask(tmp_path):
    """A written report has the mode any new file of the user's has (0666 less the umask),
    not the private 0600 of a temporary file."""
    import os

    from tck.reports.files import atomic_write

    old = os.umask(0o027)
    try:
        path = atomic_write(tmp_path / "results.json", "{}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640


@pytest.mark.spec("0.3")
def test_a_convention_row_coded_with_its_value_shows_the_declared_values() -> None:
    """A row whose code names the field and the value (``numerics.half_precision_input_dtype``,
    from a 16-bit check) is listed under its field with the declared and canonical values."""
    from tck.conformance.runner.console import conventions_shown

    document = {
        "adapter": {"deviations": {"ln": {"half_precision": ["float32", "input_dtype"]}}},
        "results": [
            {
                "status": "convention",
                "subject": "ln",
                "metrics": {"dtype": "float16"},
                "diagnosis": {"code": "numerics.half_precision_input_dtype"},
            }
        ],
    }
    assert conventions_shown(document) == [("half_precision", "input_dtype", "float32", ["ln"])]
