"""The 32-bit constants of the dropout masks' hash: one source for the engine's masks
(`plexus.engine.masks`) and the performance model's timing of their passes
(`plexus.perfmodel.measure.measure_elementwise`)."""

M32 = 0xFFFFFFFF
# Multipliers below 2**31 keep every product of a 32-bit value below 2**63: int64 arithmetic then
# never overflows, on CPU and CUDA alike.
MUL = 0x45D9F3B
GOLDEN = 0x61C88647
KEY0 = 0x2545F491
