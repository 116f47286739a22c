"""Build of pimloader. Native parts (cffi extensions) are added here as they land."""
from setuptools import find_packages, setup

setup(
    name="pimloader",
    version="0.1.0",
    description="A drop-in torch DataLoader that fuses preprocessing into native CPU kernels "
    "and UPMEM processing-in-memory DPUs",
    packages=find_packages(include=["pimloader", "pimloader.*"]),
    python_requires=">=3.10",
    install_requires=["torch", "numpy", "cffi", "pillow"],
)
