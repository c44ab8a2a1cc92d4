"""Workflows and batches: jobs that wait for other jobs (chains, groups, DAGs, callbacks).

Built in memory, checked whole, then written in the caller's transaction: one row of
pgjobs_workflow, one INSERT per 5,000 jobs and one for the edges. A step with dependencies is
WAITING; the statement that ends its last dependency makes it PENDING or CANCELLED
(queries._FAN_IN). docs/workflows.md says what rests on what.

    wf = Workflow("import", on_failure="cancel")
    a = wf.add("fetch", "shop.fetch", {"day": d})
    parts = wf.group("parse", "shop.parse", configs, after=[a])
    wf.add("report", "shop.report", after=parts, mode="complete")
    wf.enqueue()
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import ProgrammingError, transaction

from . import conf, db, queries
from .enqueue import _encode, _prepare
from .exceptions import InvalidJobConfig, InvalidJobOption
from .sql import workflows as sql
from .status import EDGE_MODES, ON_FAILURE
from .validation import encode_configs

CHUNK = queries.INSERT_MANY_CHUNK  # jobs per INSERT


@dataclass(frozen=True, slots=True)
class Step:
    """A job of a workflow, as ``after=`` takes it (one member of a group is a Step too)."""

    name: str
    index: int  # in the workflow's jobs


@dataclass(slots=True)
class JobSpec:
    """A job to be, for the helpers (Celery's signature): type, config and enqueue options."""

    type: str
    config: Mapping[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)


def job(type: str, config: Mapping[str, Any] | None = None, **options: Any) -> JobSpec:  # noqa: A002
    """A JobSpec: ``job("shop.parse", {"part": 1}, queue="cpu")``."""
    return JobSpec(type, config, options)


@dataclass(slots=True)
class _Member:
    step: str
    spec: JobSpec
    after: list[Step | str]
    mode: str


@dataclass(slots=True)
class WorkflowRun:
    """What ``enqueue()`` wrote: the workflow's id and each step's job ids."""

    id: int
    steps: dict[str, list[int]]

    def __getitem__(self, step: str) -> list[int]:
        return self.steps[step]


class Workflow:
    """Jobs and their dependencies, enqueued together (see the module's docstring).

    ``on_failure``: what a failed dependency (FAILED or CANCELLED) does to a step that needs
    success: ``"cancel"`` (default) cancels it, and so on down the graph; ``"continue"`` runs
    it anyway (``job.dependencies`` tells it what failed); ``"ignore"`` counts the failure as
    a success (a ``mode="failure"`` step then does not run either).
    """

    def __init__(
        self,
        name: str = "workflow",
        *,
        on_failure: str = "cancel",
        trace_id: str | None = None,
        tenant_id: Any = None,
        operated_by: Any = None,
        using: str | None = None,
    ) -> None:
        if on_failure not in ON_FAILURE:
            raise InvalidJobOption(
                f"on_failure must be one of {', '.join(ON_FAILURE)}, got {on_failure!r}"
            )
        if not isinstance(name, str) or not 0 < len(name) <= 255:
            raise InvalidJobOption(f"a workflow's name is 1-255 characters, got {name!r}")
        self.name = name
        self.on_failure = on_failure
        self.options = {"trace_id": trace_id, "tenant_id": tenant_id, "operated_by": operated_by}
        self.using = using
        self.members: list[_Member] = []
        self._steps: dict[str, list[int]] = {}
        self._runs: list[tuple[int, int]] = []  # (first member, count) sharing their columns
        self.id: int | None = None

    def add(
        self,
        step: str,
        type: str,  # noqa: A002
        config: Mapping[str, Any] | None = None,
        *,
        after: Any = (),
        mode: str = "success",
        **options: Any,
    ) -> Step:
        """One job, step ``step``, run once every job of ``after`` (Steps, lists of them,
        or step names) has ended as ``mode`` asks: ``"success"`` (all succeeded),
        ``"failure"`` (at least one failed: a failure callback) or ``"complete"`` (any)."""
        return self._add(step, [JobSpec(type, config, options)], after, mode)[0]

    def group(
        self,
        step: str,
        type: str,  # noqa: A002
        configs: Iterable[Mapping[str, Any] | None],
        *,
        after: Any = (),
        mode: str = "success",
        **options: Any,
    ) -> list[Step]:
        """One job per config, all step ``step``, each after ``after``."""
        return self._add(step, [JobSpec(type, c, options) for c in configs], after, mode)

    def add_spec(self, step: str, spec: JobSpec, *, after: Any = (), mode: str = "success") -> Step:
        return self._add(step, [spec], after, mode)[0]

    def _add(self, step: str, specs: list[JobSpec], after: Any, mode: str) -> list[Step]:
        if not isinstance(step, str) or not 0 < len(step) <= 255:
            raise InvalidJobOption(f"a step's name is 1-255 characters, got {step!r}")
        if step in self._steps:
            raise InvalidJobOption(f"duplicate step {step!r} in workflow {self.name!r}")
        if mode not in EDGE_MODES:
            raise InvalidJobOption(f"mode must be one of {', '.join(EDGE_MODES)}, got {mode!r}")
        for spec in specs:
            if spec.options.get("unique_key") is not None:
                raise InvalidJobOption(
                    f"step {step!r}: a workflow's job cannot have a unique_key (it would be "
                    "skipped while its dependants wait for it)"
                )
        parents = _flatten(after)
        first = len(self.members)
        self.members.extend(_Member(step, s, parents, mode) for s in specs)
        self._steps[step] = list(range(first, len(self.members)))
        head = specs[0]
        if all(s.options is head.options and s.type == head.type for s in specs):
            self._runs.append((first, len(specs)))  # one group(): all but the configs shared
        else:
            self._runs += [(i, 1) for i in range(first, len(self.members))]
        return [Step(step, i) for i in range(first, len(self.members))]

    def enqueue(self) -> WorkflowRun:
        """Check everything, then write the workflow in the caller's transaction (rolled back
        with it). A bad workflow raises InvalidJobOption (or the enqueue errors) before any SQL."""
        plan = self._plan()
        alias = self.using or conf.get("DATABASE")
        head = _prepare(
            self.members[0].spec.type,
            queue=None,
            priority=None,
            run_after=None,
            max_attempts=None,
            unique_key=None,
            **self.options,
        )
        try:
            with transaction.atomic(using=alias):
                wf_id = sql.insert_workflow(self.name, self.on_failure, using=alias)
                ids: list[int] = []
                for chunk in plan.chunks():
                    ids += queries.insert_workflow_jobs(
                        wf_id,
                        chunk,
                        trace_id=head.trace_id,
                        tenant_id=head.tenant_id,
                        operated_by=head.operated_by,
                        using=alias,
                    )
                if plan.parents:
                    sql.insert_edges(*plan.edge_arrays(ids), using=alias)
        except ProgrammingError as exc:
            db.raise_if_not_migrated(exc, alias)
            raise
        self.id = wf_id
        return WorkflowRun(wf_id, {s: [ids[i] for i in idx] for s, idx in self._steps.items()})

    def _plan(self) -> _Plan:
        """Every job's columns and every edge (parent, child, mode), by job index; raises on
        anything wrong before the caller writes anything."""
        n = len(self.members)
        if n == 0:
            raise InvalidJobOption(f"workflow {self.name!r} has no jobs")
        cap = conf.get("WORKFLOW_MAX_JOBS")
        if n > cap:
            raise InvalidJobOption(
                f"workflow {self.name!r} has {n} jobs, over PGJOBS['WORKFLOW_MAX_JOBS'] ({cap})"
            )
        parents_of = self._parents_of()
        plan = _Plan()
        prepared: dict[tuple[str, int], tuple] = {}  # a group's members share their options
        for (first, k), parents in zip(self._runs, parents_of, strict=True):
            m = self.members[first]
            plan.add_jobs(k, self._prepared(m, prepared), m.step, len(parents))
            if parents:
                plan.parents += parents * k
                plan.children += [c for c in range(first, first + k) for _ in parents]
                plan.modes += [m.mode] * (len(parents) * k)
        plan.dependants = bytearray(n)
        for p in set(plan.parents):
            plan.dependants[p] = 1
        plan.configs = self._encoded_configs()
        return plan

    def _parents_of(self) -> list[list[int]]:
        """Each run's parents (job indexes, no repeat), resolved once per step (a group's
        members share theirs); refuses a cycle of steps."""
        resolved: dict[int, list[int]] = {}
        step_parents: dict[str, set[str]] = {s: set() for s in self._steps}
        found = []
        for first, _ in self._runs:
            m = self.members[first]
            parents = resolved.get(id(m.after))
            if parents is None:
                parents = resolved[id(m.after)] = list(dict.fromkeys(self._resolve(m)))
                step_parents[m.step].update({self.members[p].step for p in parents})
            found.append(parents)
        _refuse_cycles(step_parents)
        return found

    def _encoded_configs(self) -> list[str]:
        """The configs as JSON arrays of CHUNK, checked as enqueue_many checks them; a refused
        one is named by its step."""
        arrays = []
        for start in range(0, len(self.members), CHUNK):
            members = self.members[start : start + CHUNK]
            try:
                arrays.append(
                    encode_configs(
                        [m.spec.config for m in members],
                        max_bytes=conf.get("MAX_CONFIG_BYTES"),
                        max_depth=conf.get("MAX_CONFIG_DEPTH"),
                    )
                )
            except InvalidJobConfig:
                for m in members:
                    try:
                        _encode(m.spec.config)
                    except InvalidJobConfig as exc:
                        raise exc.__class__(f"step {m.step!r}: {exc}") from None
                raise
        return arrays

    def _resolve(self, m: _Member) -> list[int]:
        found: list[int] = []
        members = self.members
        for ref in m.after:
            if isinstance(ref, Step):
                if ref.index >= len(members) or members[ref.index].step != ref.name:
                    raise InvalidJobOption(f"step {m.step!r}: {ref!r} is not of this workflow")
                found.append(ref.index)
            elif ref in self._steps:
                found += self._steps[ref]
            else:
                raise InvalidJobOption(
                    f"step {m.step!r} runs after unknown step {ref!r} (steps: "
                    f"{', '.join(sorted(self._steps))})"
                )
        return found

    def _prepared(self, m: _Member, cache: dict[tuple[str, int], tuple]) -> tuple:
        """(type, queue, priority, max_attempts, delay) of ``m``, checked as enqueue does."""
        key = (m.spec.type, id(m.spec.options))
        if key in cache:
            return cache[key]
        opts = m.spec.options
        unknown = set(opts) - {"queue", "priority", "max_attempts", "run_after"}
        if unknown:
            raise InvalidJobOption(f"step {m.step!r}: unknown options {sorted(unknown)}")
        new = _prepare(
            m.spec.type,
            queue=opts.get("queue"),
            priority=opts.get("priority"),
            run_after=opts.get("run_after"),
            max_attempts=opts.get("max_attempts"),
            unique_key=None,
            **self.options,
        )
        delay = new.delay
        if new.run_at is not None:  # an absolute time: as seconds from now (the database's)
            delay = (new.run_at - _now()).total_seconds()
        cache[key] = (new.type, new.queue, new.priority, new.max_attempts, delay)
        return cache[key]


def _now() -> datetime:
    from django.utils import timezone

    return timezone.now()


@dataclass(slots=True)
class _Plan:
    """A workflow's jobs, column by column, and its edges (job indexes), as _plan() checked
    them; written as array literals (no per-element adaptation by the driver)."""

    types: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)
    max_attempts: list[int] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    deps: list[int] = field(default_factory=list)
    dependants: bytearray = field(default_factory=bytearray)
    configs: list[str] = field(default_factory=list)  # one JSON array per CHUNK jobs
    parents: list[int] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)

    def add_jobs(self, k: int, prepared: tuple, step: str, deps: int) -> None:
        """``k`` jobs sharing their columns (all but the config)."""
        type_, queue, priority, max_attempts, delay = prepared
        self.types += [type_] * k
        self.queues += [queue] * k
        self.priorities += [priority] * k
        self.max_attempts += [max_attempts] * k
        self.delays += [delay] * k
        self.steps += [step] * k
        self.deps += [deps] * k

    def chunks(self) -> Iterator[queries.WorkflowJobs]:
        for k, configs in enumerate(self.configs):
            cut = slice(k * CHUNK, (k + 1) * CHUNK)
            yield queries.WorkflowJobs(
                configs=configs,
                types=_texts(self.types[cut]),
                queues=_texts(self.queues[cut]),
                priorities=_ints(self.priorities[cut]),
                max_attempts=_ints(self.max_attempts[cut]),
                steps=_texts(self.steps[cut]),
                deps=_ints(self.deps[cut]),
                dependants="{" + ",".join(self.dependants[cut].decode().translate(_BOOLS)) + "}",
                delays=_floats(self.delays[cut]),
            )

    def edge_arrays(self, ids: list[int]) -> tuple[str, str, str]:
        """(parent ids, child ids, modes) as array literals, from the jobs' ids in order."""
        job = ids.__getitem__
        return _ints(map(job, self.parents)), _ints(map(job, self.children)), _texts(self.modes)


_BOOLS = {0: "f", 1: "t"}  # str.translate: the dependants' bytes as a bool array's letters


def _ints(values: Iterable[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _texts(values: Sequence[str]) -> str:
    """An array literal of ``values``, each double-quoted (a few distinct ones, quoted once)."""
    quoted = {v: '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in set(values)}
    return "{" + ",".join(map(quoted.__getitem__, values)) + "}"


def _floats(values: Sequence[float]) -> str:
    if all(map(math.isfinite, values)):
        return "{" + ",".join(map(repr, values)) + "}"
    return "{" + ",".join(repr(v) if math.isfinite(v) else str(v) for v in values) + "}"


def _flatten(after: Any) -> list[Step | str]:
    if isinstance(after, Step | str):
        return [after]
    if isinstance(after, int) and not isinstance(after, bool):
        raise InvalidJobOption(
            f"after={after!r}: existing jobs cannot be dependencies yet; name a step of this "
            "workflow"
        )
    if not isinstance(after, Iterable):
        raise InvalidJobOption(f"after takes steps or step names, got {after!r}"[:300])
    found: list[Step | str] = []
    for item in after:
        found.extend(_flatten(item))
    return found


def _refuse_cycles(parents: dict[str, set[str]]) -> None:
    """InvalidJobOption naming the steps of a cycle, if the step graph has one."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(step: str, path: list[str]) -> None:
        state[step] = 1
        for p in sorted(parents[step]):
            if state.get(p) == 1:
                cycle = [*path[path.index(p) :], p] if p in path else [step, p]
                raise InvalidJobOption("cycle in the workflow's steps: " + " -> ".join(cycle))
            if p not in state:
                visit(p, [*path, p])
        state[step] = 2

    for s in sorted(parents):
        if s not in state:
            visit(s, [s])


# --- helpers, as Celery's canvas ---------------------------------------------------------------


def _spec(item: JobSpec | tuple) -> JobSpec:
    if isinstance(item, JobSpec):
        return item
    if isinstance(item, tuple) and 1 <= len(item) <= 2 and isinstance(item[0], str):
        return JobSpec(item[0], item[1] if len(item) > 1 else None)
    raise InvalidJobOption(f"expected job(type, config, ...) or (type, config), got {item!r}"[:300])


def chain(*specs: JobSpec | tuple, name: str = "chain", **options: Any) -> Workflow:
    """Each job after the previous one (steps "1", "2", ...); ``.enqueue()`` it. A task step
    (``task.step(...)``) after the first gets the previous step's return value as its first
    argument."""
    wf = Workflow(name, **options)
    previous: Any = ()
    for i, item in enumerate(specs, 1):
        spec = _spec(item)
        if i > 1:
            spec = _piped(spec)
        previous = wf.add_spec(str(i), spec, after=previous)
    return wf


def _piped(spec: JobSpec) -> JobSpec:
    """A task step that takes its parent's return value first (tasks_registry reads "pipe")."""
    from .tasks_registry import TYPE_PREFIX  # django.tasks only when tasks are used

    if not spec.type.startswith(TYPE_PREFIX) or not isinstance(spec.config, Mapping):
        return spec
    return JobSpec(spec.type, {**spec.config, "pipe": True}, spec.options)


def group(*specs: JobSpec | tuple, name: str = "group", **options: Any) -> Workflow:
    """Jobs with no order between them, all step "group"."""
    wf = Workflow(name, **options)
    _add_group(wf, "group", specs)
    return wf


def _add_group(wf: Workflow, step: str, specs: Sequence[JobSpec | tuple]) -> list[Step]:
    members = [_spec(s) for s in specs]
    if not members:
        raise InvalidJobOption(f"{wf.name}: an empty group")
    first = len(wf.members)
    wf._add(step, members, (), "success")
    return [Step(step, i) for i in range(first, len(wf.members))]


def chord(
    header: Sequence[JobSpec | tuple],
    callback: JobSpec | tuple,
    *,
    name: str = "chord",
    mode: str = "success",
    **options: Any,
) -> Workflow:
    """A group (step "header") and a callback (step "callback") run once all of it ended."""
    wf = Workflow(name, **options)
    members = _add_group(wf, "header", header)
    wf.add_spec("callback", _spec(callback), after=members, mode=mode)
    return wf


class Batch(Workflow):
    """Jobs plus callbacks: ``on_success`` runs once all succeeded, ``on_failure`` once all
    ended and one at least failed, ``on_complete`` once all ended."""

    def __init__(
        self,
        jobs: Sequence[JobSpec | tuple],
        *,
        on_success: JobSpec | tuple | None = None,
        on_failure: JobSpec | tuple | None = None,
        on_complete: JobSpec | tuple | None = None,
        name: str = "batch",
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        members = _add_group(self, "batch", jobs)
        for step, mode, cb in (
            ("on_success", "success", on_success),
            ("on_failure", "failure", on_failure),
            ("on_complete", "complete", on_complete),
        ):
            if cb is not None:
                self.add_spec(step, _spec(cb), after=members, mode=mode)
