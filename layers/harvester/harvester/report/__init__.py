"""The crawl report: a job's outcome as one self-contained HTML page (``page.render``), with the site's
timeline of crawls (``history``). Pure rendering on top of the records; the job's end writes it beside the
result (``report.html``), and ``harvest report JOB --html FILE`` writes it where asked."""
