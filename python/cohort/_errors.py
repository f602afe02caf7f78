"""The client's two exceptions: a mistake to fix (`CohortError`) and cohort's stop (`Stopped`)."""


#: The rank's exit status as decided so far (see cohort._install_stops): sys.exit's code, 1 after an uncaught
#: exception, 143 once cohort has stopped the rank.
exit_status = {"code": 0, "failed": False}


class CohortError(RuntimeError):
    """Something the user can fix, said in one line: the script runs outside cohort, a call is misused, a link is gone."""


class Stopped(SystemExit):
    """cohort is stopping this rank (the run ends or fails, or SIGTERM). A SystemExit: uncaught, the rank exits 143
    without a traceback; catch it to wind down (save, close files) before leaving."""

    def __init__(self, reason: str) -> None:
        super().__init__(143)
        self.reason = reason
        exit_status["code"] = 143

    def __str__(self) -> str:
        return f"cohort is stopping this rank: {self.reason}"
