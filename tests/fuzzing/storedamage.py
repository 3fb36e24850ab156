"""The store fuzz's damage (`fuzzing.stores`): a killed partition's work directory, a cache's
stores and ``graphs/``, an outputs directory damaged as a crash, a careless user or a hostile
co-user could leave them; a victim folder of the user's beside each case that nothing may
touch; a store forged as a co-user who knows the format would (`forge_store`,
`reseal_without_key`) and what a store holds (`store_labels`, `contents`: the oracles). The cache
fuzz (benchmarks/fuzz_cache.py) and the cache's tests share these."""

from __future__ import annotations

import json
import os
import random
import shutil
import zipfile
from pathlib import Path

import numpy as np

from plexus_datasets.base import owned
from plexus_partition.store import file_sha256

from .mutate import json_edit, mutate_bytes


def make_victim(d: Path) -> Path:
    """A directory of the user's beside the case that nothing may touch."""
    victim = d / "victim"
    victim.mkdir(mode=0o700)
    (victim / "keep").write_text("mine")
    return victim


def intact(d: Path) -> bool:
    victim = d / "victim"
    try:
        return sorted(os.listdir(victim)) == ["keep"] and \
            (victim / "keep").read_text() == "mine"
    except OSError:
        return False


def files(folder: Path, pattern: str = "*") -> list[Path]:
    return sorted(p for p in folder.rglob(pattern) if p.is_file() and not p.is_symlink())


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (the oracle of "nothing lost")."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def store_labels(store: Path) -> list:
    """Each rank file's labels, in the manifest's order."""
    manifest = json.loads((store / "manifest.json").read_text())
    out = []
    for rank in manifest["ranks"]:
        with zipfile.ZipFile(store / rank["file"]) as zf:
            out.append(np.load(zf.open("labels.npy")).tolist())
    return out


def forge_store(store: Path) -> None:
    """The forgery of issue 46: every rank file's labels and features zeroed, the manifest's
    sizes and sha256 rewritten to match (all a co-user needs to pass a hash check); a rank file
    already damaged is left as it is."""
    manifest = json.loads((store / "manifest.json").read_text())
    for rank in manifest["ranks"]:
        path = store / rank["file"]
        try:
            with zipfile.ZipFile(path) as zf:
                members = {n: np.load(zf.open(n)) for n in zf.namelist()}
        except (zipfile.BadZipFile, ValueError, OSError, EOFError):
            continue
        with zipfile.ZipFile(path, "w") as zf:
            for name, arr in members.items():
                with zf.open(name, "w") as f:
                    np.lib.format.write_array(
                        f, np.zeros_like(arr) if name.startswith(("labels", "features")) else arr)
        rank["size"], rank["sha256"] = path.stat().st_size, file_sha256(path)
    (store / "manifest.json").write_text(json.dumps(manifest))


def reseal_without_key(store: Path) -> None:
    """The store's seal listing rewritten to match its files (sizes and sha256), its HMAC not:
    only this user's key tells. Nothing where there is no seal."""
    seal_path = store / ".plexus-seal.json"
    if not seal_path.is_file():  # removed by an earlier plant (or a Plexus that seals nothing)
        return
    seal = json.loads(seal_path.read_text())
    for name, entry in seal["files"].items():
        if entry[0] is not None and (store / name).is_file():
            entry[0] = (store / name).stat().st_size
            entry[1] = file_sha256(store / name) if entry[1] is not None else None
    seal_path.write_text(json.dumps(seal))


def damage_file(path: Path, rng: random.Random) -> str:
    data = path.read_bytes()
    how = rng.choice(("flip", "truncate", "same size", "empty", "grow"))
    if how == "flip":
        path.write_bytes(mutate_bytes(data, rng))
    elif how == "truncate":
        path.write_bytes(data[:rng.randrange(max(1, len(data)))])
    elif how == "same size" and data:
        i = rng.randrange(len(data))
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(data + b"\0" * rng.randint(1, 64))
    return how


def damage_workdir(work: Path, victim: Path, rng: random.Random) -> str:
    markers = sorted(p for p in (work / "done").rglob("*.json") if p.parent != work / "done")
    data = [p for p in files(work) if "done" not in p.relative_to(work).parts
            and p.name != ".plexus-work.json" and p.name != ".lock"]
    how = rng.choice(("marker edit", "marker bytes", "marker planted",
                      "marker lost", "data", "data", "swap", "data link", "dir link",
                      "signature", "record", "work link", "mode", "planted file"))
    if how == "marker edit":
        m = rng.choice(markers)
        outer = json.loads(m.read_text())
        outer["result"] = json.dumps(json_edit(json.loads(outer["result"]), rng))
        m.write_text(json.dumps(outer))
    elif how == "marker bytes":
        damage_file(rng.choice(markers), rng)
    elif how == "marker planted":  # a finished task's marker copied over to an unfinished one
        m = rng.choice(markers)
        index = int(m.stem) + rng.randint(1, 3)
        shutil.copy(m, m.with_name(f"{index:06d}.json"))
    elif how == "marker lost":
        owned.remove_file(rng.choice(markers))
    elif how == "data":
        how += " " + damage_file(rng.choice(data), rng)
    elif how == "swap" and len(data) > 1:
        a, b = rng.sample(data, 2)
        tmp = a.with_name(a.name + ".swap")
        owned.move(a, tmp)
        owned.move(b, a)
        owned.move(tmp, b)
    elif how == "data link":
        f = rng.choice(data)
        owned.remove_file(f)
        f.symlink_to(victim / "keep")
    elif how == "dir link":
        folder = rng.choice(sorted({p.parent for p in data}))
        owned.remove_tree(folder)
        folder.symlink_to(victim)
    elif how == "signature":
        sig = work / ".plexus-work.json"
        choice = rng.random()
        if choice < 0.3:
            owned.remove_file(sig)
        elif choice < 0.6:
            sig.write_text(json.dumps(json_edit(json.loads(sig.read_text()), rng)))
        else:
            damage_file(sig, rng)
    elif how == "record":
        record = work / "done" / "files.json"
        if record.exists():
            if rng.random() < 0.5:
                damage_file(record, rng)
            else:
                record.write_text(json.dumps(json_edit(json.loads(record.read_text()), rng)))
    elif how == "work link":
        target = work.with_name(work.name + ".real")
        owned.move(work, target)
        work.symlink_to(target if rng.random() < 0.5 else victim)
    elif how == "mode":
        work.chmod(rng.choice((0o755, 0o777, 0o750)))
    else:  # a file planted where a task will write
        folder = rng.choice(sorted({p.parent for p in data}))
        (folder / rng.choice(("x.npy", "piece-000000.npy", "rank-x9-y0-z0.npz"))).write_bytes(
            os.urandom(rng.randint(0, 256)))
    return how


def damage_cache(cache: Path, rng: random.Random) -> tuple[str, str]:
    """(what was damaged, the grid to ask for next)."""
    stores = [p for p in cache.iterdir() if p.is_dir() and (p / "manifest.json").exists()]
    graph = next((cache / "graphs").iterdir())
    how = rng.choice(("rank file", "rank file", "manifest", "graph array", "graph array",
                      "graph header", "sources", "swap"))
    grid = "1x1x1"
    if how == "rank file":
        how += " " + damage_file(rng.choice(files(stores[0], "rank-*")), rng)
    elif how == "manifest":
        m = stores[0] / "manifest.json"
        if rng.random() < 0.5:
            m.write_text(json.dumps(json_edit(json.loads(m.read_text()), rng)))
        else:
            damage_file(m, rng)
    elif how == "graph array":
        grid = "2x1x1"
        how += " " + damage_file(rng.choice(files(graph, "*.npy")), rng)
    elif how == "graph header":
        grid = "2x1x1"
        h = graph / "graph.json"
        h.write_text(json.dumps(json_edit(json.loads(h.read_text()), rng)))
    elif how == "sources":
        s = rng.choice(files(cache / "sources"))
        if rng.random() < 0.3:
            depth = rng.choice((1000, 100000))
            s.write_text('{"source": ' + "[" * depth + "]" * depth + "}")
        else:
            s.write_text(json.dumps(json_edit(json.loads(s.read_text()), rng)))
    else:  # swapped between the graph and the store, or two graph arrays
        a, b = rng.sample(files(graph, "*.npy"), 2)
        grid = "2x1x1"
        tmp = a.with_name(a.name + ".swap")
        owned.move(a, tmp)
        owned.move(b, a)
        owned.move(tmp, b)
    return how, grid


def damage_outputs(res: Path, victim: Path, rng: random.Random) -> tuple[str, bool]:
    """(what was done, whether ``res`` is still exactly a directory Plexus wrote)."""
    how = rng.choice(("extra file", "marker edit", "marker bytes", "array gone", "link",
                      "marker link", "subdir", "users dir", "fifo", "untouched", "empty"))
    ours = False
    if how == "extra file":
        (res / rng.choice(("thesis.tex", ".hidden", "outputs.json.bak", "embeddings.npy"))
         ).write_text("x")
    elif how == "marker edit":
        m = res / "outputs.json"
        meta = json.loads(m.read_text())
        m.write_text(json.dumps(json_edit(meta, rng)))
    elif how == "marker bytes":
        damage_file(res / "outputs.json", rng)
    elif how == "array gone":
        owned.remove_file(res / rng.choice(("pred.npy", "logits.npy")))
    elif how == "link":
        f = res / rng.choice(("pred.npy", "logits.npy"))
        owned.remove_file(f)
        f.symlink_to(victim / "keep")
    elif how == "marker link":
        owned.move(res / "outputs.json", victim.parent / "elsewhere.json")
        (res / "outputs.json").symlink_to(victim.parent / "elsewhere.json")
    elif how == "subdir":
        f = res / rng.choice(("pred.npy", "logits.npy"))
        owned.remove_file(f)
        f.mkdir()
    elif how == "users dir":  # a user's own folder that happens to hold an outputs.json
        owned.remove_tree(res)
        res.mkdir()
        (res / "outputs.json").write_text(json.dumps({"mine": rng.randint(0, 9)}))
        if rng.random() < 0.7:
            (res / "notes.txt").write_text("mine")
    elif how == "fifo":
        owned.remove_file(res / "outputs.json")
        os.mkfifo(res / "outputs.json")
    elif how == "empty":
        owned.remove_tree(res)
        res.mkdir()
        ours = True  # empty: replaceable, nothing to lose
    else:
        ours = True
    return how, ours
