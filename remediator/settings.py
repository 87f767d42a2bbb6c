"""Controller settings: one object, built once in the CLI from a YAML file and the environment,
and passed down. Environment variables (`REMEDIATOR_DATABASE_URL`, `REMEDIATOR_WEB__LISTEN`, …)
override the file so that secrets need not live in it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from remediator.errors import RemediatorError
from remediator.model.cluster import name_problem
from remediator.model.topology import TopologySettings
from remediator.slurm.settings import SlurmSettings


class ProviderSettings(BaseModel):
    """The generic node-pool HTTP contract (docs/nodepool-api.yaml)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["http"] = "http"
    url: str = "http://127.0.0.1:8081"
    token: SecretStr | None = None
    timeout_seconds: float = Field(default=10.0, gt=0)
    max_retries: int = Field(default=5, ge=0)


class StaticAwsCredentials(BaseModel):
    """For simulators and tests only (moto accepts any key); production leaves these unset."""

    model_config = ConfigDict(extra="forbid")

    access_key_id: str
    secret_access_key: SecretStr


class AwsProviderSettings(BaseModel):
    """EC2 Auto Scaling groups. Credentials come only from boto3's own chain (environment,
    IRSA web identity, instance profile); `endpoint_url` is for tests and private endpoints."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["aws"]
    region: str | None = None
    endpoint_url: str | None = None
    # pool → Auto Scaling group name; a pool not listed is the group of the same name.
    groups: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(default=10.0, gt=0)
    max_retries: int = Field(default=5, ge=0)
    launch_timeout_seconds: float = Field(default=900.0, gt=0)
    test_credentials: StaticAwsCredentials | None = None


class ClusterApiProviderSettings(BaseModel):
    """Cluster API Machines, through the controller's own Kubernetes credentials."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["clusterapi"]
    # pool → "NAMESPACE/NAME" of its MachineDeployment (spare capacity from its maxSurge);
    # a pool not listed is the MachineDeployment of the same name, in any namespace.
    deployments: dict[str, str] = Field(default_factory=dict)
    launch_timeout_seconds: float = Field(default=900.0, gt=0)
    # Cluster API has no reboot verb: the annotation, set on the Machine, that this cluster's
    # infrastructure provider honours as "power-cycle the host, then remove me". Unset: a
    # privileged Job reboots the host instead.
    reboot_annotation: str | None = None


class GceProviderSettings(BaseModel):
    """Compute Engine managed instance groups (GKE node pools). Credentials: Application Default
    Credentials (Workload Identity); `anonymous` and `api_endpoint` are for the simulator."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["gce"]
    project: str
    # pool → "ZONE/GROUP" of its managed instance group.
    groups: dict[str, str] = Field(default_factory=dict)
    api_endpoint: str | None = None
    anonymous: bool = False
    timeout_seconds: float = Field(default=10.0, gt=0)
    launch_timeout_seconds: float = Field(default=900.0, gt=0)


def _provider_type(value: Any) -> str:
    """`type` picks the model; without one it is the HTTP contract, as before there were others."""
    if isinstance(value, dict):
        return str(value.get("type", "http"))
    return str(getattr(value, "type", "http"))


AnyProviderSettings = Annotated[
    Annotated[ProviderSettings, Tag("http")]
    | Annotated[AwsProviderSettings, Tag("aws")]
    | Annotated[ClusterApiProviderSettings, Tag("clusterapi")]
    | Annotated[GceProviderSettings, Tag("gce")],
    Discriminator(_provider_type),
]


class LeaderElectionSettings(BaseModel):
    enabled: bool = True
    namespace: str = "remediator"
    lease_name: str = "remediator-leader"
    lease_duration_seconds: int = Field(default=15, ge=2)
    renew_deadline_seconds: int = Field(default=10, ge=1)
    retry_period_seconds: float = Field(default=2.0, gt=0)
    identity: str | None = None


class KubeApiSettings(BaseModel):
    """How hard this replica may press the Kubernetes API: a token bucket shared by every job
    (client-go's QPS and Burst). 50 and 100: a storm the shipped breaker lets through (20 nodes,
    about six requests to fence each) fits in one burst, and sustained fencing is not paced
    below what a large apiserver's own priority and fairness allows (bench signal_to_cordon;
    kube-controller-manager runs with 20 and 30, Karpenter with 200 and 300)."""

    qps: float = Field(default=50.0, gt=0)
    burst: int = Field(default=100, ge=1)
    timeout_seconds: float = Field(default=10.0, gt=0)


class ScopedToken(BaseModel):
    """A console token limited to some clusters of a shared database (the fleet console): it
    can neither read nor act on any other."""

    model_config = ConfigDict(extra="forbid")

    token: SecretStr
    clusters: list[str] = Field(min_length=1)

    def get_secret_value(self) -> str:
        return self.token.get_secret_value()


class WebSettings(BaseModel):
    listen: str = "0.0.0.0:8080"
    # A plain token sees every cluster the console serves; `{token, clusters: [...]}` only those.
    operator_tokens: list[SecretStr | ScopedToken] = Field(default_factory=list)
    readonly_tokens: list[SecretStr | ScopedToken] = Field(default_factory=list)
    # Machine senders (node agents, Alertmanager): post signals and heartbeats, nothing else.
    push_tokens: list[SecretStr] = Field(default_factory=list)
    # Where people reach the console; an https URL makes the session cookie Secure even when
    # TLS ends at a proxy in front of us.
    external_url: str | None = None
    # Request bodies past this are refused with 413 before anything parses them.
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)


class NotifySettings(BaseModel):
    webhook_url: str | None = None
    timeout_seconds: float = Field(default=5.0, gt=0)


class RmaSettings(BaseModel):
    """Where RMA cases go (docs/rma.md): a ticket system's JSON webhook. Without one, cases are
    kept and shown in the console only."""

    model_config = ConfigDict(extra="forbid")

    webhook_url: str | None = None
    timeout_seconds: float = Field(default=10.0, gt=0)
    # A failed delivery is retried after base·2^(n-1) seconds, at most max: never given up.
    retry_base_seconds: float = Field(default=5.0, gt=0)
    retry_max_seconds: float = Field(default=900.0, gt=0)

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value


class SignalSettings(BaseModel):
    """Bounds on what the push API and the Alertmanager webhook take (docs/signals.md)."""

    # A pushed reading older than this is refused with the reason: history is not news.
    push_max_age_seconds: float = Field(default=300.0, gt=0)
    # An event (an XID the kernel logged) is a fact with its own time, not a reading: one an
    # agent queued through a controller outage is taken this late and decided by its time.
    push_event_max_age_seconds: float = Field(default=86400.0, gt=0)
    # A firing alert that Alertmanager has not re-sent for this long is dropped (its default
    # repeat_interval is 4 h; keep this above yours).
    alert_hold_seconds: float = Field(default=4.5 * 3600, gt=0)
    # Alertmanager's URL: a replica that starts leading reads the alerts it fires to
    # `alertmanager_receiver` there, instead of waiting for their next notification.
    alertmanager_url: str | None = None
    alertmanager_receiver: str = "remediator"


class AgentIntakeSettings(BaseModel):
    """How heartbeats are written and what the push path admits (docs/scale.md)."""

    # Heartbeats are kept in memory and written in one batch this often (and within a second
    # when an agent comes back); the database then takes ~0.2 heartbeat writes a second.
    heartbeat_flush_seconds: float = Field(default=5.0, gt=0, le=60)
    heartbeat_per_node_rate: float = Field(default=0.5, gt=0)
    heartbeat_per_node_burst: float = Field(default=3.0, ge=1)
    signals_per_node_rate: float = Field(default=20.0, gt=0)
    signals_per_node_burst: float = Field(default=200.0, ge=1)
    # Past this many heartbeats a second the replica is behind: 429 with a Retry-After.
    heartbeats_per_second: float = Field(default=2_000.0, gt=0)
    # The fleet's steady heartbeats a second: agents are asked for the period that keeps it
    # (10,000 agents: every ~17 min; up to 100 keep their own 10 s), and silence is judged on
    # three missed beats of that period (model/heartbeats.py, docs/scale.md). A heartbeat costs
    # the replica ~1 ms of CPU at such rates (a new connection each, caches cold): 10 a second
    # is ~1 % of a core, and the idle controller's other work ~0.7 %.
    heartbeat_budget_per_second: float = Field(default=10.0, gt=0)
    # The agents' DaemonSet pods (deploy/ labels them so): the kubelet's readiness and restarts
    # tell a crash-looping agent at once and a dead one once its pod has not been Ready for
    # `pod_not_ready_seconds`, at any fleet size (model/agent_liveness.py, docs/agent.md). ""
    # leaves liveness to heartbeats alone.
    pod_selector: str = "app.kubernetes.io/name=remediator,app.kubernetes.io/component=agent"
    pod_not_ready_seconds: float = Field(default=30.0, gt=0, le=3600)


class ArchiveSettings(BaseModel):
    """The signal archive a policy backtest replays (docs/backtest.md)."""

    enabled: bool = True
    retention_days: float = Field(default=30.0, gt=0)
    # A run is cut (its row completed, a new one started) at least this often.
    max_run_minutes: float = Field(default=60.0, gt=0)
    # Per signal kind, the level under which readings count as unchanged (store/archive.py).
    floors: dict[str, float] = Field(default_factory=lambda: {"thermal": 70.0})


class RepairSettings(BaseModel):
    """The Jobs that reset GPUs, run DCGM diagnostics and (where the provider cannot) reboot:
    privileged pods pinned to the node, in this namespace, under this service account.
    `job_template` is a YAML file that replaces the built-in Job spec (see docs/repair.md)."""

    namespace: str = "remediator"
    service_account: str = "remediator-repair"
    image: str = "nvcr.io/nvidia/cloud-native/dcgm:3.3.5-1-ubuntu22.04"
    job_template: Path | None = None
    poll_seconds: float = Field(default=2.0, gt=0)


class FenceSettings(BaseModel):
    """What the fence owner does with a fence found missing where the store requires one
    (docs/safety.md I3): put it back (`reassert`), or only say so on the timeline and in
    `remediator_fence_drift_total` (`report`)."""

    model_config = ConfigDict(extra="forbid")

    on_drift: Literal["reassert", "report"] = "reassert"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="REMEDIATOR_", env_nested_delimiter="__", extra="forbid"
    )

    cluster_name: str = "default"
    kubeconfig: Path | None = None  # None: in-cluster service account
    prometheus_url: str | None = None
    prometheus_timeout_seconds: float = Field(default=10.0, gt=0)
    # A Prometheus reading whose sample is older is not a reading (kept under the policies' `for`).
    prometheus_sample_max_age_seconds: float = Field(default=75.0, gt=0)
    policies_dir: Path = Path("policies")
    database_url: str = "sqlite:///remediator.db"
    provider: AnyProviderSettings = Field(default_factory=ProviderSettings)
    # pool → its own provider; pools not listed use `provider`.
    pool_providers: dict[str, AnyProviderSettings] = Field(default_factory=dict)
    web: WebSettings = Field(default_factory=WebSettings)
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)
    rma: RmaSettings = Field(default_factory=RmaSettings)
    signals: SignalSettings = Field(default_factory=SignalSettings)
    signal_archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    agents: AgentIntakeSettings = Field(default_factory=AgentIntakeSettings)
    # Policy directories the console may backtest against this cluster's archive, by name.
    backtest_dirs: dict[str, Path] = Field(default_factory=dict)
    kube_api: KubeApiSettings = Field(default_factory=KubeApiSettings)
    repair: RepairSettings = Field(default_factory=RepairSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    fences: FenceSettings = Field(default_factory=FenceSettings)
    # The labels that place a tray in its rack (remediator/model/topology.py, docs/topology.md).
    topology: TopologySettings = Field(default_factory=TopologySettings)
    pool_label: str = "simcloud.io/nodepool"
    opt_out_label: str = "remediator.io/disable-auto-replace"
    poll_interval_seconds: float = Field(default=15.0, gt=0)
    advance_interval_seconds: float = Field(default=2.0, gt=0)
    log_format: Literal["json", "text"] = "json"
    # A node agent silent this long is shown as silent and its node's health as unknown.
    agent_silent_after_seconds: float = Field(default=60.0, gt=0)

    @field_validator("cluster_name")
    @classmethod
    def _cluster_name(cls, value: str) -> str:
        problem = name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment wins over the file's values (passed as init kwargs).
        return env_settings, init_settings


def provider_kind(settings: Settings, pool: str | None) -> str:
    """Which kind of provider serves `pool` (http, aws, clusterapi, gce)."""
    return settings.pool_providers.get(pool or "", settings.provider).type


def load_settings(path: Path | None) -> Settings:
    """Read the YAML config (when given) under the environment; errors name the file and field."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise RemediatorError(f"{path}: cannot read config: {exc}") from exc
        if not isinstance(loaded, dict):
            raise RemediatorError(f"{path}: config must be a mapping at the top level")
        data = loaded
        base = path.parent
        for key in ("kubeconfig", "policies_dir"):
            if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                data[key] = str(base / data[key])
    try:
        return Settings(**data)
    except ValidationError as exc:
        root = _yaml_root(path) if path is not None else None
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            line = _line_of(root, err["loc"]) if root is not None else None
            where = f"{path}:{line}" if line else str(path) if path else "environment"
            problems.append(f"{where}: {field}: {err['msg']}")
        raise RemediatorError("\n".join(problems)) from exc


def _yaml_root(path: Path) -> yaml.Node | None:
    try:
        return yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """The 1-based line of the deepest part of `loc` the file has (a missing field: its parent;
    a value from the environment: None). Parts the file does not spell (a union's tag, as in
    `provider.aws.timeout_seconds`) are passed over."""
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == str(part)), None)
            key = next((k for k, _ in node.value if k.value == str(part)), None)
            if key is not None:
                line, node = key.start_mark.line + 1, found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
