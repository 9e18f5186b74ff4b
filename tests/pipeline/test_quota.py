import orjson
import pytest

from kip.pipeline.control import ControlState
from kip.pipeline.quota import (Bucket, Ledger, Limit, TenantQuota, apply_levels, dump_levels,
                                load_levels)
from kip.schemas.errors import QuotaExceeded


def test_bucket_refills_at_its_rate_up_to_its_burst():
    b = Bucket(tokens=2, at_ms=0)
    assert b.take(1, 10, 2, 0) == 0 and b.take(1, 10, 2, 0) == 0
    assert b.take(1, 10, 2, 0) == 100          # 1 token at 10/s: 100 ms
    assert b.take(1, 10, 2, 100) == 0
    b.take(0, 10, 2, 10_000)
    assert b.tokens == 2                       # never above the burst


def test_ledger_limits_one_tenant_and_not_another():
    ledger = Ledger({"a": TenantQuota(tenant="a", requests_per_s=1, burst_requests=3)})
    for _ in range(3):
        ledger.take("a", "m", 10, 0)
    with pytest.raises(QuotaExceeded) as err:
        ledger.take("a", "m", 10, 0)
    assert err.value.retry_after_ms == 1000 and err.value.code == "QUOTA_EXCEEDED"
    for _ in range(100):
        ledger.take("b", "m", 10, 0)           # no quota configured: unlimited
    assert ledger.dirty == {"a"}


def test_byte_quota_and_per_model_quota():
    quota = TenantQuota(tenant="a", bytes_per_s=1000, models={"big": Limit(requests_per_s=1)})
    ledger = Ledger({"a": quota})
    ledger.take("a", "big", 400, 0)
    with pytest.raises(QuotaExceeded, match="on model 'big'"):
        ledger.take("a", "big", 400, 0)
    ledger.take("a", "small", 400, 0)          # the tenant-wide byte budget still has 600
    with pytest.raises(QuotaExceeded, match="bytes quota") as err:
        ledger.take("a", "small", 400, 0)
    assert err.value.retry_after_ms == 200
    with pytest.raises(QuotaExceeded, match="can never pass"):
        ledger.take("a", "small", 5000, 10_000)


def test_a_refused_request_charges_nothing():
    quota = TenantQuota(tenant="a", requests_per_s=10, models={"m": Limit(requests_per_s=1)})
    ledger = Ledger({"a": quota})
    ledger.take("a", "m", 0, 0)
    with pytest.raises(QuotaExceeded):
        ledger.take("a", "m", 0, 0)
    assert ledger.levels["a"][""]["requests"].tokens == 9


def test_levels_round_trip_through_their_table_form():
    ledger = Ledger({"a": TenantQuota(tenant="a", requests_per_s=5)})
    ledger.take("a", "m", 0, 123)
    again = load_levels(dump_levels(ledger.levels["a"]))
    assert again[""]["requests"] == Bucket(4.0, 123)


def test_bucket_levels_from_the_future_or_out_of_bounds_are_refused():
    ledger = Ledger()
    apply = apply_levels(ledger, clock=lambda: 1000)
    apply(b"acme", orjson.dumps({"": {"requests": [2.0, 900]}}))
    for bad in ({"": {"requests": [2.0, 10**12]}}, {"": {"requests": [-1.0, 900]}},
                {"": {"requests": [1e309, 900]}}):
        with pytest.raises((ValueError, orjson.JSONEncodeError)):
            apply(b"acme", orjson.dumps(bad))
    assert ledger.levels["acme"][""]["requests"].tokens == 2.0


def test_a_fallback_record_must_name_a_model_alias():
    state = ControlState()
    state.apply(b"fallback:digits", orjson.dumps({"fallback": "digits-small"}))
    for bad in ({"fallback": 7}, {"fallback": "../../etc"}, {"other": "x"}):
        with pytest.raises(ValueError):
            state.apply(b"fallback:digits", orjson.dumps(bad))
    assert state.fallbacks == {"digits": "digits-small"}
