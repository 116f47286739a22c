"""Building the DPU kernel with UPMEM's toolchain, and the DPU profile through the loader.

No UPMEM SDK is reachable here: a stand-in `dpu-upmem-dpurte-clang` (a shell script that
logs its arguments and writes its output file, or fails) checks what pimloader asks of the
real one: the command line, the cache, the errors. The profile is followed through the
loader to the (emulated) DPU set it allocates."""
import os
import stat
import textwrap

import pytest
import torch

from pimloader import PIMDataLoader
from pimloader.backends.dpu import toolchain as toolchain
from pimloader.backends.dpu.driver import KERNEL_INCLUDES, KERNEL_SOURCE
from pimloader.datasets import ImageFolder

from test_image_pipeline import PIPELINES, photos, pimloader_batches  # noqa: F401  (fixture)


def fake_compiler(folder, *, fails=False) -> str:
    path = os.path.join(folder, toolchain.COMPILER)
    log = os.path.join(folder, "calls.log")
    body = ('echo "no such intrinsic" >&2; exit 3' if fails else
            'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then shift; echo DPU-ELF > "$1"; fi; '
            'shift; done')
    with open(path, "w") as file:
        file.write(textwrap.dedent(f"""\
            #!/bin/sh
            echo "$@" >> {log}
            {body}
            """))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def calls(folder) -> list:
    log = os.path.join(folder, "calls.log")
    return open(log).read().splitlines() if os.path.exists(log) else []


def test_the_kernel_is_built_with_the_kernel_flags_once(tmp_path, monkeypatch):
    bin_dir, cache = tmp_path / "bin", tmp_path / "cache"
    bin_dir.mkdir()
    fake_compiler(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    built = toolchain.build_kernel(KERNEL_SOURCE, nr_tasklets=16, include_dirs=KERNEL_INCLUDES,
                                   defines={"STACK_SIZE_DEFAULT": 1024}, cache_dir=str(cache))
    assert open(built).read() == "DPU-ELF\n"
    [call] = calls(bin_dir)
    arguments = call.split()
    assert arguments[:3] == ["-O2", "-DNR_TASKLETS=16", "-DSTACK_SIZE_DEFAULT=1024"]
    assert [f"-I{d}" for d in KERNEL_INCLUDES] == arguments[3:3 + len(KERNEL_INCLUDES)]
    assert arguments[-1] == KERNEL_SOURCE
    again = toolchain.build_kernel(KERNEL_SOURCE, nr_tasklets=16, include_dirs=KERNEL_INCLUDES,
                                   defines={"STACK_SIZE_DEFAULT": 1024}, cache_dir=str(cache))
    assert again == built and len(calls(bin_dir)) == 1, "a cached kernel was rebuilt"
    other = toolchain.build_kernel(KERNEL_SOURCE, nr_tasklets=11, include_dirs=KERNEL_INCLUDES,
                                   defines={"STACK_SIZE_DEFAULT": 1024}, cache_dir=str(cache))
    assert other != built and "-DNR_TASKLETS=11" in calls(bin_dir)[-1]


def test_an_edited_header_rebuilds(tmp_path, monkeypatch):
    bin_dir, include = tmp_path / "bin", tmp_path / "include"
    bin_dir.mkdir()
    include.mkdir()
    (include / "params.h").write_text("#define A 1\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fake_compiler(bin_dir)
    options = dict(nr_tasklets=4, include_dirs=[str(include)], cache_dir=str(tmp_path / "c"))
    first = toolchain.build_kernel(KERNEL_SOURCE, **options)
    (include / "params.h").write_text("#define A 2\n")
    assert toolchain.build_kernel(KERNEL_SOURCE, **options) != first
    assert len(calls(bin_dir)) == 2


def test_a_failing_build_says_why_and_leaves_nothing(tmp_path, monkeypatch):
    bin_dir, cache = tmp_path / "bin", tmp_path / "cache"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fake_compiler(bin_dir, fails=True)
    with pytest.raises(toolchain.ToolchainError, match="exit 3.*\n.*no such intrinsic"):
        toolchain.build_kernel(KERNEL_SOURCE, nr_tasklets=16, cache_dir=str(cache))
    assert not os.listdir(cache)


def test_the_compiler_is_found_under_upmem_home(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("UPMEM_HOME", raising=False)
    assert toolchain.find_compiler() is None
    with pytest.raises(toolchain.ToolchainError, match="dpu-upmem-dpurte-clang.*UPMEM_HOME"):
        toolchain.build_kernel(KERNEL_SOURCE, nr_tasklets=16, cache_dir=str(tmp_path))
    (tmp_path / "bin").mkdir()
    path = fake_compiler(tmp_path / "bin")
    monkeypatch.setenv("UPMEM_HOME", str(tmp_path))
    assert toolchain.find_compiler() == path


def test_the_dpu_profile_reaches_the_dpu_set(photos, monkeypatch):  # noqa: F811
    import pimloader.backends.dpu.driver as backend
    profiles = []
    original = backend.DpuDriver.__init__

    def recording(self, nr_dpus, nr_tasklets, profile="", *args, **kwargs):
        profiles.append(profile)
        original(self, nr_dpus, nr_tasklets, profile, *args, **kwargs)

    monkeypatch.setattr(backend.DpuDriver, "__init__", recording)
    transform = PIPELINES["val_f32"]
    expected, _ = pimloader_batches(photos, transform, 0, backend="cpu")
    actual, _ = pimloader_batches(photos, transform, 0, backend="emulator", nr_dpus=3,
                                  nr_tasklets=4, dpu_profile="nrJobsPerRank=4")
    assert profiles == ["nrJobsPerRank=4"]
    assert len(actual) == len(expected) > 0, (len(actual), len(expected))
    assert all(torch.equal(a[0], e[0]) for a, e in zip(actual, expected, strict=True))


def test_a_dpu_profile_must_be_a_string(photos):  # noqa: F811
    with pytest.raises(TypeError, match="dpu_profile"):
        PIMDataLoader(ImageFolder(photos), transform=PIPELINES["val_f32"], backend="emulator",
                      dpu_profile=4)
