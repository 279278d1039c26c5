"""Benchmark helpers: workload generators (``workloads``), the in-process cycle benchmark (``cycle``),
the live throughput benchmark against the test bed (``throughput``) and the blind binder (``blind``)."""
