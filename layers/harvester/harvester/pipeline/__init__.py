"""The steps of a job, in the order they run: start (``jobs``), discovery, the sitemap step
(``sitemap_step``), the page worker, completion; plus recovery and the scheduler's tick. Each step takes a
``StepContext``."""
