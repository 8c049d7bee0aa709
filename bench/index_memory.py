"""Memory of a job's columnar URL index (``index.parquet``, harvester.archive.index.build_index) as jobs grow.

A job's end builds the index in the invocation that ends it: in a 512 MB Lambda function, beside the
engine. This writes the gzipped record lines of jobs of ``--urls`` sizes (records as a durable discovery
writes them, an image and an alternate each), builds each index in a fresh child process, and prints the
child's peak RSS and seconds, against a named baseline run in the same way: the one-pass build the index
had until 2026-11-28 (one ``COPY`` from the JSON reader through the sort, two threads, DuckDB's default row
groups and JSON buffers, 192 MB limit), which peaked at 440 MiB at the end of a 400,000-URL discovery and
failed for memory at 1.2 million URLs.

    python bench/index_memory.py [--urls 100000,400000,1200000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import harvester.archive.index as index

source, out, baseline = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "baseline"
if baseline:  # the one-pass build, as it was
    def one_pass(records, out, *, job_id, gzipped=True):
        con = index._connect(out.parent)
        con.execute("SET memory_limit = '192MB'")
        con.execute("SET threads = 2")
        con.execute(index.SURT_SQL)
        fields = ", ".join(f"{index._literal(n)}: {index._literal(k)}" for n, k in index._RECORD_FIELDS.items())
        selected = ", ".join(
            f"CAST({sql.format(job_id=index._literal(job_id))} AS {kind}) AS {name}"
            for name, kind, sql in index.COLUMNS
        )
        source = (
            f"read_json({index._literal(str(records))}, format = 'newline_delimited', compression = 'gzip',"
            f" columns = {{{fields}}})"
        )
        con.execute(
            f"COPY (SELECT {selected} FROM {source} ORDER BY url_surtkey, url)"
            f" TO {index._literal(str(out))} (FORMAT PARQUET, COMPRESSION ZSTD)"
        )
        return con.execute(f"SELECT count(*) FROM read_parquet({index._literal(str(out))})").fetchone()[0]
    build = one_pass
else:
    build = index.build_index
start = time.perf_counter()
try:
    rows = build(source, out, job_id="j")
except Exception as exc:  # (DuckDB's OutOfMemoryException, as the baseline meets it)
    rows = type(exc).__name__
seconds = time.perf_counter() - start
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rows": rows, "seconds": seconds, "peak_mib": peak_mib}))
"""


def write_records(path: Path, urls: int) -> None:
    with gzip.open(path, "wt", compresslevel=1) as out:
        for i in range(urls):
            base = f"https://www.example.com/section-{i % 97}"
            record = {
                "url": f"{base}/article-{i}-some-slug-words-here.html",
                "last_modified": "2026-11-01T00:00:00Z",
                "change_frequency": "daily",
                "priority": 0.5,
                "status": "completed",
                "sitemap": f"https://www.example.com/sitemaps/s-{i // 50_000}.xml.gz",
                "extensions": {
                    "images": [{"loc": f"{base}/i/{i}.png"}],
                    "alternates": [{"hreflang": "de", "href": f"https://www.example.com/de/{i}"}],
                },
                "crawl_state": "unfetched",
                "next_fetch_time": "2026-11-01T00:00:00Z",
                "discovered_at": "2026-11-01T00:00:00Z",
                "finished_at": "2026-11-01T00:00:00Z",
                "fetch_reason": "listed",
                "change": "new",
            }
            out.write(json.dumps(record, separators=(",", ":")) + "\n")


def build(source: Path, work: Path, how: str) -> dict[str, object]:
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(source), str(work / "index.parquet"), how],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", default="100000,400000,1200000")
    args = parser.parse_args()
    print(f"{'URLs':>10}  {'build':<34} {'rows':>22} {'seconds':>8} {'peak MiB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for urls in (int(n) for n in args.urls.split(",")):
            source = Path(tmp) / f"records-{urls}.jsonl.gz"
            write_records(source, urls)
            figures = {}
            for how, label in (("baseline", "one pass (baseline, until 11-28)"), ("now", "two passes (build_index)")):
                figures[how] = build(source, Path(tmp) / f"{how}-{urls}", how)
                f = figures[how]
                print(f"{urls:>10,}  {label:<34} {f['rows']!s:>22} {f['seconds']:>8.2f} {f['peak_mib']:>9.0f}")
            ratio = figures["now"]["peak_mib"] / figures["baseline"]["peak_mib"]  # type: ignore[operator]
            print(f"{'':>10}  peak memory, two passes / one pass: {ratio:.2f}x")


if __name__ == "__main__":
    main()
