"""Full-batch training loop shared by the serial reference and the distributed model."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Protocol

import torch

from .config import TrainConfig


class TrainableGCN(Protocol):
    """What the trainer needs of a model (SerialModel and DistributedModel both provide it)."""

    def __call__(self, step: int | None = None) -> torch.Tensor: ...
    def loss(self, logits: torch.Tensor, mask: str = "train") -> torch.Tensor: ...
    def metrics(self, logits: torch.Tensor) -> dict[str, float | None]: ...
    def named_shards(self) -> dict[str, torch.nn.Parameter]: ...
    def full_parameter(self, name: str, shard: torch.Tensor) -> torch.Tensor: ...
    def shard_of(self, name: str, full: torch.Tensor) -> torch.Tensor: ...
    def named_stats(self) -> dict[str, torch.Tensor]: ...
    def parameter_layer(self, name: str) -> int | None: ...


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


def param_groups(model: TrainableGCN, params: dict[str, torch.nn.Parameter],
                 cfg: TrainConfig) -> list[dict]:
    """Adam's parameter groups: weight decay on every parameter, or (scope "first", as Kipf &
    Welling) on the first layer's only."""
    if cfg.weight_decay_scope not in ("all", "first"):
        raise ValueError(f"unknown weight decay scope {cfg.weight_decay_scope!r}; use all or first")
    if cfg.weight_decay_scope == "all":
        return [{"params": list(params.values()), "weight_decay": cfg.weight_decay}]
    first = [p for n, p in params.items() if model.parameter_layer(n) == 0]
    rest = [p for n, p in params.items() if model.parameter_layer(n) != 0]
    return [{"params": first, "weight_decay": cfg.weight_decay},
            {"params": rest, "weight_decay": 0.0}]


class Trainer:
    """Adam on the model's (sharded) parameters. Sharded Adam equals full Adam: it is elementwise
    and every element lives on exactly one rank, or identically on each replica."""

    def __init__(self, model: TrainableGCN, cfg: TrainConfig) -> None:
        self.model, self.cfg = model, cfg
        self.params = model.named_shards()
        self.opt = torch.optim.Adam(param_groups(model, self.params, cfg), lr=cfg.lr)
        self.epoch = 0  # epochs completed; also the dropout step key, so a resume replays exactly

    def train_step(self) -> float:
        """One forward/backward/update with dropout; returns the training loss."""
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        loss = self.model.loss(self.model(step=self.epoch))
        loss.backward()
        self.opt.step()
        return float(loss.detach())

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
        return EpochStats(self.epoch, loss, acc.get("train"), acc.get("val"), acc.get("test"),
                          elapsed, time.perf_counter() - start if acc else 0.0)

    def fit(self, epochs: int | None = None,
            callback: Callable[[EpochStats], None] | None = None) -> list[EpochStats]:
        """Run until ``epochs`` (default: the config's) epochs are complete."""
        history = []
        while self.epoch < (epochs if epochs is not None else self.cfg.epochs):
            stats = self.run_epoch()
            history.append(stats)
            if callback is not None:
                callback(stats)
        return history

    # ---- grid-independent state ----------------------------------------------------------
    def full_state(self) -> dict:
        """Parameters, BatchNorm running statistics and Adam moments as full unpadded tensors,
        plus the epoch. On a grid this is a collective: call it on every rank."""
        params, adam = {}, {}
        stats = {name: self.model.full_parameter(name, b).cpu()
                 for name, b in self.model.named_stats().items()}
        for name, p in self.params.items():
            params[name] = self.model.full_parameter(name, p).cpu()
            st = self.opt.state.get(p, {})
            if st:
                adam[name] = {"step": float(st["step"]),
                              "exp_avg": self.model.full_parameter(name, st["exp_avg"]).cpu(),
                              "exp_avg_sq": self.model.full_parameter(name, st["exp_avg_sq"]).cpu()}
        return {"epoch": self.epoch, "params": params, "adam": adam, "stats": stats}

    def load_full_state(self, state: dict) -> None:
        """Restore what `full_state` returned (possibly saved on another grid)."""
        missing = set(self.params) ^ set(state["params"])
        if missing:
            raise ValueError(f"checkpoint parameters do not match the model: {sorted(missing)}")
        with torch.no_grad():
            for name, p in self.params.items():
                full = state["params"][name]
                expected = tuple(self.model.full_parameter(name, p).shape)
                if tuple(full.shape) != expected:
                    raise ValueError(f"checkpoint {name} has shape {tuple(full.shape)}, "
                                     f"the model needs {expected}")
                p.copy_(self.model.shard_of(name, full))
                if name in state["adam"]:
                    st = state["adam"][name]
                    self.opt.state[p] = {
                        "step": torch.tensor(st["step"]),
                        "exp_avg": self.model.shard_of(name, st["exp_avg"]),
                        "exp_avg_sq": self.model.shard_of(name, st["exp_avg_sq"])}
            own = self.model.named_stats()
            if set(own) != set(state.get("stats", {})):
                raise ValueError("checkpoint running statistics do not match the model: "
                                 f"{sorted(set(own) ^ set(state.get('stats', {})))}")
            for name, b in own.items():
                b.copy_(self.model.shard_of(name, state["stats"][name]))
        self.epoch = int(state["epoch"])
