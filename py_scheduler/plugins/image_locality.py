"""ImageLocality: favour nodes that already hold the Pod's container images.

Upstream: ``pkg/scheduler/framework/plugins/imagelocality/image_locality.go`` (``Score``,
``sumImageScores``, ``scaledImageScore``, ``calculatePriority``, ``normalizedImageName``).

For every image of the Pod (init containers, containers, then image volumes' ``reference``) found in
the node's ``status.images`` the node earns ``int(size_bytes * num_nodes_with_image / total_nodes)``
(the spread factor damps images present everywhere). The sum is clamped to
``[23 MiB, 1000 MiB * number_of_images]`` and mapped linearly to ``0..100`` with Go's truncating
integer division. Image names without a tag or digest get ``:latest``. No NormalizeScore.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.gomath import go_div
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import MAX_NODE_SCORE, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import check_no_args

__all__ = ["MAX_CONTAINER_THRESHOLD", "MIN_THRESHOLD", "NAME", "ImageLocality", "calculate_priority",
           "normalized_image_name", "scaled_image_score", "sum_image_scores"]

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
"""Bytes: image sums below this score 0."""
MAX_CONTAINER_THRESHOLD = 1000 * MB
"""Bytes per image of the Pod: sums at or above ``MAX_CONTAINER_THRESHOLD * images`` score 100."""


def normalized_image_name(name: str) -> str:
    """``normalizedImageName``: append ``:latest`` unless the name has a tag (a ``:`` after the last
    ``/``) or a digest."""
    if name.rfind(":") <= name.rfind("/"):
        name = name + ":latest"
    return name


def _pod_images(pod: PodInfo) -> tuple[list[str], int]:
    """The Pod's normalized image names (init containers, containers, image volumes, in that order)
    and the image count, memoized on the PodInfo."""
    return _IMAGES_MEMO.get(pod, _compute_pod_images)


def _compute_pod_images(pod: PodInfo) -> tuple[list[str], int]:
    spec = pod.spec
    names: list[str] = []
    count = 0
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            count += 1
            image = c.get("image") if isinstance(c, dict) else None
            names.append(normalized_image_name(image if isinstance(image, str) else ""))
    for v in spec.get("volumes") or []:
        image = v.get("image") if isinstance(v, dict) else None
        if not isinstance(image, dict):
            continue
        ref = image.get("reference")
        names.append(normalized_image_name(ref if isinstance(ref, str) else ""))
        count += 1
    return names, count


_IMAGES_MEMO: PodMemo[tuple[list[str], int]] = PodMemo(NAME, PodInput.SPEC)


def scaled_image_score(size: int, num_nodes: int, total_num_nodes: int) -> int:
    """``scaledImageScore``: ``int64(float64(size) * (float64(numNodes) / float64(totalNumNodes)))``
    (bytes)."""
    if total_num_nodes <= 0:
        return 0
    spread = float(num_nodes) / float(total_num_nodes)
    return int(float(size) * spread)


def sum_image_scores(node_info: NodeInfo, pod: PodInfo, total_num_nodes: int) -> tuple[int, int]:
    """``sumImageScores``: (sum of scaled sizes in bytes of the Pod's images present on the node,
    number of images of the Pod)."""
    names, count = _pod_images(pod)
    states = node_info.image_states
    total = 0
    for n in names:
        st = states.get(n)
        if st is not None:
            total += scaled_image_score(st.size, st.num_nodes, total_num_nodes)
    return total, count


def calculate_priority(sum_scores: int, image_count: int) -> int:
    """``calculatePriority``: clamp ``sum_scores`` (bytes) to ``[MIN_THRESHOLD,
    MAX_CONTAINER_THRESHOLD * image_count]`` and scale to 0..100."""
    max_threshold = MAX_CONTAINER_THRESHOLD * image_count
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return go_div(MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD)


class ImageLocality:
    """Score plugin (``imagelocality.ImageLocality``). The node total is the cycle snapshot's node
    count (``SnapshotSharedLister().NodeInfos().List()``)."""

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/imagelocality/image_locality.go``): the distinct
        normalized image names of containers and init containers, sorted. ``snapshot`` is unused by most
        plugins."""
        names = {normalized_image_name(str(c.get("image") or "")) for c in signers.container_list(pod)}
        return [(signers.IMAGE_NAMES_SIGNER_NAME, sorted(names))], Status.success()


    def __init__(self, handle: Handle | None = None) -> None:
        self.handle = handle

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> ImageLocality:
        """ImageLocality takes no args.

        Raises:
            ConfigError: args other than ``apiVersion`` / ``kind`` were given.
        """
        check_no_args(NAME, args)
        return cls(handle)

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (batch form)."""
        snapshot = state.snapshot
        if snapshot is None:
            return [], Status.error("ImageLocality: no snapshot in the cycle state", NAME)
        total = len(snapshot.node_info_list)
        names, count = _pod_images(pod)
        none = calculate_priority(0, count)  # the score of a node holding none of the Pod's images
        images = snapshot.images
        if images is not None and not any(n in images for n in names):
            return [none] * len(nodes), Status.success()  # no node holds any of them (a new image)
        out: list[int] = []
        for ni in nodes:
            states = ni.image_states
            if not states:
                out.append(none)
                continue
            sum_scores = 0
            for n in names:
                st = states.get(n)
                if st is not None:
                    sum_scores += scaled_image_score(st.size, st.num_nodes, total)
            out.append(calculate_priority(sum_scores, count) if sum_scores else none)
        return out, Status.success()

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """0..100; Error when the cycle has no snapshot."""
        snapshot = state.snapshot
        if snapshot is None:
            return 0, Status.error("ImageLocality: no snapshot in the cycle state", NAME)
        total = len(snapshot.node_info_list)
        sum_scores, count = sum_image_scores(node_info, pod, total)
        return calculate_priority(sum_scores, count), Status.success()
