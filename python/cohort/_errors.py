"""The client's exceptions: a mistake to fix (`CohortError`), cohort's stop (`Stopped`), and a member lost while this
rank waited for it in a collective of its own (`MemberLost`)."""


#: The rank's exit status as decided so far (see cohort._install_stops): sys.exit's code, 1 after an uncaught
#: exception (MEMBER_LOST_STATUS after an uncaught MemberLost), 143 once cohort has stopped the rank.
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


#: The exit status of a rank that left a MemberLost uncaught (EX_TEMPFAIL: "try again"). The launcher's default rule
#: `member-lost` restarts such a rank, instead of counting it dead: it was not what went wrong.
MEMBER_LOST_STATUS = 75


class MemberLost(RuntimeError):
    """A member of the group was lost (it died, or cohort counted it out) while this rank waited for it in a collective
    on torch's default group: the call gives up as soon as cohort announces the group without it, instead of waiting
    for gloo's or NCCL's timeout. The group is then broken; the next step (or ctx.all_reduce & co.) forms the new one.

    Catch it around an evaluation's collectives and carry on (the survivors' result is yours to make: redo the call,
    or skip the metric). A RuntimeError, like the gloo error it replaces. Uncaught, the rank exits with status 75,
    and cohort restarts it (rule member-lost): it rejoins at the next epoch boundary, from the consensus weights."""

    def __init__(self, lost, during: str, generation: int) -> None:
        names = ", ".join(str(rank) for rank in lost) or "a member"
        super().__init__(f"rank(s) {names} left the group during {during} (generation {generation}): "
                         "catch cohort.MemberLost to carry on; the next step forms the group without them")
        self.lost = list(lost)
        self.during = during
        self.generation = generation


# Printed, and matched by the launcher's peer-loss signature, as `cohort.MemberLost`: where users find it.
MemberLost.__module__ = "cohort"
