"""Whether a URL a job lists one by one is the job's already through a part it adopted, asked of those URLs
only: a job's de-duplication costs what it lists one by one, not the URLs of the parts it adopted.

A job counts a URL once, for the first sitemap that lists it. The URLs it lists one by one are in its key set
(``PageRows``); those it took with the parts it adopted are not loaded there. A URL listed one by one is the
job's already when a part the job adopted holds it (the part's keys, less the URLs its adoption left out)
and either

* its crawl record, as the listing read it, names that part's sitemap; or
* the part is *disturbed*: another job wrote a record naming its sitemap after the part was made, or the
  sitemap has another part since (whose put keeps only its own maker's writes: an empty part, written
  with none, would hide the others').

No other URL of an adopted part can come up: each of a part's URLs had its record naming the part's sitemap
when the part was made, and a write that makes it name another moves the epoch of the sitemap it named
(``part_rows.touch``). Before the adoption, a move by anyone refuses an adoption whole, and one by another
job an adoption in part (``part_rows.adopt``); after it, a move by another job disturbs the part, and one by
this job is its listing of the URL, which read the record naming the part's sitemap. So the parts a URL is
looked up in are the one its record names and the disturbed ones, each loaded only then (and a few kept).

The other way round, a part adopted after the job listed URLs one by one: an adoption whole cannot hold one
of them (its epoch would have moved), an adoption in part is checked against the job's key set (``PageRows``).

A job whose listings name more parts than are kept loaded, one batch after another (a sitemap listing the URLs
of many others), would read them again and again: past as many reads as it adopted parts (and the few kept),
every adopted part's keys are taken into one key set (12 bytes a URL) and a URL is held when it is in it,
whatever its record names (what the naming spares is that read, never the answer).
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from harvester.adapters.local import part_rows
from harvester.keyset import KeySet, bits_of
from harvester.model.crawl import SitemapPart
from harvester.model.records import url_key

#: Parts' key sets kept loaded (a listing asks the few its URLs' records name, a urlset at a time).
_KEPT = 8

#: The parts a job adopted that another job wrote a record of since they were made (its writes' last epoch
#: past the part's), or whose sitemap has another part since (a part put keeps only its maker's writes).
_DISTURBED = (
    "SELECT jp.sitemap FROM job_parts jp JOIN crawl_parts cp ON cp.site = jp.site AND cp.sitemap = jp.sitemap"
    " WHERE jp.job_id = ? AND (cp.part IS NULL OR json_extract(cp.part, '$.job_id') IS NOT jp.made_by"
    " OR EXISTS (SELECT 1 FROM json_each(cp.writers) w WHERE w.key != ?"
    " AND json_extract(w.value, '$[1]') > json_extract(jp.part, '$.epoch')))"
)


class _Adoption(NamedTuple):
    site: str
    made_by: str
    excluded: frozenset[str]


class AdoptedKeys:
    """What each job holds through the parts it adopted (module docstring). One process writes a state file
    (``harvest crawl`` holds its lock), so the adoptions it records here are all there are."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._adopted: dict[str, dict[str, _Adoption]] = {}
        self._keys: OrderedDict[tuple[str, str, str], frozenset[str]] = OrderedDict()
        self._reads: dict[str, int] = {}
        #: The jobs whose adopted parts' keys are all in one key set (module docstring).
        self._every: dict[str, KeySet] = {}

    def adopted(self, job_id: str) -> dict[str, _Adoption]:
        """The job's adoptions by sitemap URL (read from the state file once, then kept up to date)."""
        found = self._adopted.get(job_id)
        if found is None:
            found = self._adopted[job_id] = {
                part.sitemap: _Adoption(site, part.job_id, excluded or frozenset())
                for part, _, site, excluded in part_rows.adopted_by(self.conn, job_id)
            }
        return found

    def add(self, job_id: str, part: SitemapPart, site: str, excluded: Sequence[str]) -> None:
        """An adoption the job's transaction committed."""
        adoption = _Adoption(site, part.job_id, frozenset(excluded))
        if job_id in self._adopted:
            self._adopted[job_id][part.sitemap] = adoption
        every = self._every.get(job_id)
        if every is not None:
            self._take(every, self.conn, part.sitemap, adoption)

    def reads_every_part(self, job_id: str) -> bool:
        """Whether the job's adopted parts' keys are all in one key set now (module docstring)."""
        return job_id in self._every

    def forget(self, job_id: str) -> None:
        self._adopted.pop(job_id, None)
        self._reads.pop(job_id, None)
        self._every.pop(job_id, None)

    def held(
        self,
        db: sqlite3.Connection,
        job_id: str,
        urls: Sequence[str],
        keys: Sequence[int],
        named: Mapping[str, str] | None,
    ) -> set[int]:
        """The positions of ``urls`` (``keys``: their ``bits_of`` keys) that a part the job adopted holds.
        ``named``: the sitemap each URL's crawl record named as the listing read it (a URL without a record
        has none); None when not known: every adopted part is asked."""
        adopted = self.adopted(job_id)
        if not adopted:
            return set()
        if named is None or job_id in self._every:
            disturbed = list(adopted)
        else:
            disturbed = [s for (s,) in db.execute(_DISTURBED, (job_id, job_id)) if s in adopted]
        held = set()
        for i, url in enumerate(urls):
            every = self._every.get(job_id)
            if every is not None:  # (every adopted part's keys, the adoptions' left-out URLs less)
                if keys[i] in every:
                    held.add(i)
                continue
            sitemap = named.get(url) if named is not None else None
            asked = [sitemap, *disturbed] if sitemap in adopted and sitemap not in disturbed else disturbed
            if not asked:
                continue
            key = url_key(url)
            for name in asked:
                adoption = adopted[name]
                if url in adoption.excluded:
                    continue
                part = self._part_keys(db, job_id, name, adoption)
                if part is None:  # (the reads passed their bound: every adopted part's keys are in one set)
                    if keys[i] in self._every[job_id]:
                        held.add(i)
                    break
                if key in part:
                    held.add(i)
                    break
        return held

    def _take(self, every: KeySet, db: sqlite3.Connection, sitemap: str, adoption: _Adoption) -> None:
        left_out = {url_key(url) for url in adoption.excluded}
        stored = part_rows.part_keys(db, adoption.site, sitemap, adoption.made_by)
        every.take([bits_of(key) for key in stored if key not in left_out])

    def _part_keys(
        self, db: sqlite3.Connection, job_id: str, sitemap: str, adoption: _Adoption
    ) -> frozenset[str] | None:
        """The part's keys (kept loaded, a few); None once the job's reads passed their bound, when every
        adopted part's keys have been taken into one key set instead."""
        stamp = (adoption.site, sitemap, adoption.made_by)
        keys = self._keys.get(stamp)
        if keys is None:
            reads = self._reads[job_id] = self._reads.get(job_id, 0) + 1
            if reads > _KEPT + len(self.adopted(job_id)):
                every = self._every[job_id] = KeySet()
                for name, each in self.adopted(job_id).items():
                    self._take(every, db, name, each)
                return None
            keys = frozenset(part_rows.part_keys(db, adoption.site, sitemap, adoption.made_by))
            self._keys[stamp] = keys
            if len(self._keys) > _KEPT:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(stamp)
        return keys
