"""pimloader as a new user gets it: `pip install .` from a clone, or pip install of the sdist
made from that clone (pip unpacks it and builds the cffi extensions there, from csrc/build_*.py
and the csrc/cffi_build.py they share), in a fresh virtual environment; every extension module
that setup.py builds must import from the install.

The fresh environment gets exactly the distributions that pimloader declares (pyproject.toml's
[project].dependencies) and what they in turn require, taken from this test's own environment
without copying gigabytes: a folder of symbolic links to those distributions (their modules
and their .dist-info, nothing else of this environment's site-packages), put on the new
environment's path by a .pth file. pip then sees them as installed, installs pimloader alone
with `--no-index` (so a dependency that is declared but not satisfied fails the install), and
the package must import and run from the new site-packages: a module that pimloader imports
but does not declare is simply absent there. The build runs isolated, as for a user, with the
[build-system] requirements from a local wheelhouse filled by `pip download`, the only step
that needs a package index (the configured one, or local wheels through pip's find-links);
where none is reachable the slow test is skipped and says so.

`test_declared_dependencies_cover_every_import` checks the same rule on the source tree in
this environment, in a second, so that an undeclared import fails fast too.
"""
from __future__ import annotations

import ast
import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path, PurePosixPath

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, where pytest itself depends on tomli
    import tomli as tomllib

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pimloader"


def declared_requirements(pyproject: Path) -> list[Requirement]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    if "dependencies" in project.get("dynamic", []):
        pytest.fail(f"{pyproject}: dependencies are dynamic; this test reads them statically")
    return [Requirement(text) for text in project["dependencies"]]


def imported_top_level_modules(package_dir: Path) -> dict[str, set[str]]:
    """Top-level names of every absolute import in the package's .py files, wherever the
    import statement is (functions included), -> the files that import them."""
    found: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(package_dir.parent)))
    return found


def undeclared_imports(imports: dict[str, set[str]], declared: set[str],
                       providers: dict[str, list[str]]) -> list[str]:
    """Each third-party module imported by the package that no declared distribution provides."""
    problems = []
    for module, files in sorted(imports.items()):
        if module in sys.stdlib_module_names or module in ("__future__", PACKAGE):
            continue
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists:
            problems.append(f"{module} (imported by {', '.join(sorted(files))}) is not installed")
        elif not dists & declared:
            problems.append(f"{module} (imported by {', '.join(sorted(files))}) comes from "
                            f"{', '.join(sorted(dists))}, which pimloader does not declare")
    return problems


# extras of features whose module imports them lazily (pycocotools for COCO masks,
# Hugging Face datasets for ArrowColumns)
RUNTIME_EXTRAS = ("detection", "hf")


def runtime_extras(pyproject: Path) -> set[str]:
    """The distributions of RUNTIME_EXTRAS (imported lazily by the features that need them)."""
    with open(pyproject, "rb") as f:
        extras = tomllib.load(f)["project"].get("optional-dependencies", {})
    return {canonicalize_name(Requirement(text).name)
            for extra in RUNTIME_EXTRAS for text in extras.get(extra, [])}


def test_declared_dependencies_cover_every_import():
    declared = {canonicalize_name(r.name) for r in declared_requirements(ROOT / "pyproject.toml")}
    declared |= runtime_extras(ROOT / "pyproject.toml")
    imports = imported_top_level_modules(ROOT / PACKAGE)
    assert {"torch", "torchvision", "numpy"} <= imports.keys()  # the scan does see imports
    problems = undeclared_imports(imports, declared, metadata.packages_distributions())
    assert not problems, "pyproject.toml [project].dependencies misses:\n" + "\n".join(problems)


def test_import_pimloader_gives_datasets_and_transforms():
    """As `import torchvision` gives torchvision.datasets and .transforms (in a new process:
    here other tests have imported the submodules already)."""
    code = ("import pimloader, sys; "
            "print(pimloader.datasets.ImageFolder.__name__, pimloader.transforms.Compose.__name__, "
            "{'datasets', 'transforms'} <= set(pimloader.__all__), 'pimloader.transforms' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ImageFolder", "Compose", "True", "True"]


def test_the_undeclared_import_check_can_fail(tmp_path):
    """The check above names a module imported inside a function that nothing declares."""
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("import os\nimport torch\nfrom . import sub\n")
    (package / "sub.py").write_text("def f():\n    from torchvision.io import decode_image\n")
    imports = imported_top_level_modules(package)
    providers = {"torch": ["torch"], "torchvision": ["torchvision"]}
    assert undeclared_imports(imports, {"torch"}, providers) == [
        "torchvision (imported by pimloader/sub.py) comes from torchvision, "
        "which pimloader does not declare"]
    assert undeclared_imports(imports, {"torch", "torchvision"}, providers) == []
    assert "is not installed" in undeclared_imports(imports, {"torch"}, {"torch": ["torch"]})[0]


# ---- pip install . into a fresh virtual environment ---------------------------------------

def requirement_closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions of `requirements` and, recursively, of what they require
    (markers evaluated for this interpreter), from this test's environment."""
    env = default_environment()
    seen: dict[str, metadata.Distribution] = {}
    todo = [(r, "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{req} is required (by pimloader or one of its dependencies) but not "
                        f"installed in the test environment {sys.prefix}")
        seen[name] = dist
        for text in dist.requires or []:
            sub = Requirement(text)
            for wanted in [""] + sorted(req.extras):
                todo.append((sub, wanted))
    return list(seen.values())


def _files_by_top(dist: metadata.Distribution) -> set[PurePosixPath]:
    if dist.files is None:
        pytest.fail(f"{dist.metadata['Name']} has no RECORD: cannot tell which files are its own")
    return {PurePosixPath(f.as_posix()) for f in dist.files if f.parts and f.parts[0] != ".."}


def link_overlay(dists: list[metadata.Distribution], overlay: Path) -> None:
    """Symlink into `overlay` the files of `dists`: a folder whole when nothing else in its
    site-packages has files in it, else folder by folder (namespace folders such as nvidia/)."""
    bases = {Path(d.locate_file("")).resolve() for d in dists}
    if len(bases) != 1:
        pytest.fail(f"the dependencies are spread over several site-packages: {sorted(bases)}")
    base = bases.pop()
    wanted = set().union(*(_files_by_top(d) for d in dists))
    others: set[PurePosixPath] = set()
    names = {d.metadata["Name"] for d in dists}
    for dist in metadata.distributions(path=[str(base)]):
        if dist.metadata["Name"] not in names and dist.files:
            others |= _files_by_top(dist)

    def link(prefix: PurePosixPath, mine: set[PurePosixPath]) -> None:
        children = {PurePosixPath(*f.parts[:len(prefix.parts) + 1]) for f in mine}
        for child in sorted(children):
            target = overlay / child
            under = {f for f in mine if f.parts[:len(child.parts)] == child.parts}
            shared = any(f.parts[:len(child.parts)] == child.parts for f in others)
            if not shared or child in under:   # a whole folder, or a file of its own
                if (base / child).exists() and not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(base / child)
            else:
                link(child, under)

    overlay.mkdir()
    link(PurePosixPath(), wanted)


def clone_copy(dest: Path) -> None:
    """The files a clone of this checkout has (tracked, plus new files not ignored)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: this test installs what a clone holds")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():   # a deleted but still tracked file is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)


# What a clone has that building and running the package does not read: an sdist leaves these
# out; it must carry everything else (a new folder of sources is thus required by default).
NOT_IN_SDIST = ("tests/", "docs/", "benchmarks/", "scripts/", "fuzz/", ".ci/", ".gitignore", "Makefile",
                "pytest.ini", "requirements.txt", "requirements-dev.txt", "requirements-dev-nodeps.txt",
                "requirements-bench.txt", "requirements-fuzz.txt")


def build_sdist(clone: Path, dest: Path) -> Path:
    """The source distribution of `clone`, written into `dest` by the project's build backend."""
    built = run([sys.executable, "-c", "import setuptools.build_meta as backend, sys; "
                 "print(backend.build_sdist(sys.argv[1]))", dest], cwd=clone)
    assert built.returncode == 0, built.stderr
    return dest / built.stdout.strip().splitlines()[-1]


def extension_modules(clone: Path) -> list[str]:
    """The extension modules that setup.py builds: one per csrc/build_*.py, named there."""
    names = set()
    for builder in sorted((clone / "csrc").glob("build_*.py")):
        found = set(re.findall(rf'"({PACKAGE}\._\w+)"', builder.read_text(encoding="utf-8")))
        assert len(found) == 1, f"{builder.name} names {sorted(found)}, not one module"
        names |= found
    return sorted(names)


def test_the_sdist_carries_what_building_it_reads(tmp_path):
    """A source distribution (what pip builds a wheel from where no clone is at hand) has every
    file of a clone but the tests, docs, benchmarks and development files."""
    clone = tmp_path / "clone"
    clone_copy(clone)
    with tarfile.open(build_sdist(clone, tmp_path / "dist")) as sdist:
        carried = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    in_clone = {p.relative_to(clone).as_posix() for p in clone.rglob("*") if p.is_file()}
    needed = {name for name in in_clone if not name.startswith(NOT_IN_SDIST)}
    assert {"setup.py", "pyproject.toml", "LICENSE", "csrc/build_kernels.py", "dpu_src/crop_resize.c",
            f"{PACKAGE}/__init__.py"} <= needed
    assert not needed - carried, f"the sdist lacks {sorted(needed - carried)}"


INSTALLED_CHECK = textwrap.dedent("""
    import importlib, importlib.metadata as metadata, json, sys
    from pathlib import Path
    import numpy as np
    import torch
    from PIL import Image
    import pimloader
    report = {"file": pimloader.__file__, "datasets": pimloader.datasets.__name__,
              "transforms": pimloader.transforms.__name__}   # before any import of theirs
    from pimloader import PIMDataLoader, datasets, transforms as T

    work = Path(sys.argv[1])
    ds = torch.utils.data.TensorDataset(torch.arange(24.).reshape(6, 4))
    report["tensor_batches"] = [b[0].shape[0] for b in PIMDataLoader(ds, batch_size=4)]

    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (work / "images" / label).mkdir(parents=True)
        for i in range(2):
            pixels = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(work / "images" / label / f"{i}.jpg", quality=90)
    pipeline = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                          T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.25] * 3)])
    outputs = {}
    for backend in ("cpu", "emulator"):
        torch.manual_seed(5)   # with no workers the crops are drawn from the global generator
        loader = PIMDataLoader(datasets.ImageFolder(work / "images"), batch_size=2, shuffle=True,
                               generator=torch.Generator().manual_seed(3), transform=pipeline,
                               backend=backend)
        outputs[backend] = torch.cat([images for images, _ in loader])
    report["image_shape"] = list(outputs["cpu"].shape)
    report["backends_equal"] = bool(torch.equal(outputs["cpu"], outputs["emulator"]))
    # every extension module setup.py builds (argv[2]: their names) imports from the install
    report["extensions"] = {name: importlib.import_module(name).__file__ for name in json.loads(sys.argv[2])}

    dist = metadata.distribution("pimloader")
    report["requires"] = dist.requires
    report["license"] = dist.metadata["License-Expression"]
    report["license_files"] = [str(f) for f in dist.files if "licenses" in f.parts]
    report["package_files"] = [str(dist.locate_file(f)) for f in dist.files
                               if f.parts[0] == "pimloader" and f.suffix == ".py"]
    report["providers"] = metadata.packages_distributions()
    print(json.dumps(report))
""")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", ["clone", "sdist"])
def test_pip_install_from_a_clone_gives_a_working_package(tmp_path, source):
    """`pip install .` in a clone, or pip install of the sdist made from it (what an index
    serves where no wheel fits: pip unpacks it and builds the extensions there)."""
    clone = tmp_path / "clone"
    clone_copy(clone)
    target = clone if source == "clone" else build_sdist(clone, tmp_path / "dist")
    with open(clone / "pyproject.toml", "rb") as f:
        build_requires = tomllib.load(f)["build-system"]["requires"]
    wheels = tmp_path / "wheels"
    fetched = run([sys.executable, "-m", "pip", "download", "--quiet", "--retries", "0",
                   "--timeout", "20", "--dest", wheels, *build_requires])
    if fetched.returncode != 0:
        pytest.skip(f"neither a package index nor local wheels give the build requirements "
                    f"{build_requires} (pip download: {fetched.stderr.strip()[-600:]})")

    declared = declared_requirements(clone / "pyproject.toml")
    overlay = tmp_path / "dependencies"
    link_overlay(requirement_closure(declared), overlay)

    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", venv])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                    check=True).stdout.strip())
    (site / "_pimloader_test_dependencies.pth").write_text(f"{overlay}\n")

    installed = run([python, "-m", "pip", "install", "--no-index", "--find-links", wheels, target],
                    cwd=tmp_path)
    assert installed.returncode == 0, f"pip install . failed:\n{installed.stdout}\n{installed.stderr}"
    assert "Successfully installed pimloader-" in installed.stdout, installed.stdout
    # Everything else was there already. pip may upgrade what the venv itself came with
    # (Python 3.11's has setuptools 65.5; torch 2.14 requires setuptools >= 77.0.3).
    new = {n.rsplit("-", 1)[0] for n in installed.stdout.split("Successfully installed", 1)[1].split()}
    assert PACKAGE in new and new - {PACKAGE} <= {"pip", "setuptools"}, f"pip installed more: {new}"

    # -I: neither the current folder nor PYTHONPATH on sys.path (the .pth files still count)
    extensions = extension_modules(clone)
    checked = run([python, "-I", "-c", INSTALLED_CHECK, tmp_path, json.dumps(extensions)], cwd=tmp_path)
    assert checked.returncode == 0, f"the installed package failed:\n{checked.stderr[-4000:]}"
    report = json.loads(checked.stdout.strip().splitlines()[-1])

    assert Path(report["file"]).is_relative_to(site)
    assert (report["datasets"], report["transforms"]) == ("pimloader.datasets", "pimloader.transforms")
    assert report["tensor_batches"] == [4, 2]
    assert report["image_shape"] == [4, 3, 24, 24] and report["backends_equal"]
    assert f"{PACKAGE}._kernels" in extensions and sorted(report["extensions"]) == extensions
    assert all(Path(f).is_relative_to(site / PACKAGE) for f in report["extensions"].values())
    assert report["license"] == "MIT" and report["license_files"]

    requires = [Requirement(text) for text in report["requires"]]
    runtime = {canonicalize_name(r.name) for r in requires if r.marker is None}
    assert runtime == {canonicalize_name(r.name) for r in declared}
    package_dir = site / PACKAGE
    assert all(Path(f).is_relative_to(package_dir) for f in report["package_files"])
    imports = imported_top_level_modules(package_dir)
    optional = runtime_extras(clone / "pyproject.toml")   # declared as extras, not installed
    imports = {module: files for module, files in imports.items()
               if canonicalize_name(module) not in optional}
    problems = undeclared_imports(imports, runtime, report["providers"])
    assert not problems, "the installed package's Requires-Dist misses:\n" + "\n".join(problems)
