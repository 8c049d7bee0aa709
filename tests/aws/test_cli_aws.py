"""`harvest submit` and `harvest status` against the stack deployed in moto (in-process, so boto3 is mocked)."""

from __future__ import annotations

import datetime as dt
import json
import re

import boto3
import pytest

from harvester.cli import main
from harvester.cli.progress import Pace


def test_submit_then_follow_a_job_by_its_stack(deployed_stack, site_factory, capsys):
    stack, poller = deployed_stack
    site = site_factory(pages=20, broken=1)

    assert main(["submit", f"{site.base_url}/", "--stack", stack.stack_name, "--rate-limit-delay", "0.001"]) == 0
    job_id = capsys.readouterr().out.strip()
    assert job_id.startswith("job-")
    (message,) = boto3.client("sqs").receive_message(QueueUrl=stack.outputs["JobQueueUrl"])["Messages"]
    assert json.loads(message["Body"])["job_id"] == job_id
    boto3.client("sqs").change_message_visibility(
        QueueUrl=stack.outputs["JobQueueUrl"], ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
    )

    poller.drain()
    capsys.readouterr()  # the handlers log JSON to stdout, as in Lambda

    assert main(["status", job_id, "--stack", stack.stack_name]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["status"] == "completed"
    assert (status["total_urls"], status["successful_count"], status["failed_count"]) == (21, 20, 1)
    assert status["result_location"].endswith(f"/jobs/{job_id}/result.json")


def test_submit_to_a_queue_url_with_a_chosen_job_id(deployed_stack, capsys):
    stack, _ = deployed_stack
    url = stack.outputs["JobQueueUrl"]
    assert main(["submit", "https://example.com/", "--queue-url", url, "--job-id", "mine", "--no-pages"]) == 0
    assert capsys.readouterr().out.strip() == "mine"
    (message,) = boto3.client("sqs").receive_message(QueueUrl=url)["Messages"]
    body = json.loads(message["Body"])
    assert (body["site"], body["job_id"], body["fetch_pages"]) == ("https://example.com/", "mine", False)


def test_unknown_stack_and_job_are_named(deployed_stack, capsys):
    stack, _ = deployed_stack
    assert main(["status", "nope", "--stack", stack.stack_name]) == 2
    assert "no job 'nope' in stack" in capsys.readouterr().err
    assert main(["submit", "https://e.x/", "--stack", "not-there"]) == 2
    assert "stack 'not-there'" in capsys.readouterr().err


def test_status_shows_the_jobs_pace_and_time_left_while_it_runs_and_its_pace_once_it_ended(
    deployed_stack, site_factory, capsys
):
    stack, poller = deployed_stack
    site = site_factory(pages=40, broken=0, sitemaps=2)
    assert main(["submit", f"{site.base_url}/", "--stack", stack.stack_name, "--rate-limit-delay", "0.001"]) == 0
    job_id = capsys.readouterr().out.strip()
    # Discovery to its end (the total is final), then one batch of pages: the job runs, part done.
    poller.poll_once("JobFunction")
    while poller.poll_once("SitemapFunction"):
        pass
    assert poller.poll_once("PageFunction") > 0
    capsys.readouterr()

    assert main(["status", job_id, "--stack", stack.stack_name]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["status"] == "in_progress" and status["discovery_complete"]
    done, total = status["processed_count"], status["total_urls"]
    assert 0 < done < total == 40
    pace = status["pace"]
    started = dt.datetime.fromisoformat(status["start_time"])
    elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
    assert pace["elapsed_seconds"] == pytest.approx(elapsed, abs=2.0)
    # (the elapsed time is rounded to 0.1 s in the JSON: the rate is the unrounded one's)
    assert abs(pace["pages_per_second"] * pace["elapsed_seconds"] - done) <= pace["pages_per_second"] * 0.05 + 0.01
    assert pace["seconds_left"] == pytest.approx((total - done) / pace["pages_per_second"], abs=1.0)
    # The text is Pace's wording of the same figures (made before they were rounded for the JSON: its time
    # left may differ from the rounded figures' by a second).
    # (elapsed likewise: rounded for the JSON, it may cross a whole second the text rounded down; and the rate,
    # rounded to 0.001 in the JSON, may cross the 0.05 the text rounds at: 9.74996 is "9.7/s", 9.750 "9.8/s")
    wordings = {
        " · ".join(Pace(pace["pages_per_second"] + nudge, pace["elapsed_seconds"] + shift, left).parts())
        for left in (pace["seconds_left"] - 1, pace["seconds_left"], pace["seconds_left"] + 1)
        for shift in (-0.5, 0.0, 0.5)
        for nudge in (-0.0005, 0.0, 0.0005)
    }
    assert pace["text"] in wordings
    assert "/s · " in pace["text"] and pace["text"].endswith(" left")

    poller.drain()
    capsys.readouterr()
    assert main(["status", job_id, "--stack", stack.stack_name]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["status"] == "completed"
    # An ended job: its pace over its whole life (start to end), no time left.
    life = (
        dt.datetime.fromisoformat(status["end_time"]) - dt.datetime.fromisoformat(status["start_time"])
    ).total_seconds()
    assert status["pace"]["elapsed_seconds"] == pytest.approx(life, abs=0.1)
    assert status["pace"]["pages_per_second"] == pytest.approx(40 / life, rel=0.01)
    assert status["pace"]["seconds_left"] is None and "left" not in status["pace"]["text"]


def test_get_reads_a_page_back_from_the_stacks_warc_objects(deployed_stack, site_factory, capsys):
    """`harvest get URL --stack`: the crawl record in DynamoDB names the WARC object and offset; one ranged
    GET gives the page exactly as the server sent it."""
    import urllib.request

    stack, poller = deployed_stack
    site = site_factory(pages=5, broken=1)
    assert main(["submit", f"{site.base_url}/", "--stack", stack.stack_name, "--rate-limit-delay", "0.001"]) == 0
    poller.drain()
    capsys.readouterr()
    url = site.page_urls[2]
    with urllib.request.urlopen(url) as answer:  # (127.0.0.1: the site the job crawled)
        sent = answer.read()

    assert main(["get", url, "--stack", stack.stack_name]) == 0
    assert capsys.readouterr().out.encode() == sent
    assert main(["get", url, "--stack", stack.stack_name, "--headers"]) == 0
    head, _, body = capsys.readouterr().out.partition("\r\n\r\n")
    assert re.match(r"HTTP/1\.[01] 200 OK\r\n", head) and body.encode() == sent

    assert main(["get", f"{site.base_url}/pages/none.html", "--stack", stack.stack_name]) == 2
    assert f"not in the crawl database of stack '{stack.stack_name}'" in capsys.readouterr().err
    assert main(["get", url, "--stack", "not-there"]) == 2
    assert "stack 'not-there'" in capsys.readouterr().err
