"""The Python API (no AWS needed): a site's sitemap tree and its pages as a stream."""
