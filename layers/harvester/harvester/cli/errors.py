"""How a command ends when it cannot do its work: a message and an exit status, nothing more (no engine
import here: every command, ``harvest parse`` first, loads this module)."""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY, EXIT_STATE = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # (128 + SIGINT)
EXIT_PIPE = 141  # (128 + SIGPIPE: what a shell reports for a writer whose reader closed the pipe)
EXIT_CODES = f"""exit status:
  {EXIT_OK}    done (every job completed; failed URLs are part of a completed job)
  {EXIT_FAILED}    a job failed, a file given is not what the command reads, or a file could not be read
       or written (named, with the reason)
  {EXIT_USAGE}    bad input: an option, a site, a job id or a sites file line, named
  {EXIT_BUSY}    the state directory is in use by another running crawl
  {EXIT_STATE}    the state directory cannot be used (a file, not writable, damaged, another version's)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); a crawl resumes when the same command is run again
  {EXIT_PIPE}  the output's reader went away (| head)"""


class CommandError(Exception):
    """A command that could not do its work: ``harvest`` prints the message and exits with ``status``. The
    commands raise it for the engine's own failures (see ``cli.state.engine_failures``), so that the
    entry point need not import the engine to recognise them."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


class UsageError(CommandError):
    """Bad input from the command line: the message names the input and the reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)
