"""Local crawl throughput: `harvest crawl` against Scrapy's SitemapSpider and a plain httpx loop, on one
20,000-page site served by nginx, in one run.

Each contender runs in its own process (so its peak memory is its own) against the same nginx, at the same
concurrency, with no delay between requests:

- **Scrapy** — ``SitemapSpider`` from robots.txt; CONCURRENT_REQUESTS and CONCURRENT_REQUESTS_PER_DOMAIN at
  the concurrency, DOWNLOAD_DELAY 0, AutoThrottle off, robots.txt obeyed. Each page is parsed (its title
  read) and dropped: no state, nothing stored, nothing resumable.
- **httpx baseline** — the least any crawler does: fetch every page with that many requests in flight and
  write each body to a file. No discovery, robots.txt, guard, state or accounting.
- **harvest crawl** — the whole job: robots.txt and sitemaps discovered and parsed, every page claimed,
  fetched through the SSRF guard, stored, and settled in the SQLite state (resumable after a kill), the
  per-host gate, the crawl database, the job's counts.

The target (issue 9) is harvest crawl at 2.00x Scrapy's pages/s. nginx is installed with apt-get if it is
missing (root only); ``--server python`` uses the demo's threading server instead, which caps every contender
at its own few hundred pages/s.

    python bench/local_crawl.py [--pages 20000] [--concurrency 16] [--server nginx|python]
                                [--output warc|files] [--page-kb 0] [--only NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

TARGET = 2.0

NGINX_CONF = """\
{user}
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    types {{ text/html html; application/xml xml; text/plain txt; application/gzip gz; }}
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        root {root};
    }}
}}
"""


# ---- the contenders (each runs in a child process: `--contender NAME`) ----


def run_scrapy(site: str, out: Path, concurrency: int, pages: int) -> int:
    from scrapy.crawler import CrawlerProcess
    from scrapy.spiders import SitemapSpider

    parsed = 0

    class Spider(SitemapSpider):
        name = "bench"
        sitemap_urls = [f"{site}robots.txt"]

        def parse(self, response: Any) -> Any:
            nonlocal parsed
            parsed += 1
            yield {"title": response.css("title::text").get()}

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            "DOWNLOAD_DELAY": 0,
            "AUTOTHROTTLE_ENABLED": False,
            "ROBOTSTXT_OBEY": True,
            "LOG_LEVEL": "ERROR",
            "TELNETCONSOLE_ENABLED": False,
        }
    )
    process.crawl(Spider)
    process.start()
    return parsed


def run_httpx(site: str, out: Path, concurrency: int, pages: int) -> int:
    import httpx

    urls = [f"{site}pages/{n}.html" for n in range(1, pages + 1)]

    async def crawl() -> int:
        queue: asyncio.Queue[str] = asyncio.Queue()
        for url in urls:
            queue.put_nowait(url)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        fetched = 0
        async with httpx.AsyncClient(limits=limits, trust_env=False) as client:

            async def worker() -> None:
                nonlocal fetched
                while not queue.empty():
                    url = queue.get_nowait()
                    response = await client.get(url)
                    (out / hashlib.sha256(url.encode()).hexdigest()[:32]).write_bytes(response.content)
                    fetched += response.status_code == 200

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return fetched

    return asyncio.run(crawl())


def run_harvester(site: str, out: Path, concurrency: int, pages: int, output: str = "warc") -> int:
    from harvester.adapters.local.runner import LocalHarvest, LocalRunner
    from harvester.fetch import FetchPolicy, parse_networks
    from harvester.model.messages import JobRequest
    from harvester.settings import EngineSettings

    policy = FetchPolicy(allow_networks=parse_networks(["127.0.0.0/8"]))
    request = JobRequest(site=site, rate_limit_delay=0.00001, output=output)
    # As many requests to the one host at once as Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN allows.
    settings = msgspec.structs.replace(EngineSettings.from_env(), host_max_in_flight=concurrency)

    async def crawl() -> int:
        with LocalHarvest.open(out) as harvest:
            runner = LocalRunner(harvest, policy=policy, settings=settings, concurrency=concurrency)
            outcome = await runner.crawl(request)
            return outcome.result.successful_processing

    return asyncio.run(crawl())


CONTENDERS = {
    "scrapy": ("Scrapy SitemapSpider (parse, no store)", run_scrapy),
    "httpx": ("httpx baseline (fetch + write)", run_httpx),
    "harvester": ("harvest crawl (durable, stored)", run_harvester),
}


def contender_main(args: argparse.Namespace) -> None:
    """One contender's run; prints one JSON line for the parent (its own time and peak memory)."""
    start = time.perf_counter()
    run = CONTENDERS[args.contender][1]
    if args.contender == "harvester":
        pages = run_harvester(args.site, args.out, args.concurrency, args.pages, args.output)
    else:
        pages = run(args.site, args.out, args.concurrency, args.pages)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"pages": pages, "seconds": seconds, "peak_mib": peak_kib / 1024}))


# ---- the site and its server ----


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit(
            "bench: nginx is not installed and cannot be installed here (needs root and apt-get); "
            "install it, or run with --server python"
        )
    print("bench: installing nginx (apt-get)…", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx"], check=True, env=env, stdout=subprocess.DEVNULL)
    return shutil.which("nginx") or "/usr/sbin/nginx"


@contextlib.contextmanager
def nginx(root: Path, tmp: Path, port: int) -> Iterator[str]:
    """nginx serving ``root`` on 127.0.0.1:``port``, from a private configuration, in the foreground."""
    binary = ensure_nginx()
    user = "user root;" if os.geteuid() == 0 else ""  # (nginx's default user could not read a private tmp dir)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(user=user, tmp=tmp, port=port, root=root))
    server = subprocess.Popen([binary, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")])
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if server.poll() is not None or time.monotonic() > deadline:
                log = (tmp / "error.log").read_text() if (tmp / "error.log").exists() else ""
                sys.exit(f"bench: nginx did not start on 127.0.0.1:{port}: {log.strip()}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@contextlib.contextmanager
def python_server(root: Path) -> Iterator[str]:
    from harvester.demo import serve

    with serve(root) as base:
        yield base


def run_contender(name: str, site: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    out.mkdir()
    os.sync()  # the last contender's files written back first: its disk traffic is not the next one's cost
    command = [sys.executable, __file__, "--contender", name, "--site", site, "--out", str(out)]
    command += ["--concurrency", str(args.concurrency), "--pages", str(args.pages), "--output", args.output]
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--page-kb", type=int, default=0, help="pad every page to about this many KB (0: the demo's sub-KB page)"
    )
    parser.add_argument("--server", choices=("nginx", "python"), default="nginx")
    parser.add_argument(
        "--output", choices=("warc", "files"), default="warc", help="how harvest crawl keeps pages (its --output)"
    )
    parser.add_argument("--only", action="append", choices=tuple(CONTENDERS), help="run only this contender")
    parser.add_argument("--contender", choices=tuple(CONTENDERS), help=argparse.SUPPRESS)
    parser.add_argument("--site", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contender:
        contender_main(args)
        return
    from harvester.demo import SiteSpec, build_site

    names = args.only or list(CONTENDERS)
    spec = SiteSpec(pages=args.pages, broken=0, page_bytes=args.page_kb * 1024)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "site"
        root.mkdir()
        if args.server == "nginx":
            port = free_port()
            build_site(root, f"http://127.0.0.1:{port}", spec)
            server = nginx(root, tmp, port)
        else:
            server = python_server(root)
        with server as base:
            if args.server == "python":
                build_site(root, base, spec)
            for name in names:
                results[name] = run_contender(name, f"{base}/", tmp / name, args)
    size = f"{args.page_kb} KB pages" if args.page_kb else "sub-KB pages"
    print(
        f"site: {args.pages} {size} on 127.0.0.1 ({args.server}), {args.concurrency} concurrent requests, no delay; "
        f"harvest crawl keeps pages as {args.output}"
    )
    print(f"{'':40} {'pages':>6} {'seconds':>8} {'pages/s':>8} {'peak MiB':>9}")
    for name in names:
        result = results[name]
        result["rate"] = result["pages"] / result["seconds"]
        print(
            f"{CONTENDERS[name][0]:40} {result['pages']:>6} {result['seconds']:8.2f} {result['rate']:8.0f} "
            f"{result['peak_mib']:9.0f}"
        )
    for name, result in results.items():
        if result["pages"] != args.pages:
            print(f"warning: {name} fetched {result['pages']} of {args.pages} pages")
    if "harvester" in results and "scrapy" in results:
        ratio = results["harvester"]["rate"] / results["scrapy"]["rate"]
        verdict = "met" if ratio >= TARGET else "NOT met"
        print(f"harvest crawl / Scrapy pages/s: {ratio:.2f} (target {TARGET:.2f}: {verdict})")
    if "harvester" in results and "httpx" in results:
        print(f"harvest crawl / httpx baseline pages/s: {results['harvester']['rate'] / results['httpx']['rate']:.2f}")


if __name__ == "__main__":
    main()
