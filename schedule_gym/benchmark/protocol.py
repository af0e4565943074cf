"""Fixed generalisation protocols: training tasks, held-out tasks, a budget, seeds and one metric.

A :class:`Protocol` names its training and held-out tasks by suite or task name; held-out tasks are compared
with training tasks by :func:`computation_key` (:attr:`~schedule_gym.tasks.Task.key`, the operator,
parameters, shape, splits, dtype and loop order, less the epilogue: a convolution followed by ReLU and the
same convolution followed by ReLU6 run one loop nest), and a held-out task whose computation is also a
training task's is dropped from the held-out split (ResNet-18 shares layers with ResNet-50), so no held-out
computation is ever trained on.

The metric is the **median over held-out tasks of the regret** ``best_found / reference - 1`` (each task's
regret the mean over seeds), on the deterministic mock backend with a named profile; the references are
:mod:`schedule_gym.benchmark.references`', the runs :func:`~schedule_gym.benchmark.runs.run_protocol`'s.
A protocol with ``intervals`` adds the interquartile mean over (task, seed) runs and stratified-bootstrap
confidence intervals of both (:mod:`schedule_gym.benchmark.aggregate`); one with ``budget_tracks`` is run
at one of those budgets per row (:meth:`Protocol.at_budget`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from schedule_gym.envs.multitask_env import TaskLayout, resolve_tasks
from schedule_gym.operators.epilogue import EPILOGUE_PARAMS
from schedule_gym.tasks import V0_OPERATORS, Task, expand_suites, gemm

__all__ = ["PROTOCOLS", "SPLITS", "Protocol", "computation_key", "get_protocol"]

#: the task splits of a protocol (:meth:`Protocol.split_tasks`)
SPLITS = ("train", "held_out", "validation")


def computation_key(task: Task | str) -> str:
    """The task's key (or a key as recorded in a sidecar) without its epilogue parameters
    (:data:`~schedule_gym.operators.epilogue.EPILOGUE_PARAMS`): what a held-out task must not share with
    anything trained on."""
    key = task.key if isinstance(task, Task) else task
    head, brace, rest = key.partition("{")
    if not brace:
        return key
    params, _, tail = rest.partition("}")
    kept = [p for p in params.split(",") if p.split("=", 1)[0] not in EPILOGUE_PARAMS]
    return head + ("{" + ",".join(kept) + "}" if kept else "") + tail


@dataclass(frozen=True)
class Protocol:
    """A generalisation protocol. ``train`` and ``held_out``: comma-separated suite or task names (or Task
    tuples); ``budget``: unique measurements per held-out task and seed; ``seeds``: the default seeds;
    ``operators``: the operators whose layers its suites hold (comma-separated; None: every layer);
    ``budget_tracks``: the budgets a row may be run at (empty: ``budget`` only); ``intervals``: rows report
    the IQM and 95% stratified-bootstrap intervals (:mod:`~schedule_gym.benchmark.aggregate`);
    ``validation``: comma-separated suites of the validation split (:meth:`validation_tasks`), drawn
    ``validation_per_suite`` layers each (None: every layer, as for a frozen split of ``schedule_gym/data/splits``).
    The validation split is no part of a row's score, so it is not in :meth:`to_dict` (a row run on it records
    ``split``)."""

    name: str
    train: str | tuple[Task, ...]
    held_out: str | tuple[Task, ...]
    budget: int = 100
    seeds: tuple[int, ...] = (0, 1)
    profile: str = "znver5-2core-fitted"
    exact_limit: int = 200_000
    description: str = ""
    operators: str | None = None
    budget_tracks: tuple[int, ...] = ()
    intervals: bool = False
    validation: str = ""
    validation_per_suite: int | None = 6

    def __post_init__(self) -> None:
        if self.budget_tracks and self.budget not in self.budget_tracks:
            raise ValueError(f"protocol {self.name}: budget {self.budget} is not one of its budget tracks "
                             f"{list(self.budget_tracks)}")

    def at_budget(self, track: int | None) -> Protocol:
        """This protocol at the budget track ``track`` (None: its default ``budget``); a budget that is not
        one of its tracks is a ``ValueError`` naming them."""
        if track is None or track == self.budget:
            return self
        if track not in self.budget_tracks:
            known = ", ".join(map(str, self.budget_tracks)) if self.budget_tracks else f"{self.budget} only"
            raise ValueError(f"protocol {self.name} has no budget track {track!r}; its tracks: {known}")
        return replace(self, budget=track)

    def train_tasks(self) -> tuple[Task, ...]:
        return resolve_tasks(expand_suites(self.train, self.operators))

    def held_out_tasks(self) -> tuple[Task, ...]:
        """The held-out tasks, less any whose computation (:func:`computation_key`) is a training task's."""
        trained = {computation_key(t) for t in self.train_tasks()}
        return tuple(t for t in resolve_tasks(expand_suites(self.held_out, self.operators))
                     if computation_key(t) not in trained)

    def validation_tasks(self) -> tuple[Task, ...]:
        """Tasks to choose among checkpoints or settings on without looking at the held-out split: per suite of
        ``validation``, in the suite's order, ``validation_per_suite`` layers drawn (``numpy`` seed 0; None: all of
        them) among those whose computation (:func:`computation_key`) is in neither split nor an earlier validation
        task, and that fit :meth:`layout` (a policy trained in the protocol's layout acts on them). Empty without
        ``validation``. A draw follows its suites' order, which a change to the model mapping may move: a
        protocol whose choices must stay comparable names a frozen split instead (v1's ``v1-validation``)."""
        layout = self.layout()
        seen = {computation_key(t) for t in self.train_tasks() + self.held_out_tasks()}
        picked: list[Task] = []
        for suite in filter(None, self.validation.split(",")):
            pool = []
            for task in resolve_tasks(expand_suites(suite, self.operators)):
                key = computation_key(task)
                if key in seen or not layout.fits(task):
                    continue
                seen.add(key)
                pool.append(task)
            if self.validation_per_suite is None:
                picked.extend(pool)
                continue
            draw = np.random.default_rng(0).choice(len(pool), min(self.validation_per_suite, len(pool)), replace=False)
            picked.extend(pool[i] for i in sorted(draw))
        return tuple(picked)

    def split_tasks(self, split: str) -> tuple[Task, ...]:
        """The tasks of ``split``: ``"train"``, ``"held_out"`` or ``"validation"`` (anything else is a
        ``ValueError`` naming the splits)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
        return {"train": self.train_tasks, "held_out": self.held_out_tasks, "validation": self.validation_tasks}[split]()

    def layout(self) -> TaskLayout:
        """One observation/action layout for both splits (a policy trained on one runs on the other)."""
        return TaskLayout.of_tasks(self.train_tasks() + self.held_out_tasks())

    def env_kwargs(self, split: str = "train") -> dict[str, Any]:
        """Keyword arguments of a :class:`~schedule_gym.envs.MultiTaskEnv` on one split."""
        return {"tasks": list(self.split_tasks(split)), "layout": self.layout().to_dict(),
                "backend_options": {"profile": self.profile}}

    def to_dict(self) -> dict[str, Any]:
        def names(x: str | tuple[Task, ...]) -> str:
            return x if isinstance(x, str) else ",".join(t.name for t in x)
        return {"name": self.name, "train": names(self.train), "held_out": names(self.held_out), "budget": self.budget,
                "seeds": list(self.seeds), "profile": self.profile, "exact_limit": self.exact_limit,
                **({"operators": self.operators} if self.operators is not None else {}),
                **({"budget_tracks": list(self.budget_tracks)} if self.budget_tracks else {}),
                **({"intervals": True} if self.intervals else {})}


PROTOCOLS: dict[str, Protocol] = {
    # Train on ResNet-50 and BERT-base layers; hold out two whole networks, ResNet-18 and MobileNet-V2
    # (depthwise convolutions, never seen in training), less the layers ResNet-18 shares with ResNet-50.
    "v0": Protocol("v0", train="resnet50,bert-base", held_out="resnet18,mobilenetv2", budget=100, seeds=(0, 1),
                   description="train ResNet-50 + BERT-base, hold out ResNet-18 + MobileNet-V2; 100 measurements",
                   operators=V0_OPERATORS),
    # v0's split and task lists (so v0's shipped policies run on it), at fixed budget tracks of 16, 64 and 256
    # measurements (a row is one track), five seeds, and the median and IQM with stratified-bootstrap intervals.
    # Its validation split: six layers of each zoo network in neither split (TenSet's training side less
    # ResNet-18), to choose checkpoints and settings on; a depthwise layer of EfficientNet-B0 is among them.
    # Drawn from the zoo's suites and frozen (schedule_gym/data/splits/v1-validation.json), so a change to the
    # model mapping does not move it.
    "v1": Protocol("v1", train="resnet50,bert-base", held_out="resnet18,mobilenetv2", budget=64, seeds=(0, 1, 2, 3, 4),
                   description="v0's split; budget tracks of 16, 64 and 256 measurements; seeds 0-4; median and IQM "
                               "with 95% stratified-bootstrap intervals",
                   operators=V0_OPERATORS, budget_tracks=(16, 64, 256), intervals=True,
                   validation="v1-validation", validation_per_suite=None),
    # Compatible with TenSet's split: hold out the networks TenSet holds out (ResNet-50, MobileNet-V2, ResNeXt-50,
    # BERT-base, BERT-tiny), train on the zoo's others, so a cost model pretrained on TenSet's training networks
    # meets no network it was trained on; every operator the mapping finds (pooling included: nothing shipped
    # depends on this layout); v1's tracks, seeds and statistics.
    "tenset-v1": Protocol(
        "tenset-v1", train="zoo-vgg16,zoo-inceptionv3,zoo-densenet121,zoo-efficientnet-b0,zoo-vit-b16,zoo-gpt2,zoo-resnet18",
        held_out="zoo-resnet50,zoo-mobilenetv2,zoo-resnext50,zoo-bert-base,zoo-bert-tiny", budget=64,
        seeds=(0, 1, 2, 3, 4), budget_tracks=(16, 64, 256), intervals=True,
        description="train on the zoo's VGG-16, Inception-v3, DenseNet-121, EfficientNet-B0, ViT-B/16, GPT-2 and "
                    "ResNet-18; hold out TenSet's held-out networks ResNet-50, MobileNet-V2, ResNeXt-50, BERT-base, "
                    "BERT-tiny; v1's tracks, seeds and statistics"),
    # Seconds-long protocol for tests and smoke runs: small GEMMs whose spaces are scored exactly.
    "smoke": Protocol(
        "smoke",
        train=(gemm(32, 32, 32, d_m=2, d_k=2, d_n=2, name="smoke-train-32"),
               gemm(64, 16, 64, d_m=2, d_k=2, d_n=2, name="smoke-train-64x16x64")),
        held_out=(gemm(16, 64, 32, d_m=2, d_k=2, d_n=2, name="smoke-held-16x64x32"),
                  gemm(64, 64, 16, d_m=2, d_k=2, d_n=2, name="smoke-held-64x64x16")),
        budget=10, seeds=(0,),
        description="tiny GEMMs, exact optima, 10 measurements",
    ),
}


def get_protocol(name: str | Protocol) -> Protocol:
    if isinstance(name, Protocol):
        return name
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; known protocols: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]

