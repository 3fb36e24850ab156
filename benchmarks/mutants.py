"""Plant each mutant of issue 46's list, of issue 58's classes and of the checks added with them
in a copy of the checkout, run the test that must kill it, and print the table: a mutant is
killed when that test fails with it planted (and passes without: the copy is checked first).

    python benchmarks/mutants.py [--out benchmarks/results/mutation_round6.md] [--only NAME]
    python benchmarks/mutants.py --check     # only: is every mutant plantable at HEAD?

Every mutant is planted in the checkout's code as it is now: one whose text is not found there
(stale: the code moved on) is refused before anything runs, with exit status 2. The checkout
itself is never modified: each mutant runs in a temporary copy of plexus/, partitioners/,
datasets/ and tests/ (their folders first on the path). The table names the commit it ran at.
Needs pytest; about a second per mutant, half a minute for one whose killing test
starts a world.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORACLES = "tests/engine/test_independent_oracles.py"
STATES = "tests/train/test_loop_state.py"
BOUNDS = "tests/core/test_bounds.py"
WIRE = "tests/engine/test_wire_numerics.py"
KEEP = "tests/engine/test_keep_input_rule.py"
EXPLAIN = "tests/perfmodel/test_explain_columns.py"
OWNED = "tests/core/test_owned_modes.py"
EDGES = "tests/core/test_bounds_edges.py"
LOOP_EDGES = "tests/train/test_loop_state_bounds.py::" \
    "test_a_loop_state_bound_holds_at_its_value_and_breaks_just_past_it"
PLANTED = "tests/engine/test_dryrun_check_probe.py"

# (name, file, text, replacement, killing test)
MUTANTS = [
    ("dropout_keep >= -> >", "plexus/engine/masks.py", "return u >= threshold16(p) - 32768",
     "return u > threshold16(p) - 32768",
     f"{ORACLES}::test_an_element_exactly_at_the_threshold_is_kept"),
    ("edge_keep >= -> >", "plexus/engine/masks.py", "return u >= threshold24(p)",
     "return u > threshold24(p)", f"{ORACLES}::test_an_element_exactly_at_the_threshold_is_kept"),
    ("hash multiplier changed", "plexus/core/maskhash.py", "MUL = 0x45D9F3B", "MUL = 0x45D9F3D",
     f"{ORACLES}::test_feature_masks_equal_the_documented_hash"),
    ("hash multiplier changed (edges)", "plexus/core/maskhash.py", "MUL = 0x45D9F3B",
     "MUL = 0x45D9F3D", f"{ORACLES}::test_edge_masks_equal_the_documented_hash"),
    ("Triton kernel's own copy of the multiplier", "plexus/engine/triton_masks.py",
     "    h = h * MUL_C\n", "    h = h * 0x45D9F3B\n",
     f"{ORACLES}::test_the_triton_kernels_take_the_hash_constants_from_maskhash"),
    ("row ids not cut to 32 bits", "plexus/engine/masks.py",
     "row_h = fmix((rows.to(torch.int64) & M32) ^ k_row)",
     "row_h = fmix(rows.to(torch.int64) ^ k_row)",
     f"{ORACLES}::test_an_id_and_the_same_id_plus_2_to_the_32_share_a_mask"),
    ("edge ids not cut to 32 bits", "plexus/engine/masks.py",
     "h = fmix((dst.to(torch.int64) & M32) ^ k_dst)", "h = fmix(dst.to(torch.int64) ^ k_dst)",
     f"{ORACLES}::test_edge_masks_equal_the_documented_hash"),
    ("CUDA piece budget from total memory", "plexus/engine/pieces.py",
     "return FREE_SHARE * float(free) / max(1, local_ranks)",
     "return FREE_SHARE * float(_total) / max(1, local_ranks)",
     f"{ORACLES}::test_the_cuda_piece_budget_is_an_eighth_of_the_free_memory"),
    ("CPU timer overwrites", "plexus/engine/timing.py",
     "self._seconds[name] += time.perf_counter() - start_s",
     "self._seconds[name] = time.perf_counter() - start_s",
     f"{ORACLES}::test_the_cpu_timer_adds_up_its_regions"),
    ("CUDA timer does not wait for its last event", "plexus/engine/timing.py",
     "self._pending[-1][2].synchronize()", "pass",
     f"{ORACLES}::test_the_cuda_timer_waits_for_its_last_event"),
    ("'parameter used directly' check off", "plexus/nn/layouts.py",
     "        if params and layouts:\n", "        if False:\n",
     "tests/nn/test_param_views.py::"
     "test_a_layers_own_parameter_used_directly_is_refused_naming_its_fix"),
    ("'parameter shard used directly' check off", "plexus/nn/layouts.py",
     "        if layouts and raw is not None:\n", "        if False:\n",
     f"{ORACLES}::test_a_parameter_used_directly_on_a_laid_tensor_is_refused"),
    ("per-edge ops allowed in an agg layer", "plexus/nn/graph.py",
     'if self.order != "combine":\n            raise LayoutError(f"{self.name}: g.{op}: per-edge',
     'if False:\n            raise LayoutError(f"{self.name}: g.{op}: per-edge',
     f"{ORACLES}::test_per_edge_operations_are_refused_in_an_agg_layer"),
    ("head_sums takes the input layout", "plexus/nn/graph.py",
     "allowed = (NODES_OUT, ROWS_OUT) if self.order != \"agg\" else (ROWS_OUT,)",
     "allowed = (NODES_OUT, ROWS_OUT, NODES_IN) if self.order != \"agg\" else (ROWS_OUT, NODES_IN)",
     f"{ORACLES}::test_head_sums_takes_only_the_output_layouts"),
    ("aggregate's values layout unchecked", "plexus/nn/graph.py",
     'values = self._need("aggregate", "values", values, EDGES)', "values = plain(values)",
     f"{ORACLES}::test_aggregate_checks_the_layout_of_its_values"),
    ("exactness tolerance loosened 1000x", "plexus/engine/tolerance.py",
     "RTOL, ATOL = 1e-4, 1e-5", "RTOL, ATOL = 1e-1, 1e-2",
     f"{ORACLES}::test_the_exactness_tolerance_fails_a_small_relative_error"),
    ("patience off by one", "plexus/engine/trainer.py",
     "stats.epoch - best >= patience", "stats.epoch - best > patience",
     f"{ORACLES}::test_early_stopping_stops_patience_epochs_after_the_best"),
    ("SGD ignores --momentum", "plexus/engine/trainer.py",
     "optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)",
     "optim.SGD(groups, lr=cfg.lr)", f"{ORACLES}::test_sgd_applies_its_momentum"),
    ("early stop not restored on resume", "plexus/engine/trainer.py",
     'self.stopped = loop.get("stopped")', "self.stopped = None",
     f"{ORACLES}::test_a_resumed_run_keeps_its_early_stop_and_best_epoch"),
    ("best epoch not restored on resume", "plexus/engine/trainer.py",
     'self.best = BestEpoch.from_dict(loop.get("best"))', "self.best = BestEpoch()",
     f"{ORACLES}::test_a_resumed_run_keeps_its_early_stop_and_best_epoch"),
    ("cosine-resume refusal removed", "plexus/train/checkpoint.py",
     'if train.lr_schedule == "cosine" and saved.get("epochs") != train.epochs:', "if False:",
     f"{ORACLES}::test_a_cosine_resume_with_other_epochs_is_refused"),
    ("group_link takes the largest world", "plexus/perfmodel/calibration.py",
     "world = min(sizes, key=lambda w: (abs(math.log(w / ranks_per_host)), -w))",
     "world = max(sizes)", f"{ORACLES}::test_group_link_takes_the_nearest_measured_world"),
    # this round's own checks
    ("--threads unbounded above", "partitioners/plexus_partition/model/bounds.py",
     '"threads": _int(1, MAX_THREADS),', '"threads": _int(1, 10**9),',
     f"{BOUNDS}::test_the_table_holds_the_limits_written_here"),
    ("MASTER_PORT unbounded", "partitioners/plexus_partition/model/bounds.py",
     '"MASTER_PORT": _int(1, MAX_PORT),', '"MASTER_PORT": _int(1, 10**9),',
     f"{BOUNDS}::test_launcher_variables_out_of_bounds_are_refused_up_front"),
    ("rank past the world accepted", "partitioners/plexus_partition/launch/env.py",
     "    if rank >= world:\n", "    if rank > world:\n",
     f"{BOUNDS}::test_launcher_variables_out_of_bounds_are_refused_up_front"),
    ("negative learning rate in a checkpoint accepted", "plexus/train/loopstate.py",
     "if not _finite(lr) or not 0 <= lr <= top:", "if not _finite(lr):",
     f"{STATES}::test_a_planted_corruption_is_refused_in_one_line"),
    ("stopped not checked", "plexus/train/loopstate.py",
     "    if stopped is not None:\n        patience", "    if False:\n        patience",
     f"{STATES}::test_a_planted_corruption_is_refused_in_one_line"),
    ("no labelled training node accepted", "datasets/plexus_datasets/trainable.py",
     'if counts.get("train", 0) < 1:', "if False:",
     f"{STATES}::test_the_library_refuses_an_untrainable_graph_with_a_typed_error"),
    # issue 58's classes: the code added since round 5
    ("--keep-input off ignored", "plexus/engine/model.py",
     'if learnable or depth == 1 or option == "off":', "if learnable or depth == 1:",
     f"{KEEP}::test_off_learnable_and_one_deep_never_keep_and_on_always_does"),
    ("keep-input auto boundary moved", "plexus/engine/model.py",
     'return option == "on" or depth * stored_bytes <= budget',
     'return option == "on" or depth * stored_bytes < budget',
     f"{KEEP}::test_auto_keeps_the_input_where_the_gathered_block_fits_the_budget"),
    # the kept input's set-up gather out of its exact context: under bf16 payloads it would
    # travel rounded, at 2 bytes an element (a check of the 8-rank world, whose depth axis is 2)
    ("the kept input's set-up gather not exact", "plexus/engine/model.py",
     'with comm.at(0, SETUP), comm.exact(), comm.labelled("AG(H)"):',
     'with comm.at(0, SETUP), comm.labelled("AG(H)"):',
     "tests/engine/test_engine.py::test_bf16_payloads_equal_serial_within_their_rounding"
     "[directed/gcn-batchnorm/keep-input-bytes-2x2x2]"),
    ("bf16 all-reduce biased +0.78 %", "plexus/engine/twolevel.py",
     "mine = got.view(p, m).to(flat.dtype).sum(0).to(wire)",
     "mine = (got.view(p, m).to(flat.dtype).sum(0) * 1.0078125).to(wire)",
     f"{WIRE}::test_low_precision_all_reduce_rounds_each_partial_then_the_float32_sum"),
    ("low reduce-scatter sums in the wire precision", "plexus/engine/twolevel.py",
     "return got.view((p, x.shape[0] // p) + tuple(x.shape[1:])).to(x.dtype).sum(0)",
     "return got.view((p, x.shape[0] // p) + tuple(x.shape[1:])).sum(0).to(x.dtype)",
     f"{WIRE}::test_low_precision_reduce_scatter_rounds_each_partial_once"),
    ("own partial left unrounded in the sparse sum", "plexus/engine/exchange.py",
     "own = _rounded(comm, y[ex.piece]).clone()", "own = y[ex.piece].clone()",
     f"{WIRE}::test_sparse_sum_rounds_like_the_all_reduce_it_replaces_own_partial_included"),
    ("sparse gather's piece unrounded", "plexus/engine/exchange.py",
     "own = _rounded(comm, comm.raw_reduce_scatter(y, ex.axis))",
     "own = comm.raw_reduce_scatter(y, ex.axis)",
     f"{WIRE}::test_sparse_gather_gives_the_rounded_sum_on_the_rows_a_rank_reads_and_zero_"
     "elsewhere"),
    ("engine's auto rule moved at its boundary", "plexus/engine/exchange.py",
     "return max(counts) < (p - 1) / p * self.rows",
     "return max(counts) <= (p - 1) / p * self.rows",
     f"{WIRE}::test_the_engines_auto_rule_at_its_boundary"),
    ("ledger records 4 bytes per bf16 element", "plexus/engine/comm.py",
     'self.record(axis, "all_reduce", x.numel(), p, wire.itemsize)',
     'self.record(axis, "all_reduce", x.numel(), p, 4)',
     f"{WIRE}::test_low_precision_all_reduce_rounds_each_partial_then_the_float32_sum"),
    ("--explain prices bf16 payloads at fp32's 4 bytes",
     "plexus/engine/flags.py",
     "return DTYPE_BYTES[args.comm_dtype if args.dtype == DEFAULT_DTYPE else args.dtype]",
     "return DTYPE_BYTES[DEFAULT_DTYPE]",
     f"{EXPLAIN}::test_explain_under_bf16_halves_every_payload_and_keeps_the_statistics"),
    ("--explain prices a bf16 compute's payloads at 4 bytes",
     "plexus/engine/flags.py",
     "return DTYPE_BYTES[args.comm_dtype if args.dtype == DEFAULT_DTYPE else args.dtype]",
     "return DTYPE_BYTES[args.comm_dtype]",
     f"{EXPLAIN}::test_explain_under_a_bf16_compute_precision_prices_its_payloads_at_2_bytes"),
    ("--explain's share of communication, not of the epoch", "plexus/perfmodel/explain.py",
     "{100 * r.seconds / pred.time_s:>5.1f}%", "{100 * r.seconds / pred.comm_s:>5.1f}%",
     f"{EXPLAIN}::test_explain_prints_each_collectives_bytes_time_and_share_by_hand"),
    ("--explain without the z axis total", "plexus/perfmodel/explain.py",
     'for axis in ("x", "y", "z"):\n        mine', 'for axis in ("x", "y"):\n        mine',
     f"{EXPLAIN}::test_explain_has_one_total_per_axis_adding_its_rows"),
    ("owner trusts a group-writable sealed folder", "datasets/plexus_datasets/base/owned.py",
     "    if st.st_mode & 0o022:\n        return f\"{where}: writable by group",
     "    if st.st_mode & 0o002:\n        return f\"{where}: writable by group",
     f"{OWNED}::test_a_sealed_folder_writable_by_its_group_or_others_alone_is_not_trusted"),
    ("owner follows another user's symlink", "datasets/plexus_datasets/base/owned.py",
     "if (not stat.S_ISLNK(st.st_mode) or st.st_uid not in mine or pst.st_uid not in mine",
     "if (not stat.S_ISLNK(st.st_mode) or pst.st_uid not in mine",
     f"{OWNED}::test_a_link_of_another_uid_is_not_followed"),
    ("owner removes a tree with another uid's entry", "datasets/plexus_datasets/base/owned.py",
     "        if st.st_uid != uid:\n            raise NotOursError(f\"{where}/{path}: owned",
     "        if False:\n            raise NotOursError(f\"{where}/{path}: owned",
     f"{OWNED}::test_any_one_entry_of_another_uid_keeps_the_tree"),
    ("owner trusts another user's seal file", "datasets/plexus_datasets/base/owned.py",
     "if not stat.S_ISREG(sst.st_mode) or sst.st_uid != uid or",
     "if not stat.S_ISREG(sst.st_mode) or",
     f"{OWNED}::test_a_seal_file_of_another_uid_is_not_trusted"),
    ("loop state: a step more than the epochs", "plexus/train/loopstate.py",
     "not _whole(step, 0, epoch)", "not _whole(step, 0, epoch + 1)", LOOP_EDGES),
    ("loop state: best epoch 0 accepted", "plexus/train/loopstate.py",
     "not _whole(best_epoch, 1, epoch)", "not _whole(best_epoch, 0, epoch)", LOOP_EDGES),
    ("loop state: an early stop one epoch early", "plexus/train/loopstate.py",
     "stopped - best_epoch < patience):", "stopped - best_epoch < patience - 1):", LOOP_EDGES),
    ("loop state: a metric above 1 accepted", "plexus/train/loopstate.py",
     "not (_finite(value) and 0 <= value <= 1)", "not (_finite(value) and 0 <= value <= 2)",
     LOOP_EDGES),
    ("bounds: fractions pass an integer bound", "partitioners/plexus_partition/model/bounds.py",
     "if bound.integer and not float(value).is_integer():", "if False:",
     f"{EDGES}::test_an_integer_bound_refuses_fractions_and_takes_whole_floats_as_ints"),
    ("bounds: a negative weight decay", "partitioners/plexus_partition/model/bounds.py",
     '"weight_decay": _real(0, 1e3),', '"weight_decay": _real(-1e3, 1e3),',
     f"{EDGES}::test_each_end_holds_at_its_value_and_breaks_one_step_past"),
    ("bounds: an environment integer parsed as a float",
     "partitioners/plexus_partition/model/bounds.py",
     "value: Any = int(text) if bound.integer else float(text)", "value: Any = float(text)",
     f"{EDGES}::test_an_environment_number_past_its_bound_or_not_a_number_is_refused_naming_it"),
    ("bounds: an environment number's padding kept",
     "partitioners/plexus_partition/model/bounds.py",
     'text = environ.get(name, "").strip()', 'text = environ.get(name, "")',
     f"{EDGES}::test_an_unset_or_empty_variable_is_its_default"),
    ("dry run without its check probe", "plexus/engine/dryrun.py",
     "    if _evaluate((coef, exps), at[3]) != got[3]:\n",
     "    if False:\n", f"{PLANTED}::test_the_dry_runs_check_probe_refuses_a_size_the_fit_misses"),
    ("resolve leaves rank 0's outputs unchecked", "plexus/train/resolve.py",
     "    check_launch_outputs(request)  # rank 0's", "    pass  # rank 0's",
     "tests/train/test_resolve.py::test_rank_0_resolving_checks_the_outputs_it_alone_writes"),
    ("sparse rows estimated at a mean degree of 2",
     "partitioners/plexus_partition/model/schedule.py",
     "rate = 1.0 - (1.0 - 1.0 / p) ** mean_degree", "rate = 1.0 - (1.0 - 1.0 / p) ** 2",
     "tests/perfmodel/test_sparse_rows_by_hand.py::"
     "test_the_sparse_sum_sends_the_touched_rows_worked_out_by_hand"),
    ("sparse elements truncated, not rounded", "partitioners/plexus_partition/model/schedule.py",
     "moved, named = int(round(sent * div(size, rows))), exchange_names(name, sparse)",
     "moved, named = int(sent * div(size, rows)), exchange_names(name, sparse)",
     "tests/perfmodel/test_sparse_rows_by_hand.py::"
     "test_the_sparse_sum_sends_the_touched_rows_worked_out_by_hand"),
    ("SGD's momentum hard-coded to 0.9", "plexus/engine/trainer.py",
     "optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)",
     "optim.SGD(groups, lr=cfg.lr, momentum=0.9)",
     "tests/engine/test_sgd_momentum.py::test_sgd_moves_by_its_own_momentum"),
]
#: mutants that change no behaviour a run can reach, each with its one-line argument (planted
#: nowhere; checked to be plantable so that the argument stays about the code as it is)
EQUIVALENT = [
    ("loop state: no slack on the saved rate", "plexus/train/loopstate.py",
     "top = min(saved.lr, MAX_LR) * (1 + _SLACK)", "top = min(saved.lr, MAX_LR) * (1 + 1e-3)",
     "since the loop state's rates are held to what the saved schedule gives (issue 56 N5), every "
     "rate this range bounds is also held within 1e-6 to a value no larger than --lr (the --lr, "
     "the closed forms, a plateau's gamma^k; base_lrs to the fresh schedule's): a rate inside "
     "1e-3 but past 1e-6 is refused there (the 1e-4 case of test_loop_state_bounds shows it), so "
     "this slack never decides"),
    ("--explain's fallback of 4 bytes per element", "plexus/perfmodel/explain.py",
     "c.elements * (c.itemsize or spec.dtype_bytes), seconds))",
     "c.elements * (c.itemsize or 4), seconds))",
     "plexus-model always builds its schedule with payload_itemsize = comm_dtype_bytes(args) "
     "(plexus_partition.model.schedule: a payload's itemsize is then never None), so the "
     "fallback after `or` is unreachable from --explain; the precisions it prints are killed "
     "through comm_dtype_bytes above"),
]
PARTS = ("plexus", "partitioners", "datasets", "tests", "pyproject.toml", "benchmarks",
         "examples", "README.md", "ARCHITECTURE.md", "docs")


def stale(mutants=MUTANTS, root: Path = ROOT) -> list[str]:
    """The mutants that cannot be planted in ``root``'s code as it is (their text is not in
    their file, or their file is gone), as "name: why" lines."""
    out = []
    for name, rel, text, new, _ in mutants:
        path = root / rel
        if not path.is_file():
            out.append(f"{name}: {rel} does not exist")
        elif text not in path.read_text(encoding="utf-8"):
            out.append(f"{name}: its text is not in {rel}")
        elif text == new:
            out.append(f"{name}: plants nothing")
    return out


def commit(root: Path = ROOT) -> str:
    """HEAD's short hash, with a note when the tree differs from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" with uncommitted changes" if dirty else "")


def run_test(copy: Path, *tests: str) -> tuple[bool, float]:
    """Whether ``tests`` pass in ``copy``, and their seconds: pytest in a forked child of this
    process, which has torch imported already (the slow part of a fresh interpreter) and no
    module of the project (the child imports the copy's, mutant included)."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the copy's plexus and tests, quiet
        code = 3
        try:
            os.chdir(copy)
            paths = [str(copy), str(copy / "partitioners"), str(copy / "datasets")]
            sys.path[:0] = [*paths, str(copy / "tests")]
            os.environ["PYTHONPATH"] = os.pathsep.join(paths)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest  # noqa: PLC0415

            code = int(pytest.main(["-q", "-x", "-p", "no:cacheprovider", *tests]))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0, time.perf_counter() - start


def main() -> int:
    import numpy  # noqa: F401,PLC0415 — imported once here, shared by every forked test run
    import scipy.sparse  # noqa: F401,PLC0415
    import torch  # noqa: F401,PLC0415

    assert not any(m == "plexus" or m.startswith("plexus.") for m in sys.modules)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the table (Markdown) here too")
    ap.add_argument("--only", help="mutants whose name contains this")
    ap.add_argument("--check", action="store_true", help="only check every mutant is plantable")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.only or args.only in m[0]]
    refused = stale(chosen) + stale([(*m[:4], "") for m in EQUIVALENT])
    if refused:
        print("mutants: stale (not plantable at HEAD):\n  " + "\n  ".join(refused),
              file=sys.stderr)
        return 2
    if args.check:
        print(f"every one of the {len(chosen)} mutants is plantable at {commit()}")
        return 0
    at = commit()
    rows, survivors = [], 0
    with tempfile.TemporaryDirectory(prefix="plexus-mutants-") as tmp:
        copy = Path(tmp) / "src"
        copy.mkdir()
        for part in PARTS:
            src = ROOT / part
            if src.is_dir():
                shutil.copytree(src, copy / part, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.egg-info", ".venv"))
            else:
                shutil.copy2(src, copy / part)
        # every killing test passes unmutated (one run of them all)
        ok_before, secs = run_test(copy, *sorted({m[4] for m in chosen}))
        print(f"unmutated: the {len({m[4] for m in chosen})} tests "
              f"{'pass' if ok_before else 'FAIL'} ({secs:.1f} s)", flush=True)
        for name, rel, text, new, test in chosen:
            target = copy / rel
            original = target.read_text()
            assert original.count(text) >= 1, f"{name}: {text!r} not in {rel}"
            target.write_text(original.replace(text, new, 1))
            try:
                ok_after, secs = run_test(copy, test)
            finally:
                target.write_text(original)
            killed = ok_before and not ok_after
            survivors += not killed
            verdict = "killed" if killed else ("SURVIVED" if ok_before else "test fails unmutated")
            rows.append(f"| {name} | `{rel}` | `{test.split('::')[-1]}` | {verdict} |")
            print(rows[-1], f"({secs:.1f} s)", flush=True)
    rows += [f"| {name} | `{rel}` | (none) | equivalent: {why} |"
             for name, rel, _, _, why in EQUIVALENT]
    table = ["| mutant | file | test that kills it | result |", "|---|---|---|---|", *rows]
    summary = (f"{len(chosen) - survivors} of {len(chosen)} mutants killed at commit {at}, "
               f"{len(EQUIVALENT)} argued equivalent "
               f"(load {os.getloadavg()[0]:.1f}, "
               f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    print(summary)
    if args.out:
        args.out.write_text(f"# Mutation table at commit {at}\n\nRe-run: `./run python "
                            "benchmarks/mutants.py --out " + str(args.out) + "`. Each "
                            "mutant is planted in a temporary copy of the checkout; the test "
                            "must pass unmutated and fail mutated.\n\n" + "\n".join(table)
                            + f"\n\n{summary}\n")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
