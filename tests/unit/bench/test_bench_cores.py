"""Issue 32 item 1's measuring machinery, the pure parts: CPU lists and the pinning the command line
asks for (a wrong list pins the scheduler next to the API server), per-thread CPU from /proc text (a
field off by one reads the wrong counter), kube-scheduler's profile split, the cores matrix's ratios
and the plot's points (all with made-up figures; the live path is bench/throughput's smoke run)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.bench_lib import cores as c  # noqa: E402
from bench.bench_lib.plot_cores import draw, series  # noqa: E402


def test_cpu_lists_parse_in_order_and_format_as_the_kernel_writes_them() -> None:
    assert c.parse_cpu_list("0-3,6") == (0, 1, 2, 3, 6)
    assert c.parse_cpu_list("5,1-2,1") == (5, 1, 2)  # order kept: the matrix takes the first N
    assert c.format_cpu_list((5, 1, 2, 0, 9)) == "0-2,5,9"
    assert c.format_cpu_list([3]) == "3"
    for bad in ("", "1,", "a", "3-1", "-1", "1-x"):
        with pytest.raises(ValueError):
            c.parse_cpu_list(bad)


def test_pinning_refuses_cpus_the_bench_may_not_use_and_bad_gomaxprocs() -> None:
    pin = c.parse_pinning("0", "1-2", None, 2, available=(0, 1, 2, 3))
    assert pin == c.Pinning((0,), (1, 2), None, 2)
    assert pin.bench_cpus() == (0,) and pin.active
    assert not c.parse_pinning(None, None, None, None, (0, 1)).active
    with pytest.raises(ValueError, match=r"--pin-scheduler: CPU.*7"):
        c.parse_pinning("0", "7", None, None, available=(0, 1))
    with pytest.raises(ValueError, match="gomaxprocs"):
        c.parse_pinning(None, None, None, 0, available=(0, 1))


def test_pin_prefix_sets_gomaxprocs_for_the_process_alone_and_execs_it() -> None:
    assert c.pin_prefix((2, 3), 2) == ["env", "GOMAXPROCS=2", "taskset", "-c", "2-3"]
    assert c.pin_prefix((1,)) == ["taskset", "-c", "1"]
    assert c.pin_prefix(None) == []


def test_matrix_pinning_defaults_to_control_on_the_first_cpu_and_the_scheduler_on_the_rest() -> None:
    assert c.matrix_pinning(c.Pinning(), (0, 1, 2)) == c.Pinning((0,), (1, 2))
    assert c.matrix_pinning(c.Pinning(scheduler=(2, 1)), (0, 1, 2)).scheduler == (2, 1)
    assert c.matrix_pinning(c.Pinning(), (0,)).scheduler == ()


def test_stat_cpu_reads_utime_plus_stime_after_a_command_with_spaces_and_parens() -> None:
    # proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    line = "4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000"
    assert c.stat_cpu_seconds(line, 100) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        c.stat_cpu_seconds("garbage", 100)


def _fake_proc(root: Path, pid: int, threads: dict[int, tuple[int, int, str]], environ: bytes = b"") -> Path:
    for tid, (utime, stime, allowed) in threads.items():
        task = root / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "stat").write_text(f"{tid} (py sched) R 1 1 1 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 5\n")
        (task / "status").write_text(f"Name:\tpython3\nCpus_allowed:\t2\nCpus_allowed_list:\t{allowed}\n")
    (root / str(pid) / "environ").write_bytes(environ)
    return root


def test_thread_cpu_and_affinity_come_per_thread_from_a_fake_proc(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, 77, {77: (300, 100, "1"), 78: (20, 10, "1"), 80: (5, 5, "0-1")},
                      environ=b"HOME=/root\0GOMAXPROCS=1\0")
    tck = os.sysconf("SC_CLK_TCK")
    cpu = c.thread_cpu_seconds(77, proc)
    assert cpu == pytest.approx({77: 400 / tck, 78: 30 / tck, 80: 10 / tck})
    assert c.cpus_allowed(77, proc) == {77: "1", 78: "1", 80: "0-1"}
    assert c.environ_value(77, "GOMAXPROCS", proc) == "1"
    assert c.environ_value(77, "GOGC", proc) is None
    line = c.describe_pinning("kube@1", 77, proc)
    assert "Cpus_allowed_list=0-1 / 1 (3 thread(s))" in line and "GOMAXPROCS=1" in line
    assert c.thread_cpu_seconds(99, proc) == {}


TRACES = """File: kube-scheduler
Type: cpu
Duration: 5s, Total samples = 1.20s (24.00%)
-----------+-------------------------------------------------------
     300ms   k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources.(*Fit).Filter
             k8s.io/kubernetes/pkg/scheduler.(*Scheduler).findNodesThatPassFilters.func1
             k8s.io/client-go/util/workqueue.ParallelizeUntil.func1
-----------+-------------------------------------------------------
     200ms   k8s.io/kubernetes/pkg/scheduler.(*Scheduler).schedulingCycle
             k8s.io/kubernetes/pkg/scheduler.(*Scheduler).scheduleOnePod
             k8s.io/kubernetes/pkg/scheduler.(*Scheduler).ScheduleOne
-----------+-------------------------------------------------------
     100ms   net/http.(*persistConn).writeLoop
             k8s.io/kubernetes/pkg/scheduler.(*Scheduler).bindingCycle
             k8s.io/kubernetes/pkg/scheduler.(*Scheduler).runBindingCycle
-----------+-------------------------------------------------------
     0.5s    encoding/json.(*decodeState).object (inline)
             k8s.io/client-go/tools/cache.(*Reflector).watch
-----------+-------------------------------------------------------
     100ms   runtime.gcDrain
             runtime.gcBgMarkWorker
-----------+-------------------------------------------------------
"""


def test_profile_traces_split_into_cycle_parallel_binding_gc_and_other() -> None:
    samples = c.parse_pprof_traces(TRACES)
    assert [s for s, _ in samples] == pytest.approx([0.3, 0.2, 0.1, 0.5, 0.1])
    assert samples[3][1][0] == "encoding/json.(*decodeState).object"
    shares = c.profile_shares(samples)
    assert shares == pytest.approx({"cycle": 0.2 / 1.2, "parallel": 0.3 / 1.2, "binding": 0.1 / 1.2,
                                    "gc": 0.1 / 1.2, "other": 0.5 / 1.2})
    # critical path: the serial cycle plus the workers' part spread over the cores
    assert c.kube_critical(12.0, shares, 1) == pytest.approx(5.0)
    assert c.kube_critical(12.0, shares, 3) == pytest.approx(3.0)
    assert c.kube_critical(12.0, c.profile_shares([]), 2) == 0.0


def test_configs_parse_and_refuse_unknown_or_repeated() -> None:
    assert c.parse_configs("py:1,kube:1,kube:2") == [("py", 1), ("kube", 1), ("kube", 2)]
    for bad in ("blind:1", "py", "py:0", "py:1,py:1", "kube:x"):
        with pytest.raises(ValueError):
            c.parse_configs(bad)


def _run(lab: str, drain: float, cpu: float, crit: float, rnd: int = 0, timed_out: bool = False) -> dict[str, object]:
    kind, _, n = lab.partition("@")
    return {"label": lab, "scheduler": kind, "cores": int(n), "workload": "SchedulingBasic", "round": rnd,
            "pods_per_second": drain, "cpu_ms_per_pod": cpu, "critical_ms_per_pod": crit, "timed_out": timed_out}


def test_matrix_summary_gives_per_core_ratios_and_scaling_from_medians() -> None:
    runs = [_run("py@1", 200, 4.0, 2.0, 0), _run("py@1", 240, 5.0, 3.0, 1), _run("py@1", 10, 9.0, 9.0, 2),
            _run("kube@1", 100, 5.0, 2.5, 0), _run("kube@1", 150, 6.0, 3.5, 1),
            _run("kube@2", 250, 6.0, 2.0, 0), _run("kube@2", 1, 1.0, 1.0, 1, timed_out=True)]
    s = c.matrix_summary(runs)
    assert s["py@1_pods_per_second"] == 200 and s["kube@1_pods_per_second"] == 125
    assert s["per_core_drain"] == pytest.approx(1.6)
    assert s["per_core_cpu"] == pytest.approx(5.0 / 5.5, abs=1e-3)
    assert s["critical_vs_kube_total"] == pytest.approx(3.0 / 5.5, abs=1e-3)
    assert s["critical_ratio"] == pytest.approx(1.0)
    assert s["kube_scaling_2_1"] == pytest.approx(2.0)  # the timed-out round is left out
    assert "py_scaling_2_1" not in s
    assert "per_core_drain" not in c.matrix_summary([_run("kube@1", 100, 5.0, 2.5)])


def test_plot_series_takes_medians_per_cores_and_the_png_is_written(tmp_path: Path) -> None:
    rec = {"mode": "cores-matrix", "workload": "SchedulingBasic",
           "runs": [_run("py@1", 200, 4, 2), _run("py@1", 220, 4, 2, 1), _run("kube@2", 180, 5, 2),
                    _run("kube@1", 100, 5, 2), _run("kube@1", 0, 0, 0, 1, timed_out=True)]}
    other = {"mode": "backlog", "runs": [_run("py@1", 999, 1, 1)]}
    data = series([json.loads(json.dumps(rec)), other])
    assert data == {"SchedulingBasic": {"kube": [(1, 100.0), (2, 180.0)], "py": [(1, 210.0)]}}
    rerun = {"mode": "cores-matrix", "workload": "SchedulingBasic", "runs": [_run("py@1", 300, 4, 2)]}
    assert series([rec, rerun])["SchedulingBasic"]["py"] == [(1, 220.0)]  # rounds added: 200, 220, 300
    assert series([rec, rerun], latest=True)["SchedulingBasic"] == {"kube": [(1, 100.0), (2, 180.0)],
                                                                    "py": [(1, 300.0)]}
    png = draw(data, tmp_path / "d.png", "made-up figures")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_scheduler_under_test_is_started_under_its_pinning_prefix(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from bench.bench_lib import throughput as t

    tb = SimpleNamespace(dir=tmp_path, kubeconfig=tmp_path / "k", logs_dir=tmp_path / "logs")
    py = t.PyScheduler(tb, 1.0, 1, 1, 1234, ["taskset", "-c", "1"])  # type: ignore[arg-type]
    assert py.argv[:4] == ["taskset", "-c", "1", sys.executable]
    arm = t.Arm("kube", (3, 2), 2, "kube@2")
    opts = t.Options(pinning=c.Pinning((0,), (3, 2, 1)), configs=(("py", 1), ("kube", 2), ("kube", 4)))
    assert t.arms(opts) == ([t.Arm("py", (3,), None, "py@1"), arm], ["kube@4 (--pin-scheduler lists 3 CPU(s))"])
    kube = t.make_scheduler("kube", tb, None, opts, arm)  # type: ignore[arg-type]
    assert isinstance(kube, t.KubeScheduler)
    assert kube.prefix == ["env", "GOMAXPROCS=2", "taskset", "-c", "2-3"]


def test_report_renders_a_cores_matrix_record_with_verdicts() -> None:
    from bench.bench_lib.report import render

    runs = [_run("py@1", 150, 4.0, 2.0), _run("kube@1", 100, 5.0, 3.0), _run("kube@2", 160, 5.5, 2.0)]
    rec = {"mode": "cores-matrix", "tool": "throughput", "workload": "SchedulingBasic", "argv": ["--cores-matrix"],
           "configs": ["py@1", "kube@1", "kube@2"], "pinning": {"control": "0", "scheduler": "1,2"},
           "summary": c.matrix_summary(runs), "runs": runs}
    md = render([rec])
    assert "| py@1 | 150 | 4 | 2 |" in md and "| kube@2 | 160 | 5.5 | 2 |" in md
    assert "| per-core drain, py@1 / kube@1 | 1.5 | >= 1.0x | yes |" in md
    assert "| CPU per Pod, py@1 / kube@1 | 0.8 | <= 0.8x | yes |" in md
    assert "/ total CPU per Pod kube@1 | 0.4 | <= 0.5x | yes |" in md
    assert "| kube drain with 2 CPUs / with 1 | 1.6 |" in md
