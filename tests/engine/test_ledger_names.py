"""The ledger keeps each collective's name as the code that issued it labelled it
(`plexus.engine.ledger.Ledger.names`, `plexus.engine.comm.Comm.labelled`), and a sparse
exchange's two parts are named by the schedule's one rule (`schedule.exchange_names`); the
summary and ``--log-json`` read those names (`plexus.train.traffic.collective_account`). The
world checks (`engine_checks.check_ledger`) hold every run's names to the schedule's, and the
schedule's to the hand-written declarations (`tests/engine/test_dryrun.py`)."""

from __future__ import annotations

from plexus.engine.ledger import Ledger
from plexus.train.traffic import collective_account
from plexus_partition.model.schedule import exchange_names


def test_exchange_names_by_hand():
    assert exchange_names("AR(AGG)", "sum") == {"all_to_all": "SRS(AGG)", "all_gather": "AG(AGG)"}
    assert exchange_names("AR(dAGG)", "gather") == {"reduce_scatter": "RS(dAGG)",
                                                    "all_to_all": "SAG(dAGG)"}
    assert exchange_names("AR(OUT)", "sum")["all_to_all"] == "SRS(OUT)"


def test_the_ledger_keeps_the_names_it_was_given():
    ledger = Ledger()
    ledger.record("x", "all_reduce", 12, 2, 4, layer=0, phase="forward", name="AR(AGG)")
    ledger.record("x", "all_reduce", 12, 2, 4, layer=0, phase="forward", name="AR(AGG)")
    # another collective of the same key: both names, once each
    ledger.record("x", "all_reduce", 12, 2, 4, layer=0, phase="forward", name="AR(OUT)")
    ledger.record("z", "all_gather", 6, 3, 2, layer=1, phase="backward", name="AG(dOUT)")
    assert ledger.names == {(0, "forward", "all_reduce", "x", 12, 4): "AR(AGG)/AR(OUT)",
                            (1, "backward", "all_gather", "z", 6, 2): "AG(dOUT)"}
    account = collective_account(ledger.collectives, ledger.names, {"x": 2, "y": 1, "z": 3}, 1)
    rows = {(r["name"], r["calls"], r["bytes"]) for r in account["collectives"]}
    # x: 3 all-reduces of 12 on 2 ranks (2·1/2·12 elements, 4 B each); z: a gather of 6 on 3
    # (2/3·6 = 4 elements, 2 B each)
    assert rows == {("AR(AGG)/AR(OUT)", 3, 3 * 12 * 4), ("AG(dOUT)", 1, 4 * 2)}
    ledger.reset()
    assert ledger.names == {}
