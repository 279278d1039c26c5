"""``kubectl py-scheduler``: explain, decisions and simulate as a kubectl plugin.

kubectl runs any executable named ``kubectl-<name>`` on ``PATH`` for ``kubectl <name>`` (a ``-`` in
the command is a ``_`` in the file name), so the package installs ``kubectl-py_scheduler`` (a
``[project.scripts]`` entry) and ``kubectl py-scheduler explain POD`` works wherever ``py-scheduler``
is installed; ``deploy/krew/py-scheduler.yaml`` is the krew manifest. Every subcommand reuses the
``py-scheduler`` command's code (:mod:`py_scheduler.offline.explain`, :mod:`~py_scheduler.offline.recorded`,
:mod:`~py_scheduler.offline.simulate`); this module only adds kubectl's conventions:

* ``POD`` is a name (``pod/NAME`` too) in ``-n/--namespace``, else the context's namespace, else
  ``default``.
* ``--kubeconfig`` (else ``$KUBECONFIG``, files joined by ``:``, else ``~/.kube/config``) and
  ``--context``. A context other than the current one, or a ``$KUBECONFIG`` of several files, is
  resolved by kubectl itself (``kubectl config view --raw --minify --flatten``, into a private
  temporary file removed on exit), so the plugin reads exactly the cluster and credentials kubectl
  would; that needs kubectl on ``PATH``, which it is when kubectl started the plugin.
* ``-o json|yaml|wide`` (default: the human tables of ``py-scheduler``). ``json`` is one indented
  document, ``yaml`` the same document as YAML. ``wide``: ``decisions`` adds columns (duration,
  profile, UID, nodes evaluated, feasible, rejecting plugins); ``simulate`` adds explain's per-node
  table of every Pod; ``explain``'s table has a column per Score plugin and a row per node already,
  so its ``wide`` is its table.

Exit status as ``py-scheduler``: 0 done, 2 usage error or nothing to show (one ``error:`` line on
stderr, never a traceback).

Upstream: kubectl's plugin mechanism (``staging/src/k8s.io/kubectl/pkg/cmd/plugin``) and its flags
(``k8s.io/cli-runtime/pkg/genericclioptions``); krew's ``Plugin`` manifest
(``krew.googlecontainertools.github.com/v1alpha2``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from py_scheduler.app.tuning import imports_done, imports_start
from py_scheduler.cli import (
    Config,
    DecisionsUrl,
    FeatureGates,
    KubeconfigToken,
    Lease,
    SchedulerCaFile,
    SchedulerPort,
    SchedulerScheme,
    SchedulerServiceAccount,
    Token,
    TokenFile,
    read_token,
    version_option,
)

__all__ = ["OUTPUTS", "app", "main"]

PROG = "kubectl py-scheduler"
OUTPUTS = ("", "wide", "json", "yaml")
"""``-o`` values; ``""`` is the default human output."""

Namespace = Annotated[str | None, typer.Option(
    "-n", "--namespace", help="the Pod's namespace (default: the context's namespace, else default)")]
Context = Annotated[str | None, typer.Option("--context", help="the kubeconfig context to use")]
Kubeconfig = Annotated[Path | None, typer.Option(
    "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")]
Output = Annotated[str, typer.Option("-o", "--output", help="json, yaml or wide (default: tables)")]

app = typer.Typer(add_completion=False, no_args_is_help=True, name=PROG,
                  help="py-scheduler as a kubectl plugin: why a Pod landed where it did, its recorded "
                       "decisions, and simulations of snapshot files.")


class UsageError(Exception):
    """A bad flag or an unusable kubeconfig: one ``error:`` line, exit status 2."""


@app.callback()
def _root(version: Annotated[bool, version_option(PROG)] = False) -> None:
    """py-scheduler as a kubectl plugin."""


# -- kubeconfig, context and namespace, as kubectl resolves them ---------------------------------------------

def _kubeconfig_paths(kubeconfig: Path | None) -> list[Path]:
    if kubeconfig is not None:
        return [kubeconfig]
    env = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in env] or [Path("~/.kube/config").expanduser()]


def _context_namespace(doc: Any, context: str | None) -> str | None:
    """The namespace of ``context`` (the current context when None) in a kubeconfig document."""
    if not isinstance(doc, dict):
        return None
    name = context or doc.get("current-context")
    for entry in doc.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get("context"), dict):
            ns = entry["context"].get("namespace")
            return str(ns) if ns else None
    return None


@contextlib.contextmanager
def resolved_kubeconfig(kubeconfig: Path | None, context: str | None) -> Iterator[tuple[Path, str | None]]:
    """``(one kubeconfig file whose current context is the one to use, that context's namespace)``.

    One existing file and no ``--context``: that file. Otherwise kubectl flattens the selected
    context (credentials inlined) into a 0600 file in a private temporary directory, removed when
    the block ends. Raises :class:`UsageError` when that cannot be done."""
    paths = _kubeconfig_paths(kubeconfig)
    if context is None and len(paths) == 1:
        if not paths[0].is_file():
            raise UsageError(f"kubeconfig {paths[0]}: no such file (give --kubeconfig or set KUBECONFIG)")
        try:
            doc = yaml.safe_load(paths[0].read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"kubeconfig {paths[0]}: cannot read: {exc}") from exc
        yield paths[0], _context_namespace(doc, None)
        return
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise UsageError("--context or a KUBECONFIG of several files needs kubectl on PATH to resolve them")
    argv = [kubectl, "config", "view", "--raw", "--minify", "--flatten", "-o", "json"]
    argv += ["--context", context] if context is not None else []
    env = {**os.environ, "KUBECONFIG": os.pathsep.join(map(str, paths))}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"kubectl config view: {exc}") from exc
    if done.returncode != 0:
        raise UsageError(f"kubectl config view: {done.stderr.strip().removeprefix('error: ')}")
    doc = json.loads(done.stdout)
    with tempfile.TemporaryDirectory(prefix="kubectl-py-scheduler-") as tmp:
        path = Path(tmp) / "kubeconfig"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)  # JSON is YAML: kubernetes_asyncio's loader reads it
        yield path, _context_namespace(doc, None)


def pod_name(pod: str) -> str:
    """``NAME`` from ``NAME``, ``pod/NAME`` or ``pods/NAME`` (kubectl's TYPE/NAME form)."""
    kind, sep, name = pod.rpartition("/")
    if sep and kind.lower() not in ("pod", "pods", "po"):
        raise UsageError(f"POD must be NAME or pod/NAME (the namespace goes in -n), not {pod!r}")
    if not name:
        raise UsageError("POD must not be empty")
    return name


def _check_output(output: str) -> None:
    if output not in OUTPUTS:
        raise UsageError(f"-o/--output must be one of json, yaml, wide, not {output!r}")


def emit(doc: Any, output: str) -> None:
    """Print ``doc`` as kubectl prints a document: ``json`` indented by 4, ``yaml`` block style."""
    if output == "json":
        sys.stdout.write(json.dumps(doc, indent=4, ensure_ascii=False, default=str) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False))


def _captured(run: Any) -> tuple[int, str]:
    """Run ``run()`` (a ``*_main`` returning an exit status) with stdout captured."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = int(run())
    return code, buf.getvalue()


def _fail(message: str) -> typer.Exit:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return typer.Exit(2)


# -- the subcommands ---------------------------------------------------------------------------------------

@app.command()
def explain(
    pod: Annotated[str, typer.Argument(metavar="POD", help="the Pod: NAME or pod/NAME")],
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    output: Output = "",
    config: Config = None,
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
    """Why the Pod would land (or landed) where it does: per-plugin scores, filters, totals
    (``py-scheduler explain --kubeconfig --pod``; a bound Pod shows the decision the scheduler recorded)."""
    from py_scheduler.offline.explain import explain_main

    imports_done()
    try:
        _check_output(output)
        name = pod_name(pod)
        token = read_token(token, token_file)
        with resolved_kubeconfig(kubeconfig, context) as (path, ctx_ns):
            key = f"{namespace or ctx_ns or 'default'}/{name}"

            def run(fmt: str) -> int:
                return explain_main(snapshot=None, kubeconfig=path, pod=key, config=config, output=fmt,
                                    recompute=recompute, lease=lease, scheduler_port=scheduler_port,
                                    scheduler_scheme=scheduler_scheme, decisions_url=decisions_url,
                                    feature_gates=feature_gates, token=token, kubeconfig_token=kubeconfig_token,
                                    scheduler_service_account=scheduler_service_account,
                                    scheduler_ca_file=scheduler_ca_file)

            if output in ("", "wide"):
                raise typer.Exit(run("table"))
            code, text = _captured(lambda: run("json"))
    except UsageError as exc:
        raise _fail(str(exc)) from None
    if code == 0:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        emit(docs[0] if len(docs) == 1 else docs, output)
    raise typer.Exit(code)


def _read_pod_uid(kubeconfig: Path, namespace: str, name: str) -> str | None:
    """The Pod's UID (None when it does not exist). Raises UsageError when the cluster cannot say."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException

    async def read() -> str | None:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        async with client.ApiClient(cfg) as api:
            try:
                pod = await client.CoreV1Api(api).read_namespaced_pod(name, namespace, _request_timeout=20)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise UsageError(f"reading Pod {namespace}/{name}: HTTP {exc.status} {exc.reason}") from exc
            return str(pod.metadata.uid or "")

    try:
        return asyncio.run(read())
    except UsageError:
        raise
    except Exception as exc:  # config, TLS, connection: one line, never a traceback
        raise UsageError(f"reading Pod {namespace}/{name}: {exc}") from exc


DECISION_COLUMNS = ("ATTEMPT", "RESULT", "NODE", "TIME", "MESSAGE")
WIDE_DECISION_COLUMNS = ("ATTEMPT", "RESULT", "NODE", "TIME", "DURATION", "PROFILE", "UID", "EVALUATED",
                         "FEASIBLE", "REJECTED-BY", "MESSAGE")


def decision_row(rec: dict[str, Any], wide: bool) -> list[str]:
    """One table row of a ``/debug/decisions`` record
    (:meth:`py_scheduler.app.scheduling.decisions.Decision.to_json`)."""
    def text(v: Any) -> str:
        return "<none>" if v is None or v == "" or v == [] else " ".join(str(v).split())

    node = rec.get("selected") or (f"nominated {rec['nominated_node']}" if rec.get("nominated_node") else None)
    base = {"ATTEMPT": rec.get("attempt"), "RESULT": rec.get("result"), "NODE": node, "TIME": rec.get("time"),
            "MESSAGE": rec.get("message")}
    if wide:
        base |= {"DURATION": f"{float(rec.get('duration_seconds') or 0) * 1000:.1f}ms", "PROFILE": rec.get("profile"),
                 "UID": rec.get("uid"),
                 "EVALUATED": f"{rec.get('nodes_evaluated')}/{rec.get('nodes_total')}",
                 "FEASIBLE": rec.get("feasible_count"), "REJECTED-BY": ",".join(rec.get("rejected_by") or [])}
    return [text(base[c]) for c in (WIDE_DECISION_COLUMNS if wide else DECISION_COLUMNS)]


def print_columns(header: tuple[str, ...], rows: list[list[str]]) -> None:
    """kubectl's plain table: upper-case headers, columns padded by three spaces, no borders."""
    widths = [max(len(r[i]) for r in [list(header), *rows]) for i in range(len(header))]
    for r in [list(header), *rows]:
        sys.stdout.write("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


@app.command()
def decisions(
    pod: Annotated[str, typer.Argument(metavar="POD", help="the Pod: NAME or pod/NAME")],
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    output: Output = "",
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
    """Every scheduling attempt the leading scheduler recorded for the Pod, newest first (its
    ``/debug/decisions``, through the API server's proxy to the Lease holder, as explain reads it)."""
    from py_scheduler.offline.recorded import fetch_recorded

    imports_done()
    try:
        _check_output(output)
        name = pod_name(pod)
        token = read_token(token, token_file)
        with resolved_kubeconfig(kubeconfig, context) as (path, ctx_ns):
            ns = namespace or ctx_ns or "default"
            uid = _read_pod_uid(path, ns, name)
            if uid is None:
                print(f"note: Pod {ns}/{name} not found: showing the records of any Pod of that name",
                      file=sys.stderr)
            lookup = fetch_recorded(path, f"{ns}/{name}", uid or "", lease=lease, port=scheduler_port,
                                    scheme=scheduler_scheme, decisions_url=decisions_url, token=token,
                                    kubeconfig_token=kubeconfig_token, service_account=scheduler_service_account,
                                    ca_file=scheduler_ca_file)
    except UsageError as exc:
        raise _fail(str(exc)) from None
    if lookup.record is None:
        raise _fail(f"no recorded decisions for {ns}/{name}: {lookup.reason}")
    if output in ("json", "yaml"):
        emit({"pod": f"{ns}/{name}", "uid": uid, "source": lookup.source, "decisions": lookup.records}, output)
    else:
        wide = output == "wide"
        print_columns(WIDE_DECISION_COLUMNS if wide else DECISION_COLUMNS,
                      [decision_row(r, wide) for r in lookup.records])


@app.command()
def simulate(
    file: Annotated[Path | None, typer.Argument(
        metavar="FILE", help="snapshot file (kubectl get ... -o yaml; default: the bundled example cluster)")] = None,
    output: Output = "",
    config: Config = None,
    feature_gates: FeatureGates = "",
) -> None:
    """Schedule every pending Pod of a snapshot FILE in queue order, in memory, and show where each
    lands (``py-scheduler simulate``; ``-o wide`` adds explain's table per Pod)."""
    from py_scheduler.offline.simulate import simulate_main

    imports_done()
    try:
        _check_output(output)
    except UsageError as exc:
        raise _fail(str(exc)) from None
    if output in ("", "wide"):
        raise typer.Exit(simulate_main(snapshot=file, config=config, explain=output == "wide", output="table",
                                       feature_gates=feature_gates))
    code, text = _captured(lambda: simulate_main(snapshot=file, config=config, explain=False, output="json",
                                                 feature_gates=feature_gates))
    if code == 0:
        emit(json.loads(text), output)
    raise typer.Exit(code)


def main() -> None:
    """Console-script entry point ``kubectl-py_scheduler`` (the collector is off until a command's
    imports are done, as in :func:`py_scheduler.cli.main`)."""
    imports_start()
    app(prog_name=PROG)


if __name__ == "__main__":
    main()
