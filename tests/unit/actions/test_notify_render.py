"""The Slack-compatible message shape."""

from __future__ import annotations

from remediator.actions.notify import Notification, NotificationKind, escape, render


def test_render_has_fallback_text_and_blocks() -> None:
    note = Notification(
        NotificationKind.HELD,
        "rem-7",
        "gpu-3",
        "a pod opts out of automatic replacement",
        policy="xid-fatal",
        link="http://remediator/remediations/rem-7",
        fields={"Signal": "xid 79"},
    )
    body = render(note)
    assert body["text"].startswith(":raised_hand: Remediation held")
    assert "gpu-3" in body["text"]
    kinds = [b["type"] for b in body["blocks"]]
    assert kinds == ["header", "section", "section", "context"]
    fields = [f["text"] for f in body["blocks"][2]["fields"]]
    assert fields == [
        "*Node*\ngpu-3",
        "*Remediation*\nrem-7",
        "*Policy*\nxid-fatal",
        "*Signal*\nxid 79",
    ]
    assert "rem-7" in body["blocks"][3]["elements"][0]["text"]


def test_every_kind_has_a_headline() -> None:
    for kind in NotificationKind:
        assert render(Notification(kind, "r", "n", "s"))["blocks"][0]["text"]["text"]


def test_outside_text_cannot_ping_or_hide_links() -> None:
    note = Notification(
        NotificationKind.FAILED,
        "7",
        "<!channel>",
        "provider said: <https://evil.example|retry here> & gave up",
        fields={"Signal": "<!here>"},
    )
    body = render(note)
    shown = [body["text"], body["blocks"][1]["text"]["text"]]
    shown += [f["text"] for f in body["blocks"][2]["fields"]]
    assert not any("<!" in text or "<https" in text for text in shown), shown
    assert "node &lt;!channel&gt;" in body["text"]
    assert body["blocks"][1]["text"]["text"] == escape(note.summary)
    assert "&lt;https://evil.example|retry here&gt; &amp; gave up" in body["text"]
    assert "*Signal*\n&lt;!here&gt;" in body["blocks"][2]["fields"][-1]["text"]


def test_a_cluster_wide_note_names_no_node() -> None:
    note = Notification(
        NotificationKind.BREAKER_TRIPPED, "", "", "7 nodes newly faulted", cluster="prod-east"
    )
    body = render(note)
    assert body["text"].startswith(":rotating_light: Storm breaker tripped")
    assert "node" not in body["text"].split("—")[0]
    assert body["text"].endswith("— 7 nodes newly faulted")
    fields = [f["text"] for f in body["blocks"][2]["fields"]]
    assert fields == ["*Cluster*\nprod-east"]
