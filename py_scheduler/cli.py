"""``py-scheduler``: run | explain | simulate. Thin: parse flags, call one function.

Each command's work lives in its own module (``py_scheduler.app.main``, ``py_scheduler.offline.explain``,
``py_scheduler.offline.simulate``); this file only maps flags to their arguments and exit codes.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Annotated

import typer

FeatureGates = Annotated[str, typer.Option(
    help="kube-scheduler feature gates, e.g. OpportunisticBatching=false,TaintTolerationComparisonOperators=true "
         "(v1.37 defaults: OpportunisticBatching on, TaintTolerationComparisonOperators off)")]
"""``--feature-gates``, the same option and the same path (``py_scheduler.framework.features``) for the
three commands."""

app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="An out-of-tree Kubernetes scheduler: kube-scheduler v1.37's default profile plus GPU plugins.",
)


@app.command()
def run(
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig file; in-cluster config when omitted")] = None,
    config: Annotated[Path | None, typer.Option(
        help="KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1)")] = None,
    leader_elect: Annotated[bool | None, typer.Option("--leader-elect/--no-leader-elect",
                                                      help="Lease-based leader election (default: on)")] = None,
    lease_name: Annotated[str | None, typer.Option(help="Lease name (default py-scheduler)")] = None,
    lease_namespace: Annotated[str | None, typer.Option(help="Lease namespace (default kube-system)")] = None,
    metrics_bind_address: Annotated[str, typer.Option(help="host:port for /metrics, /healthz, /livez, /readyz "
                                                      "(HTTPS unless --plain-http; empty: off)")] = "0.0.0.0:10259",
    v: Annotated[int, typer.Option("--v", help="log verbosity (kube-scheduler style; 10 logs every plugin score)")] = 2,
    feature_gates: FeatureGates = "",
    decisions_capacity: Annotated[int, typer.Option(
        help="decision records kept in memory for /debug/decisions (0: none; ~0.8 KiB each)")] = 50_000,
    decisions_top_k: Annotated[int, typer.Option(help="nodes whose scores each decision record keeps, "
                                                 "besides the selected one")] = 5,
    tls_cert_file: Annotated[Path | None, typer.Option(
        help="PEM certificate (chain) for the HTTPS metrics/health port; with --tls-private-key-file. "
             "Default: a self-signed certificate made at start")] = None,
    tls_private_key_file: Annotated[Path | None, typer.Option(help="PEM key of --tls-cert-file")] = None,
    authorization_always_allow_paths: Annotated[str, typer.Option(
        help="comma-separated paths served without authentication or authorization (a trailing * matches "
             "a prefix)")] = "/healthz,/readyz,/livez",
    plain_http: Annotated[bool, typer.Option(
        "--plain-http", help="serve the metrics/health port as plain HTTP with no authentication "
                             "(default: HTTPS, delegated authentication and authorization)")] = False,
) -> None:
    """Schedule every Pod whose spec.schedulerName names one of our profiles."""
    from py_scheduler.app.main import ServingOptions, run_scheduler

    _imported()

    serving = ServingOptions(plain_http=plain_http, tls_cert_file=tls_cert_file,
                             tls_private_key_file=tls_private_key_file,
                             always_allow_paths=tuple(p.strip() for p in authorization_always_allow_paths.split(",")
                                                      if p.strip()))
    raise typer.Exit(run_scheduler(kubeconfig=kubeconfig, config=config, leader_elect=leader_elect,
                                   lease_name=lease_name, lease_namespace=lease_namespace,
                                   metrics_bind_address=metrics_bind_address, verbosity=v,
                                   feature_gates=feature_gates, decisions_capacity=decisions_capacity,
                                   decisions_top_k=decisions_top_k, serving=serving))


@app.command()
def explain(
    snapshot: Annotated[Path | None, typer.Option(
        help="YAML/JSON snapshot (kubectl get ... -o yaml, or multi-doc)")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="read the same objects from a live cluster")] = None,
    pod: Annotated[str | None, typer.Option(
        help="NAMESPACE/NAME of the Pod to explain (default: every pending Pod)")] = None,
    config: Annotated[Path | None, typer.Option(help="KubeSchedulerConfiguration file")] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json (JSON Lines)")] = "table",
    feature_gates: FeatureGates = "",
    recompute: Annotated[bool, typer.Option(
        "--recompute", help="for a bound Pod, recompute on the cluster as it is now instead of showing the "
        "decision the scheduler recorded")] = False,
    lease: Annotated[str, typer.Option(help="NAMESPACE/NAME of the scheduler's Lease (finds the leader)")
                     ] = "kube-system/py-scheduler",
    scheduler_port: Annotated[int, typer.Option(help="the scheduler's --metrics-bind-address port")] = 10259,
    scheduler_scheme: Annotated[str, typer.Option(
        help="https (the default serving) or http (a scheduler run with --plain-http)")] = "https",
    decisions_url: Annotated[str | None, typer.Option(
        help="read recorded decisions from this URL (e.g. http://127.0.0.1:10259 after kubectl port-forward) "
        "instead of through the API server's proxy to the leader")] = None,
    token: Annotated[str | None, typer.Option(
        envvar="PY_SCHEDULER_TOKEN", show_default=False,
        help="bearer token the scheduler's secure port reviews when reading recorded decisions, e.g. kubectl "
        "create token decisions-reader -n kube-system --duration 1h")] = None,
    kubeconfig_token: Annotated[bool, typer.Option(
        "--kubeconfig-token", help="send the kubeconfig's own bearer token to the scheduler when no --token is "
        "given (off: it is often the user's whole identity)")] = False,
    scheduler_service_account: Annotated[str, typer.Option(
        envvar="PY_SCHEDULER_SERVICE_ACCOUNT", help="NAMESPACE/NAME of the scheduler's ServiceAccount: the Lease "
        "holder must be a Running Pod of that namespace running as it, or nothing is sent to it")
    ] = "kube-system/py-scheduler",
) -> None:
    """Why would (or did) a Pod land where it did: per-plugin scores, filters, totals.

    For a Pod already bound by py-scheduler, the decision recorded when it was scheduled."""
    from py_scheduler.offline.explain import explain_main

    _imported()

    raise typer.Exit(explain_main(snapshot=snapshot, kubeconfig=kubeconfig, pod=pod, config=config, output=output,
                                  recompute=recompute, lease=lease, scheduler_port=scheduler_port,
                                  scheduler_scheme=scheduler_scheme, decisions_url=decisions_url,
                                  feature_gates=feature_gates, token=token, kubeconfig_token=kubeconfig_token,
                                  scheduler_service_account=scheduler_service_account))


@app.command()
def simulate(
    snapshot: Annotated[Path | None, typer.Argument(
        help="snapshot file (default: the bundled example cluster)")] = None,
    config: Annotated[Path | None, typer.Option(help="KubeSchedulerConfiguration file")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="add explain's table per Pod")] = False,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
    feature_gates: FeatureGates = "",
) -> None:
    """Schedule every pending Pod of a snapshot in queue order and show where each lands."""
    from py_scheduler.offline.simulate import simulate_main

    _imported()

    raise typer.Exit(simulate_main(snapshot=snapshot, config=config, explain=explain, output=output,
                                   feature_gates=feature_gates))


def _imported() -> None:
    """A command's modules are imported: freeze what the imports made and turn the collector on.

    :func:`main` turns Python's cyclic garbage collector off for the option parsing (typer imports
    pydantic) and the command's imports: importing the run path makes ~10^5 objects, all kept
    (modules, classes, functions, their dicts), which set off ~180 collections (one full) that
    rescanned the growing heap for nothing, 0.075-0.1 s of CPU before ready (issue 21). Frozen
    (``gc.freeze``: the permanent generation), no later collection scans them either, as
    :func:`py_scheduler.app.informers.pause_gc` does for the initial sync's objects; without the
    freeze, the first collection after ``gc.enable`` scanned them all at once (~0.04 s).
    What this depends on: imports make little cyclic garbage, which a frozen heap keeps for good
    (the run path's: ~1900 objects, ~0.45 MiB, measured with ``gc.DEBUG_SAVEALL``)."""
    gc.freeze()
    gc.enable()


def main() -> None:
    """Console-script entry point (the collector is off until the command calls :func:`_imported`)."""
    gc.disable()
    app()


if __name__ == "__main__":
    main()
