"""A run's directory and its records: metrics.jsonl and the trackers (`logger`, `trackers`),
the completions table (`completions`), the progress bar (`progress`), curves.png (`plots`)
and the checks that never damage an existing run directory (`run_dir`).

`train` writes these; `show` and `compare` read them, so the package sits beside all three
and imports none of them (nor torch models)."""
