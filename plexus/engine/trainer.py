"""Full-batch training loop shared by the serial reference and the distributed model: an
optimizer of torch.optim, a learning-rate schedule of torch.optim.lr_scheduler, gradient
clipping by the global norm and early stopping on the validation metric, all of whose state a
checkpoint holds grid-independently (`Trainer.full_state`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Protocol

import torch
from torch.nn.utils import clip_grads_with_norm_

from plexus_datasets.trainable import check_trainable
from . import optim
from .arguments import check_model_and_config
from .config import TrainConfig


class TrainableModel(Protocol):
    """What the trainer needs of a model (SerialModel and DistributedModel both provide it)."""

    def __call__(self, step: int | None = None) -> torch.Tensor: ...
    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor: ...
    def metrics(self, logits: torch.Tensor) -> dict[str, float | None]: ...
    def named_shards(self) -> dict[str, torch.nn.Parameter]: ...
    def full_parameter(self, name: str, shard: torch.Tensor) -> torch.Tensor: ...
    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor: ...
    def named_stats(self) -> dict[str, torch.Tensor]: ...
    def parameter_layer(self, name: str) -> int | None: ...
    def grad_norm(self) -> torch.Tensor: ...


@dataclass
class EpochStats:
    """One epoch: training loss (with dropout), the metric on each split (without dropout:
    accuracy, or the mean ROC-AUC of a multi-label task; the fields keep the name "acc"), the
    wall time of its training step and that of its evaluation (0 when it was not evaluated)."""

    epoch: int
    loss: float
    train_acc: float | None
    val_acc: float | None
    test_acc: float | None
    epoch_time_s: float  # the training step only (forward, backward, update)
    eval_time_s: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class BestEpoch:
    """The epoch with the highest validation metric so far (the earliest on ties)."""

    epoch: int | None = None
    val_acc: float | None = None
    test_acc: float | None = None
    train_acc: float | None = None

    def update(self, stats: EpochStats) -> bool:
        """Take ``stats`` if it was evaluated and beats the best validation metric; whether it
        did."""
        if stats.val_acc is None:
            return False
        if self.val_acc is None or stats.val_acc > self.val_acc:
            self.epoch, self.val_acc = stats.epoch, stats.val_acc
            self.test_acc, self.train_acc = stats.test_acc, stats.train_acc
            return True
        return False

    def as_dict(self) -> dict[str, Any]:
        """Plain types (stored in checkpoints so a resumed run keeps its best epoch)."""
        return {"epoch": self.epoch, "val_acc": self.val_acc, "test_acc": self.test_acc,
                "train_acc": self.train_acc}

    @classmethod
    def from_dict(cls, d: dict | None) -> "BestEpoch":
        d = d or {}
        return cls(d.get("epoch"), d.get("val_acc"), d.get("test_acc"), d.get("train_acc"))


def param_groups(model: TrainableModel, params: dict[str, torch.nn.Parameter],
                 cfg: TrainConfig) -> list[dict]:
    """The optimizer's parameter groups: weight decay on every parameter, or (scope "first", as
    Kipf & Welling) on the first layer's only."""
    if cfg.weight_decay_scope not in ("all", "first"):
        raise ValueError(f"unknown weight decay scope {cfg.weight_decay_scope!r}; use all or first")
    if cfg.weight_decay_scope == "all":
        return [{"params": list(params.values()), "weight_decay": cfg.weight_decay}]
    first = [p for n, p in params.items() if model.parameter_layer(n) == 0]
    rest = [p for n, p in params.items() if model.parameter_layer(n) != 0]
    return [{"params": first, "weight_decay": cfg.weight_decay},
            {"params": rest, "weight_decay": 0.0}]


def make_optimizer(groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    """``cfg.optimizer`` of torch.optim over ``groups``. Every one is elementwise, so the sharded
    optimizer equals the full one: each element lives on exactly one rank, or identically on
    each replica."""
    # plexus.engine.optim's: torch.optim's classes without the torch._dynamo import (seconds)
    if cfg.optimizer == "sgd":
        return optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    kind = optim.AdamW if cfg.optimizer == "adamw" else optim.Adam
    return kind(groups, lr=cfg.lr)


def make_schedule(opt: torch.optim.Optimizer, cfg: TrainConfig) -> Any:
    """``cfg.lr_schedule`` of torch.optim.lr_scheduler on ``opt`` (None: a constant rate).
    Cosine anneals to ``lr_min`` over the run's epochs; plateau watches the validation metric
    (higher is better)."""
    sched = torch.optim.lr_scheduler
    if cfg.lr_schedule == "cosine":
        return sched.CosineAnnealingLR(opt, T_max=max(cfg.epochs, 1), eta_min=cfg.lr_min)
    if cfg.lr_schedule == "step":
        return sched.StepLR(opt, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
    if cfg.lr_schedule == "plateau":
        return sched.ReduceLROnPlateau(opt, mode="max", factor=cfg.lr_gamma,
                                       patience=cfg.lr_patience, min_lr=cfg.lr_min)
    return None


def needs_validation(cfg: TrainConfig) -> str | None:
    """What in ``cfg`` needs the validation metric (None: nothing)."""
    if cfg.patience is not None:
        return "early stopping (patience)"
    if cfg.lr_schedule == "plateau":
        return "the plateau schedule"
    return None


def _check_trainable(model: TrainableModel, cfg: TrainConfig) -> None:
    """`plexus_datasets.trainable.check_trainable` on the model's split counts (a distributed
    model's global ``counts``, a serial model's masks), before the first step."""
    model = getattr(model, "net", model)  # the API's GraphModel wraps the engine's model
    counts = getattr(model, "counts", None)
    if counts is None and isinstance(getattr(model, "masks", None), dict):
        counts = {k: int(m.sum()) for k, m in model.masks.items()}  # once, at set-up
    labels = getattr(model, "labels", None)
    if counts is None or labels is None or not hasattr(model, "num_classes"):
        return  # a model without a task's split (a test's stand-in)
    check_trainable(getattr(model, "graph_name", None) or "the graph", counts, model.num_classes,
                    labels.ndim == 2, needs_validation(cfg))


class Trainer:
    """The training loop on a model's (sharded) parameters: ``cfg.optimizer``, its schedule,
    clipping and early stopping (`TrainConfig`). ``best`` is the best validation epoch so far;
    ``stopped`` the epoch early stopping ended the run at (None: it did not)."""

    def __init__(self, model: TrainableModel, cfg: TrainConfig) -> None:
        check_model_and_config(model, cfg)
        self.model, self.cfg = model, cfg
        _check_trainable(model, cfg)
        self.params = model.named_shards()
        self.opt = make_optimizer(param_groups(model, self.params, cfg), cfg)
        self.schedule = make_schedule(self.opt, cfg)
        self.epoch = 0  # epochs completed; also the dropout step key, so a resume replays exactly
        self.best = BestEpoch()
        self.stopped: int | None = None

    def train_step(self) -> float:
        """One forward/backward/update with dropout; returns the training loss."""
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        loss = self.model.loss(self.model(step=self.epoch))
        loss.backward()
        if self.cfg.clip_grad_norm is not None:
            # the norm of the whole gradient (every rank the same): no host synchronisation
            clip_grads_with_norm_(list(self.params.values()), self.cfg.clip_grad_norm,
                                  self.model.grad_norm())
        self.opt.step()
        if self.cfg.lr_schedule in ("cosine", "step"):  # per epoch; plateau after evaluations
            self.schedule.step()
        return float(loss.detach())

    @property
    def lr(self) -> float:
        """The learning rate of the next step (the first parameter group's)."""
        return float(self.opt.param_groups[0]["lr"])

    @torch.no_grad()
    def evaluate(self) -> dict[str, float | None]:
        """The metric (accuracy, or ROC-AUC for a multi-label task) on train/val/test, without
        dropout."""
        self.model.eval()
        return self.model.metrics(self.model())

    def run_epoch(self) -> EpochStats:
        """Train one epoch, then evaluate if ``eval_every`` says so."""
        start = time.perf_counter()
        loss = self.train_step()
        elapsed = time.perf_counter() - start
        self.epoch += 1
        every = self.cfg.eval_every
        start = time.perf_counter()
        acc = self.evaluate() if every and (self.epoch % every == 0 or
                                             self.epoch == self.cfg.epochs) else {}
        stats = EpochStats(self.epoch, loss, acc.get("train"), acc.get("val"), acc.get("test"),
                           elapsed, time.perf_counter() - start if acc else 0.0)
        self._after_evaluation(stats)
        return stats

    def _after_evaluation(self, stats: EpochStats) -> None:
        """The best epoch, the plateau schedule and early stopping see an evaluated epoch."""
        if stats.val_acc is None:
            return
        self.best.update(stats)
        if self.cfg.lr_schedule == "plateau":
            self.schedule.step(stats.val_acc)
        patience, best = self.cfg.patience, self.best.epoch
        if patience is not None and best is not None and stats.epoch - best >= patience:
            self.stopped = stats.epoch

    def fit(self, epochs: int | None = None,
            callback: Callable[[EpochStats], None] | None = None) -> list[EpochStats]:
        """Run until ``epochs`` (default: the config's) epochs are complete or early stopping
        ends the run (`stopped`; `best` is the epoch to report)."""
        history = []
        while (self.epoch < (epochs if epochs is not None else self.cfg.epochs)
                and self.stopped is None):
            stats = self.run_epoch()
            history.append(stats)
            if callback is not None:
                callback(stats)
        return history

    # ---- grid-independent state ----------------------------------------------------------
    def full_state(self) -> dict:
        """Parameters, BatchNorm running statistics and the optimizer's per-parameter state
        (Adam's moments, SGD's momentum) as full unpadded tensors, plus the epoch and the loop's
        own state ("loop": the optimizer's kind, the schedule's state, every group's learning
        rate, the best epoch, where early stopping ended the run). On a grid this is a
        collective: call it on every rank."""
        params, moments = {}, {}
        stats = {name: self.model.full_parameter(name, b).cpu()
                 for name, b in self.model.named_stats().items()}
        for name, p in self.params.items():
            params[name] = self.model.full_parameter(name, p).cpu()
            st = {k: v for k, v in self.opt.state.get(p, {}).items() if v is not None}
            if st:
                moments[name] = {k: float(v) if k == "step" else
                                 self.model.full_parameter(name, v).cpu() for k, v in st.items()}
        loop = {"optimizer": self.cfg.optimizer,
                "schedule": self.schedule.state_dict() if self.schedule is not None else None,
                "lrs": [float(g["lr"]) for g in self.opt.param_groups],
                "best": self.best.as_dict(), "stopped": self.stopped}
        return {"epoch": self.epoch, "params": params, "adam": moments, "stats": stats,
                "loop": loop}

    def load_full_state(self, state: dict) -> None:
        """Restore what `full_state` returned (possibly saved on another grid). A state without
        "loop" (saved before it existed) is Adam's at the constant rate."""
        missing = set(self.params) ^ set(state["params"])
        if missing:
            raise ValueError(f"checkpoint parameters do not match the model: {sorted(missing)}")
        loop = state.get("loop") or {"optimizer": "adam"}
        if loop.get("optimizer") != self.cfg.optimizer:
            raise ValueError(f"the checkpoint holds {loop.get('optimizer')!r:.20}'s state, the "
                             f"run uses {self.cfg.optimizer}")
        with torch.no_grad():
            for name, p in self.params.items():
                full = state["params"][name]
                expected = tuple(self.model.full_parameter(name, p).shape)
                if tuple(full.shape) != expected:
                    raise ValueError(f"checkpoint {name} has shape {tuple(full.shape)}, "
                                     f"the model needs {expected}")
                p.copy_(self.model.shard_of(name, full))
                if name in state["adam"]:
                    self.opt.state[p] = {
                        k: torch.tensor(v) if k == "step" else self.model.shard_of(name, v)
                        for k, v in state["adam"][name].items()}
            own = self.model.named_stats()
            if set(own) != set(state.get("stats", {})):
                raise ValueError("checkpoint running statistics do not match the model: "
                                 f"{sorted(set(own) ^ set(state.get('stats', {})))}")
            for name, b in own.items():
                b.copy_(self.model.shard_of(name, state["stats"][name]))
        if self.schedule is not None and loop.get("schedule") is not None:
            self.schedule.load_state_dict(loop["schedule"])
        for group, lr in zip(self.opt.param_groups, loop.get("lrs") or []):
            group["lr"] = lr  # the schedule's state does not hold the rates it set
        self.best = BestEpoch.from_dict(loop.get("best"))
        self.stopped = loop.get("stopped")
        self.epoch = int(state["epoch"])
