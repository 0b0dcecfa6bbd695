"""The one exception type of trainledger.

Raise `TrainledgerError` for every problem a user can fix (bad flag, unknown GPU, malformed config).
The CLI turns it into exit status 2 and one line on stderr; the web API turns it into HTTP 422.
Messages say what was received, what is allowed, and (where known) the flag:
    --seq-len must be a positive integer, got '0'
"""


class TrainledgerError(ValueError):
    """A user-facing error: one line, naming the input and what is allowed."""

    def __init__(self, message: str, flag: str | None = None):
        self.flag = flag
        if flag and flag not in message:
            message = f"{message} ({flag})"
        super().__init__(message)


def first_line(error: BaseException, default: str = "") -> str:
    """The first line of `error`'s message (stripped first), or `default` when it has none: for one-line errors."""
    text = str(error).strip()
    return text.splitlines()[0] if text else default
