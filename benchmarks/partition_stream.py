"""Peak memory and speed of the out-of-core partitioner, as a user runs it.

    python benchmarks/partition_stream.py [--scales 21,23,24] [--jobs-scale 21] [--repeats 2]
                                          [--work DIR] [--out DIR] [--smoke]

For every scale S, one run of

    plexus-partition --dataset rmat:scale=S,edge_factor=16,features=32,classes=16 \\
                     --grid 2x2x2 --layers 3 --out DIR/store --verbose

in its own process under ``/usr/bin/time -v`` (peak RSS of the largest process, wall time),
the R-MAT graph generated into the work directory in pieces first; non-zeros of Â per second per
process over the whole command, and per phase (conversion, partition). Then ``--jobs 1`` and
``--jobs 2`` at ``--jobs-scale``, interleaved, ``--repeats`` each: the median speed-up.
Checks: peak RSS <= 3 GiB at every scale, the largest-but-one scale's peak within 25% of the
smallest's, >= 1 M non-zeros/s per process, --jobs 2 >= 1.6x. Stores are removed after each
run (scale 24 needs ~45 GB of disk for a moment); the free disk space is checked first.
Results: ``partition_stream.txt`` and ``.json`` in ``--out`` (default benchmarks/out).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import OUT_DIR, loadavg, median, write_json, write_text  # noqa: E402
from plexus.studies.launchers import interpreter  # noqa: E402

SPEC = "rmat:scale={scale},edge_factor=16,features=32,classes=16"
GIB = 2**30
#: disk a run needs, per non-zero of Â (graph, work pieces and the store at once), with margin
DISK_PER_NNZ = 100


def run_once(scale: int, jobs: int, work: Path, extra: list[str]) -> dict:
    out = work / f"store-s{scale}-j{jobs}"
    cmd = ["/usr/bin/time", "-v", *interpreter(sys.executable), "-m", "plexus_partition.cli",
           "--dataset", SPEC.format(scale=scale), "--grid", "2x2x2", "--layers", "3",
           "--orders", "agg",  # the snapshot's order (the default is now auto)
           "--out", str(out), "--verbose", "--jobs", str(jobs), *extra]
    load = loadavg()
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"scale {scale}: plexus-partition failed:\n{done.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    summary = [ln for ln in done.stdout.splitlines() if "wrote" in ln][-1]
    nnz = int(re.search(r"nnz=(\d+)", summary).group(1))
    phases, phase_rss = {}, {}
    for line in done.stdout.splitlines():
        m = re.match(r"plexus-partition: phase (\S+): ([\d.]+)s.*peak RSS (\d+) MiB", line)
        if m:
            phases[m.group(1)] = float(m.group(2))
            phase_rss[m.group(1)] = int(m.group(3)) * 2**20
    convert = sum(v for k, v in phases.items() if k.startswith("rmat-"))
    return {"scale": scale, "jobs": jobs, "nnz": nnz, "peak_rss_bytes": rss * 1024,
            "wall_s": wall, "convert_s": convert, "partition_s": sum(phases.values()) - convert,
            "nnz_per_s_per_process": nnz / wall / jobs, "phases": phases,
            "phase_peak_rss": phase_rss, "load_before": load,
            "load_after": loadavg()}


#: ogbn-papers100M as OGB ships it, and made undirected (as OGB's examples train it)
PAPERS = {"num_nodes": 111_059_956, "edges": 1_615_685_872, "features": 128, "classes": 172}


def project(runs: list[dict]) -> list[str]:
    """ogbn-papers100M from the measured constants: every phase's peak RSS fitted as a + b * N
    over the measured scales (the R-MAT generator's phases but its canonicalization left out:
    papers100M arrives as raw edges, which the partitioner canonicalizes itself), the
    non-zeros per second per process of the largest run, and per-rank memory of training from
    the performance model (3-layer GCN, hidden 256, the grid it picks) for G = 64, 256, 1024."""
    import numpy as np  # noqa: PLC0415

    from plexus_partition.model.grid import GridShape  # noqa: PLC0415
    from plexus_partition.model.layout import layer_plans  # noqa: PLC0415
    from plexus_partition.plan import block_key  # noqa: PLC0415
    from plexus.engine.config import ModelConfig  # noqa: PLC0415
    from plexus.perfmodel.model import ModelSpec, choose_grid, epoch_memory  # noqa: PLC0415

    single = [r for r in runs if r["jobs"] == 1]
    if len({r["scale"] for r in single}) < 2:
        return ["(projection needs runs at two scales)"]
    n_p = PAPERS["num_nodes"]
    nnz_p = 2 * PAPERS["edges"] + n_p
    fits = {}
    for name in single[0]["phase_peak_rss"]:
        if name.startswith("rmat-") and not name.startswith("rmat-canon-"):
            continue
        xs = [2 ** r["scale"] for r in single if name in r["phase_peak_rss"]]
        ys = [r["phase_peak_rss"][name] for r in single if name in r["phase_peak_rss"]]
        b, a = np.polyfit(xs, ys, 1)
        fits[name.replace("rmat-", "")] = (a, max(b, 0.0))
    worst = max(fits, key=lambda k: fits[k][0] + fits[k][1] * n_p)
    a, b = fits[worst]
    rate = single[-1]["nnz_per_s_per_process"]
    lines = [f"ogbn-papers100M projection (N = {n_p:,}, {PAPERS['edges']:,} edges, made "
             f"undirected: nnz(Â) <= {nnz_p / 1e9:.2f} B; {PAPERS['features']} features, "
             f"{PAPERS['classes']} classes)",
             f"  partition peak per process: {(a + b * n_p) / GIB:.1f} GiB, in phase {worst} "
             f"({a / 2**20:.0f} MiB + {b:.1f} B/node, fitted over scales "
             f"{', '.join(str(r['scale']) for r in single)}); the same for any G and any "
             "number of processes"]
    for procs in (1, 16, 64):
        lines.append(f"  partition time with {procs} processes at {rate / 1e6:.2f} M "
                     f"non-zeros/s each: {nnz_p / rate / procs / 3600:.2f} h")
    model = ModelConfig(num_layers=3, hidden=256)
    spec = ModelSpec(n_p, nnz_p, PAPERS["features"], PAPERS["classes"], model,
                     perm="double", from_store=True)
    for world in (64, 256, 1024):
        grid = choose_grid(world, spec)
        mem = epoch_memory(spec, grid).total
        shape = GridShape.of(grid)
        cuts = {block_key(q): shape[q.a_rows] * shape[q.a_cols] for q in layer_plans(3, "agg")}
        # its blocks of Â (int32 index + float32 value per non-zero) and its feature rows
        store = sum(8 * nnz_p / c for c in cuts.values()) + 4 * n_p * PAPERS["features"] / world
        lines.append(f"  G = {world:4d}: grid {GridShape.of(grid)}, training memory per rank "
                     f"(performance model, from a store) {mem / GIB:.2f} GiB; its shard "
                     f"file about {store / GIB:.2f} GiB")
    return lines


def check_disk(work: Path, scale: int) -> None:
    need = DISK_PER_NNZ * 32 * (1 << scale)
    free = shutil.disk_usage(work).free
    if free < need:
        raise SystemExit(f"scale {scale} needs about {need / GIB:.0f} GiB of disk in {work}, "
                         f"{free / GIB:.0f} GiB are free")


def run_line(r: dict) -> str:
    return (f"scale {r['scale']}: nnz {r['nnz']:,}  peak RSS {r['peak_rss_bytes'] / GIB:.2f} GiB"
            f"  wall {r['wall_s']:.1f}s (convert {r['convert_s']:.1f}s, partition "
            f"{r['partition_s']:.1f}s)  {r['nnz_per_s_per_process'] / 1e6:.2f} M non-zeros/s per "
            f"process ({r['nnz'] / max(r['partition_s'], 1e-3) / 1e6:.2f} M/s in the partition phases) [load {r['load_before']} / {r['load_after']}]")


def pair_line(one: dict, two: dict) -> str:
    return (f"scale {one['scale']} --jobs 1 {one['wall_s']:.1f}s "
            f"({one['nnz_per_s_per_process'] / 1e6:.2f} M non-zeros/s), --jobs 2 "
            f"{two['wall_s']:.1f}s: {one['wall_s'] / two['wall_s']:.2f}x; peak RSS per process "
            f"{one['peak_rss_bytes'] / GIB:.2f} / {two['peak_rss_bytes'] / GIB:.2f} GiB "
            f"[load {one['load_before']} / {two['load_after']}]")


def report(runs: list[dict], pairs: list[tuple[dict, dict]]) -> tuple[list[str], dict]:
    """The result lines after the runs' own: summary, checks, projection."""
    speedup = median(a["wall_s"] / b["wall_s"] for a, b in pairs)
    single = [r for r in runs] + [a for a, _ in pairs]
    best = max(single, key=lambda r: r["nnz_per_s_per_process"])
    peaks = [r["peak_rss_bytes"] for r in runs]
    checks = {
        "peak RSS <= 3 GiB at every scale": max(peaks) <= 3 * GIB,
        f"scale {runs[1]['scale'] if len(runs) > 1 else runs[0]['scale']} peak within 25% of "
        f"scale {runs[0]['scale']}'s": len(peaks) < 2 or peaks[1] <= 1.25 * peaks[0],
        ">= 1 M non-zeros/s per process at every scale (whole command; load in brackets)":
            all(r["nnz_per_s_per_process"] >= 1e6 for r in runs),
        "--jobs 2 >= 1.6x --jobs 1 (median)": speedup >= 1.6,
    }
    lines = [f"one process, fastest run: {best['nnz_per_s_per_process'] / 1e6:.2f} M "
             f"non-zeros/s at scale {best['scale']} [load {best['load_before']} / "
             f"{best['load_after']}]",
             f"--jobs 2 speed-up at scale {pairs[0][0]['scale'] if pairs else '-'}: "
             f"{speedup:.2f}x (median of {len(pairs)}, interleaved)"]
    lines += [f"{'PASS' if ok else 'FAIL'}: {name}" for name, ok in checks.items()]
    return lines + project(runs), checks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scales", default="21,23,24")
    p.add_argument("--jobs-scale", type=int, default=21)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--work", default=None, help="where stores go (default: a temporary dir)")
    p.add_argument("--out", default=str(OUT_DIR))
    p.add_argument("--smoke", action="store_true", help="scales 10 and 11, tiny chunks")
    p.add_argument("--from-json", default=None,
                   help="write the results again from a saved .json (no runs)")
    args = p.parse_args()
    header = (f"Out-of-core partitioner, R-MAT (edge factor 16, 32 features, 16 classes), grid "
              f"2x2x2, 3 layers, perm double; {os.cpu_count()} cores; load before/after each "
              "run in brackets")
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        runs, pairs = saved["runs"], [tuple(p) for p in saved["jobs_pairs"]]
    else:
        runs, pairs = measure(args)
    lines, checks = report(runs, pairs)
    lines = [header, *map(run_line, runs), *(pair_line(a, b) for a, b in pairs), *lines]
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "partition_stream.txt", "\n".join(lines) + "\n")
    write_json(out / "partition_stream.json", {"runs": runs, "jobs_pairs": pairs,
                                               "checks": checks})


def measure(args) -> tuple[list[dict], list[tuple[dict, dict]]]:
    """The runs: one per scale, then --jobs 1 and 2 interleaved at the jobs scale."""
    scales = [10, 11] if args.smoke else [int(s) for s in args.scales.split(",")]
    jobs_scale = 10 if args.smoke else args.jobs_scale
    extra = ["--chunk-edges", "5000", "--bucket-entries", "9000"] if args.smoke else []
    work = Path(args.work or tempfile.mkdtemp(prefix="partition-stream-"))
    work.mkdir(parents=True, exist_ok=True)
    runs, pairs = [], []
    try:
        for scale in scales:
            check_disk(work, scale)
            runs.append(run_once(scale, 1, work, extra))
            print(run_line(runs[-1]), flush=True)
        for _ in range(args.repeats):
            pairs.append((run_once(jobs_scale, 1, work, extra),
                          run_once(jobs_scale, 2, work, extra)))
            print(pair_line(*pairs[-1]), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return runs, pairs


if __name__ == "__main__":
    main()
