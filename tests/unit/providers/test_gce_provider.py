"""The GCE provider's pure parts: providerIDs, the requestId that makes a repeated recreate the
same operation, and how the client library's errors are wrapped."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc

from remediator.errors import NotFoundError, PermanentError, TransientError
from remediator.providers.gce import parse_provider_id, request_id, wrap


def test_provider_id() -> None:
    assert parse_provider_id("gce://proj/us-central1-a/gke-n-1") == (
        "proj",
        "us-central1-a",
        "gke-n-1",
    )
    for bad in ("aws:///us-east-1a/i-1", "gce://proj/zone", "gce:///zone/name"):
        with pytest.raises(PermanentError):
            parse_provider_id(bad)


def test_request_id_is_stable_per_key_and_a_uuid() -> None:
    assert request_id("rem-1/replace") == request_id("rem-1/replace")
    assert request_id("rem-1/replace") != request_id("rem-2/replace")
    assert len(request_id("k")) == 36


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (gexc.TooManyRequests("Rate Limit Exceeded"), TransientError),
        (gexc.ServiceUnavailable("down"), TransientError),
        (gexc.NotFound("no group"), NotFoundError),
        (gexc.BadRequest("bad"), PermanentError),
    ],
)
def test_errors_are_wrapped_by_what_retrying_can_do(
    exc: gexc.GoogleAPICallError, kind: type
) -> None:
    wrapped = wrap(exc, "recreate")
    assert type(wrapped) is kind
    assert str(exc.message) in str(wrapped)
