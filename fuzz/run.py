"""The bounded fuzz run of every target under ASan and UBSan (the Makefile's `make fuzz`,
which .ci/run calls after the test suite; docs/fuzzing.md):

    python fuzz/run.py --build build/asan/lib --shim build/fuzz/coverage_shim.so [--seconds 100]

`--build` holds pimloader with its C extensions built with -fsanitize=address,undefined
(the Makefile builds it; the checkout's own pimloader/*.so are never touched). Every target
runs in its own process for an equal share of `--seconds` ($FUZZ_SECONDS, default 100),
with libasan preloaded (after fuzz/coverage_shim.c's library, which keeps atheris's
coverage feedback working beside it), leaks not reported (CPython's own are not ours) and
every UBSan report fatal. Before that, fuzz/canary.py checks that both sanitizers report.

New inputs go to build/fuzz/corpus/TARGET (the seeds of fuzz/corpus/ are only read), a
finding's input to build/fuzz/findings/. The run prints a table (time, inputs executed,
coverage, corpus) and writes it to build/fuzz/summary.md; it exits 1 when any target found
something or a canary stayed silent.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ("jpeg", "seekable", "seek_index", "wav", "sample_cache", "coco")
CORPUS = {"jpeg": "jpeg", "seekable": "jpeg", "seek_index": "jpeg", "wav": "wav", "sample_cache": "sample_cache", "coco": "coco"}
CANARIES = {"asan": "AddressSanitizer: heap-buffer-overflow", "ubsan": "runtime error: signed integer overflow"}
STARTUP_SECONDS = 180   # beyond its fuzzing time: imports and the seeds, under ASan


def gcc_library(name: str) -> str:
    path = subprocess.run(["gcc", f"-print-file-name={name}"], check=True, capture_output=True,
                          text=True).stdout.strip()
    if not os.path.isabs(path):
        sys.exit(f"fuzz/run.py: gcc has no {name} (install gcc's sanitizer runtimes)")
    return path


def sanitizer_env(build: str, shim: str) -> dict:
    env = dict(os.environ)
    env.update(
        # the shim before libasan (verify_asan_link_order=0 allows it), libstdc++ so that
        # ASan's __cxa_throw interceptor finds its target
        LD_PRELOAD=" ".join([os.path.abspath(shim), gcc_library("libasan.so"), gcc_library("libstdc++.so")]),
        ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0:allocator_may_return_null=0",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        PYTHONPATH=os.pathsep.join(filter(None, [os.path.abspath(build), os.environ.get("PYTHONPATH")])),
        PIMLOADER_FUZZ_BUILD=os.path.abspath(build),
        PYTHONWARNINGS="ignore",
    )
    return env


def check_canaries(env: dict) -> list:
    failures = []
    for kind, report in CANARIES.items():
        done = subprocess.run([sys.executable, os.path.join(HERE, "canary.py"), kind], env=env,
                              capture_output=True, text=True, timeout=STARTUP_SECONDS)
        if done.returncode == 0 or report not in done.stderr:
            failures.append(f"canary {kind}: expected {report!r} and a failure, got rc {done.returncode}:\n"
                            + done.stdout[-2000:] + done.stderr[-2000:])
        else:
            print(f"canary {kind}: reported ({report})", flush=True)
    return failures


def fuzz(target: str, seconds: int, env: dict, out: str) -> dict:
    work = os.path.join(out, "corpus", target)
    findings = os.path.join(out, "findings")
    os.makedirs(work, exist_ok=True)
    os.makedirs(findings, exist_ok=True)
    command = [sys.executable, os.path.join(HERE, "driver.py"), target, f"-max_total_time={seconds}",
               "-timeout=30", "-rss_limit_mb=8192", "-print_final_stats=1",
               f"-artifact_prefix={os.path.join(findings, target)}-", work,
               os.path.join(HERE, "corpus", CORPUS[target])]
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=seconds + STARTUP_SECONDS)
        rc, log = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        rc, log = "hung", (expired.stdout or b"").decode() + (expired.stderr or b"").decode()
    wall = time.monotonic() - start
    with open(os.path.join(out, f"{target}.log"), "w") as file:
        file.write(log)
    return dict(target=target, wall=wall, rc=rc, log=log, **_stats(log))


def _stats(log: str) -> dict:
    units = re.findall(r"stat::number_of_executed_units:\s+(\d+)", log)
    done = re.findall(r"#\d+\s+DONE\s+cov: (\d+) ft: \d+ corp: (\d+)/", log)
    speed = re.findall(r"stat::average_exec_per_sec:\s+(\d+)", log)
    return dict(inputs=int(units[-1]) if units else None, cov=int(done[-1][0]) if done else None,
                corpus=int(done[-1][1]) if done else None, speed=int(speed[-1]) if speed else None)


def table(results: list, seconds_each: int) -> str:
    lines = [f"| target | fuzzing s | wall s | inputs executed | inputs/s | Python coverage | corpus | result |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        result = "clean" if r["rc"] == 0 else f"FINDING (rc {r['rc']})"
        lines.append(f"| {r['target']} | {seconds_each} | {r['wall']:.0f} | {r['inputs']} | {r['speed']} | "
                     f"{r['cov']} | {r['corpus']} | {result} |")
    total = sum(r["inputs"] or 0 for r in results)
    lines.append(f"| all | {seconds_each * len(results)} | {sum(r['wall'] for r in results):.0f} | {total} | | | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True, help="the folder holding the sanitizer build of pimloader")
    parser.add_argument("--shim", required=True, help="fuzz/coverage_shim.c built as a shared library")
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", 100)),
                        help="fuzzing time of all targets together ($FUZZ_SECONDS, default 100)")
    parser.add_argument("--out", default="build/fuzz")
    parser.add_argument("targets", nargs="*", default=list(TARGETS))
    args = parser.parse_args(argv)
    env = sanitizer_env(args.build, args.shim)
    failures = check_canaries(env)
    seconds_each = max(1, args.seconds // len(args.targets))
    results = []
    for target in args.targets:
        print(f"fuzz {target}: {seconds_each} s ...", flush=True)
        result = fuzz(target, seconds_each, env, args.out)
        results.append(result)
        if result["rc"] != 0:
            failures.append(f"fuzz {target}: {result['rc']}\n" + result["log"][-6000:])
    summary = table(results, seconds_each)
    with open(os.path.join(args.out, "summary.md"), "w") as file:
        file.write(summary + "\n")
    print(summary)
    for failure in failures:
        print(failure, file=sys.stderr)
    found = sum(r["rc"] != 0 for r in results)
    if found:
        print(f"the inputs of the findings are in {args.out}/findings")
    # the closing line in the form CI reads ("N passed, N failed"): targets without and with findings
    print(f"fuzz: {len(results) - found} passed, {found} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
