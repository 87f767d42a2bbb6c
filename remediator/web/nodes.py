"""The node page's answer to "what happened to node X": the node as the cluster has it now,
and its remediations and signals within a time window, paged (nothing silently cut off),
with the replacement links between an old node and its successor."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from remediator.errors import RemediatorError
from remediator.kube.objects import Node
from remediator.store import cursor as cursors
from remediator.store.records import RemediationFilter, SignalEntry
from remediator.web import console, views
from remediator.web.agent_views import agent_out, judge_of
from remediator.web.deps import WebDeps
from remediator.web.paging import fetch_page
from remediator.web.problems import WebError
from remediator.web.schemas import NodeLinkOut, NodeOut, NodeStatusOut, SignalEntryOut

GPU_PRODUCT = "nvidia.com/gpu.product"
DEFAULT_WINDOW = timedelta(days=7)
NODE_PAGE = 50


@dataclass(frozen=True)
class NodeQuery:
    """The window [start, end) and where each list's page starts (cursors from the last
    answer)."""

    start: datetime | None = None
    end: datetime | None = None
    remediations_cursor: str | None = None
    signals_cursor: str | None = None
    limit: int = NODE_PAGE


NOT_IN_CLUSTER = "the cluster has no node of this name (now)"


def node_status(node: Node | None, pool_label: str) -> NodeStatusOut:
    if node is None:
        return NodeStatusOut(found=False, error=NOT_IN_CLUSTER)
    return NodeStatusOut(
        found=True,
        ready=node.ready,
        cordoned=node.unschedulable,
        taints=[f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in node.taints],
        pool=node.labels.get(pool_label) or None,
        gpus=node.gpus,
        gpu_product=node.labels.get(GPU_PRODUCT),
        problems=[
            f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "")
            for c in node.conditions
            if c.type != "Ready" and c.status != "False"
        ],
    )


def read_status(deps: WebDeps, name: str) -> NodeStatusOut:
    if deps.read_node is None:
        return NodeStatusOut(found=False, error="this console has no access to the cluster")
    try:
        return node_status(deps.read_node(name), deps.settings.pool_label)
    except RemediatorError as exc:
        return NodeStatusOut(found=False, error=f"cluster unreachable: {exc}")


def _window(query: NodeQuery, now: datetime) -> tuple[datetime, datetime | None]:
    """[start, end); no end asked means up to now and whatever arrives meanwhile. A start at
    or after the end is a window with nothing in it, not a mistake (as `created_from` after
    `created_to` is for the list): a rule between two parameters that no schema can state.
    The answer names the window it read."""
    end = _utc(query.end) if query.end else None
    start = _utc(query.start) if query.start else (end or now) - DEFAULT_WINDOW
    return start, end


def _utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except OverflowError as exc:
        raise WebError(422, f"{value.isoformat()} is out of range") from exc


def _signals_after(cursor: str | None) -> tuple[datetime, int] | None:
    if not cursor:
        return None
    try:
        position = cursors.decode(cursor)
    except cursors.InvalidCursor as exc:
        raise WebError(400, f"invalid cursor: {exc}") from exc
    if position.created_at is None or position.id is None:
        raise WebError(400, "invalid cursor: no position")
    return position.created_at, position.id


def signals_page(
    deps: WebDeps, name: str, now: datetime, query: NodeQuery
) -> tuple[tuple[SignalEntry, ...], int, str | None]:
    """One page of the node's signals in the window, their total, and the next page's cursor."""
    start, end = _window(query, now)
    signals = deps.repository.signals_for_node(
        name,
        since=start,
        until=end,
        limit=query.limit + 1,
        after=_signals_after(query.signals_cursor),
    )
    shown = signals[: query.limit]
    following = (
        cursors.encode(cursors.Cursor("all", shown[-1].signal.observed_at, shown[-1].id))
        if len(signals) > query.limit
        else None
    )
    return shown, deps.repository.count_signals(name, since=start, until=end), following


def no_such_node(deps: WebDeps, name: str, status: NodeStatusOut) -> bool:
    """The cluster says it has no such node and nothing this store keeps names it: a typo or
    another cluster's node, not a node with an empty history. A node that left the cluster
    (replaced, scaled down) keeps its page, and so does any node while the cluster cannot say."""
    if status.error != NOT_IN_CLUSTER:
        return False
    repo = deps.repository
    assert deps.heartbeats is not None  # create_app fills it in
    return (
        repo.count(RemediationFilter(node=name)) == 0
        and repo.replacement_of(name) is None
        and not repo.signals_for_node(name, limit=1)
        and deps.heartbeats.status(name) is None
    )


def node_out(deps: WebDeps, name: str, now: datetime, query: NodeQuery) -> NodeOut:
    """The node's page; 404 for a name neither the cluster nor this store knows."""
    status = read_status(deps, name)
    if no_such_node(deps, name, status):
        raise WebError(
            404,
            f"{name}: no such node (the cluster has none of this name, and no remediation, "
            "signal or agent of this store names it)",
        )
    repo = deps.repository
    start, end = _window(query, now)
    in_window = RemediationFilter(node=name, created_from=start, created_to=end)
    page = fetch_page(deps, in_window, query.remediations_cursor, query.limit)
    shown, signals_total, signals_next = signals_page(deps, name, now, query)
    rule = views.repeat_rule(deps.policies.active)
    nth, within = rule
    recent = repo.count(RemediationFilter(node=name, created_from=now - within))
    replaced = repo.replacement_of(name)
    successors = repo.list(RemediationFilter(node=name), limit=NODE_PAGE).rows
    assert deps.heartbeats is not None  # create_app fills it in
    agent = deps.heartbeats.status(name)
    judge = judge_of(deps)
    has_agent = agent is not None or (judge.watching and name in judge.sights)
    return NodeOut(
        node=name,
        agent=agent_out(name, agent, judge) if has_agent else None,
        repeat_offender=recent >= nth,
        remediations_in_window=recent,
        repeat_rule=f"{nth} remediations within {views.format_duration(within.total_seconds())}",
        status=status,
        window_from=start,
        window_to=end or now,
        remediations=[console.remediation_out(r, now) for r in page.rows],
        remediations_total=repo.count(in_window),
        remediations_next=page.next_cursor,
        signals=[signal_entry_out(s) for s in shown],
        signals_total=signals_total,
        signals_next=signals_next,
        replacement_of=(
            NodeLinkOut(remediation_id=replaced.id, node=replaced.node) if replaced else None
        ),
        replaced_by=[
            NodeLinkOut(remediation_id=r.id, node=r.new_node) for r in successors if r.new_node
        ],
    )


def signal_entry_out(entry: SignalEntry) -> SignalEntryOut:
    """One stored signal with what became of it, as the node page and the signals API show it."""
    return SignalEntryOut(
        id=entry.id,
        remediation_id=entry.remediation_id,
        signal=entry.signal,
        value_text=views.signal_value(entry.signal),
        disposition=entry.disposition,
    )
