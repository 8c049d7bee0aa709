"""The crawl's output as web archives keep it: WARC records and their indexes."""
