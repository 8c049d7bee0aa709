"""Harvester: sitemap ingestion on AWS serverless or on one machine, with one engine."""

__version__ = "0.1.0"
