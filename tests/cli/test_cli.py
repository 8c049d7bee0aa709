"""The `harvest` command's other verbs and its handling of bad input."""

from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tests.support import LOOPBACK, harvest, harvest_json, sigint_as_in_a_terminal

ALLOW = ("--allow-network", LOOPBACK)


def test_sitemaps_tree_shows_the_tree_with_counts(site_factory):
    site = site_factory(pages=40, broken=2, sitemaps=3)
    run = harvest("sitemaps", f"{site.base_url}/", *ALLOW)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"{site.base_url}/"
    assert lines[1] == f"└── {site.base_url}/robots.txt  [robots]  1 sitemap"
    assert f"{site.base_url}/sitemap_index.xml  [index]  3 sitemaps" in lines[2]
    counts = [line for line in lines if "[urlset]" in line]
    assert len(counts) == 3 and any(".xml.gz  [urlset]" in line for line in counts)
    assert sum(int(line.split("]  ")[1].split(" pages")[0]) for line in counts) == 42
    assert "(13 well-known locations probed and not found)" in run.stdout
    assert lines[-1] == "42 pages in 4 sitemaps"


def test_sitemaps_jsonl_lists_every_page_with_what_its_sitemap_says(site_factory):
    site = site_factory(pages=25, broken=0, sitemaps=2)
    run = harvest("sitemaps", f"{site.base_url}/", *ALLOW, "--format", "jsonl")
    pages = [json.loads(line) for line in run.stdout.splitlines()]
    assert sorted(p["url"] for p in pages) == sorted(site.page_urls)
    first = next(p for p in pages if p["url"].endswith("/pages/1.html"))
    assert first["change_frequency"] in {"daily", "weekly", "monthly"} and 0.0 <= first["priority"] <= 1.0
    assert first["last_modified"].startswith("2026-01-01") and first["sitemap"] in site.sitemap_urls
    with_images = [p for p in pages if "images" in p]
    assert with_images and all(p["images"][0]["loc"].endswith(".jpg") for p in with_images)


def test_a_sitemaps_line_says_what_the_python_api_record_says(served_dir, tmp_path):
    """The CLI makes its lines straight from the entries, the API its records: both say the same of every
    kind of entry (images, news, videos, alternates, mobile, PageMap; a feed's stories; entities; any
    lastmod)."""
    from harvester import iter_pages

    root = tmp_path / "site"
    root.mkdir()
    fixture = Path(__file__).parent.parent / "sitemap" / "fixtures" / "urlset_extensions.xml"
    base = served_dir(root)
    text = fixture.read_text()
    for host in ("shop", "news", "video"):  # (its pages are on three hosts: all on the served one here)
        text = text.replace(f"https://{host}.example.org", base)
    (root / "sitemap.xml").write_text(text)
    # crawler-commons' fixtures (a TV show's video, Mobile, PageMap) and a feed whose items are news stories.
    more = ["cc_sitemap-videos-tvshow.xml", "cc_sitemap-mobile.xml", "cc_pagemaps-sitemap.xml", "rss1.xml"]
    for name in more:
        text = (fixture.parent / name).read_text()
        for host in ("https://example.org", "http://www.example.com", "https://journal.example.org"):
            text = text.replace(host, base)
        (root / name).write_text(text)
    (root / "robots.txt").write_text("".join(f"Sitemap: {base}/{name}\n" for name in ["sitemap.xml", *more]))
    run = harvest("sitemaps", f"{base}/", *ALLOW, "--format", "jsonl")
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    records = [
        {
            "url": page.url,
            "last_modified": page.last_modified.isoformat() if page.last_modified else None,
            "change_frequency": page.change_frequency,
            "priority": page.priority,
            "sitemap": page.sitemap,
            **page.extensions,
        }
        for page in iter_pages(f"{base}/", allow_networks=[LOOPBACK])
    ]
    kinds = {"images", "news", "videos", "alternates", "mobile", "pagemap"}
    assert len(lines) >= 3 and kinds <= {k for line in lines for k in line}
    shown = {line["url"]: line for line in lines}
    assert shown[f"{base}/my-tv-show/23/13/"]["videos"][0]["tvshow"]["episode_number"] == 13
    assert shown[f"{base}/foo"]["pagemap"][0] == {
        "type": "document",
        "id": "one",
        "attributes": {"name": "Doc One", "review": "3.5"},
    }
    assert shown[f"{base}/entries/1"]["news"]["title"] == "First entry"
    assert sorted(lines, key=lambda line: line["url"]) == sorted(records, key=lambda line: line["url"])


def test_sitemaps_lists_invalid_sitemaps_with_their_reason(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    robots = "".join(f"Sitemap: {base}/{name}\n" for name in ("good.xml", "soft404.xml", "gone.xml"))
    (root / "robots.txt").write_text(robots)
    (root / "good.xml").write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<url><loc>{base}/a</loc></url><url><loc>ftp://x/y</loc></url></urlset>"
    )
    (root / "soft404.xml").write_text("<html><body>Page not found</body></html>")

    run = harvest("sitemaps", f"{base}/", *ALLOW)

    assert run.returncode == 0
    assert "invalid sitemaps (2):" in run.stdout
    assert f"{base}/soft404.xml: not a sitemap: root element <html>" in run.stdout
    assert f"{base}/gone.xml: HTTP 404 Not Found" in run.stdout
    assert "1 entry dropped (not_http 1)" in run.stdout


def test_parse_reads_any_kind_of_local_sitemap(tmp_path):
    xml = (
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>https://e.x/a</loc><priority>0.9</priority></url><url><loc>https://e.x/b</loc></url></urlset>"
    )
    (tmp_path / "pages.xml.gz").write_bytes(gzip.compress(xml.encode()))
    (tmp_path / "robots.txt").write_text("User-agent: *\nsitemap: https://e.x/s1.xml\nSite-map:/s2.xml\n")
    (tmp_path / "list.txt").write_text("https://e.x/one\nnot a url\nhttps://e.x/two\n")

    pages = [json.loads(line) for line in harvest("parse", str(tmp_path / "pages.xml.gz")).stdout.splitlines()]
    assert pages == [
        {"url": "https://e.x/a", "last_modified": None, "change_frequency": None, "priority": 0.9},
        {"url": "https://e.x/b", "last_modified": None, "change_frequency": None, "priority": 0.5},
    ]
    robots = [json.loads(line) for line in harvest("parse", str(tmp_path / "robots.txt")).stdout.splitlines()]
    # A relative line has nothing to resolve against in a local file (over HTTP it takes the robots.txt URL).
    assert [r["sitemap"] for r in robots] == ["https://e.x/s1.xml", "/s2.xml"]
    listed = [json.loads(line)["url"] for line in harvest("parse", str(tmp_path / "list.txt")).stdout.splitlines()]
    assert listed == ["https://e.x/one", "https://e.x/two"]


def test_parse_shows_every_extension():
    fixtures = Path(__file__).parent.parent / "sitemap" / "fixtures"

    def parsed(name: str) -> list[dict]:
        run = harvest("parse", str(fixtures / name))
        assert run.returncode == 0, run.stderr
        return [json.loads(line) for line in run.stdout.splitlines()]

    [video] = parsed("cc_sitemap-videos-tvshow.xml")[0]["videos"]
    assert video["tvshow"] == {
        "show_title": "My TV Show!",
        "video_type": "full",
        "episode_title": "Thu, Jun 05, 2025",
        "season_number": 23,
        "episode_number": 13,
        "premier_date": "2025-06-05T21:00:00+00:00",
    }
    assert video["content_segments"][1] == {"loc": "https://example.org/video/video/23-13-2.mp4", "duration": 1172}
    assert [page.get("mobile") for page in parsed("cc_sitemap-mobile.xml")] == [True, True, None]
    assert parsed("cc_pagemaps-sitemap.xml")[1]["pagemap"] == [
        {"type": "document", "id": "two", "attributes": {"name": "Doc Two", "review": "4.0"}}
    ]
    assert parsed("atom1.xml")[1]["news"] == {
        "title": "A link without rel",
        "publication_date": "2024-03-04T08:00:00-05:00",
    }


def test_parse_writes_a_number_beyond_64_bits_as_it_is_read(tmp_path):
    """Lines are written by orjson, which refuses integers beyond 64 bits: such a line is written by the
    encoder that takes them, never as a float and never as a failure."""
    (tmp_path / "videos.xml").write_text(BIG_VIEWS.format(base="https://e.x"))
    run = harvest("parse", str(tmp_path / "videos.xml"))
    assert run.returncode == 0, run.stderr
    assert '"view_count":100000000000000000000' in run.stdout.replace(" ", "")
    assert [json.loads(line)["url"] for line in run.stdout.splitlines()] == ["https://e.x/a", "https://e.x/b"]


#: What `harvest parse` has no use for: the engine, the models, the HTTP clients, AWS.
HEAVY = (
    "harvester.adapters.local.runner",
    "harvester.api.pages",
    "harvester.api.tree",
    "harvester.model.records",
    "harvester.pipeline.sitemap_step",
    "pydantic",
    "aiohttp",
    "httpx",
    "boto3",
    "botocore",
)


def test_parse_imports_the_parser_and_not_the_engine(tmp_path):
    """Importing the engine took three times as long as parsing a 50,000-URL urlset (bench/cli_parse.py
    measures it); `harvest parse` loads what it uses, whatever the other commands need."""
    import subprocess
    import sys

    sitemap = tmp_path / "pages.xml"
    sitemap.write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://e.x/a</loc>'
        "<lastmod>2024-05-01</lastmod></url></urlset>"
    )
    program = (
        "import sys\n"
        "from harvester.cli import main\n"
        f"status = main(['parse', {str(sitemap)!r}])\n"
        f"print(status, [name for name in {HEAVY!r} if name in sys.modules], file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert run.stderr.strip() == "0 []"
    assert json.loads(run.stdout)["url"] == "https://e.x/a"


def test_parse_names_a_file_that_fails_as_it_is_read_and_an_output_that_fails_apart(tmp_path):
    unreadable = harvest("parse", "/proc/self/mem")  # (opens, then every read fails: EIO)
    assert (unreadable.returncode, unreadable.stderr) == (
        1,
        "harvest: /proc/self/mem: cannot be read: Input/output error\n",
    )
    file = tmp_path / "s.txt"
    file.write_text("https://e.x/a\n" * 5000)
    with open("/dev/full", "w") as full:
        run = subprocess.run(
            [sys.executable, "-m", "harvester", "parse", str(file)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    assert (run.returncode, run.stderr) == (1, "harvest: standard output: No space left on device\n")


def test_commands_that_only_read_the_state_directory_import_no_http_pool(tmp_path):
    """`harvest report` and `harvest jobs` open the state directory through the engine's local adapter, but
    fetch nothing: aiohttp, a third of the engine's import, is imported by the first fetch, not by theirs."""
    import subprocess
    import sys

    state = tmp_path / "state"
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from harvester.adapters.local.runner import LocalHarvest\n"
        "from harvester.cli import main\n"
        f"with LocalHarvest.open(Path({str(state)!r})):\n"
        "    pass\n"
        f"statuses = [main([command, '--state-dir', {str(state)!r}]) for command in ('report', 'jobs')]\n"
        "print(statuses, 'aiohttp' in sys.modules, file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert run.stderr.strip() == "[0, 0] False"


def test_parse_says_which_values_it_set_aside(tmp_path):
    file = tmp_path / "s.xml"
    file.write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>https://e.x/a</loc><lastmod>yesterday</lastmod><priority>2.5</priority></url>"
        "<url><loc>https://e.x/b</loc><lastmod>also not a date</lastmod></url></urlset>"
    )
    run = harvest("parse", str(file))
    assert run.returncode == 0 and len(run.stdout.splitlines()) == 2
    assert run.stderr == f"harvest: {file}: set aside 3 values (entries kept): invalid_lastmod 2, invalid_priority 1\n"


def test_parse_says_why_a_file_is_not_a_sitemap(tmp_path):
    (tmp_path / "page.xml").write_text("<html><body>hello</body></html>")
    run = harvest("parse", str(tmp_path / "page.xml"))
    assert run.returncode == 1
    assert "page.xml: not a sitemap: root element <html>" in run.stderr
    assert run.stderr.count("not a sitemap") == 1


def test_report_in_every_format(site_factory, tmp_path):
    site = site_factory(pages=12, broken=1)
    state = str(tmp_path / "s")
    result = harvest_json("crawl", f"{site.base_url}/", "--state-dir", state, *ALLOW, "--quiet")
    job_id = result["job_id"]

    report = json.loads(harvest("report", job_id, "--state-dir", state).stdout)
    assert report["job"]["status"] == "completed" and report["job"]["total_urls"] == 13
    assert report["job"]["progress_percentage"] == 100.0 and report["job"]["failed_count"] == 1
    assert report["result"] == result
    assert report["loader_state"]["completed"] is True and report["loader_state"]["pending_sitemap_urls"] == []
    # The job's pace from what the state file records: 13 pages from its start to its end, nothing left.
    life = (
        datetime.fromisoformat(report["job"]["end_time"]) - datetime.fromisoformat(report["job"]["start_time"])
    ).total_seconds()
    assert report["pace"]["elapsed_seconds"] == pytest.approx(life, abs=0.1)
    assert report["pace"]["pages_per_second"] == pytest.approx(13 / life, rel=0.01)
    assert report["pace"]["seconds_left"] is None and report["pace"]["text"].endswith(" elapsed")

    lines = harvest("report", job_id, "--state-dir", state, "--format", "jsonl").stdout.splitlines()
    assert len(lines) == 13 and all(json.loads(line)["status"] in ("completed", "failed") for line in lines)

    rows = list(csv.DictReader(io.StringIO(harvest("report", job_id, "--state-dir", state, "--format", "csv").stdout)))
    assert len(rows) == 13
    (broken,) = [r for r in rows if r["status"] == "failed"]
    assert broken["url"] == site.broken_urls[0] and broken["error_message"] == "HTTP 404 Not Found"
    assert broken["http_status"] == "404"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["crawl", "ftp://example.com/"], "site 'ftp://example.com/'"),
        (["crawl", "https://e.x/", "--allow-network", "300.1.2.3/8"], "300.1.2.3/8"),
        (["crawl", "https://e.x/", "--include", "re:("], "'re:(' is not a valid regular expression"),
        (["crawl", "https://e.x/", "--concurrency", "0"], "--concurrency 0: must be from 1 to 256"),
        (["crawl", "https://e.x/", "--concurrency", "100000"], "--concurrency 100000: must be from 1 to 256"),
        (["crawl", "https://e.x/", "--per-host", "1000"], "--per-host 1000: must be from 1 to 256"),
        (
            ["crawl", "https://e.x/", "--rate-limit-delay", "-1"],
            "--rate-limit-delay -1.0: must be greater than or equal to 0",
        ),
        (["crawl", ""], "site '': not an http(s) URL: give it whole, with its scheme (https://example.com/)"),
        (["report", "--site", "127.0.0.1:19500"], "--site '127.0.0.1:19500': not an http(s) URL: give it whole"),
        (
            ["crawl", "https://e.x/", "--concurency", "4"],
            "harvest crawl: error: unrecognized arguments: --concurency 4 (did you mean --concurrency?)",
        ),
        (
            ["schedule", "list", "--jsn"],
            "harvest schedule list: error: unrecognized arguments: --jsn (did you mean --json?)",
        ),
        (["crawl", "example.com"], "site 'example.com': not an http(s) URL: give it whole, with its scheme"),
        (["sitemaps", "example.com"], "site 'example.com': not an http(s) URL"),
        (["crawl", "https://e.x/", "--max-depth", "0"], "--max-depth 0: must be greater than or equal to 1"),
        (["crawl", "https://e.x/", "--sitemap", "/relative.xml"], "--sitemap /relative.xml: not an http(s) URL"),
        (["crawl"], "give a site to crawl"),
        (
            ["crawl", "https://a.x/", "https://b.x/", "--sitemap", "https://a.x/s.xml"],
            "--sitemap starts one site's job",
        ),
        (["crawl", "https://a.x/", "https://b.x/", "--job-id", "j1"], "--job-id names one job"),
        (["crawl", "https://a.x/", "https://A.x"], "site 'https://A.x': https://a.x is given twice"),
        (["crawl", "--sites", "/no/such/list"], "--sites /no/such/list: cannot be read"),
        (["parse", "/no/such/file.xml"], "/no/such/file.xml: no such file"),
        (["report", "job-x", "--state-dir", "/no/such/dir"], "--state-dir /no/such/dir: no harvest state there"),
    ],
)
def test_bad_input_names_the_input_and_the_reason(args, message):
    run = harvest(*args)
    assert run.returncode == 2
    assert message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_a_mistyped_option_shows_its_commands_usage_not_the_top_level_one():
    run = harvest("crawl", "https://e.x/", "--concurency", "4")
    assert run.returncode == 2 and run.stderr.startswith("usage: harvest crawl ")


def test_no_delay_paces_a_host_by_per_host_alone_and_a_page_given_as_the_site_crawls_its_root(site_factory, tmp_path):
    site = site_factory(pages=40, broken=0)
    run = harvest(
        "crawl",
        f"{site.base_url}/pages/1.html",
        "--rate-limit-delay",
        "0",
        "--state-dir",
        str(tmp_path / "s"),
        *ALLOW,
        "--json",
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["site"] == f"{site.base_url}/" and result["successful_processing"] == 40
    assert f"harvest: {site.base_url}/pages/1.html: a site is crawled from its root: {site.base_url}/" in run.stderr
    job = json.loads(harvest("report", result["job_id"], "--state-dir", str(tmp_path / "s")).stdout)["job"]
    assert job["rate_limit_delay"] == 0


def test_a_site_whose_sitemaps_name_another_host_says_why_it_has_no_urls(site_factory, tmp_path):
    site = site_factory(pages=5, broken=0)
    as_localhost = site.base_url.replace("127.0.0.1", "localhost")
    run = harvest("crawl", f"{as_localhost}/", "--state-dir", str(tmp_path / "s"), *ALLOW, "--allow-network", "::1/128")
    assert run.returncode == 0, run.stderr
    assert "  dropped       5 entries (URL hygiene): out_of_scope 5" in run.stdout
    host = as_localhost.removeprefix("http://")
    assert f"  note          5 entries name pages on other hosts than {host}, which the job's --scope" in run.stdout


def test_several_sites_are_crawled_in_one_run_each_as_its_own_job(site_factory, tmp_path):
    one, two, three = (site_factory(pages=n, broken=0) for n in (5, 7, 3))
    listed = tmp_path / "sites.txt"
    listed.write_text(f"# more sites\n{two.base_url}/\n\n{three.base_url}/  # the small one\n")
    state = str(tmp_path / "s")
    run = harvest("crawl", f"{one.base_url}/", "--sites", str(listed), "--state-dir", state, *ALLOW, "--json")
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)
    assert [(r["site"], r["successful_processing"]) for r in results] == [
        (f"{one.base_url}/", 5),
        (f"{two.base_url}/", 7),
        (f"{three.base_url}/", 3),
    ]
    assert len({r["job_id"] for r in results}) == 3
    assert "3/3 sites done" in run.stderr  # (the progress line adds the jobs up)
    listing = harvest("report", "--state-dir", state).stdout.splitlines()
    assert {line.split()[0] for line in listing} == {r["job_id"] for r in results}


def test_a_bad_line_in_a_sites_file_is_named(tmp_path):
    listed = tmp_path / "sites.txt"
    listed.write_text("https://ok.example/\nnot a url\n")
    run = harvest("crawl", "--sites", str(listed), "--state-dir", str(tmp_path / "s"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"--sites {listed} line 2: site 'not a url'" in run.stderr, run.stderr
    assert not (tmp_path / "s").exists()  # (nothing started)


def test_report_of_an_unknown_job(site_factory, tmp_path):
    site = site_factory(pages=3, broken=0)
    harvest("crawl", f"{site.base_url}/", "--state-dir", str(tmp_path / "s"), *ALLOW, "--quiet")
    run = harvest("report", "nope", "--state-dir", str(tmp_path / "s"))
    assert run.returncode == 2 and "no job 'nope'" in run.stderr


def test_two_crawls_cannot_share_a_state_directory(tmp_path):
    import fcntl

    state = tmp_path / "s"
    state.mkdir()
    with open(state / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242")
        held.flush()
        run = harvest("crawl", "https://e.x/", "--state-dir", str(state), "--quiet")
    assert run.returncode == 3 and "in use by a running harvest crawl (pid 4242)" in run.stderr


BIG_VIEWS = """<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:video="http://www.google.com/schemas/sitemap-video/1.1">
  <url><loc>{base}/a</loc>
    <video:video><video:title>t</video:title><video:view_count>100000000000000000000</video:view_count></video:video>
  </url>
  <url><loc>{base}/b</loc></url>
</urlset>
"""


def test_a_number_beyond_64_bits_is_written_as_it_is_read(served_dir, tmp_path):
    """A sitemap may give a video any view count: orjson refuses integers beyond 64 bits, so the lines fall
    back to msgspec's encoder, and the listing replayed on the next crawl keeps
    the number exact."""
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    (root / "sitemap.xml").write_text(BIG_VIEWS.format(base=base))
    (root / "robots.txt").write_text(f"Sitemap: {base}/sitemap.xml\n")
    run = harvest("sitemaps", f"{base}/", *ALLOW, "--format", "jsonl")
    lines = {line["url"]: line for line in map(json.loads, run.stdout.splitlines())}
    assert run.returncode == 0 and sorted(lines) == [f"{base}/a", f"{base}/b"]
    assert '"view_count":100000000000000000000' in run.stdout  # (an int: a float would say 1e+20)
    state = tmp_path / "state"
    for crawl in range(2):  # the second crawl replays the first one's listing (the sitemap did not change)
        result = harvest_json("crawl", f"{base}/", *ALLOW, "--state-dir", str(state), "--no-pages")
        assert result["status"] == "completed" and result["total_urls"] == 2
        records = Path(result["processed_urls"]).read_text()
        assert records.count("\n") == 2 and '"view_count":100000000000000000000' in records
        # First listed: /a built as models (orjson cannot write it), /b written straight as JSON, in one batch.
        feed = [json.loads(line) for line in Path(result["changes_location"]).read_text().splitlines()]
        assert result["changes"]["new"] == (2 if crawl == 0 else 0)
        assert sorted(line["url"] for line in feed) == ([f"{base}/a", f"{base}/b"] if crawl == 0 else [])


def test_output_piped_into_head_ends_quietly(tmp_path):
    """`harvest parse FILE | head`: the reader goes away after a line; the writer stops without a traceback,
    with the status a shell gives a writer whose pipe closed (128 + SIGPIPE)."""
    import subprocess
    import sys

    urls = "".join(f"<url><loc>https://e.x/page/{n}</loc></url>" for n in range(20000))  # far past a pipe's buffer
    sitemap = tmp_path / "big.xml"
    sitemap.write_text(f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')
    process = subprocess.Popen(
        [sys.executable, "-m", "harvester", "parse", str(sitemap)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=60) == 141, stderr
    assert "https://e.x/page/0" in first
    assert stderr == ""


def test_a_state_directory_that_cannot_be_used_is_named_with_the_reason(tmp_path):
    """Not a traceback: the path, why, exit 4 (its own status: not a failed job, not a busy directory)."""
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "harvest.db").write_bytes(b"garbage, not SQLite" * 100)
    for args, message in [
        (("crawl", "https://e.x/", "--state-dir", str(a_file)), f"the state directory {a_file} is a file"),
        (("crawl", "https://e.x/", "--state-dir", str(damaged)), "is not a Harvester state file, or it is damaged"),
        (("report", "--state-dir", str(damaged)), "is not a Harvester state file, or it is damaged"),
    ]:
        run = harvest(*args, "--quiet") if args[0] == "crawl" else harvest(*args)
        assert run.returncode == 4, (args, run.stderr)
        assert message in run.stderr
        assert "Traceback" not in run.stderr


def test_parse_says_when_a_file_is_no_sitemap_at_all(tmp_path):
    """A binary, a JSON document, an empty file, a directory: each named with why, never a silent exit 0."""
    (tmp_path / "program").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "data.json").write_text('{"urls": ["not", "here"]}\n')
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "empty.xml").write_text('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"></urlset>')
    for name, code, message in [
        ("program", 1, "not a sitemap: no URL in it"),
        ("data.json", 1, "not a sitemap: no URL in it"),
        ("empty.txt", 1, "empty"),
        (".", 2, "a directory, not a sitemap file"),
        ("empty.xml", 0, "a urlset with no entries"),
    ]:
        run = harvest("parse", str(tmp_path / name))
        assert (run.returncode, run.stdout) == (code, ""), (name, run.stderr)
        assert message in run.stderr, (name, run.stderr)


def test_help_lists_every_exit_status():
    text = harvest("--help").stdout
    for code in ("0", "1", "2", "3", "4", "130", "141"):
        assert f"\n  {code} " in text, code


@pytest.mark.parametrize("output", ["jsonl", "json"])
def test_sitemaps_that_failed_are_named_on_stderr_in_every_format(served_dir, tmp_path, output):
    """Data on stdout, failures on stderr: a refused, a hostile and a soft-404 sitemap each said with why."""
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)
    laughs = '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]><urlset>&b;</urlset>'
    (root / "laughs.xml").write_text(laughs)
    (root / "soft404.xml").write_text("<html><body>Page not found</body></html>")
    (root / "robots.txt").write_text(
        f"Sitemap: {base}/laughs.xml\nSitemap: {base}/soft404.xml\nSitemap: http://169.254.169.254/latest.xml\n"
    )
    run = harvest("sitemaps", f"{base}/", *ALLOW, "--format", output)
    assert run.returncode == 1
    assert f"{base}/laughs.xml: invalid: not a sitemap: it declares an entity (<!ENTITY a ...>)" in run.stderr
    assert f"{base}/soft404.xml: invalid: not a sitemap: root element <html>" in run.stderr
    assert "http://169.254.169.254/latest.xml: " in run.stderr and "169.254.169.254" in run.stderr
    assert "no sitemap of the site could be read" in run.stderr
    assert "Traceback" not in run.stderr


def test_every_option_of_every_command_says_what_it_is_for_and_v_works_after_the_command(tmp_path):
    """argparse prints an option without help as its bare name: every option and argument has a line of
    text; the default state directory is shown; -v is accepted after the command too."""
    import re

    for command in ("crawl", "sitemaps", "parse", "report", "changes", "submit", "status"):
        text = harvest(command, "--help").stdout
        options = text.split("\noptions:\n", 1)[1]
        positional = (
            text.split("\npositional arguments:\n", 1)[1].split("\noptions:\n")[0] if "positional" in text else ""
        )
        for block, start in ((options, r"  -"), (positional, r"  ")):
            for line in block.splitlines():
                # An option or argument alone on its line, with no text after it and none on the next line
                # (an argument group's description, also indented by two, is not an option).
                if re.fullmatch(start + r"\S.*", line) and "  " not in line.strip():
                    following = block.splitlines()[block.splitlines().index(line) + 1 :][:1]
                    assert following and following[0].startswith(" " * 10), (command, line)
    assert "(default .harvest)" in harvest("crawl", "--help").stdout.replace("\n", " ").replace("  ", " ")
    sitemap = tmp_path / "s.xml"
    sitemap.write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://e.x/a</loc></url></urlset>'
    )
    run = harvest("parse", str(sitemap), "-v")
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize(("command", "resumes"), [("sitemaps", False), ("crawl", True)])
def test_ctrl_c_says_resume_only_where_there_is_something_to_resume(tmp_path, command, resumes):
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        site = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        args = [command, site, *ALLOW]
        if command == "crawl":
            args += ["--state-dir", str(tmp_path / "s"), "--quiet"]
        process = subprocess.Popen(
            [sys.executable, "-m", "harvester", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_as_in_a_terminal,
        )
        time.sleep(2)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "harvest: interrupted" in stderr
    assert ("run the same command again to resume" in stderr) is resumes
    assert "Traceback" not in stderr


def test_a_crawl_summary_shows_excluded_pages_dropped_entries_and_set_aside_values(served_dir, tmp_path):
    """What the sitemaps tree shows per sitemap (hygiene drops, values set aside) and pages robots.txt keeps
    out reach the crawl's summary and its result, each in its own count: none of them is a failure."""
    root = tmp_path / "site"
    (root / "private").mkdir(parents=True)
    base = served_dir(root)
    (root / "robots.txt").write_text(f"User-agent: *\nDisallow: /private/\nSitemap: {base}/s.xml\n")
    (root / "a.html").write_text("a")
    (root / "private" / "b.html").write_text("b")
    (root / "s.xml").write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<url><loc>{base}/a.html</loc><lastmod>not-a-date</lastmod><priority>7</priority></url>"
        f"<url><loc>{base}/private/b.html</loc></url>"
        "<url><loc>ftp://x/y</loc></url><url><loc>http://.bad/x</loc></url></urlset>"
    )
    state = str(tmp_path / "state")

    text = harvest("crawl", f"{base}/", *ALLOW, "--state-dir", state, "--quiet")
    job_id = text.stdout.split()[1].rstrip(":")
    result = json.loads(harvest("report", job_id, "--state-dir", state).stdout)["result"]

    assert text.returncode == 0, text.stderr
    assert "  failed        0\n" in text.stdout
    assert "  excluded      1: forbidden by robots.txt 1\n" in text.stdout
    assert "  dropped       2 entries (URL hygiene): malformed 1, not_http 1\n" in text.stdout
    assert "  set aside     2 values (entries kept): invalid_lastmod 1, invalid_priority 1\n" in text.stdout
    assert (result["total_urls"], result["successful_processing"], result["excluded_processing"]) == (2, 1, 1)
    assert result["failed_processing"] == 0 and result["error_details"] == []
    assert result["entries_dropped"] == {"malformed": 1, "not_http": 1}
    assert result["entry_warnings"] == {"invalid_lastmod": 1, "invalid_priority": 1}
    tree = harvest("sitemaps", f"{base}/", *ALLOW).stdout
    shown = "2 entries dropped (malformed 1, not_http 1)  2 values set aside (invalid_lastmod 1, invalid_priority 1)"
    assert shown in tree


def test_probes_that_got_no_answer_are_not_reported_as_not_found(served_dir, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    base = served_dir(root)

    refused = harvest("sitemaps", f"{base}/")  # (no --allow-network: 127.0.0.1 is refused)
    answered = harvest("sitemaps", f"{base}/", *ALLOW)

    assert refused.returncode == 1
    assert "probed and not found" not in refused.stdout
    assert "(14 well-known locations could not be probed: refused to connect to 127.0.0.1" in refused.stdout
    assert "(15 well-known locations probed and not found)" in answered.stdout  # (robots.txt too)
    assert "could not be probed" not in answered.stdout


def test_the_cli_reference_synopsis_names_every_option_of_every_command_and_no_other():
    """The CLI reference (docs/cli.md) and `harvest COMMAND --help` come from one parser: they must agree."""
    import argparse
    import re

    from harvester.cli import build_parser

    reference = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    block = reference.split("# The `harvest` command\n", 1)[1].split("```", 2)[1]
    synopsis: dict[str, set[str]] = {}
    command = ""
    for line in block.splitlines():
        if line.startswith("harvest "):
            words = line.split()
            command = " ".join(words[1:3]) if words[1] == "schedule" else words[1]
        synopsis.setdefault(command, set()).update(re.findall(r"--[a-z][a-z-]*", line))
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    job_options = {
        "--no-pages",
        "--full",
        "--output",
        "--include",
        "--exclude",
        "--sitemap-include",
        "--sitemap-exclude",
    }
    job_options |= {"--scope", "--max-depth", "--rate-limit-delay"}
    job_options |= {"--since", "--before", "--require-lastmod", "--min-priority", "--changefreq", "--with-extension"}
    job_options |= {"--sitemap-since", "--alternates", "--lang"}
    job_options |= {"--repair-urls", "--strict-location", "--allow-doctype", "--warn-size"}  # (the reading rules)
    job_options |= {"--no-robots", "--no-known-paths", "--known-path", "--keep-site-path"}
    parsers = dict(commands.choices)
    for name, sub in commands.choices.items():  # (a command of commands: `schedule add`, ...)
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                del parsers[name]
                parsers.update({f"{name} {a}": p for a, p in action.choices.items()})
    for name, sub in parsers.items():
        helped = {o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        helped.discard("--verbose")  # (every command's, said once below the synopsis)
        written = synopsis.get(name, set()) | (job_options if name in ("submit", "schedule add") else set())
        only = f"docs/cli.md only {sorted(written - helped)}, --help only {sorted(helped - written)}"
        assert written == helped, f"harvest {name}: {only}"
