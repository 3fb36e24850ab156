"""What one ``plexus-train`` run is asked to do, once the command line has been checked."""

from __future__ import annotations

from dataclasses import dataclass

from plexus.core.grid import GridShape
from plexus.api.training import EngineConfig, TrainConfig
from plexus.core.model import ModelConfig
from plexus.runtime.group import DEFAULT_TIMEOUT_S

from .faults import Fault


@dataclass(frozen=True)
class RunOptions:
    """Everything a rank needs to know about the run (validated by `plexus.train`)."""

    grid: GridShape | None  # None: "auto", chosen by plexus.perfmodel
    dataset: str
    root: str | None
    model: ModelConfig
    train: TrainConfig
    engine: EngineConfig
    perm: str | None = None  # None: DEFAULT_PERMUTATION, or whatever the shard store was cut with
    shards: str | None = None
    cache_dir: str | None = None  # the shard-store cache of --dataset runs (None: --no-cache)
    cache_explicit: bool = False  # --cache was given (a 1x1x1 run uses the cache only then)
    cache: dict | None = None  # how the launcher came by the store (`plexus.train.cache`)
    cache_max_bytes: int | None = None  # the cache's size cap (None: none); LRU eviction
    checkpoint: str | None = None
    checkpoint_every: int = 10
    resume: bool = False
    log_json: str | None = None
    quiet: bool = False
    # when the command started (`time.time`): the run's wall time counts start-up from there;
    # None: from the rank's own process start (a rank of torchrun/srun)
    launched_at: float | None = None
    setup_script_s: float = 0.0  # ./run's set-up before the command (not in the start-up)
    device: str | None = None  # "cpu" or "cuda" (--device); None: CUDA where available
    threads: int | None = None  # torch threads per rank (--threads); None: OMP_NUM_THREADS/share
    calibration: str | None = None  # the rates --grid auto prices with (None: built-in)
    timeout_s: float = DEFAULT_TIMEOUT_S
    check_memory: bool = True  # False: --force, or the launching process already checked
    fault: Fault | None = None  # --inject-fault (tests of failure handling)
    # results out (plexus.train.results) and OGB fidelity
    save_predictions: str | None = None  # a directory: pred.npy, logits.npy (+ embeddings.npy)
    save_embeddings: bool = False
    export: str | None = None  # unsharded weights under PyG names
    export_best: bool = False  # ... of the best-validation epoch
    symmetrize: bool = False  # make the graph undirected before training
    log_csv: str | None = None  # a CSV of epochs
    tensorboard: str | None = None  # a TensorBoard log directory
