"""``py-scheduler``: run | explain | simulate. Thin: parse flags, call one function.

Each command's work lives in its own module (``py_scheduler.app.main``, ``py_scheduler.offline.explain``,
``py_scheduler.offline.simulate``); this file only maps flags to their arguments and exit codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
    feature_gates: Annotated[str, typer.Option(
        help="kube-scheduler feature gates, e.g. OpportunisticBatching=false (on by default)")] = "",
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

    serving = ServingOptions(plain_http=plain_http, tls_cert_file=tls_cert_file,
                             tls_private_key_file=tls_private_key_file,
                             always_allow_paths=tuple(p.strip() for p in authorization_always_allow_paths.split(",")
                                                      if p.strip()))
    raise typer.Exit(run_scheduler(kubeconfig=kubeconfig, config=config, leader_elect=leader_elect,
                                   lease_name=lease_name, lease_namespace=lease_namespace,
                                   metrics_bind_address=metrics_bind_address, verbosity=v,
                                   feature_gates=feature_gates, serving=serving))


@app.command()
def explain(
    snapshot: Annotated[Path | None, typer.Option(
        help="YAML/JSON snapshot (kubectl get ... -o yaml, or multi-doc)")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="read the same objects from a live cluster")] = None,
    pod: Annotated[str | None, typer.Option(
        help="NAMESPACE/NAME of the Pod to explain (default: every pending Pod)")] = None,
    config: Annotated[Path | None, typer.Option(help="KubeSchedulerConfiguration file")] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json (JSON Lines)")] = "table",
) -> None:
    """Why would (or did) a Pod land where it did: per-plugin scores, filters, totals."""
    from py_scheduler.offline.explain import explain_main

    raise typer.Exit(explain_main(snapshot=snapshot, kubeconfig=kubeconfig, pod=pod, config=config, output=output))


@app.command()
def simulate(
    snapshot: Annotated[Path | None, typer.Argument(
        help="snapshot file (default: the bundled example cluster)")] = None,
    config: Annotated[Path | None, typer.Option(help="KubeSchedulerConfiguration file")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="add explain's table per Pod")] = False,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
) -> None:
    """Schedule every pending Pod of a snapshot in queue order and show where each lands."""
    from py_scheduler.offline.simulate import simulate_main

    raise typer.Exit(simulate_main(snapshot=snapshot, config=config, explain=explain, output=output))


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
