"""A local HTTP server that speaks the part of the Kubernetes REST API that ``rgt_jupyter.backends.k8s.client``
uses, as documented (https://kubernetes.io/docs/reference/kubernetes-api/):

- ``/apis/batch/v1/namespaces/{ns}/jobs``: POST creates (201), GET lists (``labelSelector``);
  ``.../jobs/{name}``: GET reads, DELETE deletes honouring ``propagationPolicy`` (query or
  DeleteOptions body; a Job's default is Orphan): Background and Foreground delete its pods
  and collect the Secrets it owns, Orphan strips their owner references.
- ``/api/v1/namespaces/{ns}/secrets[/{name}]``: POST, GET, DELETE; PATCH with
  ``application/strategic-merge-patch+json`` (owner references merged by uid) or
  ``application/merge-patch+json`` (RFC 7386); any other patch type is 415.
- ``/api/v1/namespaces/{ns}/pods`` GET (``labelSelector``) and ``.../pods/{name}/log`` GET
  (``tailLines``; 400 while the container waits to start), answered as text/plain.

Requests need ``Authorization: Bearer <token>`` (401 otherwise). Errors are ``Status`` objects
(404 NotFound, 409 AlreadyExists, 422 Invalid for a bad name or body). Every request is recorded.

The job controller is simulated by counting reads, not wall time: every read of a Job (GET or
list) first moves that Job one step. By default a Job's first read creates its pod Pending, the
next makes it Running, the next Succeeded (Job ``Complete``). A :class:`Script` per Job name
scripts pods that fail (``OOMKilled``, ``Evicted``, ``Preempted``, ``Error``) until
``backoffLimit`` is exceeded, pods stuck Pending, or a deadline.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .httpfake import Recorded, ServedFake

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_EPOCH = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)
_MAX_SECRET = 1024 * 1024

_JOBS = re.compile(r"/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?")
_SECRETS = re.compile(r"/api/v1/namespaces/([^/]+)/secrets(?:/([^/]+))?")
_PODS = re.compile(r"/api/v1/namespaces/([^/]+)/pods")
_LOG = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log")

_PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")


@dataclass
class Reply:
    """Status code with a JSON body, or a text body (``text``)."""

    status: int
    body: Any = None
    text: str | None = None


@dataclass
class Script:
    """How the simulated controller runs one Job (counted in reads of that Job)."""

    #: Reads a new pod stays Pending, then Running.
    pending: int = 1
    running: int = 1
    #: How the first pods end, in order: OOMKilled, Evicted, Preempted or Error; later ones succeed.
    failures: list[str] = field(default_factory=list)
    #: Keep every pod Pending with this container waiting reason (e.g. ImagePullBackOff).
    waiting: str | None = None
    waiting_message: str = ""
    #: Keep every pod Pending, unschedulable, with this message.
    unschedulable: str | None = None
    #: After this many reads the Job fails with DeadlineExceeded.
    deadline_after: int | None = None


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> Any:
    """A ``Status`` object as the API server sends it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def _error(code: int, reason: str, message: str, **details: Any) -> Reply:
    return Reply(code, status_body(code, reason, message, details or None))


def _merge(target: Any, patch: Any, strategic: bool) -> Any:
    """RFC 7386 merge; ``strategic`` also merges ownerReferences lists by uid, as the API's
    strategic merge patch does for that field."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif strategic and key == "ownerReferences" and isinstance(value, list):
            merged = {o.get("uid"): o for o in out.get(key) or []}
            merged.update({o.get("uid"): copy.deepcopy(o) for o in value})
            out[key] = list(merged.values())
        else:
            out[key] = _merge(out.get(key), value, strategic)
    return out


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selector: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, comma-joined."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = re.split("==?", term, maxsplit=1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class FakeK8s(ServedFake):
    """The fake API server: objects by (namespace, name), a request log, per-Job scripts."""

    token: str = "k8s-token-3c1d9b0e77a4"
    #: Echo the presented token in 401 messages (to check that the client scrubs it).
    echo_token: bool = False
    #: Seconds to wait before every answer (timeouts).
    hang: float = 0.0
    #: (method, path regex, seconds): answer matching requests late, after acting on them.
    slow: list[tuple[str, str, float]] = field(default_factory=list)
    #: (method, path regex, status, reason): refuse matching requests with that Status.
    refuse: list[tuple[str, str, int, str]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    secrets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: By Job name; Jobs without one run :attr:`default_script`.
    scripts: dict[str, Script] = field(default_factory=dict)
    default_script: Script = field(default_factory=Script)
    #: Pod log text by Job name (every pod of the Job prints it).
    logs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._runs: dict[tuple[str, str], dict[str, Any]] = {}
        self._server = None

    @property
    def url(self) -> str:
        """The API server address for a kubeconfig."""
        return self.origin

    def write_kubeconfig(
        self, path: Path, token: str | None = None, namespace: str = "default"
    ) -> Path:
        """A kubeconfig (JSON is YAML) whose current context reaches this server with a token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [
                {"name": "tester", "user": {"token": self.token if token is None else token}}
            ],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "tester", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config, indent=1))
        return path

    def pods_of(self, ns: str, job: str) -> list[dict[str, Any]]:
        """The pods the simulated controller made for a Job, oldest first."""
        with self.lock:
            return [
                p
                for (pns, _), p in self.pods.items()
                if pns == ns and p["metadata"]["labels"].get("job-name") == job
            ]

    # -- plumbing ----------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        path, query, body, bad_json = self.read_request(h)
        rec = Recorded(h.command, path, query, body, dict(h.headers.items()))
        with self.lock:
            self.requests.append(rec)
        auth = h.headers.get("Authorization", "")
        if auth != f"Bearer {self.token}":
            presented = auth.split(" ", 1)[-1] if auth else ""
            said = f" (got {presented!r})" if self.echo_token and presented else ""
            reply = _error(401, "Unauthorized", "Unauthorized" + said)
        elif bad_json:
            reply = _error(400, "BadRequest", "the request body is not JSON")
        elif refused := [
            (code, why)
            for m, rx, code, why in self.refuse
            if m == h.command and re.fullmatch(rx, path)
        ]:
            code, why = refused[0]
            reply = _error(code, why, f"refused on purpose ({why})")
        else:
            with self.lock:
                reply = self._route(h.command, path, query, body, rec.headers)
        delay = self.hang + sum(
            s for m, rx, s in self.slow if m == h.command and re.fullmatch(rx, path)
        )
        if delay:
            time.sleep(delay)
        if reply.text is not None:
            payload, kind = reply.text.encode(), "text/plain"
        else:
            payload, kind = json.dumps(reply.body).encode(), "application/json"
        try:
            h.send_response(reply.status)
            h.send_header("Content-Type", kind)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: Any,
        headers: dict[str, str],
    ) -> Reply:
        selector = (query.get("labelSelector") or [""])[0]
        if m := _JOBS.fullmatch(path):
            ns, name = unquote(m[1]), m[2] and unquote(m[2])
            if name is None and method == "GET":
                return self._list("JobList", "batch/v1", self._read_jobs(ns, selector))
            if name is None and method == "POST":
                return self._create_job(ns, body)
            if name is not None and method == "GET":
                job = self.jobs.get((ns, name))
                if job is None:
                    return self._missing("jobs", "batch", name)
                self._tick(ns, name)
                return Reply(200, job)
            if name is not None and method == "DELETE":
                policy: str | None = (query.get("propagationPolicy") or [""])[0] or None
                if policy is None and isinstance(body, dict):
                    policy = body.get("propagationPolicy")
                return self._delete_job(ns, name, policy or "Orphan")
        elif m := _SECRETS.fullmatch(path):
            ns, name = unquote(m[1]), m[2] and unquote(m[2])
            if name is None and method == "GET":
                found = [
                    s
                    for (sns, _), s in self.secrets.items()
                    if sns == ns and selector_matches(selector, s["metadata"].get("labels") or {})
                ]
                return self._list("SecretList", "v1", found)
            if name is None and method == "POST":
                return self._create_secret(ns, body)
            if name is not None and method == "GET":
                secret = self.secrets.get((ns, name))
                return Reply(200, secret) if secret else self._missing("secrets", "", name)
            if name is not None and method == "PATCH":
                return self._patch_secret(ns, name, body, headers.get("Content-Type", ""))
            if name is not None and method == "DELETE":
                if self.secrets.pop((ns, name), None) is None:
                    return self._missing("secrets", "", name)
                return Reply(200, status_body(200, "", "", {"name": name, "kind": "secrets"}))
        elif m := _LOG.fullmatch(path):
            if method == "GET":
                return self._log(unquote(m[1]), unquote(m[2]), query)
        elif m := _PODS.fullmatch(path):
            ns = unquote(m[1])
            if method == "GET":
                found = [
                    p
                    for (pns, _), p in self.pods.items()
                    if pns == ns and selector_matches(selector, p["metadata"].get("labels") or {})
                ]
                return self._list("PodList", "v1", found)
        else:
            return _error(404, "NotFound", "the server could not find the requested resource")
        return _error(405, "MethodNotAllowed", f"the server does not allow this method ({method})")

    # -- objects -----------------------------------------------------------------------------

    def _stamp(self) -> tuple[str, str, str]:
        """A uid, resourceVersion and creationTimestamp (one fake second per object)."""
        n = next(self._ids)
        when = _EPOCH + datetime.timedelta(seconds=n)
        uid = f"{n:08x}-0000-4000-8000-{n:012x}"
        return uid, str(1000 + n), when.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _list(self, kind: str, api: str, items: list[dict[str, Any]]) -> Reply:
        return Reply(
            200,
            {
                "kind": kind,
                "apiVersion": api,
                "metadata": {"resourceVersion": str(1000 + next(self._ids))},
                "items": items,
            },
        )

    @staticmethod
    def _missing(kind: str, group: str, name: str) -> Reply:
        what = f"{kind}.{group}" if group else kind
        return _error(404, "NotFound", f'{what} "{name}" not found', name=name, kind=kind)

    @staticmethod
    def _invalid(kind: str, name: str, problem: str) -> Reply:
        return _error(
            422, "Invalid", f'{kind} "{name}" is invalid: {problem}', name=name, kind=kind
        )

    def _check_meta(self, ns: str, body: Any, kind: str, api: str) -> Reply | None:
        if not isinstance(body, dict) or body.get("kind") != kind or body.get("apiVersion") != api:
            return _error(400, "BadRequest", f"the body is not a {api} {kind}")
        meta = body.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            return self._invalid(kind, "", "metadata.name: Required value: name or generateName")
        name = str(meta["name"])
        if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
            return self._invalid(
                kind,
                name,
                f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
                "consist of lower case alphanumeric characters, '-' or '.'",
            )
        if meta.get("namespace") not in (None, ns):
            return _error(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )
        for key, value in (meta.get("labels") or {}).items():
            if len(str(value)) > 63 or not _LABEL_VALUE.fullmatch(str(value)):
                return self._invalid(kind, name, f"metadata.labels: Invalid value: {value!r}")
            if len(key.rpartition("/")[2]) > 63:
                return self._invalid(kind, name, f"metadata.labels: Invalid value: {key!r}")
        return None

    def _create_job(self, ns: str, body: Any) -> Reply:
        bad = self._check_meta(ns, body, "Job", "batch/v1")
        if bad is not None:
            return bad
        name = body["metadata"]["name"]
        if len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            return self._invalid(
                "Job.batch", name, "metadata.name: must be no more than 63 characters"
            )
        pod_spec = (((body.get("spec") or {}).get("template") or {}).get("spec")) or {}
        containers = pod_spec.get("containers") or []
        if not containers or not all(c.get("name") and c.get("image") for c in containers):
            return self._invalid("Job.batch", name, "spec.template.spec.containers: Required value")
        if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
            return self._invalid(
                "Job.batch",
                name,
                'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", '
                '"Never"',
            )
        if (ns, name) in self.jobs:
            return _error(
                409,
                "AlreadyExists",
                f'jobs.batch "{name}" already exists',
                name=name,
                group="batch",
                kind="jobs",
            )
        job = copy.deepcopy(body)
        uid, version, created = self._stamp()
        job["metadata"].update(
            namespace=ns, uid=uid, resourceVersion=version, creationTimestamp=created, generation=1
        )
        controller = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        spec = job["spec"]
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template_meta = spec["template"].setdefault("metadata", {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **controller}
        job["status"] = {}
        self.jobs[(ns, name)] = job
        self._runs[(ns, name)] = {"reads": 0, "ticks": 0, "pod": None, "ended": 0}
        return Reply(201, job)

    def _create_secret(self, ns: str, body: Any) -> Reply:
        bad = self._check_meta(ns, body, "Secret", "v1")
        if bad is not None:
            return bad
        name = body["metadata"]["name"]
        size = 0
        for key, value in (body.get("data") or {}).items():
            try:
                size += len(base64.b64decode(value, validate=True))
            except (binascii.Error, TypeError):
                return self._invalid("Secret", name, f"data[{key}]: Invalid value: not base64")
        if size > _MAX_SECRET:
            return self._invalid(
                "Secret", name, f"data: Too long: must have at most {_MAX_SECRET} bytes"
            )
        if (ns, name) in self.secrets:
            return _error(
                409, "AlreadyExists", f'secrets "{name}" already exists', name=name, kind="secrets"
            )
        secret = copy.deepcopy(body)
        uid, version, created = self._stamp()
        secret["metadata"].update(
            namespace=ns, uid=uid, resourceVersion=version, creationTimestamp=created
        )
        secret.setdefault("type", "Opaque")
        self.secrets[(ns, name)] = secret
        return Reply(201, secret)

    def _patch_secret(self, ns: str, name: str, body: Any, content_type: str) -> Reply:
        kind = content_type.split(";")[0].strip()
        if kind not in _PATCH_TYPES:
            return _error(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(_PATCH_TYPES)}",
            )
        secret = self.secrets.get((ns, name))
        if secret is None:
            return self._missing("secrets", "", name)
        if not isinstance(body, dict):
            return _error(400, "BadRequest", "a merge patch must be a JSON object")
        patched = _merge(secret, body, strategic=kind == _PATCH_TYPES[0])
        if secret.get("immutable") and (
            patched.get("data") != secret.get("data") or not patched.get("immutable")
        ):
            return self._invalid("Secret", name, "data: Forbidden: field is immutable")
        if patched["metadata"].get("name") != name or patched["metadata"].get("uid") != secret[
            "metadata"
        ].get("uid"):
            return _error(400, "BadRequest", "metadata.name and metadata.uid cannot change")
        patched["metadata"]["resourceVersion"] = str(1000 + next(self._ids))
        self.secrets[(ns, name)] = patched
        return Reply(200, patched)

    def _delete_job(self, ns: str, name: str, policy: str) -> Reply:
        job = self.jobs.pop((ns, name), None)
        if job is None:
            return self._missing("jobs", "batch", name)
        self._runs.pop((ns, name), None)
        uid = job["metadata"]["uid"]
        dependents = [(self.pods, key) for key in self.pods] + [
            (self.secrets, key) for key in self.secrets
        ]
        for store, key in dependents:
            meta = store[key]["metadata"]
            owners = meta.get("ownerReferences") or []
            if key[0] != ns or not any(o.get("uid") == uid for o in owners):
                continue
            if policy == "Orphan":
                meta["ownerReferences"] = [o for o in owners if o.get("uid") != uid]
            elif all(o.get("uid") == uid for o in owners):
                del store[key]
        details = {"name": name, "group": "batch", "kind": "jobs", "uid": uid}
        return Reply(200, status_body(200, "", "", details))

    def _read_jobs(self, ns: str, selector: str) -> list[dict[str, Any]]:
        found = []
        for (jns, name), job in list(self.jobs.items()):
            if jns == ns and selector_matches(selector, job["metadata"].get("labels") or {}):
                self._tick(ns, name)
                found.append(job)
        return found

    def _log(self, ns: str, name: str, query: dict[str, list[str]]) -> Reply:
        pod = self.pods.get((ns, name))
        if pod is None:
            return self._missing("pods", "", name)
        if pod["status"]["phase"] == "Pending":
            why = "ContainerCreating"
            for status in pod["status"].get("containerStatuses") or []:
                why = status["state"].get("waiting", {}).get("reason") or why
            return _error(
                400,
                "BadRequest",
                f'container "job" in pod "{name}" is waiting to start: {why}',
            )
        text = self.logs.get(pod["metadata"]["labels"].get("job-name", ""), "")
        tail = (query.get("tailLines") or [""])[0]
        if tail:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
        return Reply(200, text=text)

    # -- the simulated job controller ---------------------------------------------------------

    def _tick(self, ns: str, name: str) -> None:
        """One step of the Job's life: pods appear, run and end as its script says."""
        job, run = self.jobs[(ns, name)], self._runs.get((ns, name))
        if run is None or run["ended"]:
            return
        script = self.scripts.get(name, self.default_script)
        status = job["status"]
        run["reads"] += 1
        pod = self.pods.get((ns, run["pod"])) if run["pod"] else None
        if script.deadline_after is not None and run["reads"] > script.deadline_after:
            if pod is not None and pod["status"]["phase"] in ("Pending", "Running"):
                pod["status"].update(
                    phase="Failed",
                    reason="DeadlineExceeded",
                    message="Pod was active on the node longer than the specified deadline",
                )
            self._end(
                job,
                run,
                "Failed",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            )
            return
        if pod is None or pod["status"]["phase"] == "Failed":
            self._new_pod(ns, name, job, run, script)
            status["active"] = 1
            status.setdefault("startTime", job["metadata"]["creationTimestamp"])
            return
        run["ticks"] += 1
        phase = pod["status"]["phase"]
        if phase == "Pending":
            if script.waiting or script.unschedulable:
                return
            if run["ticks"] >= script.pending:
                self._set_running(pod)
                status["ready"] = 1
                run["ticks"] = 0
        elif phase == "Running" and run["ticks"] >= script.running:
            failed = int(status.get("failed") or 0)
            status["active"], status["ready"] = 0, 0
            if failed < len(script.failures):
                self._fail_pod(pod, script.failures[failed])
                status["failed"] = failed + 1
                if failed + 1 > job["spec"]["backoffLimit"]:
                    self._end(
                        job,
                        run,
                        "Failed",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit",
                    )
            else:
                self._finish_pod(pod, "Succeeded", {"exitCode": 0, "reason": "Completed"})
                status["succeeded"] = 1
                self._end(job, run, "Complete", None, None)

    def _end(
        self,
        job: dict[str, Any],
        run: dict[str, Any],
        kind: str,
        reason: str | None,
        message: str | None,
    ) -> None:
        run["ended"] = 1
        now = self._stamp()[2]
        condition: dict[str, Any] = {
            "type": kind,
            "status": "True",
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }
        if reason:
            condition.update(reason=reason, message=message)
        job["status"]["active"] = 0
        job["status"].setdefault("conditions", []).append(condition)
        if kind == "Complete":
            job["status"]["completionTime"] = now

    def _new_pod(
        self, ns: str, job_name: str, job: dict[str, Any], run: dict[str, Any], script: Script
    ) -> None:
        uid, version, created = self._stamp()
        name = f"{job_name[:57]}-{int(uid[:8], 16):05x}"[-63:]
        template = job["spec"]["template"]
        container = template["spec"]["containers"][0]
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": uid,
                "resourceVersion": version,
                "creationTimestamp": created,
                "labels": dict(template["metadata"].get("labels") or {}),
                "annotations": dict(template["metadata"].get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": []},
        }
        if script.unschedulable:
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": script.unschedulable,
                    "lastProbeTime": None,
                    "lastTransitionTime": created,
                }
            ]
        else:
            pod["spec"]["nodeName"] = "gpu-node-1"
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": created}
            ]
            waiting = {"reason": script.waiting or "ContainerCreating"}
            if script.waiting_message:
                waiting["message"] = script.waiting_message
            pod["status"]["containerStatuses"] = [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"waiting": waiting},
                }
            ]
        self.pods[(ns, name)] = pod
        run["pod"], run["ticks"] = name, 0

    @staticmethod
    def _set_running(pod: dict[str, Any]) -> None:
        pod["status"]["phase"] = "Running"
        pod["status"]["startTime"] = pod["metadata"]["creationTimestamp"]
        for status in pod["status"].get("containerStatuses") or []:
            status.update(
                ready=True,
                started=True,
                imageID=status["image"],
                state={"running": {"startedAt": pod["metadata"]["creationTimestamp"]}},
            )

    @staticmethod
    def _finish_pod(pod: dict[str, Any], phase: str, terminated: dict[str, Any]) -> None:
        pod["status"]["phase"] = phase
        for status in pod["status"].get("containerStatuses") or []:
            status.update(ready=False, started=False, state={"terminated": terminated})

    def _fail_pod(self, pod: dict[str, Any], how: str) -> None:
        if how == "OOMKilled":
            self._finish_pod(pod, "Failed", {"exitCode": 137, "reason": "OOMKilled"})
        elif how == "Evicted":
            self._finish_pod(pod, "Failed", {"exitCode": 137, "reason": "Error"})
            pod["status"].update(
                reason="Evicted",
                message='Usage of EmptyDir volume "scratch" exceeds the limit "20Gi". ',
            )
            pod["status"]["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": "The node was low on resource: ephemeral-storage.",
                }
            )
        elif how == "Preempted":
            self._finish_pod(pod, "Failed", {"exitCode": 143, "reason": "Error"})
            pod["status"]["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "Kubernetes Scheduler: preempting to accommodate a higher "
                    "priority pod",
                }
            )
        else:
            self._finish_pod(pod, "Failed", {"exitCode": 1, "reason": "Error"})
