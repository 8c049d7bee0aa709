"""The crawl database: a site's memory across jobs (one record per URL and per sitemap), the crawl-state
machine and fetch schedule that move it, lastmod trust, and the change feed a job writes from it."""
