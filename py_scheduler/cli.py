"""``py-scheduler``: run | explain | simulate | fake-gpu-plugin (and ``--version``). Thin: parse flags, call one
function.

Each command's work lives in its own module (``py_scheduler.app.process.main``, ``py_scheduler.offline.explain``,
``py_scheduler.offline.simulate``); this file only maps flags to their arguments and exit codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from py_scheduler.app.tuning import imports_done, imports_start

FeatureGates = Annotated[str, typer.Option(
    help="kube-scheduler feature gates, e.g. OpportunisticBatching=false,TaintTolerationComparisonOperators=true "
         "(v1.37 defaults: OpportunisticBatching on, TaintTolerationComparisonOperators off)")]
"""``--feature-gates``, the same option and the same path (``py_scheduler.framework.features``) for the
three commands."""

Config = Annotated[Path | None, typer.Option(help="KubeSchedulerConfiguration file")]
# Where explain and `kubectl py-scheduler decisions` read recorded decisions (py_scheduler.offline.recorded).
Lease = Annotated[str, typer.Option(help="NAMESPACE/NAME of the scheduler's Lease (finds the leader)")]
SchedulerPort = Annotated[int, typer.Option(help="the scheduler's --metrics-bind-address port")]
SchedulerScheme = Annotated[str, typer.Option(
    help="https (the default serving) or http (a scheduler run with --plain-http)")]
DecisionsUrl = Annotated[str | None, typer.Option(
    help="read recorded decisions from this URL (e.g. http://127.0.0.1:10259 after kubectl port-forward) "
    "instead of through the API server's proxy to the leader")]
Token = Annotated[str | None, typer.Option(
    envvar="PY_SCHEDULER_TOKEN", show_default=False,
    help="bearer token the scheduler's secure port reviews when reading recorded decisions, e.g. kubectl "
    "create token decisions-reader -n kube-system --duration 1h (prefer --token-file or PY_SCHEDULER_TOKEN: a "
    "command line is visible to every user of the machine)")]
TokenFile = Annotated[Path | None, typer.Option(
    help="file holding that bearer token, e.g. kubectl create token decisions-reader -n kube-system "
    "--duration 1h > token")]
SchedulerCaFile = Annotated[Path | None, typer.Option(
    help="PEM CA that signed the scheduler's certificate: --decisions-url is verified against it (without "
    "it: against the system's CAs, except on a loopback address)")]
KubeconfigToken = Annotated[bool, typer.Option(
    "--kubeconfig-token", help="send the kubeconfig's own bearer token to the scheduler when no --token is "
    "given (off: it is often the user's whole identity)")]
SchedulerServiceAccount = Annotated[str, typer.Option(
    envvar="PY_SCHEDULER_SERVICE_ACCOUNT", help="NAMESPACE/NAME of the scheduler's ServiceAccount: the Lease "
    "holder must be a Running Pod of that namespace running as it, or nothing is sent to it")]


UPSTREAM = "v1.37.2"
"""The kube-scheduler release whose default profile py-scheduler reproduces (``--version``)."""


def version_text(prog: str = "py-scheduler") -> str:
    """``<prog> <version> (kube-scheduler <upstream> default profile)``: the installed distribution's
    version (pyproject.toml's ``version``), ``unknown`` when the package runs uninstalled."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("py-scheduler")
    except PackageNotFoundError:
        ours = "unknown"
    return f"{prog} {ours} (kube-scheduler {UPSTREAM} default profile)"


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """The bearer token of ``--token`` / ``PY_SCHEDULER_TOKEN`` or of ``--token-file`` (stripped).

    Raises:
        typer.BadParameter: both given, or the file unreadable or empty.
    """
    if token_file is None:
        return token
    if token:
        raise typer.BadParameter("give --token or --token-file, not both", param_hint="--token-file")
    try:
        text = token_file.read_text().strip()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {token_file}: {exc.strerror}", param_hint="--token-file") from None
    if not text:
        raise typer.BadParameter(f"{token_file} is empty", param_hint="--token-file")
    return text


def version_option(prog: str) -> Any:
    """A ``--version`` option for a typer callback: prints :func:`version_text` and exits 0."""
    def show(value: bool) -> None:
        if value:
            typer.echo(version_text(prog))
            raise typer.Exit(0)

    return typer.Option("--version", callback=show, is_eager=True, help="print the version and exit")


app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="An out-of-tree Kubernetes scheduler: kube-scheduler v1.37's default profile plus GPU plugins.",
)


@app.callback()
def _root(version: Annotated[bool, version_option("py-scheduler")] = False) -> None:
    """An out-of-tree Kubernetes scheduler: kube-scheduler v1.37's default profile plus GPU plugins."""


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
    anonymous_auth: Annotated[str, typer.Option(
        help="true: a request without a token is system:anonymous (authorized like any user); false: it "
             "answers 401 (kube-scheduler's --anonymous-auth)")] = "true",
    authentication_audiences: Annotated[str, typer.Option(
        help="comma-separated audiences a token must be minted for (kubectl create token NAME --audience AUD); "
             "empty: the API server's own")] = "",
    tls_min_version: Annotated[str, typer.Option(help="VersionTLS12 or VersionTLS13")] = "VersionTLS12",
    profiling: Annotated[bool, typer.Option(
        "--profiling", help="allow /debug/memory's actions (allocation tracing, a full collection) by POST, "
                            "as kube-scheduler's --profiling allows pprof (default: off)")] = False,
    request_process: Annotated[bool | None, typer.Option(
        "--request-process/--no-request-process",
        help="send API writes (Bindings, Events, status patches) from a process of their own, off the process "
             "that runs scheduling cycles (watches and LISTs stay there); default: on when this process may use "
             "more than one CPU (bench/RESULTS.md)", show_default=False)] = None,
) -> None:
    """Schedule every Pod whose spec.schedulerName names one of our profiles."""
    from py_scheduler.app.process.main import ServingOptions, run_scheduler

    imports_done()

    if anonymous_auth.lower() not in ("true", "false"):
        raise typer.BadParameter(f"must be true or false, not {anonymous_auth!r}", param_hint="--anonymous-auth")
    from py_scheduler.app.serving.secure import TLS_VERSIONS

    # refused at start, not after logging in, as component-base/cli/flag/ciphersuites_flag.go TLSVersion
    if tls_min_version not in TLS_VERSIONS:
        raise typer.BadParameter(f"unknown tls version {tls_min_version!r}; one of {', '.join(TLS_VERSIONS)}",
                                 param_hint="--tls-min-version")
    serving = ServingOptions(plain_http=plain_http, tls_cert_file=tls_cert_file,
                             tls_private_key_file=tls_private_key_file,
                             always_allow_paths=_csv(authorization_always_allow_paths),
                             anonymous_auth=anonymous_auth.lower() == "true",
                             authentication_audiences=_csv(authentication_audiences),
                             tls_min_version=tls_min_version, profiling=profiling)
    raise typer.Exit(run_scheduler(kubeconfig=kubeconfig, config=config, leader_elect=leader_elect,
                                   lease_name=lease_name, lease_namespace=lease_namespace,
                                   metrics_bind_address=metrics_bind_address, verbosity=v,
                                   feature_gates=feature_gates, decisions_capacity=decisions_capacity,
                                   decisions_top_k=decisions_top_k, serving=serving,
                                   request_process=request_process))


@app.command()
def explain(
    snapshot: Annotated[Path | None, typer.Option(
        help="YAML/JSON snapshot (kubectl get ... -o yaml, or multi-doc)")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="read the same objects from a live cluster")] = None,
    pod: Annotated[str | None, typer.Option(
        help="NAMESPACE/NAME of the Pod to explain (default: every pending Pod)")] = None,
    config: Config = None,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json (JSON Lines)")] = "table",
    feature_gates: FeatureGates = "",
    recompute: Annotated[bool, typer.Option(
        "--recompute", help="for a bound Pod, recompute on the cluster as it is now instead of showing the "
        "decision the scheduler recorded")] = False,
    lease: Lease = "kube-system/py-scheduler",
    scheduler_port: SchedulerPort = 10259,
    scheduler_scheme: SchedulerScheme = "https",
    decisions_url: DecisionsUrl = None,
    token: Token = None,
    token_file: TokenFile = None,
    scheduler_ca_file: SchedulerCaFile = None,
    kubeconfig_token: KubeconfigToken = False,
    scheduler_service_account: SchedulerServiceAccount = "kube-system/py-scheduler",
) -> None:
    """Why would (or did) a Pod land where it did: per-plugin scores, filters, totals.

    For a Pod already bound by py-scheduler, the decision recorded when it was scheduled."""
    from py_scheduler.offline.explain import explain_main

    imports_done()

    token = read_token(token, token_file)
    raise typer.Exit(explain_main(snapshot=snapshot, kubeconfig=kubeconfig, pod=pod, config=config, output=output,
                                  recompute=recompute, lease=lease, scheduler_port=scheduler_port,
                                  scheduler_scheme=scheduler_scheme, decisions_url=decisions_url,
                                  feature_gates=feature_gates, token=token, kubeconfig_token=kubeconfig_token,
                                  scheduler_service_account=scheduler_service_account,
                                  scheduler_ca_file=scheduler_ca_file))


@app.command()
def simulate(
    snapshot: Annotated[Path | None, typer.Argument(
        help="snapshot file (default: the bundled example cluster)")] = None,
    config: Config = None,
    explain: Annotated[bool, typer.Option("--explain", help="add explain's table per Pod")] = False,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
    feature_gates: FeatureGates = "",
) -> None:
    """Schedule every pending Pod of a snapshot in queue order and show where each lands."""
    from py_scheduler.offline.simulate import simulate_main

    imports_done()

    raise typer.Exit(simulate_main(snapshot=snapshot, config=config, explain=explain, output=output,
                                   feature_gates=feature_gates))


@app.command("fake-gpu-plugin")
def fake_gpu_plugin(
    profile: Annotated[str | None, typer.Option(
        help="fake GPU profile (py_scheduler/fakegpu/profiles.yaml: a100-80gb-x8, h100-x8, l4-x1, t4-shared, "
             "a100-mig-single, ...); default: the node's gpu.py-scheduler.io/fake-profile label")] = None,
    node_name: Annotated[str | None, typer.Option(
        envvar="NODE_NAME", help="this node: label it with the profile's GFD labels (and read its profile)")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig file; in-cluster config when omitted")] = None,
    plugin_dir: Annotated[Path, typer.Option(help="the kubelet's device-plugin socket directory")] = Path(
        "/var/lib/kubelet/device-plugins"),
    cdi_dir: Annotated[Path | None, typer.Option(
        help="write a CDI spec of the devices here and name them in Allocate (e.g. /var/run/cdi)")] = None,
) -> None:
    """Advertise fake nvidia.com/gpu devices to this node's kubelet (for clusters without GPUs)."""
    import asyncio
    import logging

    from py_scheduler.fakegpu import plugin
    from py_scheduler.fakegpu.profiles import PROFILE_LABEL, ProfileError, get_profile

    imports_done()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        name = profile or (asyncio.run(plugin.profile_from_node(node_name, PROFILE_LABEL, kubeconfig))
                           if node_name else None)
        if not name:
            raise ProfileError("give --profile, or --node-name of a node labelled " + PROFILE_LABEL)
        chosen = get_profile(name)
    except (ProfileError, LookupError) as e:
        typer.echo(f"fake-gpu-plugin: {e}", err=True)
        raise typer.Exit(2) from e
    asyncio.run(plugin.main(chosen, plugin_dir, cdi_dir, node_name, kubeconfig))


def _csv(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


def main() -> None:
    """Console-script entry point (the collector is off until the command calls
    :func:`~py_scheduler.app.tuning.imports_done`)."""
    imports_start()
    app()


if __name__ == "__main__":
    main()
