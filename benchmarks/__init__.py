"""The benchmarks: `specrl bench engine|spec|adaptive|peer` (modules here, run through the CLI) and the scripts
beside them (`python benchmarks/<name>.py`). Each prints JSON lines; none is imported by `specrl`'s core."""
