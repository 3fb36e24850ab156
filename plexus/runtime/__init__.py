"""Where a Plexus job runs: which launcher started this process (`env`), joining the job's
process group (`group`), starting local workers with torch's elastic launcher (`local`), and host
memory settings of CPU workers (`hostmem`). Used by the training command and the Python API."""
