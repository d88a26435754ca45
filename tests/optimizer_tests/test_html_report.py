"""``--html FILE`` / ``optimize report --html FILE``: one self-contained page (issue 25),
checked as text and, where a Chromium is installed, rendered headless: a screenshot, no
console errors, and the click-to-select breakdown working."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from conftest import run_cli

from optimizer.output.html_report import render_html

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", re.I)


@pytest.fixture(scope="module")
def front_doc():
    from optimizer import optimize

    return optimize("llama3-8b", 16, gpu="h100-sxm-80gb", seq_length=8192,
                    keep_cloud=True).to_dict()


@pytest.fixture(scope="module")
def plan_pages(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    page, doc = d / "plan.html", d / "plan.json"
    rc, out, err = run_cli(["--model", "llama-7b", "--gpus", "8-64", "--tokens", "1e12",
                            "--gpu-hour-cost", "2", "--html", str(page), "--json"])
    assert rc == 0, err
    doc.write_text(out)
    return page, doc


def test_front_page_is_self_contained(front_doc):
    page = render_html(front_doc)
    assert page.startswith("<!DOCTYPE html>")
    assert not EXTERNAL.search(page), "the page must not load anything from the network"
    assert page.count("<svg") >= 3  # front, time and memory breakdowns
    assert f"show the {len(front_doc['dominated'])} dominated" in page
    for finding in front_doc["pareto_front"][front_doc["recommended"]]["bottlenecks"]:
        assert finding.replace("'", "&#x27;") in page or finding in page
    data = re.search(r'id="front-data">(.*?)</script>', page, re.S).group(1)
    assert len(json.loads(data)) == len(front_doc["pareto_front"])


def test_plan_page_has_the_plan_and_the_picks_front(plan_pages):
    page = plan_pages[0].read_text()
    assert "Plan across GPU counts" in page and "At the pick" in page
    assert "Pareto front: tokens/s vs peak memory" in page
    assert not EXTERNAL.search(page)
    assert sorted(p.name for p in plan_pages[0].parent.iterdir()) == ["plan.html", "plan.json"]


def test_report_from_a_document(tmp_path, plan_pages, front_doc):
    doc = tmp_path / "front.json"
    doc.write_text(json.dumps(front_doc))
    out = tmp_path / "r.html"
    rc, stdout, err = run_cli(["report", "--from", str(doc), "--html", str(out)])
    assert rc == 0, err
    assert out.read_text().startswith("<!DOCTYPE html>") and stdout == ""
    rc, _, err = run_cli(["report", "--from", str(plan_pages[1]), "--html",
                          str(tmp_path / "p.html")])
    assert rc == 0, err
    assert "Plan across GPU counts" in (tmp_path / "p.html").read_text()


def test_report_needs_exactly_one_source(tmp_path):
    rc, _, err = run_cli(["report", "--html", str(tmp_path / "x.html")])
    assert rc == 2 and "--from" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}')
    rc, _, err = run_cli(["report", "--from", str(bad), "--html", str(tmp_path / "x.html")])
    assert rc == 2 and "not a front or plan document" in err


# ---------------------------------------------------------------------------------------------
def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


HARNESS = """<script>
window.addEventListener('load', function(){
  var title = document.getElementById('sel-title');
  var seen = {};
  var pts = document.querySelectorAll('.pt[data-i]');
  for (var i = 0; i < pts.length; i++) {
    pts[i].dispatchEvent(new MouseEvent('click', {bubbles: true}));
    seen[title.textContent] = 1;
  }
  var n = Object.keys(seen).length;
  document.body.setAttribute('data-harness', n === pts.length ? 'ok' : 'saw ' + n);
});
</script></body>"""


def _chromium(browser: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                           "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize("which", ["front", "plan"])
def test_renders_in_headless_chromium_without_console_errors(which, tmp_path, front_doc,
                                                             plan_pages):
    browser = _browser()
    if browser is None:
        reason = "no Chromium/Chrome on PATH (apt-get install -y chromium)"
        if os.environ.get("PARAPLAN_REQUIRE_CHROMIUM") == "1":  # set by .ci/run
            pytest.fail(f"PARAPLAN_REQUIRE_CHROMIUM=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    page = tmp_path / "page.html"
    if which == "front":
        page.write_text(render_html(front_doc))
    else:
        page.write_text(plan_pages[0].read_text())
    png = tmp_path / "shot.png"
    res = _chromium(browser, tmp_path, f"--screenshot={png}", "--window-size=1200,1800",
                    page.as_uri())
    assert png.exists(), res.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000
    console = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, "console messages: " + "\n".join(console)
    # the inline script runs and a click on a front point shows its breakdown
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", HARNESS, 1))
    res = _chromium(browser, tmp_path, "--dump-dom", probe.as_uri())
    console = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, "console messages: " + "\n".join(console)
    assert 'data-harness="ok"' in res.stdout
