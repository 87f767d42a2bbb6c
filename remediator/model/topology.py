"""Where a node sits in a rack-scale system (GB200/GB300 NVL72): its NVLink domain, clique and
tray, read from its labels only.

The domain of a node is the clusterUUID of its `nvidia.com/gpu.clique` label (GPU feature
discovery's `<clusterUUID>.<cliqueId>`); the rack and tray labels (settings `topology.rack_label`
and `topology.tray_label`) give the physical position. Everything here is pure: the controller
feeds it the labels of the nodes it watches, and what cannot be read is reported, never guessed.
A node without a usable clique label is remediated per node, as before this existed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CLIQUE_LABEL = "nvidia.com/gpu.clique"
SPARE_LABEL = "remediator.io/spare"
# GPU feature discovery writes the clusterUUID as a UUID; the simulator and some labellers use
# other stable identifiers, so any label-safe token is taken, the cliqueId must be an integer.
_CLIQUE = re.compile(r"^(?P<domain>[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?)\.(?P<clique>\d+)$")


class TopologySettings(BaseModel):
    """The label keys that carry a tray's physical position (in production set by the agent or
    the user's labeller from `nvidia-smi -q` Platform Info)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rack_label: str = Field(default="remediator.io/rack", min_length=1)
    tray_label: str = Field(default="remediator.io/tray", min_length=1)


@dataclass(frozen=True, order=True)
class Clique:
    domain: str
    clique_id: int

    @property
    def label(self) -> str:
        return f"{self.domain}.{self.clique_id}"


def parse_clique(value: str) -> Clique | None:
    """The clique a `nvidia.com/gpu.clique` value names, or None when it is not of that form."""
    match = _CLIQUE.match(value)
    if match is None:
        return None
    return Clique(match["domain"], int(match["clique"]))


ProblemKind = Literal["bad_clique", "bad_tray", "tray_conflict", "rack_mismatch"]


@dataclass(frozen=True)
class TopologyProblem:
    kind: ProblemKind
    nodes: tuple[str, ...]
    detail: str


@dataclass(frozen=True)
class Placement:
    """One node's place. `tray` is None when its tray label is missing, unreadable or claimed by
    another node too (a conflict is reported and neither claim is believed)."""

    node: str
    clique: Clique
    rack: str | None
    tray: int | None
    spare: bool

    @property
    def domain(self) -> str:
        return self.clique.domain


@dataclass(frozen=True)
class Domain:
    name: str
    rack: str | None
    # Trays in position order; trays without a believed position last, by name.
    trays: tuple[Placement, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(p.node for p in self.trays)

    @property
    def spares(self) -> tuple[str, ...]:
        return tuple(p.node for p in self.trays if p.spare)

    def clique_nodes(self, clique: Clique) -> tuple[str, ...]:
        return tuple(p.node for p in self.trays if p.clique == clique)


@dataclass(frozen=True)
class Topology:
    placements: Mapping[str, Placement]
    domains: Mapping[str, Domain]
    # Nodes with no usable clique label: remediated per node (and counted on the console).
    per_node: tuple[str, ...]
    problems: tuple[TopologyProblem, ...] = field(default=())

    def placement(self, node: str) -> Placement | None:
        return self.placements.get(node)

    def domain_of(self, node: str) -> Domain | None:
        place = self.placements.get(node)
        return None if place is None else self.domains[place.domain]

    def clique_of(self, node: str) -> tuple[str, ...]:
        """The nodes of `node`'s clique (itself alone when it has none)."""
        place = self.placements.get(node)
        if place is None:
            return (node,)
        return self.domains[place.domain].clique_nodes(place.clique)

    def cliques(self) -> dict[Clique, tuple[str, ...]]:
        out: dict[Clique, list[str]] = defaultdict(list)
        for domain in self.domains.values():
            for place in domain.trays:
                out[place.clique].append(place.node)
        return {clique: tuple(nodes) for clique, nodes in sorted(out.items())}


def _tray(value: str | None) -> int | str | None:
    """The slot number, None when absent, or the raw value when it is not a slot number."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    return value


def build_topology(
    labels: Mapping[str, Mapping[str, str]] | Iterable[tuple[str, Mapping[str, str]]],
    settings: TopologySettings | None = None,
) -> Topology:
    """The topology of the nodes given as node name -> labels."""
    keys = settings or TopologySettings()
    items = sorted(labels.items() if isinstance(labels, Mapping) else labels)
    problems: list[TopologyProblem] = []
    per_node: list[str] = []
    raw: list[tuple[str, Clique, str | None, int | None, bool]] = []
    for node, node_labels in items:
        value = node_labels.get(CLIQUE_LABEL)
        if value is None:
            per_node.append(node)
            continue
        clique = parse_clique(value)
        if clique is None:
            per_node.append(node)
            problems.append(
                TopologyProblem(
                    "bad_clique",
                    (node,),
                    f"{node}: {CLIQUE_LABEL}={value!r} is not <clusterUUID>.<cliqueId>; "
                    "remediated per node",
                )
            )
            continue
        tray = _tray(node_labels.get(keys.tray_label))
        if isinstance(tray, str):
            problems.append(
                TopologyProblem(
                    "bad_tray",
                    (node,),
                    f"{node}: {keys.tray_label}={tray!r} is not a slot number",
                )
            )
            tray = None
        spare = node_labels.get(SPARE_LABEL, "").lower() == "true"
        raw.append((node, clique, node_labels.get(keys.rack_label), tray, spare))

    problems.extend(_rack_mismatches(raw, keys.rack_label))
    conflicts = _tray_conflicts(raw, keys.tray_label)
    problems.extend(conflicts)
    disputed = {node for problem in conflicts for node in problem.nodes}

    placements = {
        node: Placement(node, clique, rack, None if node in disputed else tray, spare)
        for node, clique, rack, tray, spare in raw
    }
    by_domain: dict[str, list[Placement]] = defaultdict(list)
    for place in placements.values():
        by_domain[place.domain].append(place)
    domains = {}
    for name, places in sorted(by_domain.items()):
        racks = sorted({p.rack for p in places if p.rack is not None})
        ordered = sorted(
            places, key=lambda p: (p.tray is None, p.tray if p.tray is not None else 0, p.node)
        )
        domains[name] = Domain(name, racks[0] if len(racks) == 1 else None, tuple(ordered))
    return Topology(placements, domains, tuple(per_node), tuple(problems))


def _rack_mismatches(
    raw: list[tuple[str, Clique, str | None, int | None, bool]], rack_label: str
) -> list[TopologyProblem]:
    """A rack is one NVLink domain: a domain whose trays name two racks, or a rack whose trays
    name two domains, is reported (the clique label, the GPUs' own view, still places them)."""
    racks_of: dict[str, set[str]] = defaultdict(set)
    domains_of: dict[str, set[str]] = defaultdict(set)
    nodes_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node, clique, rack, _tray, _spare in raw:
        if rack is None:
            continue
        racks_of[clique.domain].add(rack)
        domains_of[rack].add(clique.domain)
        nodes_of[(clique.domain, rack)].append(node)
    out = []
    for domain, racks in sorted(racks_of.items()):
        if len(racks) > 1:
            nodes = tuple(sorted(n for r in racks for n in nodes_of[(domain, r)]))
            out.append(
                TopologyProblem(
                    "rack_mismatch",
                    nodes,
                    f"domain {domain}: trays labelled {rack_label} = {', '.join(sorted(racks))}",
                )
            )
    for rack, domains in sorted(domains_of.items()):
        if len(domains) > 1:
            nodes = tuple(sorted(n for d in domains for n in nodes_of[(d, rack)]))
            out.append(
                TopologyProblem(
                    "rack_mismatch",
                    nodes,
                    f"{rack_label}={rack}: trays in domains {', '.join(sorted(domains))}",
                )
            )
    return out


def _tray_conflicts(
    raw: list[tuple[str, Clique, str | None, int | None, bool]], tray_label: str
) -> list[TopologyProblem]:
    """Two nodes claiming one physical position (rack, or domain when unlabelled, and slot)."""
    claims: dict[tuple[str, int], list[str]] = defaultdict(list)
    for node, clique, rack, tray, _spare in raw:
        if tray is not None:
            claims[(rack if rack is not None else clique.domain, tray)].append(node)
    return [
        TopologyProblem(
            "tray_conflict",
            tuple(sorted(nodes)),
            f"{' and '.join(sorted(nodes))} all claim {tray_label}={slot} in {where}",
        )
        for (where, slot), nodes in sorted(claims.items())
        if len(nodes) > 1
    ]


def domain_map(labels: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """node → NVLink domain, for the nodes whose clique label parses (the budgets' units)."""
    out = {}
    for node, node_labels in labels.items():
        value = node_labels.get(CLIQUE_LABEL)
        clique = None if value is None else parse_clique(value)
        if clique is not None:
            out[node] = clique.domain
    return out
