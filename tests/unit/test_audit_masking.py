"""Audit documents never hold a secret: secret-named fields and URL passwords are masked."""

from __future__ import annotations

from common.db.audit import masked


def test_secret_named_fields_and_url_passwords_are_masked_however_deep() -> None:
    doc = {
        "callbackUrl": "https://hook:s3cret@example.com/h",
        "signingSecret": "whsec_abc",
        "nested": [{"apiKey": "kairos_x", "token": "kop_y", "name": "keep"}],
        "params": {"Password": "pw", "count": 3},
    }
    shown = masked(doc)
    text = str(shown)
    for secret in ("s3cret", "whsec_abc", "kairos_x", "kop_y", "'pw'"):
        assert secret not in text
    assert shown["callbackUrl"] == "https://hook:***@example.com/h"
    assert shown["nested"][0]["name"] == "keep" and shown["params"]["count"] == 3
