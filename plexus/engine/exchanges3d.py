"""Where a stage's sums travel as sparse exchanges (`plexus.engine.exchange`): the index lists of
its convolution's sum over o (and, aggregate first, its result's gradient) from the block's
touched rows, and of its input gradient's sum over depth from the block's touched columns, each
built once at the stage's first run, by ``engine.sparse_comm``; and the rows each sends, which
the schedule prices (`plexus_partition.model.schedule.exact_rows`). A mixin of
`plexus.engine.graph3d.StageGraph`, whose plan, communicator, graph and engine it reads."""

from __future__ import annotations

from plexus_partition.model.ops.conv import RootTerm

from .exchange import RowExchange


class StageExchanges:
    """The sparse exchanges of one stage (``exchange``: the convolution's; ``input_exchange``:
    the input gradient's; None until built or where none applies)."""

    exchange: RowExchange | None = None
    input_exchange: RowExchange | None = None

    def _exchanges(self, root: RootTerm) -> tuple[RowExchange | None, RowExchange | None]:
        """The sparse exchanges of the convolution's sum over o and, aggregate first, of its
        replicated result's gradient (None: the all-reduce), by ``engine.sparse_comm``: a
        plain block's touched rows (`plexus.engine.exchange`). Built at the stage's first run,
        together by every rank of the axis."""
        if "exchange" not in self._cache:
            mode = getattr(self.engine, "sparse_comm", "off")
            o = self.plan.outer
            ex = None
            if not root.stacked and mode != "off" and self.comm.grid.size(o) > 1:
                m = self.graph.matrix(self.plan)
                ex = RowExchange.build(self.comm, o, self.graph.shard.touched_rows(
                    self.plan.index), m.shape[0])
            self.exchange = ex
            self._cache["exchange"] = (ex if ex is not None and ex.use("sum", mode) else None,
                                       ex if ex is not None and self.plan.order == "agg"
                                       and ex.use("gather", mode) else None)
        return self._cache["exchange"]  # type: ignore[return-value]

    def exchange_counts(self) -> dict[tuple[int, str], tuple[int, int]]:
        """{(stage, "sum"/"gather"/"input"): (rows this rank sends, the most any rank of the
        axis sends)} of the exchanges built (`plexus_partition.model.schedule.exact_rows`
        prices them)."""
        out, index = {}, self.plan.index
        for ex, kinds in ((self.exchange, ("sum", "gather")), (self.input_exchange, ("input",))):
            if ex is not None:
                me = self.comm.grid.coords[ex.axis]
                out.update({(index, k): (ex.sent("gather" if k == "gather" else "sum", me),
                                         max(ex.gathered if k == "gather" else ex.summed))
                            for k in kinds})
        return out

    def _input_exchange(self) -> RowExchange | None:
        """The input gradient's sparse exchange over depth (None: the all-reduce), by
        ``engine.sparse_comm``: the block's touched columns. Built at the first run, together
        by every rank of the axis."""
        if "input exchange" not in self._cache:
            mode, d = getattr(self.engine, "sparse_comm", "off"), self.plan.depth
            ex = None
            if mode != "off" and self.comm.grid.size(d) > 1:
                ex = RowExchange.build(self.comm, d, self.graph.shard.touched_columns(
                    self.plan.index), self.graph.matrix(self.plan).shape[1])
            self.input_exchange = ex
            self._cache["input exchange"] = ex if ex is not None and ex.use("sum", mode) else None
        return self._cache["input exchange"]  # type: ignore[return-value]
