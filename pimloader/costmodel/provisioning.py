"""What it takes to feed a GPU: host cores from a measured CPU time per image, UPMEM DIMMs
from the cost model's PROJECTED images/s per DPU, and a cost per hour from published prices.

Every GPU rate and price here is an ASSUMPTION, a `Param` with its source and date. No
network was reachable from this project: each source says whether its figure was read from
a stored copy of the page or recalled, and a recalled one is marked unverified. Change one
with dataclasses.replace, as for `Assumptions`. Used by benchmarks/cost_table.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from .assumptions import ASSUMED, Param, _fixed

DPUS_PER_DIMM = 128   # 2 ranks of 64 DPUs; 20 DIMMs hold 2,560 DPUs (upmem-reference.md)

DLE_RESNET50 = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/"
                "README.md, 'Training performance', pytorch-21.03 NGC container, 1 GPU, batch "
                "256 (read from a stored copy of the README, 2026-12-01)")


@dataclass(frozen=True)
class GpuRate:
    """A published ResNet-50 training rate of one GPU: the rate a loader has to feed."""
    name: str
    images_per_s: Param

    def at(self, case: str = "nominal") -> float:
        return self.images_per_s.at(case)


GPU_RATES = (
    GpuRate("V100 AMP", _fixed(1200, "img/s per GPU", DLE_RESNET50 + ": DGX-1 16GB",
                               "ResNet-50 v1.5, mixed precision")),
    GpuRate("A100 AMP", _fixed(2470, "img/s per GPU", DLE_RESNET50 + ": DGX A100 80GB",
                               "ResNet-50 v1.5, mixed precision (8 GPUs: 16,621 img/s, "
                               "2,078 per GPU)")),
    GpuRate("H100 AMP", _fixed(
        5000, "img/s per GPU", ASSUMED + ", UNVERIFIED: about 2x the A100 figure, as recalled "
        "from MLPerf Training v3.0 (2023-06): 8x H100 trained ResNet-50 in about half the "
        "time of 8x A100 in earlier rounds; not checked here (no network)",
        "an order of magnitude for the newest GPU; MLPerf-tuned stacks run faster still")),
)


@dataclass(frozen=True)
class Prices:
    """Published or assumed prices, in US dollars."""

    vcpu_hour: Param = _fixed(
        0.0425, "$/vCPU-hour",
        "AWS EC2 Auto Scaling user guide, 'Spot price per unit hour example': c5.2xlarge "
        "On-Demand $0.34/h for 8 vCPUs in US East (N. Virginia), which AWS labels example, "
        "not current, pricing (read from a stored copy of the page, 2026-12-01); c6i.large's "
        "$0.085/h for 2 vCPUs, as recalled from the 2023-2024 price list, is the same rate",
        "a vCPU is one hardware thread; the CPUs this benchmark counts are the machine's "
        "os.sched_getaffinity CPUs, which on a cloud VM are vCPUs")
    dimm: Param = Param(
        300, 1000, 3000, "$/DIMM", ASSUMED + ": UPMEM publishes no list price that this "
        "project found (sold on request); a placeholder range",
        "one PIM DIMM (8 GB, 128 DPUs); see the break-even price, which needs no assumption")
    amortisation_hours: Param = _fixed(
        3 * 8760, "hours", ASSUMED, "a DIMM bought outright, used around the clock for 3 years; "
        "no power, server slot or software cost")

    def table(self) -> list[dict]:
        return [{"name": f.name, **{k: getattr(getattr(self, f.name), k) for k in
                                    ("best", "nominal", "worst", "unit", "source", "why")}}
                for f in fields(self)]


def gpu_rates_table() -> list[dict]:
    return [{"name": g.name, "images_per_s": g.images_per_s.nominal, "unit": g.images_per_s.unit,
             "source": g.images_per_s.source, "why": g.images_per_s.why} for g in GPU_RATES]


def host_cores(target_images_per_s: float, cpu_s_per_image: float) -> float:
    """Cores kept busy producing `target_images_per_s`, at a MEASURED CPU time per image
    (linear scaling: the naive sweep shows how far that holds)."""
    return target_images_per_s * cpu_s_per_image


def dimms_for(target_images_per_s: float, dpu_images_per_s: float) -> int:
    """Whole DIMMs whose DPUs reach the target, at a PROJECTED rate per DPU."""
    if dpu_images_per_s <= 0:
        raise ValueError(f"the rate per DPU must be positive, got {dpu_images_per_s}")
    return math.ceil(target_images_per_s / dpu_images_per_s / DPUS_PER_DIMM)


def hourly_cost(cores: float, dimms: int, prices: Prices, case: str = "nominal") -> float:
    """$ per hour: cores at the vCPU price, DIMMs amortised over their life."""
    return (cores * prices.vcpu_hour.at(case)
            + dimms * prices.dimm.at(case) / prices.amortisation_hours.at(case))


def break_even_dimm_price(cores_saved: float, dimms: int, prices: Prices) -> float:
    """The DIMM price at which `dimms` cost per hour what the `cores_saved` cost (<= 0: the
    DPUs save no cores, so no price pays)."""
    return cores_saved * prices.vcpu_hour.nominal * prices.amortisation_hours.nominal / dimms


__all__ = ["DPUS_PER_DIMM", "GPU_RATES", "GpuRate", "Prices", "break_even_dimm_price",
           "dimms_for", "gpu_rates_table", "host_cores", "hourly_cost"]
