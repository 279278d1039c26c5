"""ImageLocality: image-name normalization, spread-scaled sums, thresholds, init containers and image
volumes (image_locality.go). Sizes in bytes; MB = 1024 * 1024."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins import registry
from py_scheduler.plugins.image_locality import ImageLocality, calculate_priority, normalized_image_name
from tests.unit.plugins.plain_handle import plain_handle

MB = 1024 * 1024


def node(name: str, images: dict[str, int] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"},
                       "images": [{"names": [n], "sizeBytes": s} for n, s in (images or {}).items()]}}


def pod(*images: str, init: tuple[str, ...] = (), volumes: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images)]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "image": im} for i, im in enumerate(init)]
    if volumes:
        spec["volumes"] = [{"name": f"v{i}", "image": {"reference": r}} for i, r in enumerate(volumes)]
    return {"metadata": {"name": "p"}, "spec": spec}


def run(incoming: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, int]:
    snap = Snapshot.from_objects(nodes)
    pl = registry.get("ImageLocality")({}, plain_handle())
    state = CycleState(snap)
    pi = PodInfo(incoming)
    out = {}
    for ni in snap.node_info_list:
        sc, s = pl.score(state, pi, ni)
        assert s.is_success()
        out[ni.name] = sc
    return out


@pytest.mark.parametrize(("name", "want"), [
    ("nginx", "nginx:latest"),
    ("nginx:1.25", "nginx:1.25"),
    ("registry:5000/nginx", "registry:5000/nginx:latest"),
    ("registry:5000/nginx:1.25", "registry:5000/nginx:1.25"),
    ("repo/img@sha256:abcd", "repo/img@sha256:abcd"),
    ("", ":latest"),
])
def test_normalized_image_name(name: str, want: str) -> None:
    assert normalized_image_name(name) == want


def test_spread_factor_scales_image_size() -> None:
    nodes = [node("n1", {"gcr.io/big:latest": 300 * MB}), node("n2")]
    # int(300MB * 1/2) = 150MB -> 100 * (150 - 23) / (1000 - 23) = 12 (truncated).
    assert run(pod("gcr.io/big"), nodes) == {"n1": 12, "n2": 0}


def test_image_on_every_node_is_not_damped() -> None:
    nodes = [node("n1", {"gcr.io/big:latest": 300 * MB}), node("n2", {"gcr.io/big:latest": 300 * MB})]
    # 100 * 277 / 977 = 28.
    assert run(pod("gcr.io/big:latest"), nodes) == {"n1": 28, "n2": 28}


def test_spread_over_all_snapshot_nodes() -> None:
    nodes = [node("n1", {"img:1": 800 * MB}), node("n2"), node("n3"), node("n4")]
    # int(800MB / 4) = 200MB -> 100 * 177 / 977 = 18.
    assert run(pod("img:1"), nodes)["n1"] == 18


def test_below_min_threshold_scores_zero_and_above_max_scores_100() -> None:
    nodes = [node("n1", {"small:1": 20 * MB, "huge:1": 3000 * MB})]
    assert run(pod("small:1"), nodes) == {"n1": 0}
    assert run(pod("huge:1"), nodes) == {"n1": 100}


def test_init_containers_count_in_threshold() -> None:
    nodes = [node("n1", {"app:1": 1500 * MB})]
    assert run(pod("app:1"), nodes) == {"n1": 100}
    # Two images: max threshold 2000MB -> 100 * (1500 - 23) / (2000 - 23) = 74.
    assert run(pod("app:1", init=("setup:1",)), nodes) == {"n1": 74}


def test_init_container_image_on_node_adds() -> None:
    nodes = [node("n1", {"app:1": 500 * MB, "setup:1": 500 * MB})]
    # (1000 - 23) * 100 / (2000 - 23) = 49.
    assert run(pod("app:1", init=("setup:1",)), nodes) == {"n1": 49}


def test_image_volumes_count() -> None:
    nodes = [node("n1", {"data:v1": 500 * MB})]
    # container image absent; volume image present; 2 images -> 100 * 477 / 1977 = 24.
    assert run(pod("absent:1", volumes=("data:v1",)), nodes) == {"n1": 24}


def test_calculate_priority_integer_math() -> None:
    assert calculate_priority(0, 1) == 0
    assert calculate_priority(1000 * MB, 1) == 100
    assert calculate_priority(523 * MB, 1) == 51  # 100 * 500 / 977 = 51.17


def test_no_snapshot_is_an_error_not_an_exception() -> None:
    pl = ImageLocality.create({}, plain_handle())
    snap = Snapshot.from_objects([node("n1")])
    sc, s = pl.score(CycleState(None), PodInfo(pod("a")), snap.get("n1"))
    assert (sc, s.code) == (0, Code.ERROR)


def test_takes_no_args() -> None:
    with pytest.raises(ConfigError):
        ImageLocality.create({"foo": 1}, plain_handle())


def test_batch_score_on_the_cache_snapshot_follows_the_images_nodes_report_and_drop() -> None:
    """``score_nodes`` returns at once when no node holds any of the Pod's images (the snapshot's
    image map, the cache's own); a node that reports the image, or stops reporting it, moves the
    scores at the next snapshot update, as the per-node ``score`` does."""
    from py_scheduler.cache.cache import Cache

    cache = Cache()
    cache.add_node(node("a", {"app:v1": 500 * MB}))
    cache.add_node(node("b"))
    pl = registry.get("ImageLocality")({}, plain_handle())
    fresh = PodInfo(pod("app:v2"))

    def both(pi: PodInfo) -> list[int]:
        snap = cache.snapshot()
        state = CycleState(snap)
        batch, st = pl.score_nodes(state, pi, snap.node_info_list)
        assert st.is_success()
        assert list(batch) == [pl.score(state, pi, ni)[0] for ni in snap.node_info_list]
        return list(batch)

    assert both(fresh) == [0, 0]
    images = cache.snapshot().images
    assert images is not None and "app:v1:latest" not in images and "app:v1" in images and "app:v2" not in images
    cache.update_node(node("b"), node("b", {"app:v2": 800 * MB}))
    assert max(both(fresh)) > 0
    cache.update_node(node("b", {"app:v2": 800 * MB}), node("b"))
    assert both(fresh) == [0, 0]
