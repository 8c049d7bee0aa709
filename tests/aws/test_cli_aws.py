"""`harvest submit` and `harvest status` against the stack deployed in moto (in-process, so boto3 is mocked)."""

from __future__ import annotations

import json

import boto3

from harvester.cli import main


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
