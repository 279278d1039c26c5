"""e2e tests on real nodes: kubelet + containerd + kube-proxy in namespaces the test bed makes (issue 27).

See tests/e2e/testbed/README.md, "Real nodes", and conftest.py here for the fixtures.
"""
