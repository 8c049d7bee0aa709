"""The numbers that bound what one fetch or one document may cost (sitemaps.org, RFC 9309, our own)."""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB

#: sitemaps.org: 50 MiB uncompressed and 50,000 entries per sitemap (and 50,000 children per index).
SITEMAP_MAX_BYTES = 50 * MiB
SITEMAP_MAX_ENTRIES = 50_000
#: RFC 9309 requires parsing at least 500 KiB of a robots.txt.
ROBOTS_MAX_BYTES = 512 * KiB
#: Pages are configurable; this is the default.
PAGE_MAX_BYTES = 10 * MiB
#: sitemaps.org: URLs of at most 2,048 characters.
URL_MAX_LENGTH = 2048
MAX_REDIRECTS = 5
#: Depth of the sitemap tree below the site node (USP stops at 11, Crawlee at 10).
MAX_DEPTH = 10
#: What a document being written (a fetched body, a listing, a job's records) keeps in memory before
#: it spills to a temporary file.
SPOOL_IN_MEMORY = 1 * MiB
#: The largest version of a sitemap (uncompressed) compared with its stored copy element by element
#: (``sitemap.elements``): both versions and their elements are held at once, about four times this, in a
#: function of 512 MB. A larger one is parsed whole and compared entry by entry.
ELEMENTS_MAX_BYTES = 16 * MiB
#: A local WARC file rolls over to a new one once it reaches this size (Common Crawl's are about 1 GB).
WARC_FILE_MAX_BYTES = 1024 * MiB
