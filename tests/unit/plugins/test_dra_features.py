"""DynamicResources with v1.37's default DRA features, against upstream's own allocator.

Partitionable devices (counter sets: MIG profiles carved from one physical GPU), consumable capacity
(devices shared by several claims, capacity request policies, fractional ranges), admin access and
binding conditions, all on by default in v1.37.2. Random clusters mixing them with the plain cases
are scheduled by py-scheduler and by the Go parity oracle (upstream's framework and default plugins,
``tests/e2e/testbed/oracle``), which must agree on feasible nodes, filter reasons, scores and the
FailedScheduling message. Hand-written cases pin the behaviour a GPU user relies on (seven 1g
partitions of one GPU, the eighth unschedulable; two Pods sharing a GPU by memory, the third not).
"""

from __future__ import annotations

import copy
import random
from decimal import Decimal
from pathlib import Path

import pytest

from py_scheduler.framework import quantity as qty
from py_scheduler.plugins.dynamic_resources import ALLOCATIONS_KEY
from py_scheduler.plugins.dynamic_resources.capacity import (
    CapacityError,
    consumed_from_request,
    fits_capacity,
    format_quantity,
)
from tests.unit.plugins.test_dynamic_resources import (
    G,
    Obj,
    claim,
    dclass,
    dev,
    ex,
    match_oracle,
    node,
    pod,
    rslice,
    schedule,
    uses,
)

GI = 2**30


# -- building blocks ------------------------------------------------------------------------------
def counter_slice(name: str, pool: str, node_name: str, sets: dict[str, dict[str, str]], count: int = 2) -> Obj:
    """A ResourceSlice that only publishes counter sets (``sharedCounters``)."""
    s = rslice(name, G, pool, node=node_name, count=count)
    s["spec"].pop("devices")
    s["spec"]["sharedCounters"] = [{"name": k, "counters": {c: {"value": v} for c, v in cs.items()}}
                                   for k, cs in sets.items()]
    return s


def mig_devices(gpu: str, counter_set: str, profiles: list[tuple[str, int, str, str]]) -> list[Obj]:
    """The whole GPU plus MIG partitions: (profile, how many, memory, multiprocessors) each
    consuming its share of the GPU's counters."""
    out = [dev(f"{gpu}", {"profile": {"string": "whole"}}, {"memory": "80Gi"},
               consumesCounters=[{"counterSet": counter_set, "counters": {
                   "memory": {"value": "80Gi"}, "multiprocessors": {"value": "98"}}}])]
    for prof, n, mem, mp in profiles:
        for i in range(n):
            out.append(dev(f"{gpu}-{prof}-{i}", {"profile": {"string": prof}}, {"memory": mem},
                           consumesCounters=[{"counterSet": counter_set, "counters": {
                               "memory": {"value": mem}, "multiprocessors": {"value": mp}}}]))
    return out


MIG = [("1g", 7, "10Gi", "14"), ("3g", 2, "40Gi", "42")]


def shared_gpu(name: str, policy: Obj | None = None) -> Obj:
    cap: Obj = {"value": "80Gi"}
    if policy is not None:
        cap["requestPolicy"] = policy
    return {"name": name, "allowMultipleAllocations": True,
            "attributes": {"model": {"string": "h100"}, "profile": {"string": "shared"}}, "capacity": {"memory": cap}}


def profile_request(prof: str, count: int = 1) -> Obj:
    return ex(count=count, sel=[f'device.attributes["{G}"].profile == "{prof}"'])


# -- hand-written cases ----------------------------------------------------------------------------
def _mig_cluster() -> list[Obj]:
    return [node("a"), dclass("gpu", [f'device.driver == "{G}"']),
            counter_slice("a-counters", "pa", "a", {"gpu-0-set": {"memory": "80Gi", "multiprocessors": "98"}}),
            rslice("a-devices", G, "pa", node="a", count=2, devices=mig_devices("gpu-0", "gpu-0-set", MIG))]


def test_seven_1g_partitions_fit_one_gpu_and_the_eighth_does_not() -> None:
    objs = _mig_cluster()
    for i in range(8):
        objs.append(claim(f"c{i}", [{"name": "r", "exactly": profile_request("1g")}]))
        objs.append(pod(f"p{i}", uses(f"c{i}"), ts=f"2024-01-01T00:00:{i:02d}Z"))
    res = schedule(objs, reserve=True)
    assert [r.selected for r in res[:7]] == ["a"] * 7
    assert res[7].selected is None
    assert res[7].filtered["a"] == ["cannot allocate all claims"]


def test_whole_gpu_does_not_fit_once_a_partition_is_taken() -> None:
    objs = _mig_cluster()
    objs.append(claim("used", [{"name": "r", "exactly": profile_request("1g")}], allocation={
        "devices": {"results": [{"request": "r", "driver": G, "pool": "pa", "device": "gpu-0-1g-0"}]}}))
    objs.append(claim("c", [{"name": "r", "exactly": profile_request("whole")}]))
    objs.append(pod("p", uses("c")))
    assert schedule(objs)[0].selected is None


def test_missing_counter_set_makes_the_pool_invalid() -> None:
    objs = [node("a"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("a-devices", G, "pa", node="a", devices=mig_devices("gpu-0", "nope", MIG[:1])),
            claim("c", [{"name": "r", "exactly": profile_request("1g")}]), pod("p", uses("c"))]
    res = schedule(objs)[0]
    assert res.selected is None
    assert res.filtered["a"] == ["invalid resource pools were encountered"]


def test_two_pods_share_one_gpu_by_memory_and_the_third_does_not_fit() -> None:
    objs = [node("a"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("a", G, "pa", node="a", devices=[shared_gpu("gpu-0")])]
    for i in range(3):
        objs.append(claim(f"c{i}", [{"name": "r", "exactly": ex(capacity={"requests": {"memory": "40Gi"}})}]))
        objs.append(pod(f"p{i}", uses(f"c{i}"), ts=f"2024-01-01T00:00:{i:02d}Z"))
    res = schedule(objs, reserve=True)
    assert [r.selected for r in res] == ["a", "a", None]
    assert res[0].state is not None


def test_shares_allocated_earlier_count_against_capacity() -> None:
    used = claim("used", [{"name": "r", "exactly": ex()}], allocation={"devices": {"results": [
        {"request": "r", "driver": G, "pool": "pa", "device": "gpu-0",
         "shareID": "3c8f0c0e-0000-4000-8000-000000000001", "consumedCapacity": {"memory": "60Gi"}}]}})
    objs = [node("a"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("a", G, "pa", node="a", devices=[shared_gpu("gpu-0")]), used,
            claim("c", [{"name": "r", "exactly": ex(capacity={"requests": {"memory": "30Gi"}})}]), pod("p", uses("c"))]
    assert schedule(copy.deepcopy(objs))[0].selected is None
    objs[-2] = claim("c", [{"name": "r", "exactly": ex(capacity={"requests": {"memory": "20Gi"}})}])
    assert schedule(objs)[0].selected == "a"


def test_admin_access_may_take_a_device_in_use() -> None:
    used = claim("used", [{"name": "r", "exactly": ex()}], allocation={"devices": {"results": [
        {"request": "r", "driver": G, "pool": "pa", "device": "g0"}]}})
    objs = [node("a"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("a", G, "pa", node="a", devices=[dev("g0")]), used,
            claim("c", [{"name": "r", "exactly": ex(adminAccess=True)}]), pod("p", uses("c"))]
    assert schedule(copy.deepcopy(objs))[0].selected == "a"
    objs[-2] = claim("c", [{"name": "r", "exactly": ex()}])
    assert schedule(objs)[0].selected is None


# -- capacity arithmetic ---------------------------------------------------------------------------
def test_request_rounded_up_to_range_step_and_valid_values() -> None:
    rng = {"memory": {"value": "80Gi", "requestPolicy": {"default": "10Gi", "validRange": {
        "min": "5Gi", "max": "40Gi", "step": "5Gi"}}}}
    assert consumed_from_request({"memory": Decimal(7 * GI)}, rng) == {"memory": Decimal(10 * GI)}
    assert consumed_from_request({"memory": Decimal(1 * GI)}, rng) == {"memory": Decimal(5 * GI)}
    assert consumed_from_request(None, rng) == {"memory": Decimal(10 * GI)}
    assert not fits_capacity(None, {"memory": Decimal(41 * GI)}, rng, None)  # rounds to 45Gi > max
    vals = {"memory": {"value": "80Gi", "requestPolicy": {"validValues": ["10Gi", "20Gi", "40Gi"]}}}
    assert consumed_from_request({"memory": Decimal(11 * GI)}, vals) == {"memory": Decimal(20 * GI)}
    assert not fits_capacity(None, {"memory": Decimal(41 * GI)}, vals, None)
    assert not fits_capacity(None, {"cores": Decimal(1)}, vals, None)  # names a capacity the device lacks
    assert fits_capacity({"memory": Decimal(60 * GI)}, {"memory": Decimal(10 * GI)}, vals,
                         {"memory": Decimal(10 * GI)})
    assert not fits_capacity({"memory": Decimal(60 * GI)}, {"memory": Decimal(10 * GI)}, vals,
                             {"memory": Decimal(20 * GI)})


def test_fractional_range_uses_milli_units() -> None:
    cap = {"cores": {"value": "4", "requestPolicy": {"validRange": {"min": "100m", "step": "250m"}}}}
    assert consumed_from_request({"cores": Decimal("0.2")}, cap) == {"cores": Decimal("0.35")}
    assert consumed_from_request({"cores": Decimal("0.2")}, cap, fractional=False) == {"cores": Decimal(1)}
    with pytest.raises(CapacityError, match='capacity "cores"'):
        consumed_from_request({"cores": Decimal("0.0001")}, {"cores": {"value": "4", "requestPolicy": {
            "validRange": {"min": "0", "step": "250m"}}}})


def test_format_quantity() -> None:
    assert format_quantity(Decimal(10 * GI)) == "10Gi"
    assert format_quantity(Decimal(1000)) == "1000"
    assert format_quantity(Decimal("0.35")) == "350m"


# -- random clusters against upstream ----------------------------------------------------------------
def feature_cluster(seed: int) -> list[Obj]:
    """2-3 nodes, each with one of: a MIG-partitionable GPU pool (counter slice + device slice, some
    partitions allocated), shareable GPUs with a capacity policy (some shares allocated), plain
    GPUs (some allocated), devices with binding conditions; DeviceTaintRules; one pending Pod with
    1-2 claims asking profiles, capacity, admin access, counts, tolerations and firstAvailable."""
    r = random.Random(seed)
    n = r.randint(2, 3)
    objs: list[Obj] = [node(f"n{i}") for i in range(n)]
    objs.append(dclass("gpu", [f'device.driver == "{G}"']))
    if r.random() < 0.5:  # class configs travel into the allocation (source FromClass)
        objs[-1]["spec"]["config"] = [{"opaque": {"driver": G, "parameters": {"sharing": "time-slicing"}}}]
    policies: list[Obj | None] = [None, {"default": "10Gi", "validRange": {"min": "5Gi", "step": "5Gi"}},
                                  {"validValues": ["10Gi", "20Gi", "40Gi", "80Gi"]},
                                  {"default": "20Gi", "validRange": {"min": "10Gi", "max": "40Gi"}}]
    used = 0

    def allocated(pool: str, device: str, share: str | None = None, mem: str | None = None) -> None:
        nonlocal used
        res: Obj = {"request": "r", "driver": G, "pool": pool, "device": device}
        if share is not None:
            res["shareID"] = share
            if mem is not None:
                res["consumedCapacity"] = {"memory": mem}
        if r.random() < 0.15:
            res["adminAccess"] = True
        objs.append(claim(f"used{used}", [{"name": "r", "exactly": ex()}], allocation={"devices": {"results": [res]}},
                          reserved=[{"resource": "pods", "name": "x", "uid": "x"}]))
        used += 1

    for i in range(n):
        kind = r.choice(["mig", "mig", "shared", "plain", "binding"])
        pool = f"p{i}"
        if kind == "mig":
            gpus = r.randint(1, 2)
            sets = {f"g{k}-set": {"memory": "80Gi", "multiprocessors": "98"} for k in range(gpus)}
            devs: list[Obj] = []
            for k in range(gpus):
                devs += mig_devices(f"g{k}", f"g{k}-set", MIG)
            objs.append(counter_slice(f"s-n{i}-counters", pool, f"n{i}", sets))
            objs.append(rslice(f"s-n{i}-devices", G, pool, node=f"n{i}", count=2, devices=devs))
            for d in devs:
                if r.random() < 0.12:
                    allocated(pool, d["name"])
        elif kind == "shared":
            devs = [shared_gpu(f"g{k}", r.choice(policies)) for k in range(r.randint(1, 2))]
            objs.append(rslice(f"s-n{i}", G, pool, node=f"n{i}", devices=devs))
            for d in devs:
                for s in range(r.randint(0, 2)):
                    allocated(pool, d["name"], share=f"00000000-0000-4000-8000-{i:04d}{s:08d}",
                              mem=r.choice(["10Gi", "20Gi", "40Gi", None]))
        elif kind == "plain":
            devs = [dev(f"g{k}", {"model": {"string": "a100"}, "profile": {"string": "whole"}}, {"memory": "40Gi"})
                    for k in range(r.randint(1, 3))]
            objs.append(rslice(f"s-n{i}", G, pool, node=f"n{i}", devices=devs))
            for d in devs:
                if r.random() < 0.3:
                    allocated(pool, d["name"])
        else:
            devs = [dev(f"g{k}", {"model": {"string": "l4"}, "profile": {"string": "whole"}}, {"memory": "24Gi"},
                        bindingConditions=["attached"],
                        bindingFailureConditions=["failed"], **({"bindsToNode": True} if r.random() < 0.5 else {}))
                    for k in range(r.randint(1, 2))]
            objs.append(rslice(f"s-n{i}", G, pool, node=f"n{i}", devices=devs))

    for k in range(r.choice([0, 0, 1, 2])):  # DeviceTaintRules (GA): taint devices by driver / pool / device
        sel: Obj = {"driver": G}
        if r.random() < 0.7:
            sel["pool"] = f"p{r.randrange(n)}"
        if r.random() < 0.5:
            sel["device"] = r.choice(["g0", "g1", "g0-1g-0"])
        objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": f"dtr{k}"},
                     "spec": {"deviceSelector": sel, "taint": {"key": "maintenance", "value": "yes",
                                                               "effect": r.choice(["NoSchedule", "NoExecute",
                                                                                   "None"])}}})

    def request() -> Obj:
        choice = r.random()
        if choice < 0.3:
            e = profile_request(r.choice(["1g", "1g", "3g", "whole"]), count=r.choice([1, 1, 2]))
        elif choice < 0.55:
            e = ex(capacity={"requests": {"memory": r.choice(["5Gi", "7Gi", "10Gi", "30Gi", "50Gi"])}})
        elif choice < 0.65:
            e = ex(adminAccess=True)
        else:
            e = ex(count=r.choice([1, 1, 2]))
        if r.random() < 0.2:
            e["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
        return e

    refs = []
    for ci in range(r.choice([1, 1, 2])):
        reqs: list[Obj] = []
        for ri in range(r.choice([1, 1, 2])):
            if r.random() < 0.25:
                reqs.append({"name": f"r{ri}", "firstAvailable": [
                    {"name": f"s{si}", **request()} for si in range(2)]})
            else:
                reqs.append({"name": f"r{ri}", "exactly": request()})
        c = claim(f"c{ci}", reqs)
        if r.random() < 0.4:  # claim configs for some, all or none of the requests (FromClaim)
            names = r.choice([[], ["r0"], [q["name"] for q in reqs],
                              [f"r0/s{r.randint(0, 1)}"] if "firstAvailable" in reqs[0] else ["r0"]])
            c["spec"]["devices"]["config"] = [{"requests": names,
                                               "opaque": {"driver": G, "parameters": {"mode": "exclusive"}}}]
        objs.append(c)
        refs.append(f"c{ci}")
    objs.append(pod("p", uses(*refs)))
    return objs


@pytest.fixture(scope="module")
def oracle() -> Path:
    """The Go oracle (upstream's framework), built on first use and cached beside the test bed."""
    from bench.parity_lib.runner import oracle_binary

    return oracle_binary()


@pytest.mark.parametrize("seed", range(60))
def test_feature_clusters_match_upstream(seed: int, oracle: Path) -> None:
    matched = match_oracle(feature_cluster(seed), oracle)
    if matched is None:
        return
    got, want = matched
    assert allocations(got) == comparable(want.get("allocations") or {})


def comparable(allocs: dict[str, Obj]) -> dict[str, Obj]:
    """AllocationResults with the random share IDs replaced by a marker and quantities normalized."""
    out = copy.deepcopy(allocs)
    for a in out.values():
        for r in (a.get("devices") or {}).get("results") or []:
            if "shareID" in r:
                r["shareID"] = "<share>"
            if "consumedCapacity" in r:
                r["consumedCapacity"] = {k: str(qty.parse(v)) for k, v in r["consumedCapacity"].items()}
    return out


def allocations(res: object) -> dict[str, Obj]:
    """py-scheduler's allocations after Reserve (claim namespace/name -> AllocationResult)."""
    state = getattr(res, "state", None)
    if state is None or getattr(res, "selected", None) is None:
        return {}
    return comparable(state.data.get(ALLOCATIONS_KEY) or {})
