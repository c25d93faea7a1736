import pickle

import cloudpickle
import pytest

from aiospark.lookup import LookupCache


def test_lru_eviction_keeps_recently_used():
    c = LookupCache(max_rows=2)
    c.put(("a",), [{"v": 1}])
    c.put(("b",), [{"v": 2}])
    assert c.get(("a",)) == [{"v": 1}]  # a is now most recent
    c.put(("c",), [{"v": 3}])           # evicts b
    assert c.get(("b",)) is None
    assert c.get(("a",)) == [{"v": 1}]
    assert c.get(("c",)) == [{"v": 3}]
    s = c.stats()
    assert s["evictions"] == 1 and s["size"] == 2 and s["loads"] == 3
    assert s["hits"] == 3 and s["misses"] == 1


def test_put_existing_key_replaces_without_eviction():
    c = LookupCache(max_rows=2)
    c.put((1,), [{"v": 1}])
    c.put((2,), [{"v": 2}])
    c.put((1,), [{"v": 10}])
    assert len(c) == 2 and c.stats()["evictions"] == 0
    assert c.get((1,)) == [{"v": 10}]


def test_expire_after_write():
    now = [0.0]  # a controllable clock: expiry is decided by the clock, not by how fast we run
    c = LookupCache(expire_after_write=5, clock=lambda: now[0])
    c.put(("k",), [{"v": 1}])
    assert c.get(("k",)) == [{"v": 1}]
    now[0] = 3.0
    assert c.get(("k",)) == [{"v": 1}]  # access does not extend a write expiry
    now[0] = 5.5
    assert c.get(("k",)) is None
    assert c.stats()["expirations"] == 1
    assert len(c) == 0


def test_expire_after_access_is_extended_by_hits():
    now = [0.0]
    c = LookupCache(expire_after_access=5, clock=lambda: now[0])
    c.put(("k",), [{"v": 1}])
    for _ in range(4):
        now[0] += 3.0
        assert c.get(("k",)) == [{"v": 1}]  # each hit refreshes: 12 s after the put, still there
    now[0] += 7.0
    assert c.get(("k",)) is None


def test_fake_clock_both_expiries():
    now = [0.0]
    c = LookupCache(expire_after_write=10, expire_after_access=3, clock=lambda: now[0])
    c.put(("k",), [])
    now[0] = 2.9
    assert c.get(("k",)) == []
    now[0] = 5.8
    assert c.get(("k",)) == []
    now[0] = 10.0
    assert c.get(("k",)) is None  # written 10 s ago


def test_cache_missing_on_and_off():
    on = LookupCache(cache_missing=True)
    on.put(("x",), [])
    assert on.get(("x",)) == []  # a cached miss, not "absent"
    off = LookupCache(cache_missing=False)
    off.put(("x",), [])
    assert off.get(("x",)) is None
    assert len(off) == 0 and off.stats()["loads"] == 1


@pytest.mark.parametrize("kwargs, match", [
    ({"max_rows": 0}, "max_rows"),
    ({"max_rows": 1.5}, "max_rows"),
    ({"max_rows": True}, "max_rows"),
    ({"expire_after_write": 0}, "expire_after_write"),
    ({"expire_after_write": -1}, "expire_after_write"),
    ({"expire_after_access": "5"}, "expire_after_access"),
])
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LookupCache(**kwargs)


def test_pickle_ships_config_only():
    c = LookupCache(max_rows=5, expire_after_write=1.0, cache_missing=False)
    c.put(("a",), [{"v": 1}])
    c.get(("a",))
    for dumps in (pickle.dumps, cloudpickle.dumps):
        c2 = pickle.loads(dumps(c))
        assert (c2.max_rows, c2.expire_after_write, c2.cache_missing) == (5, 1.0, False)
        assert len(c2) == 0 and c2.stats()["hits"] == 0
        c2.put(("b",), [{"v": 2}])
        assert c2.get(("b",)) == [{"v": 2}]


def test_invalidate_and_clear():
    c = LookupCache()
    c.put((1,), [{"a": 1}])
    c.put((2,), [{"a": 2}])
    c.invalidate((1,))
    assert c.get((1,)) is None and c.get((2,)) == [{"a": 2}]
    c.clear()
    assert len(c) == 0
