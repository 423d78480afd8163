"""Ways to ask for a replacement node, each idempotent per incident.

* Cluster API: annotate the Machine behind the Node with
  ``cluster.x-k8s.io/remediate-machine`` (its MachineHealthCheck / remediation
  controller replaces it), or delete the Machine.  Annotating twice sets the
  same value; deleting twice gives 404, which means done.
* webhook: POST JSON with ``Idempotency-Key: <incident>``; the receiver
  deduplicates.
* crd: create a ``NodeReplacement`` named after node and incident; a second
  create answers 409 AlreadyExists, which means "already requested".

The bridge records the request on the Node afterwards; if it dies in
between, the next run repeats the request and these rules make the repeat
harmless.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any, Protocol

import requests

from slurm_hooks.bridge.plan import CAPI_REMEDIATE_ANNOTATION, RequestReplacement, replacement_name
from slurm_hooks.bridge.settings import BridgeConfig
from slurm_hooks.core.clock import format_utc
from slurm_hooks.core.errors import ConfigError, ConflictError, KubernetesError
from slurm_hooks.core.http_retry import mount_retry, retry_policy
from slurm_hooks.k8s.client import (
    REPLACEMENT_GROUP,
    REPLACEMENT_VERSION,
    KubeClient,
    machine_path,
    replacement_path,
)

log = logging.getLogger(__name__)


class Replacer(Protocol):
    def request(self, step: RequestReplacement) -> str:
        """Ask for the replacement; return a short description for the log.
        Raise KubernetesError when it could not be asked (retried next pass)."""
        ...


def _payload(step: RequestReplacement) -> dict[str, Any]:
    return {
        "incident": step.incident,
        "node": step.node,
        "slurmNode": step.slurm_node,
        "code": step.code,
        "reason": step.reason,
        "machine": step.machine,
        "requestedAt": format_utc(datetime.now(UTC)),
    }


class ClusterApiReplacer:
    def __init__(self, client: KubeClient, cfg: BridgeConfig) -> None:
        self.client = client
        self.cfg = cfg

    def request(self, step: RequestReplacement) -> str:
        if not step.machine:
            raise KubernetesError(
                f"node {step.node} has no cluster.x-k8s.io/machine annotation: "
                "not managed by Cluster API"
            )
        ns = step.machine_namespace or self.cfg.capi_namespace
        path = machine_path(ns, step.machine, self.cfg.capi_version)
        if self.cfg.capi_mode == "delete":
            try:
                self.client.delete(path)
            except KubernetesError as exc:
                if exc.status != 404:
                    raise
                return f"machine {ns}/{step.machine} already gone"
            return f"deleted machine {ns}/{step.machine}"
        self.client.patch(
            path, {"metadata": {"annotations": {CAPI_REMEDIATE_ANNOTATION: ""}}}, "merge"
        )
        return f"annotated machine {ns}/{step.machine} for remediation"


class CrdReplacer:
    def __init__(self, client: KubeClient, cfg: BridgeConfig) -> None:
        self.client = client
        self.cfg = cfg

    def request(self, step: RequestReplacement) -> str:
        name = replacement_name(step.node, step.incident)
        body = {
            "apiVersion": f"{REPLACEMENT_GROUP}/{REPLACEMENT_VERSION}",
            "kind": "NodeReplacement",
            "metadata": {
                "name": name,
                "namespace": self.cfg.namespace,
                "labels": {"slurm-hooks.io/incident": step.incident[:63]},
            },
            "spec": {
                "nodeName": step.node,
                "slurmNode": step.slurm_node,
                "incident": step.incident,
                "code": step.code,
                "reason": step.reason,
                **({"machine": step.machine} if step.machine else {}),
            },
        }
        try:
            self.client.create(replacement_path(self.cfg.namespace), body)
        except ConflictError as exc:
            if exc.reason != "AlreadyExists":
                raise
            return f"nodereplacement {name} already exists"
        return f"created nodereplacement {self.cfg.namespace}/{name}"


class WebhookReplacer:
    """POST is made idempotent by the key, so it is retried like a GET."""

    def __init__(self, cfg: BridgeConfig, session: requests.Session | None = None) -> None:
        self.cfg = cfg
        self.url = cfg.webhook_url
        self.session = session or requests.Session()
        self.session.verify = cfg.webhook_ca or True
        mount_retry(self.session, retry_policy(cfg.api_retries, backoff=0.5, methods=("POST",)))
        self.token: str | None = None
        if cfg.webhook_token_env:
            self.token = os.environ.get(cfg.webhook_token_env)
            if not self.token:
                raise ConfigError(
                    f"environment variable {cfg.webhook_token_env} is empty",
                    key="bridge.webhook_token_env",
                )

    def request(self, step: RequestReplacement) -> str:
        headers = {"Idempotency-Key": step.incident, "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            resp = self.session.post(
                self.url, json=_payload(step), headers=headers, timeout=self.cfg.api_timeout
            )
        except requests.RequestException as exc:
            raise KubernetesError(f"replacement webhook: {exc}") from exc
        if resp.status_code == 409:
            return "webhook: already requested"
        if resp.status_code >= 300:
            raise KubernetesError(
                f"replacement webhook answered {resp.status_code}: {resp.text[:200]}",
                status=resp.status_code,
            )
        return f"webhook accepted ({resp.status_code})"


def make_replacer(
    client: KubeClient, cfg: BridgeConfig, session: requests.Session | None = None
) -> Replacer | None:
    if cfg.replacement == "cluster-api":
        return ClusterApiReplacer(client, cfg)
    if cfg.replacement == "crd":
        return CrdReplacer(client, cfg)
    if cfg.replacement == "webhook":
        return WebhookReplacer(cfg, session)
    return None
