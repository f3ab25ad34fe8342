"""Benchmark runners: one module per benchmark family, mirroring `eval/scorers/` (`vqa`, `gqa`, `pope`, ...),
each a `core.interfaces.Benchmark` built from `conf/benchmark/<name>.yaml`; `base` holds the shared run loop."""
