"""EC2 Auto Scaling for `sim serve --cloud aws`: moto, the group reconciler and the fault proxy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moto.server import ThreadedMotoServer
from starlette.types import ASGIApp

from remediator.sim.cloud.aws.fleet import REGION, TEST_KEYS, SimAwsFleet
from remediator.sim.cloud.aws.proxy import build_aws_app
from remediator.sim.kube.controllers.cluster import SimCluster


@dataclass
class SimAws:
    app: ASGIApp
    fleet: SimAwsFleet
    moto: ThreadedMotoServer

    def provider(self, url: str) -> dict[str, Any]:
        """The controller's `provider:` setting for this endpoint."""
        return {
            "type": "aws",
            "region": REGION,
            "endpoint_url": url,
            "test_credentials": dict(TEST_KEYS),
        }

    def stop(self) -> None:
        self.fleet.stop()
        self.moto.stop()


def start_aws(
    cluster: SimCluster,
    provision_delay: float,
    reboot: Callable[[str], None] | None = None,
) -> SimAws:
    """`reboot` power-cycles a node by name: what EC2 RebootInstances does to its instance."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    moto_url = f"http://{host}:{port}"
    fleet = SimAwsFleet(cluster, moto_url, provision_delay)
    fleet.bootstrap()
    fleet.start()
    return SimAws(build_aws_app(fleet, moto_url, reboot), fleet, moto)
