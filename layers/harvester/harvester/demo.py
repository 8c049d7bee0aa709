"""The bundled demo site, and `make demo`: serve it on 127.0.0.1 and crawl it with `harvest crawl`.

The site is what a real one looks like to Harvester: robots.txt declares a sitemap index, the index lists
several urlsets (the last one gzipped), pages carry lastmod / changefreq / priority and some images, and a
few listed pages do not exist. The end-to-end tests build their sites with the same generator.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from xml.sax.saxutils import escape

from harvester.adapters.local.runner import LocalHarvest

CHANGEFREQS = ("daily", "weekly", "monthly")


@dataclass(frozen=True)
class SiteSpec:
    pages: int = 300
    broken: int = 5
    sitemaps: int = 4
    gzip_last: bool = True
    images_every: int = 10


@dataclass(frozen=True)
class BuiltSite:
    base_url: str
    page_urls: tuple[str, ...]
    broken_urls: tuple[str, ...]
    sitemap_urls: tuple[str, ...]

    @property
    def listed(self) -> int:
        return len(self.page_urls) + len(self.broken_urls)


def build_site(root: Path, base_url: str, spec: SiteSpec = SiteSpec()) -> BuiltSite:
    """Writes the site under ``root``; every URL in it is absolute under ``base_url``."""
    base_url = base_url.rstrip("/")
    (root / "pages").mkdir(parents=True, exist_ok=True)
    (root / "sitemaps").mkdir(exist_ok=True)
    pages = [f"{base_url}/pages/{n}.html" for n in range(1, spec.pages + 1)]
    broken = [f"{base_url}/pages/missing-{n}.html" for n in range(1, spec.broken + 1)]
    for n in range(1, spec.pages + 1):
        (root / "pages" / f"{n}.html").write_text(_page_html(n, base_url), encoding="utf-8")
    listed = list(pages)
    # Broken links are spread through the listing rather than bunched at its end.
    for i, url in enumerate(broken):
        listed.insert((i + 1) * len(listed) // (len(broken) + 1), url)
    chunks = [listed[i :: spec.sitemaps] for i in range(spec.sitemaps)]
    sitemap_urls = []
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i, chunk in enumerate(chunks, start=1):
        body = _urlset(chunk, start, spec.images_every, base_url).encode("utf-8")
        name = f"pages-{i}.xml"
        if spec.gzip_last and i == spec.sitemaps:
            name += ".gz"
            body = gzip.compress(body, mtime=0)
        (root / "sitemaps" / name).write_bytes(body)
        sitemap_urls.append(f"{base_url}/sitemaps/{name}")
    index = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">',
    ]
    for url in sitemap_urls:
        index.append(f"  <sitemap><loc>{escape(url)}</loc><lastmod>2026-11-01</lastmod></sitemap>")
    index.append("</sitemapindex>")
    (root / "sitemap_index.xml").write_text("\n".join(index) + "\n", encoding="utf-8")
    (root / "robots.txt").write_text(
        f"User-agent: *\nDisallow: /private/\n\nSitemap: {base_url}/sitemap_index.xml\n", encoding="utf-8"
    )
    (root / "index.html").write_text(_page_html(0, base_url), encoding="utf-8")
    return BuiltSite(base_url, tuple(pages), tuple(broken), (f"{base_url}/sitemap_index.xml", *sitemap_urls))


def _urlset(urls: list[str], start: datetime, images_every: int, base_url: str) -> str:
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">',
    ]
    for n, url in enumerate(urls):
        lastmod = (start + timedelta(hours=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
        entry = [f"  <url><loc>{escape(url)}</loc><lastmod>{lastmod}</lastmod>"]
        entry.append(f"<changefreq>{CHANGEFREQS[n % 3]}</changefreq><priority>{(n % 10) / 10:.1f}</priority>")
        if images_every and n % images_every == 0:
            entry.append(f"<image:image><image:loc>{base_url}/img/{n}.jpg</image:loc></image:image>")
        entry.append("</url>")
        out.append("".join(entry))
    out.append("</urlset>")
    return "\n".join(out) + "\n"


def _page_html(n: int, base_url: str) -> str:
    return (
        f"<!doctype html><html><head><title>Demo page {n}</title></head>"
        f"<body><h1>Demo page {n}</h1><p>Served by the Harvester demo site at {base_url}.</p>"
        f"<p>{'Lorem ipsum dolor sit amet. ' * (1 + n % 20)}</p></body></html>\n"
    )


class _QuietHandler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(root: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serves ``root`` over HTTP on ``host``; yields the base URL (the port is picked by the OS)."""
    server = ThreadingHTTPServer((host, port), partial(_QuietHandler, directory=str(root)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="demo-site", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the demo site on 127.0.0.1 and crawl it.")
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--broken", type=int, default=5)
    parser.add_argument("--state-dir", type=Path, default=Path(".harvest-demo"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.state_dir, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="harvest-demo-site-") as tmp:
        root = Path(tmp)
        with serve(root) as base_url:
            site = build_site(root, base_url, SiteSpec(pages=args.pages, broken=args.broken))
            print(
                f"Demo site on {base_url}/ : robots.txt -> sitemap index -> {len(site.sitemap_urls) - 1} sitemaps"
                f" (one gzipped), {len(site.page_urls)} pages, {len(site.broken_urls)} broken links\n"
            )
            allow = ["--allow-network", "127.0.0.0/8"]
            status = _run(["sitemaps", f"{base_url}/", *allow])
            if status == 0:
                status = _run(["crawl", f"{base_url}/", "--state-dir", str(args.state_dir), *allow])
    if status == 0:
        with LocalHarvest.open(args.state_dir) as harvest:
            job = harvest.store.all_jobs()[-1]
        print(
            f"Raw documents and the result: {args.state_dir}/documents/jobs/{job.job_id}/\n"
            f"Progress and result:          .venv/bin/harvest report {job.job_id} --state-dir {args.state_dir}\n"
            f"Per-URL records as CSV:       .venv/bin/harvest report {job.job_id} --state-dir {args.state_dir}"
            " --format csv"
        )
    return status


def _run(arguments: list[str]) -> int:
    print("$ harvest " + " ".join(arguments), flush=True)
    status = subprocess.run([sys.executable, "-m", "harvester", *arguments], check=False).returncode
    print(flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
