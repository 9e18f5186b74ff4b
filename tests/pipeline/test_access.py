import numpy as np
import pytest

from kip.pipeline.access import AccessConfig, authenticate, authorize
from kip.schemas.errors import Forbidden, Unauthenticated
from tests.pipeline.conftest import NOW_MS, signer

PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def test_a_correctly_signed_request_authenticates(access):
    authenticate(signer().request("digits", PIXELS, issued_at_ms=NOW_MS), access, NOW_MS)


@pytest.mark.parametrize("client, issued_at, reason", [
    (signer(secret="wrong"), NOW_MS, "signature does not match"),
    (signer(key_id="nobody"), NOW_MS, "unknown key id"),
    (signer(tenant="limited"), NOW_MS, "unknown key id"),     # acme's key, other tenant
    (signer(), NOW_MS - 10 * 60_000, "replay window"),
    (signer(), NOW_MS + 10 * 60_000, "replay window"),
])
def test_authentication_failures(access, client, issued_at, reason):
    request = client.request("digits", PIXELS, issued_at_ms=issued_at)
    with pytest.raises(Unauthenticated, match=reason):
        authenticate(request, access, NOW_MS)


def test_a_tampered_request_fails_authentication(access):
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    tampered = request.model_copy(update={"model": "minilm"})
    with pytest.raises(Unauthenticated):
        authenticate(tampered, access, NOW_MS)


def test_authorization_checks_model_and_priority(access):
    lim = signer("limited", "lim-k1", "lim-secret")
    authorize(lim.request("minilm", {"text": ["x"]}, priority="batch"), access)
    with pytest.raises(Forbidden, match="may not use model 'digits'"):
        authorize(lim.request("digits", PIXELS, priority="batch"), access)
    with pytest.raises(Forbidden, match="may not send interactive"):
        authorize(lim.request("minilm", {"text": ["x"]}, priority="interactive"), access)
    with pytest.raises(Forbidden, match="may not use model 'minilm'"):
        authorize(lim.request("minilm@abc", {"text": ["x"]}, priority="batch"),
                  access.model_copy(update={"tenants": {
                "limited": access.tenants["limited"].model_copy(update={"models": []})}}))


def test_secrets_never_appear_in_repr_but_survive_the_file(access, tmp_path):
    assert "acme-secret" not in repr(access) and "acme-secret" not in str(access)
    path = tmp_path / "access.json"
    path.write_text(access.to_json())
    again = AccessConfig.from_file(path)
    assert again.keys["acme-k1"].secret.get_secret_value() == "acme-secret"


def test_an_unusable_access_file_names_the_problem_but_never_a_secret(tmp_path):
    path = tmp_path / "access.json"
    path.write_text('{"keys": {"k1": {"secret": "TOP-SECRET-42"}}, "tenants": {}}')
    with pytest.raises(ValueError) as caught:
        AccessConfig.from_file(path)
    assert "keys.k1.tenant" in str(caught.value)
    assert "TOP-SECRET" not in str(caught.value) and caught.value.__cause__ is None
