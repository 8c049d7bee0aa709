"""The README's and the docs' examples, run as written; the field lists they give, held to the models.

Every Python block of README.md and docs/*.md runs in-process against a real site on 127.0.0.1, the one
change being the site: ``https://example.com/`` reads as the local site's URL. The network is allowed as a
user allows it (``HARVEST_ALLOW_NETWORKS``), and the README's block also runs without it, to see what a
newcomer trying it on a local site sees. Every command of the README's shell blocks is run or checked, none
left out: the ``harvest`` commands that work offline run in a scratch directory against the same site, the
others (AWS, make targets, the install) are checked for what can be checked here, every ``harvest`` command
line (the prose's too) by the command's own parser. The summary the README shows has the labels a crawl
prints, and the field lists the docs give are the models' fields.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harvester import SiteUnreachable
from harvester.cli import build_parser
from harvester.cli.reporting import CRAWL_CSV_FIELDS, CSV_FIELDS
from harvester.crawldb.changes import FeedLine
from harvester.demo import serve
from harvester.model.messages import JobRequest
from harvester.model.records import SitemapURL
from harvester.sitemap import (
    Alternate,
    ChildSitemap,
    ContentSegment,
    Image,
    NewsStory,
    PageEntry,
    PageMapObject,
    TvShow,
    Video,
)
from tests.support import LOOPBACK

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
EXAMPLE_SITE = "https://example.com/"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path, lang: str) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return [
        Block(path, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == lang
    ]


PYTHON = [b for path in (README, *DOCS) for b in blocks(path, "python")]


@dataclass(frozen=True)
class Site:
    root: Path
    base: str  # with no trailing slash

    def url(self, path: str = "") -> str:
        return f"{self.base}/{path}"


def _urlset(site: Site, pages: dict[str, str]) -> str:
    urls = "".join(
        f"<url><loc>{site.url(path)}</loc><lastmod>{lastmod}</lastmod><changefreq>weekly</changefreq>"
        f"<priority>0.8</priority></url>"
        for path, lastmod in pages.items()
    )
    return f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'


LISTED = {"": "2026-11-01", "about": "2026-11-01", "blog/first": "2026-11-02", "missing": "2026-11-01"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A small site: robots.txt naming one urlset of a home page, an about page, a blog post and a page
    that is not there."""
    root = tmp_path_factory.mktemp("site")
    with serve(root) as base:
        site = Site(root, base)
        (root / "robots.txt").write_text(f"User-agent: *\nAllow: /\nSitemap: {site.url('sitemap.xml')}\n")
        (root / "sitemap.xml").write_text(_urlset(site, LISTED))
        (root / "index.html").write_text("<html><body>home</body></html>")
        (root / "about").write_text("about us")
        (root / "blog").mkdir()
        (root / "blog" / "first").write_text("a first post")
        yield site


def _as_run_here(block: Block, site: Site) -> str:
    code = block.text.replace(EXAMPLE_SITE, site.url())
    assert "example.com" not in code, f"{block.where}: a site other than {EXAMPLE_SITE} (left as it is)"
    return code


def _run_python(block: Block, site: Site) -> None:
    exec(compile(_as_run_here(block, site), block.where, "exec"), {"__name__": "__example__"})


# The Python examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_every_python_example_runs_as_written(block, site, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARVEST_ALLOW_NETWORKS", LOOPBACK)
    monkeypatch.chdir(tmp_path)  # (where a `parse_file("sitemap.xml.gz")` finds its file)
    (tmp_path / "sitemap.xml.gz").write_bytes(gzip.compress((site.root / "sitemap.xml").read_bytes()))

    _run_python(block, site)

    out = capsys.readouterr().out
    assert site.url("about") in out and site.url("blog/first") in out, out  # (it went through the pages)


def test_there_are_python_examples_in_the_readme_and_the_docs():
    assert {b.path.name for b in PYTHON} >= {"README.md", "python-api.md"}


def test_the_readme_example_on_a_local_site_not_allowed_says_how_to_allow_it(site, capsys):
    (block,) = [b for b in PYTHON if b.path == README]

    with pytest.raises(SiteUnreachable) as raised:
        _run_python(block, site)

    message = str(raised.value)
    assert message.startswith(f"{site.url()}: nothing could be read")
    assert 'allow_networks=["127.0.0.0/8"]' in message and "FetchPolicy" not in message
    assert capsys.readouterr().out == ""  # (raised at the call: nothing printed before)


# The README's shell examples -------------------------------------------------------------------------


def commands(path: Path) -> list[tuple[Block, list[str]]]:
    out = []
    for block in blocks(path, "sh"):
        for line in block.text.splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                out.append((block, argv))
    return out


def parse_harvest(argv: list[str], where: str) -> None:
    """The command line as `harvest` reads it: a flag or a value it does not take fails here."""
    try:
        build_parser().parse_args(argv[1:])
    except SystemExit as exit_:
        pytest.fail(f"{where}: `{shlex.join(argv)}` is not a command line harvest takes (exit {exit_.code})")


def check_offline(argv: list[str], where: str) -> None:
    """What can be checked here of a command that needs AWS, make's set-up or an installation."""
    tool = argv[0]
    if tool == "harvest":
        parse_harvest(argv, where)
    elif tool == "make":
        makefile = (ROOT / "Makefile").read_text()
        for target in argv[1:]:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), f"{where}: no make target {target}"
    elif tool == "pip":
        assert argv[1:] == ["install", "-e", "."], where
        assert 'harvest = "harvester.cli:main"' in (ROOT / "pyproject.toml").read_text(), where
    elif tool == "sam":
        assert argv[1] in ("build", "deploy"), where
        assert "Transform: AWS::Serverless-2016-10-31" in (ROOT / "template.yaml").read_text(), where
    elif tool == "aws":
        assert argv[1:3] == ["sqs", "send-message"], where
        JobRequest.model_validate_json(argv[argv.index("--message-body") + 1])  # what the job queue takes
        assert re.search(r"^  JobQueueUrl:", (ROOT / "template.yaml").read_text(), re.MULTILINE), where
    else:
        pytest.fail(f"{where}: `{shlex.join(argv)}`: a command this test does not know how to check")


def runs_offline(argv: list[str]) -> bool:
    return argv[0] == "harvest" and "--stack" not in argv


def harvest_here(argv: list[str], cwd: Path, site: Site) -> subprocess.CompletedProcess[str]:
    argv = [a.replace(EXAMPLE_SITE.rstrip("/"), site.base) for a in argv]
    return subprocess.run(
        [sys.executable, "-m", "harvester", *argv[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HARVEST_ALLOW_NETWORKS": LOOPBACK},
        check=False,
    )


def summary_labels(text: str) -> set[str]:
    """The labels of a crawl summary's lines: ``  total urls    3`` and ``  errors (1):``."""
    return {m.group(1) for m in re.finditer(r"^  ([a-z][a-z ]*?)(?: \(\d+\))?(?::$|  +\S)", text, re.MULTILINE)}


def test_every_readme_command_runs_or_is_checked(site, tmp_path):
    ran: dict[str, list[subprocess.CompletedProcess[str]]] = {}
    for block, argv in commands(README):
        if not runs_offline(argv):
            check_offline(argv, block.where)
            continue
        run = harvest_here(argv, tmp_path, site)
        assert run.returncode == 0, f"{block.where}: `{shlex.join(argv)}`: {run.stderr}"
        ran.setdefault(argv[1], []).append(run)
    assert set(ran) == {"crawl", "changes", "report", "get"}  # (what the README's shell blocks run)

    (crawl,) = ran["crawl"]
    first, again = [b.text for b in blocks(README, "")][:2]
    assert summary_labels(first) <= summary_labels(crawl.stdout), crawl.stdout
    assert crawl.stdout.startswith("job ") and ": completed\n" in crawl.stdout
    assert ran["get"][0].stdout == "about us"
    feed = [json.loads(line) for line in ran["changes"][0].stdout.splitlines()]
    assert {line["url"] for line in feed} == {site.url(path) for path in LISTED}
    for line in feed:  # (docs/crawl-database.md: the fields in FeedLine's order; `warc` with WARC output)
        assert list(line) == [name for name in FeedLine.__annotations__ if name in line]
        assert "document_key" not in line and ("warc" in line or line["state"] != "fetched"), line

    # "Run the same command again later": a page changed, and its sitemap says so.
    (site.root / "about").write_text("about us, and more")
    (site.root / "sitemap.xml").write_text(_urlset(site, {**LISTED, "about": "2026-11-20"}))
    crawl_argv = next(argv for _, argv in commands(README) if argv[:2] == ["harvest", "crawl"])
    second = harvest_here(crawl_argv, tmp_path, site)
    assert second.returncode == 0, second.stderr
    assert summary_labels(again) <= summary_labels(second.stdout), second.stdout


def test_every_harvest_command_line_in_the_readme_prose_is_one_harvest_takes():
    text = README.read_text(encoding="utf-8")
    spans = re.findall(r"`(harvest [^`]+)`", FENCE.sub("", text))
    assert len(spans) >= 5
    for span in spans:
        words = span.replace("…", "").split()
        choices = [w.split("|") for w in words]
        for n in range(max(len(c) for c in choices)):  # `--format warc|parquet|jsonl|csv`: each of them
            parse_harvest([c[min(n, len(c) - 1)] for c in choices], f"README.md `{span}`")


# The field lists the docs give -----------------------------------------------------------------------


def test_the_change_feed_fields_in_the_docs_are_those_of_a_feed_line():
    text = (ROOT / "docs" / "crawl-database.md").read_text(encoding="utf-8")
    (listed,) = re.findall(r'`\{("url", "change",.*?)\}`', text, re.DOTALL)
    assert re.findall(r'"(\w+)"', listed) == list(FeedLine.__annotations__)


def _bullet(text: str, opening: str) -> list[str]:
    start = text.index(opening) + len(opening)
    return re.findall(r"`(\w+)`", text[start : text.index(";", start)])


def test_the_csv_columns_in_the_cli_reference_are_the_models_fields():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert _bullet(text, "`report JOB --format csv` in SitemapURL's order:") == list(CSV_FIELDS)
    assert _bullet(text, "`report --site --format csv` in the crawl record's:") == list(CRAWL_CSV_FIELDS)


def test_the_extensions_in_the_docs_are_those_of_a_page_entry():
    """docs/sitemaps.md#extensions: the keys of a page's extensions and each one's fields, as the models have
    them (what ``PageEntry.extensions`` writes: every field, those without a value left out)."""
    text = (ROOT / "docs" / "sitemaps.md").read_text(encoding="utf-8")
    section = text[text.index("## Extensions") :]
    section = section[: section.index("\n## ") if "\n## " in section else len(section)]
    start = section.index("only when present:")
    keys = section[start : section.index(".", start)]
    assert re.findall(r"`(\w+)`", keys) == list(PageEntry.__struct_fields__[4:])
    models = {
        "`images`": Image,
        "`news`": NewsStory,
        "`videos`": Video,
        "a video's `content_segments`": ContentSegment,
        "a video's `tvshow`": TvShow,
        "`alternates`": Alternate,
        "`pagemap`": PageMapObject,
    }
    for opening, model in models.items():
        start = section.index(f"\n* {opening}")
        bullet = section[start : min(i for i in (section.find("\n*", start + 1), section.find("\n\n", start)) if i > 0)]
        said = re.findall(r"`(\w+)`", bullet.split("):", 1)[1])
        assert said == list(model.__struct_fields__), opening


def test_harvest_parse_and_parsed_entries_name_a_pages_values_as_the_records_do(site, tmp_path):
    """docs/cli.md: a page as `sitemaps --format jsonl` has it (the records' names), a child sitemap as
    `{"sitemap", "last_modified"}`; the Python API's entries use the same names."""
    said = ["last_modified", "change_frequency", "priority"]
    assert set(said) <= set(SitemapURL.__struct_fields__)
    assert list(PageEntry.__struct_fields__[1:4]) == said and ChildSitemap.__struct_fields__ == ("url", "last_modified")
    for name, keys in (("sitemap.xml", {"url", *said}), ("robots.txt", {"sitemap", "last_modified"})):
        run = subprocess.run(
            [sys.executable, "-m", "harvester", "parse", str(site.root / name)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert all(set(json.loads(line)) == keys for line in run.stdout.splitlines()), run.stdout
