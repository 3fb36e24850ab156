"""Where a Plexus process runs: which launcher started it (`env`, from environment variables
alone), joining the job's process group (`group`, the one module that imports torch, only under
torchrun/srun), a parent's death ending its children (`lifeline`), host memory settings
(`hostmem`). The partitioner's ranks and the engine's share them (old path
`plexus.runtime.<name>`)."""
