"""A fake-GPU kubelet device plugin (``py-scheduler fake-gpu-plugin``) for clusters without GPUs.

``profiles`` says what a node of a named profile advertises and labels; ``wire`` is the kubelet's
device-plugin API v1beta1; ``plugin`` serves it. Runs as the DaemonSet of ``deploy/kind/fake-gpus/``.
"""
