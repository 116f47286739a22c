"""The fuzz targets: one module per parser of untrusted bytes, each with

- `CORPUS`: its seed folder under fuzz/corpus/;
- `MAX_LEN`: the longest input the fuzzer makes;
- `one_input(data: bytes) -> None`: feeds the bytes to the parser and returns when it
  accepted them or raised one of the errors it documents; anything else (another
  exception, a failed assertion on what it returned, a crash or sanitizer report in the C
  code, a hang) is a finding.

The targets import no fuzzing library: tests/test_fuzz_targets.py runs them over the seed
corpus and the findings' regression inputs with the ordinary build, fuzz/driver.py under
atheris with the sanitizer build. The decoders' warnings (images over the pixel limit) are
documented behaviour, not findings: fuzz/run.py silences them (PYTHONWARNINGS)."""
