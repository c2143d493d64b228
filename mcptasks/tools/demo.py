"""The demo tool pack: a deployment with an approval gate, a CI pipeline, a batch export, and
a wrapper of an external job API. The fakes live in mcptasks.tools.fakes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from mcptasks.tools import ApprovalPolicy, ToolContext, ToolError, WaitTimedOut, tool
from mcptasks.tools.fakes import fake_cloud

# How long cloud_job waits for the backend to know a job it submitted.
UNKNOWN_JOB_S = 30.0


@tool(policy="task", ttl_ms=24 * 3_600_000, poll_interval_ms=2000, max_input_wait_s=12 * 3600)
def deploy_service(
    ctx: ToolContext,
    service: str,
    version: str,
    environment: Literal["staging", "production"] = "staging",
) -> dict[str, Any]:
    """Build and roll out a service version; production needs an operator's approval."""
    ctx.report(f"Building {service} {version}")
    build = ctx.effect(
        "build", lambda key: fake_cloud.build(key, service, version), idempotent=True
    )
    if environment == "production":
        approval = ctx.approve(
            "approval",
            f"Approve rollout of {service} {version} to production?",
            summary={
                "service": service,
                "version": version,
                "environment": environment,
                "build": build["build_id"],
            },
            policy=ApprovalPolicy(required=1, roles=("operator",)),
        )
        if not approval.approved:
            # Completed on the wire, with a result that says so; the rollout never runs.
            return {
                "status": approval.status,
                "service": service,
                "version": version,
                "environment": environment,
                "build": build["build_id"],
                "comment": approval.comment,
            }
    ctx.report(f"Rolling out {service} {version} to {environment}")
    rollout = ctx.effect(
        "rollout", lambda key: fake_cloud.rollout(key, service, version, environment)
    )
    # A rollout whose worker died mid-call may be reconciled by an operator as applied: the
    # step's outcome is then {"external_ref": <what the operator found>, "reconciled": True}.
    rollout_id = rollout["external_ref"] if rollout.get("reconciled") else rollout["rollout_id"]
    return {
        "status": "deployed",
        "service": service,
        "version": version,
        "environment": environment,
        "build": build["build_id"],
        "rollout": rollout_id,
    }


@tool(policy="task", poll_interval_ms=1000)
def run_pipeline(
    ctx: ToolContext, pipeline: str, stages: int = 3, stage_seconds: float = 1.0
) -> dict[str, Any]:
    """Run a CI pipeline stage by stage, waiting durably between stages."""
    if not 1 <= stages <= 20:
        raise ToolError("stages must be between 1 and 20")
    for number in range(1, stages + 1):
        ctx.report(f"{pipeline}: stage {number}/{stages}")
        ctx.sleep(f"stage-{number}", stage_seconds)
    return {"pipeline": pipeline, "stages": stages, "status": "passed"}


@tool(policy="auto", poll_interval_ms=1000)
def export_dataset(
    ctx: ToolContext, dataset: str, rows: int = 1000, batch: int = 250
) -> dict[str, Any]:
    """Export a dataset in batches, reporting progress; returns where the file is."""
    if rows < 0 or batch <= 0:
        raise ToolError("rows must be ≥ 0 and batch > 0")
    written = 0
    number = 0
    while written < rows:
        number += 1
        count = min(batch, rows - written)
        ctx.effect(f"batch-{number}", _batch_writer(dataset, count), idempotent=True)
        written += count
        ctx.report(f"Exported {written}/{rows} rows of {dataset}")
    return {
        "dataset": dataset,
        "rows": written,
        "artifact": f"s3://exports/{dataset}/{ctx.uuid()}.csv",
    }


def _batch_writer(dataset: str, count: int) -> Callable[[str], dict[str, Any]]:
    return lambda key: fake_cloud.write_batch(key, dataset, count)


@tool(policy="task", poll_interval_ms=2000)
def cloud_job(ctx: ToolContext, spec: str, poll_seconds: float = 1.0) -> dict[str, Any]:
    """Submit a job to the (fake) cloud job API and follow it to the end."""
    submitted = ctx.effect("submit", lambda key: fake_cloud.submit_job(key, spec), idempotent=True)
    job_id = submitted["job_id"]
    ctx.job(job_id)
    # A job the backend does not know (yet: it may lag behind the submit) fails the task after
    # a bounded time instead of being polled for ever; one it forgets later has failed.
    try:
        ctx.wait_until(
            "known",
            lambda: fake_cloud.job_status(job_id) != "unknown",
            every=poll_seconds,
            timeout_s=UNKNOWN_JOB_S,
        )
    except WaitTimedOut:
        raise ToolError(
            f"Cloud job {job_id} is unknown to the backend after {UNKNOWN_JOB_S:g} s"
        ) from None
    ctx.wait_until(
        "finished", lambda: fake_cloud.job_status(job_id) != "running", every=poll_seconds
    )
    status = fake_cloud.job_status(job_id)
    if status == "unknown":
        raise ToolError(f"Cloud job {job_id} is no longer known to the backend")
    if status == "error":
        raise ToolError(f"Cloud job {job_id} failed")
    return {"job_id": job_id, "status": status}


@tool(policy="task", ttl_ms=2 * 3_600_000, poll_interval_ms=1000, max_input_wait_s=3600)
def draft_release_notes(ctx: ToolContext, service: str) -> dict[str, Any]:
    """Draft a service's release notes, asking the MCP client (its user) what they should say.

    The task turns ``input_required``; the client answers with ``tasks/update`` (key ``notes``).
    """
    ctx.report(f"Waiting for the release notes of {service}")
    answer = ctx.ask(
        "notes",
        f"What should the release notes of {service} say?",
        {
            "type": "object",
            "properties": {
                "summary": {"type": "string", "title": "Summary", "maxLength": 500},
                "breaking": {"type": "boolean", "title": "Breaking change", "default": False},
            },
            "required": ["summary"],
        },
        audience="client",
    )
    if not answer.accepted:
        raise ToolError(f"The release notes of {service} were not written ({answer.action})")
    return {
        "service": service,
        "summary": answer.content["summary"],
        "breaking": bool(answer.content.get("breaking", False)),
    }
