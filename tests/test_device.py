"""mage_gym.device: the device pick and the measured choice of a compute dtype."""
from __future__ import annotations

import pytest

import mage_gym.device as device


def test_matmul_rates_time_both_dtypes_on_this_machine():
    rates = device.matmul_rates("cpu", size=64, repeats=2)
    assert set(rates) == {"float32", "bfloat16"} and all(r > 0 for r in rates.values())


@pytest.mark.parametrize(("rates", "faster"), [({"float32": 356.0, "bfloat16": 195.0}, "float32"),
                                               ({"float32": 70.0, "bfloat16": 510.0}, "bfloat16")])
def test_the_faster_dtype_follows_the_timing_not_the_flags(monkeypatch, rates, faster):
    monkeypatch.setattr(device, "cpu_flags", lambda: frozenset({"avx512_bf16", "amx_bf16"}))
    monkeypatch.setattr(device, "matmul_rates", lambda dev: rates)
    assert device.faster_compute_dtype("cpu") == faster


def test_the_device_override_wins(monkeypatch):
    monkeypatch.setenv("MAGE_GYM_DEVICE", "cpu")
    assert device.pick_device() == "cpu"
    assert device.pick_device("cuda:1") == "cuda:1"
