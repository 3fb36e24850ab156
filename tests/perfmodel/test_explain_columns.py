"""``plexus-model --explain``'s columns recomputed apart from `plexus.perfmodel.explain` (issue 58
item 1): each collective's bytes per rank from its size by the ring's formula and the wire's item
size (2 bytes per payload element under bf16, 4 per statistic: the loss's), its time from the
calibration's α and β printed in the header, its share of the epoch, and every axis's total line
(bytes, time, share). The epoch is the prediction's (``--json``'s entry for the grid), never the
account's own sum.
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from plexus.perfmodel.cli import model_main

# N=16, one aggregate-first layer 8 -> 4 on 2x1x1: the aggregation's all-reduce over x is of Â's
# block (16 rows) times the 8 input columns: 128 elements
TINY = ["--nodes", "16", "--nnz", "100", "--features", "8", "--classes", "4", "--layers", "1",
        "--hidden", "8", "--order", "agg", "--no-bias", "--sparse-comm", "off"]
BIG = ["--nodes", "5000", "--nnz", "60000", "--features", "64", "--classes", "8", "--layers",
       "3", "--hidden", "32"]
STATISTICS = {"loss"}  # phases whose collectives are sent exactly (float32)


def _run(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert model_main(argv) == 0
    return out.getvalue()


def _moved(op: str, size: int, p: int) -> float:
    """Elements one rank sends in a ring collective of ``size`` over p ranks, by hand."""
    return {"all_reduce": 2 * (p - 1) / p * size, "all_gather": (p - 1) / p * size,
            "reduce_scatter": (p - 1) / p * size, "all_to_all": size}[op]


def _steps(op: str, p: int) -> int:
    return 2 * (p - 1) if op == "all_reduce" else p - 1


def _table(text: str) -> tuple[list[dict], dict[str, str]]:
    """The explain table's rows (text columns) and its axis total lines by axis."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.split()[:2] == ["layer", "phase"])
    rows, totals = [], {}
    for line in lines[start + 1:]:
        m = re.match(r"\s+axis (\w) ", line)
        if m:
            totals[m.group(1)] = line.strip()
            continue
        if not line.strip():
            break
        t = line.split()
        if len(t) != 13 or totals:
            break
        rows.append(dict(layer=t[0], phase=t[1], name=t[2], op=t[3], axis=t[4], link=t[5],
                         size=int(t[6].replace(",", "")), calls=int(t[7]),
                         bytes=f"{t[8]} {t[9]}", time=f"{t[10]} {t[11]}", share=t[12]))
    return rows, totals


def _header_link(text: str) -> tuple[float, float]:
    m = re.search(r"alpha ([0-9.e+-]+) s, beta ([0-9.e+-]+) B/s", text)
    assert m, "the header names the link's alpha and beta"
    return float(m.group(1)), 1.0 / float(m.group(2))


def _epoch_of(argv: list[str], grid: list[int]) -> float:
    doc = json.loads(_run(argv + ["--json"]))
    [config] = [c for c in doc["configs"] if c["grid"] == grid]
    return config["time_s"]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us"


@pytest.mark.parametrize("wire,payload", [("bf16", 2), ("fp32", 4)])
def test_explain_prints_each_collectives_bytes_time_and_share_by_hand(wire, payload):
    """The one-layer case: AR(AGG) moves 128 of its 128 elements at the wire's item size
    (256 B under bf16, 512 B as fp32), the loss's statistics 4 bytes per element moved; each
    time is 2(p-1)·α + bytes·β; each share 100·time/epoch; the x axis's total line sums them;
    no other axis has one."""
    argv = TINY + ["--grid", "2x1x1", "--explain", "--comm-dtype", wire]
    text = _run(argv)
    rows, totals = _table(text)
    alpha, beta = _header_link(text)
    epoch = _epoch_of(argv, [2, 1, 1])
    agg = [r for r in rows if r["name"] == "AR(AGG)"]
    assert len(agg) == 1 and (agg[0]["op"], agg[0]["axis"], agg[0]["size"]) == (
        "all_reduce", "x", 128)
    assert agg[0]["bytes"] == f"{128 * payload} B"
    assert {r["phase"] for r in rows} == {"forward", "loss"}
    moved_bytes, seconds = 0.0, 0.0
    for r in rows:
        itemsize = 4 if r["phase"] in STATISTICS else payload
        b = _moved(r["op"], r["size"], 2) * itemsize
        t = _steps(r["op"], 2) * alpha + b * beta
        assert r["bytes"] == f"{b:.0f} B", r
        assert r["time"] == _us(t), r
        assert r["share"] == f"{100 * t / epoch:.1f}%", r
        moved_bytes, seconds = moved_bytes + b, seconds + t
    assert set(totals) == {"x"}
    assert totals["x"] == (f"axis x (local): {moved_bytes:.0f} B per rank, {_us(seconds)}, "
                           f"{100 * seconds / epoch:.1f}% of the epoch")


def test_explain_under_bf16_halves_every_payload_and_keeps_the_statistics():
    """Three layers on 2x2x2 (``--json``'s account): every collective's bytes are its elements
    moved (by the ring's formula from its size) times 4 as fp32; under bf16 payloads the same
    collectives move half of that, the loss's statistics the same."""
    accounts = {}
    for wire in ("fp32", "bf16"):
        doc = json.loads(_run(BIG + ["--grid", "2x2x2", "--explain", "--comm-dtype", wire,
                                     "--json"]))
        accounts[wire] = doc["explain"]
    key = ("layer", "phase", "name", "op", "axis", "size")
    fp32 = {tuple(r[k] for k in key): r for r in accounts["fp32"]}
    bf16 = {tuple(r[k] for k in key): r for r in accounts["bf16"]}
    assert fp32.keys() == bf16.keys() and len(fp32) == len(accounts["fp32"])
    assert {r["axis"] for r in fp32.values()} == {"x", "y", "z"}
    statistics = 0
    for k, r in fp32.items():
        want = _moved(r["op"], r["size"], 2) * 4
        assert r["bytes"] == pytest.approx(want, rel=1e-12), k
        exact = r["phase"] in STATISTICS
        statistics += exact
        assert bf16[k]["bytes"] == pytest.approx(want if exact else want / 2, rel=1e-12), k
    assert 0 < statistics < len(fp32)


def test_explain_has_one_total_per_axis_adding_its_rows():
    """Three layers on 2x2x2 under bf16: a total line for each of x, y and z whose share is the
    sum of its rows' (their times over the prediction's epoch) and whose time is their sum."""
    argv = BIG + ["--grid", "2x2x2", "--explain", "--comm-dtype", "bf16"]
    text = _run(argv)
    rows, totals = _table(text)
    doc = json.loads(_run(argv + ["--json"]))
    account = doc["explain"]
    [config] = [c for c in doc["configs"] if c["grid"] == [2, 2, 2]]
    epoch = config["time_s"]
    assert len(rows) == len(account) and set(totals) == {"x", "y", "z"}
    for r, a in zip(rows, account):  # the share column from the account's time, by hand
        assert r["share"] == f"{100 * a['seconds'] / epoch:.1f}%", r
    for axis in "xyz":
        mine = [a for a in account if a["axis"] == axis]
        seconds = sum(a["seconds"] for a in mine)
        share = re.search(r"([0-9.]+)% of the epoch", totals[axis])
        assert share and share.group(1) == f"{100 * seconds / epoch:.1f}", totals[axis]
        assert config["comm_s_per_axis"][axis] == pytest.approx(seconds, rel=1e-9), axis


def test_explain_under_a_bf16_compute_precision_prices_its_payloads_at_2_bytes():
    """``--dtype bf16`` (the payloads travel in the compute precision: no wire of their own):
    every payload moves its elements times 2, the loss's statistics times 4 (issue 58: a
    fallback of 4 bytes per element passed every fp32-computing test)."""
    doc = json.loads(_run(BIG + ["--grid", "2x2x2", "--explain", "--dtype", "bf16", "--json"]))
    rows = doc["explain"]
    assert {r["axis"] for r in rows} == {"x", "y", "z"}
    exact = [r for r in rows if r["phase"] in STATISTICS]
    assert 0 < len(exact) < len(rows)
    for r in rows:
        want = _moved(r["op"], r["size"], 2) * (4 if r["phase"] in STATISTICS else 2)
        assert r["bytes"] == pytest.approx(want, rel=1e-12), r
