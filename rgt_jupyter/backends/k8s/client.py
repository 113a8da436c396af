"""Kubernetes Jobs through the API: submit a run's Job and bundle Secret (rendered by
:mod:`rgt_jupyter.k8s`), follow many Jobs with two list calls a poll, read the newest pod's log,
delete. Each Job and its pods are read as a :class:`K8sState` in the job contract's words.

``kubernetes`` (the official client) is imported only inside :class:`K8sJobs`, so importing this
module stays cheap.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import LaunchError, RgtError, TransportError, UsageError
from .manifests import (
    CONTAINER,
    ID_ANNOTATION,
    JOB_LABEL,
    SCRATCH_DIR,
    SELECTOR,
    K8sJobSpec,
    check_dns_label,
    render_bundle_secret,
    render_job,
)

#: (connect, read) seconds for every API call.
TIMEOUT = (5.0, 30.0)

#: The API server's default when a Job leaves ``backoffLimit`` unset.
_API_BACKOFF_DEFAULT = 6

#: Pod disruption reasons (``DisruptionTarget`` condition) that mean the cluster took the pod away.
_DISRUPTIONS = frozenset(
    {
        "PreemptionByScheduler",
        "PreemptionByKubeScheduler",
        "DeletionByTaintManager",
        "EvictionByEvictionAPI",
        "TerminationByKubelet",
        "DeletionByPodGC",
    }
)
_PULL_FAILURES = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})

LOST_DIAGNOSIS = (
    "the Job is gone: deleted outside rgt, or garbage-collected (ttlSecondsAfterFinished). "
    "Its checkpoints on the PVC are kept: relaunch the job to resume from them."
)


@dataclass(frozen=True)
class K8sState:
    """One Job as seen in one poll, in the job contract's words.

    ``state`` is one of queued, running, finished, failed, preempted, lost; ``phase`` the raw
    Kubernetes word it came from (pod phase, or Job condition); ``restarts`` the Job's failed
    pods so far; ``pod`` the newest pod's name.
    """

    state: str
    phase: str
    reason: str | None = None
    diagnosis: str = ""
    restarts: int = 0
    pod: str | None = None


# -- reading state -----------------------------------------------------------------------------


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in _get(obj, "status", "conditions") or [] if isinstance(c, dict)]


def _true_conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("type")): c for c in _conditions(obj) if str(c.get("status")) == "True"}


def _detail(reason: str, obj: dict[str, Any]) -> str:
    """``reason``, then ``obj``'s message after a colon when it has one."""
    text = str(obj.get("message") or "").strip()
    return f"{reason}: {text}" if text else reason


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    def key(pod: dict[str, Any]) -> tuple[str, bool, str]:
        # Timestamps have one-second resolution: a replacement pod can share its
        # predecessor's, so a live pod wins a tie.
        live = _get(pod, "status", "phase") in ("Pending", "Running")
        return (str(_get(pod, "metadata", "creationTimestamp") or ""), live, _pod_name(pod))

    return max(pods, key=key) if pods else None


def _pod_name(pod: dict[str, Any]) -> str:
    return str(_get(pod, "metadata", "name") or "")


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in _get(pod, "status", "containerStatuses") or []:
        done = _get(status, "state", "terminated")
        if isinstance(done, dict):
            return done
    return None


def pod_failure(pod: dict[str, Any]) -> tuple[str, str, bool]:
    """Why a failed pod failed: (reason, one line in plain words, whether the cluster took it
    away rather than the program failing)."""
    name = _pod_name(pod)
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "").strip()
    disruption = _true_conditions(pod).get("DisruptionTarget")
    done = _terminated(pod) or {}
    if reason == "Evicted":
        hint = (
            f"keep node-local files under {SCRATCH_DIR} within its sizeLimit and checkpoints "
            "on the PVC"
            if "storage" in message or "EmptyDir" in message
            else "the node ran short of resources"
        )
        return reason, f"pod {name} was evicted ({message or 'no message'}): {hint}", True
    if disruption is not None and str(disruption.get("reason")) in _DISRUPTIONS:
        why = str(disruption.get("reason"))
        return why, f"pod {name} was taken away by the cluster ({_detail(why, disruption)})", True
    if done.get("reason") == "OOMKilled":
        return (
            "OOMKilled",
            f"pod {name} ran out of memory (OOMKilled, exit 137): raise memory or lower the "
            "batch size",
            False,
        )
    if reason == "DeadlineExceeded":
        return reason, f"pod {name} was stopped at the Job's activeDeadlineSeconds", False
    if done:
        why = str(done.get("reason") or "Error")
        return why, f"pod {name} exited with code {done.get('exitCode')} ({why})", False
    return (
        reason or "Failed",
        f"pod {name} failed ({message or reason or 'no reason given'})",
        False,
    )


def _pending_words(pod: dict[str, Any]) -> tuple[str | None, str]:
    name = _pod_name(pod)
    for status in _get(pod, "status", "containerStatuses") or []:
        waiting = _get(status, "state", "waiting")
        if not isinstance(waiting, dict) or not waiting.get("reason"):
            continue
        why = str(waiting["reason"])
        detail = _detail(why, waiting)
        if why in _PULL_FAILURES:
            return why, (
                f"pod {name} cannot pull its image ({detail}): check the digest exists in the "
                "registry and the cluster may pull from it (imagePullSecrets); the pod stays "
                "Pending until then"
            )
        if why.startswith("CreateContainer"):
            return why, f"pod {name} cannot start its container ({detail}): fix the Job's spec"
        return why, f"pod {name} is starting ({detail})"
    scheduled = next((c for c in _conditions(pod) if c.get("type") == "PodScheduled"), None)
    if scheduled is not None and str(scheduled.get("status")) == "False":
        why = str(scheduled.get("reason") or "Unschedulable")
        return why, (
            f"no node can take pod {name} ({_detail(why, scheduled)}): free or add "
            "GPU nodes (scale the node pool up), or ask for fewer resources"
        )
    return None, f"pod {name} is waiting for a node"


def job_state(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> K8sState:
    """Read one Job (``None``: not in the list) and its pods as a :class:`K8sState`."""
    if job is None:
        return K8sState("lost", "Gone", "NotFound", LOST_DIAGNOSIS)
    failed = int(_get(job, "status", "failed") or 0)
    limit = _get(job, "spec", "backoffLimit")
    limit = _API_BACKOFF_DEFAULT if limit is None else int(limit)
    newest = _newest(pods)
    pod = _pod_name(newest) if newest else None
    failures = [p for p in pods if _get(p, "status", "phase") == "Failed"]
    last = pod_failure(_newest(failures) or {}) if failures else None
    conditions = _true_conditions(job)
    done = conditions.get("Complete") or conditions.get("SuccessCriteriaMet")
    if done is not None:
        return K8sState("finished", "Complete", done.get("reason"), "", failed, pod)
    ended = conditions.get("Failed") or conditions.get("FailureTarget")
    if ended is not None:
        why = str(ended.get("reason") or "Failed")
        last_words = f"; the last: {last[1]}" if last else ""
        if why == "BackoffLimitExceeded":
            text = (
                f"the pod failed {failed} times (backoffLimit {limit}){last_words}. Read the "
                "log, fix the cause, then relaunch: the checkpoints on the PVC are kept"
            )
        elif why == "DeadlineExceeded":
            deadline = _get(job, "spec", "activeDeadlineSeconds")
            text = (
                f"the Job ran past its activeDeadlineSeconds ({deadline} s) and Kubernetes "
                "stopped it: relaunch to resume from the checkpoint, or allow more time"
            )
        else:
            text = f"the Job failed ({_detail(why, ended)}){last_words}"
        # Retries used up by evictions or preemption: resuming elsewhere is the remedy.
        state = "preempted" if why == "BackoffLimitExceeded" and last and last[2] else "failed"
        return K8sState(state, "Failed", why, text, failed, pod)
    if "Suspended" in conditions:
        return K8sState(
            "queued", "Suspended", "Suspended", "the Job is suspended (spec.suspend)", failed, pod
        )
    history = f"{failed} failed pod(s) so far; the last: {last[1]}" if failed and last else ""
    before = f" (after {history})" if history else ""
    if newest is None:
        text = "waiting for the Job controller to create a pod" + before
        return K8sState("queued", "Pending", None, text, failed, None)
    phase = str(_get(newest, "status", "phase") or "Unknown")
    if phase == "Running":
        return K8sState("running", phase, None, history, failed, pod)
    if phase == "Pending":
        waiting, words = _pending_words(newest)
        return K8sState("queued", phase, waiting, words + before, failed, pod)
    if phase == "Succeeded":
        text = f"pod {pod} exited 0; the Job has not recorded its completion yet"
        return K8sState("running", phase, None, text, failed, pod)
    if phase == "Failed":
        why, words, _ = pod_failure(newest)
        text = f"{words}; the Job will start a new pod ({failed} of {limit} retries used)"
        return K8sState("queued", phase, why, text, failed, pod)
    text = f"pod {pod} is in phase {phase}: its node may have stopped reporting"
    return K8sState("running", phase, None, text, failed, pod)


# -- the API -----------------------------------------------------------------------------------


def _load_api_client(context: str | None) -> Any:
    """An ``ApiClient`` from the kubeconfig (``KUBECONFIG`` or ~/.kube/config), else from the
    pod's service account when running inside the cluster."""
    import urllib3  # deferred: the kubernetes client, only once a k8s profile is used
    import yaml  # deferred: the kubernetes client, only once a k8s profile is used
    from kubernetes import (  # deferred: the kubernetes client, only once a k8s profile is used
        client,
        config,
    )

    cfg = client.Configuration()
    try:
        config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG") or None,
            context=context,
            client_configuration=cfg,
        )
    except (config.ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        # Falling back with an explicit context would talk to a cluster the user did not ask for.
        if context is not None:
            raise UsageError(
                f"Kubernetes context {context!r} cannot be loaded ({exc}): list the contexts "
                "with `kubectl config get-contexts` and use one of them."
            ) from None
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            raise UsageError(
                f"No Kubernetes credentials found ({exc}). Point KUBECONFIG at a kubeconfig "
                "(or create ~/.kube/config) whose current context reaches the cluster; "
                "`kubectl cluster-info` should work first."
            ) from None
    # One connect retry, no read retries: a hung API server costs one timeout, not four.
    cfg.retries = urllib3.util.Retry(total=1, read=0, redirect=0, status=0)
    return client.ApiClient(cfg)


class K8sJobs:
    """Jobs in one namespace through the official client (``BatchV1Api``, ``CoreV1Api``).

    Every call has a (connect, read) timeout; every failure becomes an ``rgt_jupyter.errors``
    exception whose message says what failed and what to do. Answers are read as the API's
    own JSON, so the dicts here look like ``kubectl get -o json``.
    """

    def __init__(
        self,
        namespace: str,
        api_client: Any | None = None,
        *,
        context: str | None = None,
        timeout: tuple[float, float] = TIMEOUT,
    ) -> None:
        check_dns_label("namespace", namespace)
        from kubernetes import (
            client,  # deferred: the kubernetes client, only once a k8s profile is used
        )

        self.namespace = namespace
        self.api_client = api_client if api_client is not None else _load_api_client(context)
        self.timeout = timeout
        self.batch: Any = client.BatchV1Api(self.api_client)
        self.core: Any = client.CoreV1Api(self.api_client)

    # -- verbs ----------------------------------------------------------------------------------

    def submit(self, spec: K8sJobSpec, bundle: bytes) -> dict[str, str]:
        """Create the bundle Secret, then the Job, then make the Job own the Secret.

        Returns ``{"k8s_job", "namespace", "uid"}``, plus ``warning`` when the Job runs but
        could not be made the Secret's owner. A Job or Secret of that name already there is an
        error (it is never replaced); a Job refused leaves no Secret behind.
        """
        if spec.namespace != self.namespace:
            raise UsageError(
                f"The job spec is for namespace {spec.namespace!r} but this client works in "
                f"{self.namespace!r}: make them the same."
            )
        job = render_job(spec)
        secret = render_bundle_secret(spec, bundle)
        name, secret_name, ns = job["metadata"]["name"], secret["metadata"]["name"], self.namespace
        self._call(
            f"creating Secret {ns}/{secret_name}",
            self.core.create_namespaced_secret,
            ns,
            secret,
            error=LaunchError,
            known={
                409: LaunchError(
                    f"Kubernetes already holds Secret {ns}/{secret_name}: job {spec.job_id!r} "
                    f"was submitted before (Job {name}). Follow that job, or delete it "
                    f"(kubectl -n {ns} delete job {name} --cascade=background; kubectl -n {ns} "
                    f"delete secret {secret_name}) before launching it again."
                )
            },
        )
        try:
            created = self._json(
                self._call(
                    f"creating Job {ns}/{name}",
                    self.batch.create_namespaced_job,
                    ns,
                    job,
                    error=LaunchError,
                    known={
                        409: LaunchError(
                            f"Kubernetes already has a Job {ns}/{name} (job id "
                            f"{spec.job_id!r}); rgt never replaces a Job. Follow it, or delete "
                            f"it (kubectl -n {ns} delete job {name} --cascade=background) "
                            "before launching again."
                        )
                    },
                )
            )
        except TransportError:
            # The create may have landed before the answer was lost: look before cleaning up.
            found = self._find_created(spec, name)
            if found is None:
                self._drop_secret(secret_name)
                raise
            created = found
        except RgtError:
            self._drop_secret(secret_name)
            raise
        uid = str(_get(created, "metadata", "uid") or "")
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}
        result = {"k8s_job": name, "namespace": ns, "uid": uid}
        try:
            self._call(
                f"making Job {name} own Secret {secret_name}",
                self.core.patch_namespaced_secret,
                secret_name,
                ns,
                {"metadata": {"ownerReferences": [owner]}},
            )
        except RgtError as exc:
            # The Job runs already: failing the launch now would leave it running untracked.
            result["warning"] = (
                f"{exc} Until then Secret {ns}/{secret_name} outlives a `kubectl delete job`; "
                "deleting the job through rgt removes it."
            )
        return result

    def states(self, names: list[str]) -> dict[str, K8sState]:
        """The state of each named Job: one Job list and one Pod list, however many names."""
        for name in names:
            check_dns_label("Job name", name)
        if not names:
            return {}
        jobs = {
            str(_get(j, "metadata", "name")): j
            for j in self._items("listing Jobs", self.batch.list_namespaced_job)
        }
        pods: dict[str, list[dict[str, Any]]] = {}
        for pod in self._items("listing pods", self.core.list_namespaced_pod):
            owner = _job_of(pod, jobs)
            if owner is not None:
                pods.setdefault(owner, []).append(pod)
        return {name: job_state(jobs.get(name), pods.get(name, [])) for name in names}

    def logs(self, name: str, tail_lines: int = 50) -> str:
        """The last ``tail_lines`` lines of the newest pod's log ("" while there is none)."""
        check_dns_label("Job name", name)
        pods = self._items(
            f"listing the pods of Job {name}",
            self.core.list_namespaced_pod,
            selector=f"{SELECTOR},{JOB_LABEL}={name}",
        )
        newest = _newest(pods)
        if newest is None:
            return ""
        # 400: the container has not started yet; 404: the pod went meanwhile.
        raw = self._call(
            f"reading the log of pod {_pod_name(newest)}",
            self.core.read_namespaced_pod_log,
            _pod_name(newest),
            self.namespace,
            container=CONTAINER,
            tail_lines=tail_lines,
            ok=(400, 404),
        )
        return "" if raw is None else raw.decode("utf-8", errors="replace")

    def delete(self, name: str) -> None:
        """Delete the Job and its pods (background propagation) and its bundle Secret; a Job
        already gone is fine."""
        check_dns_label("Job name", name)
        self._call(
            f"deleting Job {self.namespace}/{name}",
            self.batch.delete_namespaced_job,
            name,
            self.namespace,
            propagation_policy="Background",
            ok=(404,),
        )
        # The ownerReference would collect it too; deleting it here does not wait on the GC.
        self._delete_secret(f"{name}-bundle")

    # -- plumbing -------------------------------------------------------------------------------

    def _find_created(self, spec: K8sJobSpec, name: str) -> dict[str, Any] | None:
        try:
            raw = self._call(
                f"checking for Job {self.namespace}/{name}",
                self.batch.read_namespaced_job,
                name,
                self.namespace,
                ok=(404,),
            )
        except RgtError:
            raise TransportError(
                f"Creating Job {self.namespace}/{name} got no answer and its fate is unknown: "
                f"check with `kubectl -n {self.namespace} get job {name}` before launching again."
            ) from None
        if raw is None:
            return None
        job = self._json(raw)
        return job if _get(job, "metadata", "annotations", ID_ANNOTATION) == spec.job_id else None

    def _delete_secret(self, secret_name: str) -> None:
        self._call(
            f"deleting Secret {self.namespace}/{secret_name}",
            self.core.delete_namespaced_secret,
            secret_name,
            self.namespace,
            ok=(404,),
        )

    def _drop_secret(self, secret_name: str) -> None:
        # The launch error is the one to show; a stray Secret is named by delete().
        with contextlib.suppress(RgtError):
            self._delete_secret(secret_name)

    def _items(
        self, what: str, method: Callable[..., Any], selector: str = SELECTOR
    ) -> list[dict[str, Any]]:
        raw = self._call(what, method, self.namespace, label_selector=selector)
        items = self._json(raw).get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    @staticmethod
    def _json(raw: bytes | None) -> dict[str, Any]:
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            raise TransportError(
                "The Kubernetes API answered something that is not JSON: check the kubeconfig's "
                "server address points at the API server, not a proxy or dashboard."
            ) from None
        return data if isinstance(data, dict) else {}

    def _call(
        self,
        what: str,
        method: Callable[..., Any],
        *args: Any,
        ok: tuple[int, ...] = (),
        error: type[RgtError] = TransportError,
        known: dict[int, RgtError] | None = None,
        **kwargs: Any,
    ) -> bytes | None:
        """Call the client; the raw body, or ``None`` for a status in ``ok``."""
        import urllib3  # deferred: the kubernetes client, only once a k8s profile is used
        from kubernetes.client.exceptions import (  # deferred: the kubernetes client, only once a k8s profile is used
            ApiException,
            OpenApiException,
        )

        try:
            # The API's own JSON, not the client's models: same shape as the manifests here,
            # and no model validation of fields this module never reads.
            response = method(
                *args, _request_timeout=self.timeout, _preload_content=False, **kwargs
            )
        except ApiException as exc:
            if exc.status in ok:
                return None
            if known and exc.status in known:
                raise known[exc.status] from None
            raise self._api_error(exc, what, error) from None
        except urllib3.exceptions.HTTPError as exc:
            detail = self._scrub(_short(exc))
            if "timed out" in detail:
                raise TransportError(
                    f"The Kubernetes API at {self._host()} did not answer in time while {what} "
                    f"({detail}): it is overloaded or the network drops packets. Retry, or give "
                    "K8sJobs a longer timeout."
                ) from None
            raise TransportError(
                f"Could not reach the Kubernetes API at {self._host()} while {what} "
                f"({detail}). Check the cluster is up and the kubeconfig's server address is "
                "right (`kubectl cluster-info`), then retry."
            ) from None
        except OpenApiException as exc:
            raise UsageError(f"Kubernetes client refused {what}: {self._scrub(str(exc))}") from None
        try:
            return bytes(response.data)
        finally:
            response.release_conn()

    def _api_error(self, exc: Any, what: str, error: type[RgtError]) -> RgtError:
        status = exc.status
        message = self._scrub(_status_message(exc))
        if status == 401:
            return UsageError(
                f"Kubernetes at {self._host()} refused the credentials while {what} (401 "
                "Unauthorized): the kubeconfig's token or client certificate is missing, wrong "
                "or expired. Log in to the cluster again to refresh it (`kubectl auth whoami` "
                "tells when it works), then retry."
            )
        if status == 403:
            return UsageError(
                f"Kubernetes forbade {what} ({message}). Ask the cluster's admin for a Role in "
                f"namespace {self.namespace} allowing jobs, pods, pods/log and secrets, or use a "
                "namespace you may write to."
            )
        if status == 429 or (isinstance(status, int) and status >= 500):
            return TransportError(
                f"The Kubernetes API answered {status} while {what} ({message}): it is busy or "
                "failing. Retry in a minute; jobs already running are not affected."
            )
        return error(
            f"Kubernetes refused {what} ({status} {exc.reason}: {message}). Fix what it names "
            "and retry."
        )

    def _config(self, name: str, default: Any = None) -> Any:
        return getattr(getattr(self.api_client, "configuration", None), name, default)

    def _host(self) -> str:
        return str(self._config("host", "?"))

    def _scrub(self, text: str) -> str:
        keys = self._config("api_key") or {}
        for value in keys.values():
            token = str(value).split()[-1] if str(value).strip() else ""
            if len(token) >= 4:
                text = text.replace(token, "<token>")
        return re.sub(r"(?i)bearer\s+\S+", "Bearer <token>", text)


def _status_message(exc: Any) -> str:
    """The ``message`` of the API's ``Status`` answer, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "")
    except (ValueError, TypeError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(exc.reason or "no message")


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc).splitlines()[0][:300]


def _job_of(pod: dict[str, Any], jobs: dict[str, dict[str, Any]]) -> str | None:
    """The Job a pod belongs to, by its owner reference's uid (a Job deleted and created again
    under the same name must not inherit the old one's pods), else by label."""
    labels = _get(pod, "metadata", "labels") or {}
    name = labels.get(JOB_LABEL) or labels.get("batch.kubernetes.io/job-name")
    owners = [
        o
        for o in _get(pod, "metadata", "ownerReferences") or []
        if isinstance(o, dict) and o.get("kind") == "Job"
    ]
    if owners:
        uids = {str(_get(j, "metadata", "uid")): n for n, j in jobs.items()}
        return uids.get(str(owners[0].get("uid")))
    return str(name) if name else None
