"""The errors every dataset reader raises and the limits it checks against: the lowest module of
`plexus_datasets`, so that the graph, its validation and the file readers share them without
importing one another in a circle."""

from __future__ import annotations

from plexus_datasets.base.values import ErrorType  # noqa: F401 (the readers' ``error=`` argument)


class DatasetError(ValueError):
    """Bad or missing dataset input. The message is one line naming the file and the problem."""


class RootMissing(DatasetError):
    """A dataset read from files was asked for without the directory holding them: the message
    names the API's ``root`` argument; `command_line` says the same with the tools' flag."""

    def __init__(self, name: str, holding: str) -> None:
        self.name, self.holding = name, holding
        super().__init__(f"{name}: needs root=DIR, the directory holding {holding}")

    def command_line(self, flag: str = "--root DIR") -> str:
        """The message in the command-line tools' terms."""
        return f"{self.name}: needs {flag}, the directory holding {self.holding}"


#: Most nodes a graph may have: `edges_to_csr` keys an edge as ``src * N + dst`` in an int64.
MAX_NODES = 3_000_000_000
