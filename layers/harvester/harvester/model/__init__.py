"""The records a user sees (jobs, URL records, sitemap records, the ingestion result), the messages that
travel on the queues, and the accounting that says what each record move counts."""
