"""The pair operator of link prediction as values (no torch): its collectives with their sizes,
its buffers in bytes, and the pairs a batch holds for a byte budget. The engine runs it
(`plexus.engine.pairs`), the performance model prices these collectives like the schedule's
(`plexus.perfmodel`), and the tests compare the engine's ledger with them.

For a batch of P pairs with E distinct end nodes, on an encoder whose last stage cuts its output
rows over R and its D' padded columns over C (|C| ranks, D'/|C| each):

  AR(ends)  over R   n = E·D'/|C|   every rank of R gets the ends' rows of its column block
  AR(dot)   over C   n = P          the dot decoder: the partial sums of h_u ⊙ h_v
  AG(prod)  over C   n = P·D'       the MLP decoder: h_u ⊙ h_v at full width

Collectives over an axis of one rank are not issued; the backward issues none (every rank
computes the same scores, so each block's gradient is its own part of theirs).
"""

from __future__ import annotations

from typing import Mapping

from .layout import LayerPlan
from .schedule import Collective

#: The decoders of a pair's two embeddings.
DECODERS = ("dot", "mlp")
#: The MLP decoder's layers unless asked otherwise (OGB's examples' ``LinkPredictor``).
DECODER_LAYERS = 3
#: The layer number the MLP decoder's dropout masks are keyed with (its hidden layer i:
#: DECODER_LAYER + i), far above any encoder's.
DECODER_LAYER = 1 << 20


def pair_collectives(last: LayerPlan, shape: Mapping[str, int], width_padded: int,
                     num_pairs: int, num_ends: int, decoder: str,
                     phase: str = "loss") -> list[Collective]:
    """The collectives one batch of ``num_pairs`` pairs with ``num_ends`` distinct ends issues
    (module docstring), recorded under ``phase`` ("loss" in training, "eval" when scoring),
    on the encoder whose last stage is ``last`` with ``width_padded`` output columns."""
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder {decoder!r}; use one of {', '.join(DECODERS)}")
    rows, cols = last.out_rows, last.out_cols
    block = width_padded // shape[cols]
    out = []
    if shape[rows] > 1:
        out.append(Collective("AR(ends)", None, phase, "all_reduce", rows, shape[rows],
                              int(num_ends) * block))
    if shape[cols] > 1:
        if decoder == "dot":
            out.append(Collective("AR(dot)", None, phase, "all_reduce", cols, shape[cols],
                                  int(num_pairs)))
        else:
            out.append(Collective("AG(prod)", None, phase, "all_gather", cols, shape[cols],
                                  int(num_pairs) * width_padded))
    return out


def pair_bytes(block: int, width_padded: int, decoder: str, hidden: int = 0,
               layers: int = 0, itemsize: int = 4) -> int:
    """Bytes one pair of a batch takes at most (its two ends distinct: E ≤ 2P) while the
    batch's loss and backward run, on a rank whose output block has ``block`` columns: the ends'
    rows (taken, masked, summed: 3 per end), the pair's two ends' rows and their product
    (3·block), and for the MLP the gathered product at full width (twice: with its transpose)
    and five buffers per hidden layer (its output, the ReLU's, the dropout's, and in the
    backward the gradients of its output and input), plus the int64 ids (the pair, its ends,
    their positions)."""
    floats = 3 * 2 * block + 3 * block
    if decoder == "mlp":
        floats += 2 * width_padded + 5 * hidden * max(layers - 1, 0) + 2
    return int(floats * itemsize + 6 * 8)


def pair_peak(pairs: int, ends: int, block: int, width_padded: int, rows: int, decoder: str,
              hidden: int = 0, layers: int = 0, itemsize: int = 4) -> float:
    """Bytes one training batch of ``pairs`` positives and as many negatives (each with at
    most ``ends`` distinct ends) holds at its peak besides the embedding block of ``rows`` ×
    ``block`` and its gradient (`plexus.engine.link.LinkTask.train_step`; measured with the
    tensor tracker, `plexus.testing.linkmemory`). Each of the two graphs keeps its pairs' two
    end rows (2·block a pair), the MLP's input product (width_padded a pair) and two buffers per
    hidden layer (the ReLU's output and the dropout's), and int64 ids (its ends' positions, 2 a
    pair; the pair ids, 1; the ends' rows, 1 an end, and their float32 presence, 1 an end).
    The peak is the larger of two moments: both graphs kept with the second's newest buffers
    (the dot: a product and the ends' all-reduced rows; the MLP: its last hidden layer's linear
    output, one-byte mask and 16-bit hash words), or one graph kept beside the other's ends'
    gradient and the block's scattered gradient (zeros, then their ``index_add``: 2·rows·block).
    The negatives' ids (2 a pair) are alive throughout."""
    P, E, f = int(pairs), int(ends), itemsize
    k = max(layers - 1, 0) if decoder == "mlp" else 0
    kept = P * 2 * block * f + P * 3 * 8 + E * (8 + 4)
    if decoder == "mlp":
        kept += P * (width_padded + 2 * k * hidden) * f
        newest = P * hidden * (f + 1 + 2) if k else 0
    else:
        newest = (P + E) * block * f
    both = 2 * kept + newest
    one = kept + (E + 2 * rows) * block * f
    return float(max(both, one) + 2 * P * 8)


def decoder_parameters(decoder: str, channels: int, hidden: int = 0, layers: int = 0) -> int:
    """The decoder's parameters: none for "dot"; for "mlp" the weights and biases of its
    ``layers`` Linear layers, ``channels`` → ``hidden`` → ... → 1 (OGB's ``LinkPredictor``)."""
    if decoder != "mlp":
        return 0
    widths = [channels] + [hidden] * (layers - 1) + [1]
    return sum(a * b + b for a, b in zip(widths, widths[1:]))


def batch_pairs(budget: float, per_pair: int, total: int) -> int:
    """Pairs in one batch: as many as ``budget`` bytes hold at ``per_pair`` bytes each (at
    least one), at most ``total``."""
    return max(1, min(int(total), int(budget // max(per_pair, 1))))
