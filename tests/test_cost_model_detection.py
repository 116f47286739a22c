"""The detection part of the cost model (pimloader/costmodel/detection.py): size groups
combined by their shares, the host bounding the DPU path, and the bytes of a zoom-out
canvas against numpy's own padding of an image."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimloader import costmodel as cm
from pimloader.transforms.params import Geometry, Padding


def test_groups_combine_by_time_not_by_rate():
    groups = [cm.SizeGroup((800, 1066), 0.75, 100.0), cm.SizeGroup((800, 800), 0.25, 400.0)]
    result = cm.combine(groups, host_s_per_image=1e-9, host_cores=1)
    # 0.75 / 100 + 0.25 / 400 seconds per image of the pipeline
    assert result["dpu_images_per_s"] == pytest.approx(1 / (0.75 / 100 + 0.25 / 400))
    assert result["images_per_s"] == result["dpu_images_per_s"]
    assert result["bound"] == "DPU path"


def test_the_host_bounds_a_fast_dpu_path():
    result = cm.combine([cm.SizeGroup((300, 300), 0.5, 1e6)], host_s_per_image=0.01,
                        host_cores=2)
    assert result["host_images_per_s"] == pytest.approx(200.0)
    assert result["images_per_s"] == pytest.approx(200.0) and result["bound"].startswith("host")


def test_no_dpu_group_leaves_the_host_alone():
    result = cm.combine([], host_s_per_image=0.004, host_cores=2)
    assert math.isinf(result["dpu_images_per_s"]) and result["images_per_s"] == 500.0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 30), st.integers(0, 30),
       st.integers(0, 30), st.integers(0, 30), st.data())
def test_canvas_bytes_against_numpys_padding(height, width, top, left, bottom, right, data):
    canvas_h, canvas_w = height + top + bottom, width + left + right
    box_top = data.draw(st.integers(0, canvas_h - 1))
    box_left = data.draw(st.integers(0, canvas_w - 1))
    box_h = data.draw(st.integers(1, canvas_h - box_top))
    box_w = data.draw(st.integers(1, canvas_w - box_left))
    geometry = Geometry(box=(box_top, box_left, box_h, box_w), resized=(box_h, box_w),
                        window=(0, 0, box_h, box_w), source=(height, width),
                        padding=Padding(top, left, bottom, right))
    source = np.pad(np.ones((height, width, 3), bool), ((top, bottom), (left, right), (0, 0)))
    crop = source[box_top:box_top + box_h, box_left:box_left + box_w]
    assert cm.canvas_bytes(geometry) == (crop.size, int(crop.sum()))


def test_a_sample_that_does_not_pad_sends_its_box():
    geometry = Geometry(box=(2, 3, 10, 20), resized=(5, 10), window=(0, 0, 5, 10),
                        source=(40, 50))
    assert cm.canvas_bytes(geometry) == (600, 600)
