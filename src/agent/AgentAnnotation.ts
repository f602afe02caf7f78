/**
 * The log annotation an agent's fibers carry: its host. The agent of the
 * launcher's own machine runs inside the launcher, on the launcher's logger;
 * with this annotation its lines are said as a remote agent's are
 * (`cohort agent HOST: `), so the terminal tells them from the launcher's and
 * `--log-dir` puts them in `agent-HOST.log`. Annotated with anything but a
 * host name (null), a line said inside an agent keeps the logger's own prefix.
 */
export const AGENT_ANNOTATION = "cohort.agent"
