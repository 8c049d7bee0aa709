"""The job's outputs: its result (results.py: the files' keys and the records' lines; lines.py: JSON Lines
written in batches; index.py: the Parquet URL index) and its captures as web archives keep them (warc.py,
batch.py: WARC records and their CDXJ indexes; stored.py: a page's stored content read back), with the
ports they are written through (stores.py)."""
