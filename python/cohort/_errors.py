"""The client's two exceptions: a mistake to fix (`CohortError`) and cohort's stop (`Stopped`)."""


class CohortError(RuntimeError):
    """Something the user can fix, said in one line: the script runs outside cohort, a call is misused, a link is gone."""


class Stopped(SystemExit):
    """cohort is stopping this rank (the run ends or fails, or SIGTERM). A SystemExit: uncaught, the rank exits 143
    without a traceback; catch it to wind down (save, close files) before leaving."""

    def __init__(self, reason: str) -> None:
        super().__init__(143)
        self.reason = reason

    def __str__(self) -> str:
        return f"cohort is stopping this rank: {self.reason}"
