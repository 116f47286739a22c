"""Run PyTorch's own test/test_dataloader.py against PIMDataLoader.

PyTorch's file is not part of this repository and this script does not fetch it: give it
a copy from the PyTorch source matching the installed torch (test/test_dataloader.py of
that release). It is copied into a scratch folder, never into the repository, and run there
with pytest, with `torch.utils.data.DataLoader` replaced by `pimloader.PIMDataLoader` in
every Python process of the run: the test process, the processes its tests spawn
(ErrorTrackingProcess targets, spawn/forkserver workers) and the `python -c` subprocesses
some tests start. The replacement is a `sitecustomize` module on PYTHONPATH, so nothing in
PyTorch's file is edited.

    python scripts/torch_dataloader_suite.py /path/to/test_dataloader.py [-- pytest args]
    python scripts/torch_dataloader_suite.py FILE --torch      # the control: torch's own
    python scripts/torch_dataloader_suite.py FILE --slow       # also @slowTest (test_proper_exit)
    python scripts/torch_dataloader_suite.py FILE -- -k segfault --timeout 600   # pytest args

Prints pytest's summary line (passed/failed/skipped) and returns pytest's exit status.
Tests that need an accelerator (pin_memory, CUDA IPC) skip on a machine without one.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SITECUSTOMIZE = '''\
# Written by pimloader's scripts/torch_dataloader_suite.py: every Python process of the
# run (pytest, spawned children, `python -c` subprocesses) loads PIMDataLoader under the
# name torch.utils.data.DataLoader before PyTorch's test code imports it.
import os
if os.environ.get("PIMLOADER_SUITE_LOADER") == "pimloader":
    import torch.utils.data
    from pimloader import PIMDataLoader
    torch.utils.data.DataLoader = PIMDataLoader
'''

CHECK = '''\
import torch.utils.data, pimloader
want = "pimloader" if %r == "pimloader" else "torch"
got = "pimloader" if torch.utils.data.DataLoader is pimloader.PIMDataLoader else "torch"
assert got == want, (got, want)
print(pimloader.__file__)
'''


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file", help="PyTorch's test/test_dataloader.py (a local copy)")
    parser.add_argument("--torch", action="store_true",
                        help="run it against torch's own DataLoader (the control)")
    parser.add_argument("--slow", action="store_true",
                        help="run @slowTest tests too (PYTORCH_TEST_WITH_SLOW=1)")
    parser.add_argument("--keep", help="scratch folder to use and keep (default: a temp one)")
    argv = sys.argv[1:] if argv is None else list(argv)
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)

    scratch = args.keep or tempfile.mkdtemp(prefix="pimloader-torch-suite-")
    os.makedirs(scratch, exist_ok=True)
    if os.path.realpath(scratch).startswith(os.path.realpath(ROOT) + os.sep):
        parser.error("the scratch folder must be outside the repository")
    shutil.copyfile(args.test_file, os.path.join(scratch, "test_dataloader.py"))
    with open(os.path.join(scratch, "sitecustomize.py"), "w") as out:
        out.write(SITECUSTOMIZE)

    env = dict(os.environ)
    env["PIMLOADER_SUITE_LOADER"] = "torch" if args.torch else "pimloader"
    env["PYTHONPATH"] = os.pathsep.join(
        [scratch, ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if args.slow:
        env["PYTORCH_TEST_WITH_SLOW"] = "1"
    which = subprocess.run([sys.executable, "-c", CHECK % env["PIMLOADER_SUITE_LOADER"]],
                           env=env, cwd=scratch, capture_output=True, text=True)
    if which.returncode != 0:
        sys.stderr.write(which.stderr)
        return 2
    print(f"DataLoader under test: {env['PIMLOADER_SUITE_LOADER']} "
          f"(pimloader from {which.stdout.strip()}); scratch folder {scratch}", flush=True)
    command = [sys.executable, "-m", "pytest", "test_dataloader.py", "-q", "-rfE",
               "-p", "no:cacheprovider", "--rootdir", scratch, "-c", os.devnull,
               *pytest_args]
    return subprocess.run(command, env=env, cwd=scratch).returncode


if __name__ == "__main__":
    sys.exit(main())
