"""``plexus-train``'s cache options: ``--cache-list``/``--cache-clean``, the size cap
(``--cache-max-gb``), and the launching process finding or building a run's store in the cache
(the library side: `plexus.train.cache`, `cachedir`, `cacheuse`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from plexus.core.units import format_bytes

from .cache import Plan, cached_options
from .cachedir import Cache, default_cache_dir
from .cacheuse import MAX_GB_ENV, StoreUse, entries, evict
from .errors import PROG
from .runlog import console_line


def from_cache(plan: Plan, force: bool) -> tuple[Plan, dict, StoreUse | None]:
    """The launching process finds or builds the store of the run's dataset in the cache (once,
    for all ranks, after every cheap check has passed) and says which in one line; the ranks
    then read their shards from it. Returns the plan, the store's summary (`JobFacts.cache`)
    and the hold on the store against eviction (keep it until the run ends)."""
    def say(text: str) -> None:
        if not plan.quiet:
            console_line(f"{PROG}: {text}")

    assert plan.grid is not None  # resolved at launch, or given (a big graph's)
    plan, store = cached_options(plan, Cache(Path(plan.cache_dir), say),  # type: ignore
                                 plan.grid.world_size, force=force)
    say(store.line())
    return plan, store.summary(), store.hold


def cache_command(args: argparse.Namespace) -> int:
    """``--cache-list`` / ``--cache-clean``: the cache directory's contents, or what no run
    holds removed; status 0. Only this user's private cache is listed or cleaned, and in it
    only the stores and graphs this user's Plexus sealed (`plexus.train.cacheuse.entries`):
    a folder of the user's own there, or anything planted, stays."""
    root = Path(args.cache or default_cache_dir()).expanduser()
    cap = args.cache_max_bytes  # --cache-max-gb, else the environment's (plexus.train.options)
    if root.exists() or root.is_symlink():
        Cache(root).check_trusted()  # another user's cache, or one others write: left alone
    if args.cache_clean:
        gone = evict(root, cap or 0)
        freed = sum(e.bytes for e in gone)
        print(f"{PROG}: removed {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} "
              f"({format_bytes(freed)}) from {root}"
              + (f", down to the cap of {format_bytes(cap)}" if cap else "")
              + "; what runs hold stays")
    found = entries(root)
    if args.cache_list or not args.cache_clean:
        for e in reversed(found):  # most recently used first
            used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
            print(f"{format_bytes(e.bytes):>10}  {e.kind:<5}  last used {used}"
                  f"{'  IN USE' if e.in_use else ''}  {e.path}")
    total = sum(e.bytes for e in found)
    print(f"{PROG}: cache {root}: {len(found)} entr{'y' if len(found) == 1 else 'ies'}, "
          f"{format_bytes(total)}" + (f" (cap {format_bytes(cap)})" if cap else
                                         f" (no cap: --cache-max-gb or ${MAX_GB_ENV})"))
    return 0
