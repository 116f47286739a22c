"""Fuzzing of pimloader's parsers of untrusted bytes (docs/fuzzing.md): the targets
(fuzz/targets/), their seed corpus (fuzz/corpus/, made by fuzz/make_seeds.py), the atheris
driver of one target (fuzz/driver.py) and the bounded run of them all under ASan and UBSan
(fuzz/run.py, the Makefile's `fuzz` target)."""
