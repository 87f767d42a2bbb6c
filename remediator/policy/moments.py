"""Events decided in the order they were observed, whatever the batching. Pure.

One intake can bring a node's signals from minutes apart: an agent's queue after an outage,
two pushes drained together, a push beside a scrape in one poll. Evaluated at once, the node's
highest-priority match won and the rest joined it: an XID 13 logged 100 s before an XID 79
joined the XID 79's repair, while delivered apart it opened its own notify. So each node's
signals are evaluated one moment (one `observed_at`) at a time, oldest first, the streak and
burst state carried from moment to moment. The first moment that decides ends the node's turn:
its later signals wait for the next intake, which sees what the decision became (a notify-only
remediation has finished, a repair in flight is joined), as it would had they come apart. A
node without a decision goes through all its moments in this intake.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from operator import attrgetter

from remediator.policy.evaluate import Decision, Evaluation, History, evaluate
from remediator.policy.schema import GlobalSettings, Policy
from remediator.signals.model import Signal


@dataclass(frozen=True)
class InOrder:
    evaluation: Evaluation
    decided: tuple[Signal, ...]  # evaluated in this intake (explained and stored with it)
    waiting: tuple[Signal, ...]  # after a deciding moment of their node: for the next intake


def moments(signals: Iterable[Signal]) -> dict[str, deque[list[Signal]]]:
    """Each node's signals grouped by `observed_at`, oldest first."""
    found: dict[str, deque[list[Signal]]] = {}
    for signal in sorted(signals, key=attrgetter("observed_at")):
        queue = found.setdefault(signal.node, deque())
        if queue and queue[-1][0].observed_at == signal.observed_at:
            queue[-1].append(signal)
        else:
            queue.append([signal])
    return found


def evaluate_in_order(
    signals: Iterable[Signal],
    history: History,
    policies: Sequence[Policy],
    now: datetime,
    settings: GlobalSettings,
) -> InOrder:
    """`evaluate`, a moment per node per round; one round when every node has one moment."""
    pending = moments(signals)
    state = history.state
    decisions: list[Decision] = []
    decided: list[Signal] = []
    waiting: list[Signal] = []
    while pending:
        round_ = [signal for queue in pending.values() for signal in queue[0]]
        result = evaluate(round_, replace(history, state=state), policies, now, settings)
        state = result.state
        decisions.extend(result.decisions)
        deciding = {decision.node for decision in result.decisions}
        for node in list(pending):
            queue = pending[node]
            decided.extend(queue.popleft())
            if node in deciding:
                waiting.extend(signal for moment in queue for signal in moment)
                queue.clear()
            if not queue:
                del pending[node]
    decisions.sort(key=lambda d: (-d.priority, d.node))  # evaluate's own order
    return InOrder(Evaluation(tuple(decisions), state), tuple(decided), tuple(waiting))
