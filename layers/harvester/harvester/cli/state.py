"""The local state directory (or a deployed stack's stores) as the commands that use it open it, and the
engine's failures in the words and exit statuses of the command line."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harvester.adapters.local.database import StateDirBusy, StateDirError, StorageFailed, storage_failure
from harvester.adapters.local.runner import JobStuck, LocalHarvest
from harvester.cli.errors import EXIT_BUSY, EXIT_FAILED, EXIT_STATE, CommandError, UsageError
from harvester.model.messages import Unprocessable
from harvester.patience import Busy


@contextlib.contextmanager
def engine_failures(state_dir: Path, *, resumes: bool = False) -> Iterator[None]:
    """The failures a local run reports rather than a bug's traceback, as the exit status each has.
    ``resumes``: the command keeps what it did (a crawl), which the storage failing does not undo."""
    try:
        yield
    except Unprocessable as exc:  # (a job id already used for another job, a site given twice)
        raise UsageError(str(exc)) from None
    except StateDirBusy as exc:
        raise CommandError(str(exc), EXIT_BUSY) from None
    except Busy as exc:  # (outside a task: a task's step gives its work back and the run goes on)
        keeps = " (what was done is kept: run the same command again)" if resumes else ""
        raise CommandError(
            f"{state_dir}: the state file stayed locked by another program: {exc.reason}{keeps}", EXIT_BUSY
        ) from None
    except StorageFailed as exc:
        raise CommandError(f"{exc}{_mend(resumes)}", EXIT_STATE) from None
    except StateDirError as exc:
        raise CommandError(str(exc), EXIT_STATE) from None
    except JobStuck as exc:
        raise CommandError(str(exc), EXIT_FAILED) from None
    except Exception as exc:  # (the storage failing under a read or write of the state, outside a task)
        reason = storage_failure(exc)
        if reason is None:
            raise
        raise CommandError(f"{StorageFailed(state_dir, reason)}{_mend(resumes)}", EXIT_STATE) from None


def _mend(resumes: bool) -> str:
    if resumes:
        return " (what was done is kept: free space or mend the disk, then run the same command again to resume)"
    return " (free space or mend the disk, then try again)"


@contextlib.contextmanager
def open_state(state_dir: Path) -> Iterator[LocalHarvest]:
    """The state directory of earlier crawls (a command that reads it does not create one)."""
    if not (state_dir / "harvest.db").exists():
        raise UsageError(f"--state-dir {state_dir}: no harvest state there")
    with engine_failures(state_dir), LocalHarvest.open(state_dir) as harvest:
        yield harvest


@contextlib.contextmanager
def open_stores(args: argparse.Namespace) -> Iterator[tuple[Any, str]]:
    """What `get` and `export` read (``store``, ``crawldb``, ``documents``, ``warcs``): a local state
    directory's (``--state-dir``), or a deployed stack's (``--stack``: DynamoDB and S3); and how to name it."""
    if args.stack:
        from harvester.adapters.aws.stack import StackError, reading_stack

        try:
            with reading_stack(args.stack, region=args.region) as stores:
                yield stores, f"stack {args.stack!r}"
        except StackError as exc:
            raise UsageError(str(exc)) from None
        return
    with open_state(args.state_dir) as harvest:
        yield harvest, str(args.state_dir)
