"""What cohort tells a rank about itself: the host envelope (COHORT_RANK_ENVELOPE, JSON) and the rank's slot in
it (COHORT_LOCAL_SLOT). Read once by `cohort.init()`; every problem is one `CohortError` naming the variable."""
import json
import os
from dataclasses import dataclass
from typing import List, Mapping, Optional

from ._errors import CohortError

#: The rank <-> relay protocol this client speaks (docs/protocol.md). The envelope says the relay's.
PROTOCOL_VERSION = 2

_OUTSIDE = (
    "cohort.init() runs inside a rank that cohort started, and {variable} is not set: launch the script "
    "with `bun run launch cluster.yml` (job.command: [python3, your_script.py], job.dataset_size: the samples "
    "of an epoch), or run it without cohort.init()"
)


@dataclass(frozen=True)
class Envelope:
    run: str
    host: str
    rank: int
    local_rank: int
    local_world_size: int
    group_rank: int
    world_size: int
    backend: str
    socket: str
    dir: str
    dataset_size: int
    epochs: int
    heartbeat_timeout_s: float
    controller_host: str
    controller_port: int
    restart_count: int
    #: job.checkpoint_pickle: states may travel as torch.save's pickle, which runs any rank's code as it loads.
    checkpoint_pickle: bool = False


def death_patience_s(envelope: "Envelope") -> float:
    """How long a rank whose group broke waits for cohort to announce the death that broke it (a silent member is
    found at the heartbeat timeout, and told at the next beat): past that, the failure is the job's own."""
    return 2 * envelope.heartbeat_timeout_s + 5


def _field(fields: Mapping[str, object], name: str, kind: type, variable: str) -> object:
    value = fields.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise CohortError(f"{variable} is not a valid cohort envelope: {name} is missing or not a {kind.__name__}; "
                          "it is set by cohort for its own processes, do not set it by hand")
    return value


def read_envelope(environ: Optional[Mapping[str, str]] = None) -> Envelope:
    """The rank's envelope from `environ` (default: the process's environment), or a CohortError saying why not."""
    env = os.environ if environ is None else environ
    variable = "COHORT_RANK_ENVELOPE"
    text = env.get(variable)
    if text is None or text == "":
        raise CohortError(_OUTSIDE.format(variable=variable))
    try:
        fields = json.loads(text)
    except ValueError:
        raise CohortError(f"{variable} is not JSON: it is set by cohort for its own processes; do not set it by hand") from None
    if not isinstance(fields, dict):
        raise CohortError(f"{variable} is not a valid cohort envelope: expected a JSON object")
    protocol = fields.get("protocol")
    if protocol is None:
        raise CohortError(
            f"the cohort that started this rank names no rank-relay protocol version (it is older than this Python "
            f"client, which speaks {PROTOCOL_VERSION}): use the client that comes with the launcher (its python/ folder)"
        )
    if type(protocol) is not int:
        # 2.0, "2" or true is no version any cohort writes: the envelope was made by hand, or by something else.
        raise CohortError(
            f"{variable} is not a valid cohort envelope: protocol is {json.dumps(protocol)}, not a whole number; "
            "it is set by cohort for its own processes, do not set it by hand"
        )
    if protocol != PROTOCOL_VERSION:
        raise CohortError(
            f"this cohort speaks version {protocol} of the rank-relay protocol and this Python client speaks "
            f"{PROTOCOL_VERSION}: use the client that comes with the launcher (its python/ folder, which cohort puts "
            "on PYTHONPATH), not another copy"
        )
    slot_text = env.get("COHORT_LOCAL_SLOT")
    if slot_text is None:
        raise CohortError(_OUTSIDE.format(variable="COHORT_LOCAL_SLOT"))
    try:
        slot = int(slot_text)
    except ValueError:
        raise CohortError(f"COHORT_LOCAL_SLOT is {slot_text!r}, not a whole number: it is set by cohort; do not set it by hand") from None
    ranks = _field(fields, "ranks", list, variable)
    if not 0 <= slot < len(ranks):
        raise CohortError(f"COHORT_LOCAL_SLOT {slot} is out of range: host {fields.get('host')} has {len(ranks)} slot(s)")
    controller = _field(fields, "controller", dict, variable)
    restart_text = env.get("COHORT_RESTART_COUNT", "0")
    pickle = fields.get("checkpointPickle", False)
    if not isinstance(pickle, bool):
        raise CohortError(f"{variable} is not a valid cohort envelope: checkpointPickle is not true or false; "
                          "it is set by cohort for its own processes, do not set it by hand")
    return Envelope(
        run=str(_field(fields, "run", str, variable)),
        host=str(_field(fields, "host", str, variable)),
        rank=int(ranks[slot]),
        local_rank=slot,
        local_world_size=len(ranks),
        group_rank=int(_field(fields, "groupRank", int, variable)),
        world_size=int(_field(fields, "worldSize", int, variable)),
        backend=str(_field(fields, "backend", str, variable)),
        socket=str(_field(fields, "socket", str, variable)),
        dir=str(_field(fields, "dir", str, variable)),
        dataset_size=int(_field(fields, "datasetSize", int, variable)),
        epochs=int(_field(fields, "epochs", int, variable)),
        heartbeat_timeout_s=int(_field(fields, "heartbeatTimeoutMs", int, variable)) / 1000.0,
        controller_host=str(_field(controller, "host", str, variable)),
        controller_port=int(_field(controller, "port", int, variable)),
        restart_count=int(restart_text) if restart_text.isdigit() else 0,
        checkpoint_pickle=pickle,
    )
