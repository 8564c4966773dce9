"""Which certificates callbacks over https trust by default."""

from __future__ import annotations

import ssl

import certifi

from services.notifier.posting import _system_tls


def test_callbacks_trust_certifis_bundle_even_where_the_system_has_no_store() -> None:
    bundle = ssl.create_default_context(cafile=certifi.where()).get_ca_certs()
    trusted = {cert["serialNumber"] for cert in _system_tls().get_ca_certs()}
    assert bundle and {cert["serialNumber"] for cert in bundle} <= trusted


def test_callbacks_check_certificates_and_host_names() -> None:
    context = _system_tls()
    assert context.check_hostname and context.verify_mode is ssl.CERT_REQUIRED
